"""The `Backend` protocol: what the request handlers and job control ask of the place a job runs,
job by job. `local` (the station's own slots: `backends/local/`) and `slurm` (a Slurm cluster:
`backends/slurm_jobs.py`, over `backends/slurm.py`) implement it; `engine/job_control.py`'s
`Backends` picks one from a job's spec, once per job, so no handler tells them apart.

- `admit`, `submit`, `check_submit`: a request's jobs, all bound for this backend;
- `cancel`, `hold`, `release`, `requeue`: one job's control, each with its `JobOutcome`;
- `edit`: a job that has not started given its edited spec (`gpudesk edit`), or why not;
- `suspend`, `resume`, `signal`: a running job's processes stopped, continued, or sent a
  signal (`by`: who asked, for the job's events);
- `explain`: why a queued job waits, at length (`show`'s `waiting`);
- `view`: the backend's part of the replies of a page of jobs (`JobsView`: where each runs or
  ran, its log, its short wait code, its attempts, its allocation), read in one go;
- `log`: where an attempt's output is read from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import msgspec

from gpudesk.core.identity import Caller
from gpudesk.core.job_changes import JobOutcome
from gpudesk.core.job_edit import JobEdit
from gpudesk.core.jobs import JobSpec
from gpudesk.core.records import JobRecord
from gpudesk.core.wire.base import PlacementMode
from gpudesk.core.wire.jobs import AttemptView, RemainingView, SlurmJobView, SubmitResult
from gpudesk.engine.offloop import Later


class LogFile(msgspec.Struct, frozen=True):
    """An attempt's output as a file the engine reads itself, and whose files it must be
    (None: the engine's own)."""

    path: Path
    owner_uid: int | None


class OwnerRead(msgspec.Struct, frozen=True):
    """An attempt's output read by a process run as its owner, off the loop: `read(offset,
    limit)` gives the bytes and the file's end (it raises ProtocolError when it cannot)."""

    read: Callable[[int, int], tuple[bytes, int]]
    bound_s: float
    what: str


class JobPart(msgspec.Struct, frozen=True):
    """A backend's part of a job's reply (`JobView`): while it runs, where (`slot`, a label;
    `gpus`, `mode` and `mig_slice`, the same as data; `pgid`, its process group) and how long
    it has left (`remaining`: a job on Slurm has none, its progress is not read), its log, and
    a Slurm job's `slurm` (and `unsaved`: why its Slurm id is not saved yet, a full disk)."""

    slot: str | None = None
    gpus: tuple[int, ...] = ()
    mode: PlacementMode | None = None
    mig_slice: str | None = None
    pgid: int | None = None
    log: str | None = None
    slurm: SlurmJobView | None = None
    remaining: RemainingView | None = None
    unsaved: str | None = None
    suspended_s: float = 0.0  # its last attempt's seconds suspended (JobView.suspended_s)


class JobsView(Protocol):
    """A backend's part of the replies of a page of its jobs (those given to `Backend.view`)."""

    def fields(self, job: JobRecord) -> JobPart:
        """`slot`, `gpus`, `mode`, `mig_slice`, `pgid` and `log`, and what the backend adds
        (a Slurm job's `slurm`)."""
        ...

    def wait_code(self, job: JobRecord) -> str | None:
        """A queued job's `wait_reason`: the short code `gpudesk queue` shows, as squeue does."""
        ...

    def attempts(self, job: JobRecord) -> list[AttemptView]:
        """`show`'s attempts."""
        ...

    def allocation(
        self, job: JobRecord, stored: tuple[str | None, float]
    ) -> tuple[str | None, float]:
        """`jobs --usage`' `last_slot` and `gpu_s`, given the store's."""
        ...


class Backend(Protocol):
    """Where jobs run: the operations the request handlers need per job."""

    def admit(self, specs: Sequence[JobSpec], undone: str = "nothing was submitted") -> None:
        """This backend's own checks of a submit's (or an edit's) jobs, on the loop, before the
        checks every submit gets; raises ProtocolError saying `undone`."""
        ...

    def submit(
        self, specs: Sequence[JobSpec], base_env: dict[str, str] | None, caller: Caller
    ) -> SubmitResult | Later[Any]: ...

    def check_submit(
        self, specs: Sequence[JobSpec], base_env: dict[str, str] | None, caller: Caller
    ) -> SubmitResult | Later[Any]: ...

    def cancel(self, job: JobRecord, grace: float) -> JobOutcome:
        """Cancel a job that has not ended."""
        ...

    def hold(self, job: JobRecord) -> JobOutcome: ...

    def release(self, job: JobRecord) -> JobOutcome: ...

    def requeue(self, job: JobRecord) -> JobOutcome: ...

    def edit(self, job: JobRecord, edit: JobEdit) -> JobOutcome:
        """A queued job given its checked edit, or why not (ok false)."""
        ...

    def suspend(self, job: JobRecord, by: str) -> JobOutcome: ...

    def resume(self, job: JobRecord, by: str) -> JobOutcome: ...

    def signal(self, job: JobRecord, name: str, by: str) -> JobOutcome:
        """`name`: one of gpudesk.core.job_signals.JOB_SIGNALS, by its full name."""
        ...

    def explain(self, job: JobRecord) -> str:
        """Why a queued job (not held) has not started."""
        ...

    def view(self, jobs: Sequence[JobRecord]) -> JobsView: ...

    def log(self, job: JobRecord, attempt: int) -> LogFile | OwnerRead: ...
