"""`SlurmJobs`: jobs on a Slurm cluster behind the `Backend` protocol. It wraps the collaborator
that submits and follows them (`backends/slurm.py`'s SlurmBackend) and how they show
(`gpudesk.slurm.views`). Slurm, not the station, holds, releases and requeues them; their log is the
file Slurm writes. A cluster job whose Slurm row is gone (never recorded) shows as the
station's do: the local backend's view, explanation and log."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import msgspec

from gpudesk import diskspace
from gpudesk.core import protocol
from gpudesk.core.identity import Caller
from gpudesk.core.job_changes import JobOutcome
from gpudesk.core.job_edit import JobEdit
from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.protocol import ProtocolError
from gpudesk.core.records import JobRecord
from gpudesk.core.wire.jobs import AttemptView, SubmitResult
from gpudesk.engine.backends.base import JobPart, JobsView, LogFile, OwnerRead
from gpudesk.engine.backends.local import LocalBackend
from gpudesk.engine.backends.slurm import Prepared, Sent, SlurmBackend
from gpudesk.engine.offloop import Later
from gpudesk.slurm import logs as slurm_logs
from gpudesk.slurm import views as slurm_views
from gpudesk.slurm.as_owner import acts_for_other
from gpudesk.slurm.commands import TIMEOUT_S as SLURM_TIMEOUT_S

# A Slurm submit's first step runs up to four clients (the slurm.conf check, sinfo twice,
# scontrol), each bounded by Slurm's client timeout; one more of margin.
PREPARE_BOUND_S = 5 * SLURM_TIMEOUT_S


class SlurmView:
    """A page of Slurm jobs: their Slurm rows, in one query (a run can list thousands)."""

    def __init__(self, jobs: Sequence[JobRecord], backend: SlurmJobs) -> None:
        self.rows = backend.slurm.store.slurm_jobs([job.id for job in jobs])
        # a job whose Slurm id the store refused (a full disk) shows as Slurm has it, marked
        self.unsaved = backend.slurm.unsaved_ids()
        for job_id, submission in self.unsaved.items():
            row = self.rows.get(job_id)
            if row is not None and row.sending:
                self.rows[job_id] = msgspec.structs.replace(
                    row, submission=submission, state="PENDING"
                )
        root = backend.slurm.home.root
        self.unsaved_why = diskspace.unsaved_text(root) if self.unsaved else None
        rowless = [job for job in jobs if job.id not in self.rows]
        self.rowless: JobsView | None = backend.local.view(rowless) if rowless else None

    def _station(self) -> JobsView:
        assert self.rowless is not None  # built for every job without a row
        return self.rowless

    def fields(self, job: JobRecord) -> JobPart:
        """Its Slurm view, the log Slurm writes (once it started), and its slot label while it
        runs; none of the station's placement fields."""
        row = self.rows.get(job.id)
        if row is None:
            return self._station().fields(job)
        return JobPart(
            slot=slurm_views.slot(row) if job.state is JobState.RUNNING else None,
            log=row.output if job.attempts else None,
            slurm=slurm_views.slurm_view(row),
            unsaved=self.unsaved_why if job.id in self.unsaved else None,
        )

    def wait_code(self, job: JobRecord) -> str | None:
        row = self.rows.get(job.id)
        return self._station().wait_code(job) if row is None else slurm_views.wait_code(row)

    def attempts(self, job: JobRecord) -> list[AttemptView]:
        """Its one attempt, as Slurm tells, once Slurm ran it (the store keeps no attempt rows
        for a Slurm job)."""
        row = self.rows.get(job.id)
        if row is None:
            return self._station().attempts(job)
        return [slurm_views.attempt(job, row)] if job.attempts else []

    def allocation(
        self, job: JobRecord, stored: tuple[str | None, float]
    ) -> tuple[str | None, float]:
        row = self.rows.get(job.id)
        if row is None or job.started_at is None:
            return stored
        # Slurm allocated it: the GPUs it asked for, over its wall time
        ended = job.ended_at or time.time()
        return slurm_views.slot(row), job.spec.gpus * (ended - job.started_at)


class SlurmJobs:
    """Jobs whose spec names a cluster."""

    def __init__(self, slurm: SlurmBackend, local: LocalBackend) -> None:
        self.slurm = slurm
        self.local = local  # for a cluster job without a Slurm row

    # ----------------------------------------------------------- submitting
    def admit(self, specs: Sequence[JobSpec], undone: str = "nothing was submitted") -> None:
        """Nothing here: Slurm's checks run off the loop, after the common ones."""

    def submit(
        self, specs: Sequence[JobSpec], base_env: dict[str, str] | None, caller: Caller
    ) -> Later[Prepared]:
        """A Slurm submit in the backend's three steps (gpudesk.engine.backends.slurm): its
        Slurm commands run off the loop, so a slow cluster keeps only its submitter waiting."""
        backend, owner = self.slurm, caller.identity
        backend.check_after(specs)
        prepare = backend.prepared(specs, base_env, owner)

        def prepared(ready: Prepared) -> Later[Sent]:
            ids, work, bound = backend.record_intent(specs, base_env, owner, ready)

            def sent(outcome: Sent) -> SubmitResult:
                records = backend.record_sent(ids, outcome)
                for record in records:
                    backend.events.job(record.id, "submitted to Slurm", record)
                return SubmitResult(ids=ids)

            return Later(work, sent, bound, f"submitting job(s) {ids[0]}-{ids[-1]} to Slurm")

        return Later(prepare, prepared, PREPARE_BOUND_S, "asking the Slurm cluster what it has")

    def check_submit(
        self, specs: Sequence[JobSpec], base_env: dict[str, str] | None, caller: Caller
    ) -> Later[Prepared]:
        backend = self.slurm
        backend.check_after(specs)
        prepare = backend.prepared(specs, base_env, caller.identity)
        return Later(
            prepare,
            lambda _ready: SubmitResult(ids=[]),
            PREPARE_BOUND_S,
            "asking the Slurm cluster",
        )

    # ----------------------------------------------------------- job control
    def cancel(self, job: JobRecord, grace: float) -> JobOutcome:
        """Slurm ends it (scancel); the job ends when Slurm says so."""
        return JobOutcome(self.slurm.cancel(job))

    def hold(self, job: JobRecord) -> JobOutcome:
        return self._on_slurm(job, "hold")

    def release(self, job: JobRecord) -> JobOutcome:
        return self._on_slurm(job, "release")

    def requeue(self, job: JobRecord) -> JobOutcome:
        return self._on_slurm(job, "requeue")

    def edit(self, job: JobRecord, edit: JobEdit) -> JobOutcome:
        """Slurm holds its spec once sbatch took it: none is changed (the engine's copy would
        differ from what Slurm runs); say which `scontrol update` changes a pending one."""
        row = self.slurm.store.slurm_job(job.id)
        fields = ", ".join(change.split(" ", 1)[0] for change in edit.changes) or "none"
        return JobOutcome(
            f"job {job.id} is a Slurm job ({job.state.value}): gpudesk edits only the station's "
            f"jobs, so none of the fields asked ({fields}) was changed; while it is pending, "
            f"`scontrol update JobId={row.slurm_id if row else '?'} TimeLimit=… JobName=… "
            "Dependency=…` changes it on the cluster",
            ok=False,
        )

    def suspend(self, job: JobRecord, by: str) -> JobOutcome:
        return self._admins_only(job, "suspend")

    def resume(self, job: JobRecord, by: str) -> JobOutcome:
        return self._admins_only(job, "resume")

    def signal(self, job: JobRecord, name: str, by: str) -> JobOutcome:
        """`scancel --signal`, as the job's owner (Slurm lets her signal her own jobs)."""
        message, sent = self.slurm.signal(job, name, by)
        return JobOutcome(message, ok=sent)

    def _admins_only(self, job: JobRecord, verb: str) -> JobOutcome:
        """Slurm suspends and resumes jobs for its operators and admins alone (`scontrol
        suspend`): refused, saying who may."""
        return JobOutcome(
            f"a Slurm job: only the cluster's Slurm operators or admins may {verb} it "
            f"(`scontrol {verb} {self._slurm_id(job)}`); gpudesk does not ask on a user's behalf",
            ok=False,
        )

    def _on_slurm(self, job: JobRecord, verb: str) -> JobOutcome:
        """Slurm, not the station, holds, releases and requeues a Slurm job: say how."""
        return JobOutcome(
            f"a Slurm job: gpudesk does not {verb} it on the cluster; "
            f"`scontrol {verb} {self._slurm_id(job)}` does",
            ok=False,
        )

    def _slurm_id(self, job: JobRecord) -> str:
        row = self.slurm.store.slurm_job(job.id)
        return row.slurm_id if row is not None else "?"

    # ----------------------------------------------------------- views
    def explain(self, job: JobRecord) -> str:
        row = self.slurm.store.slurm_job(job.id)
        return self.local.explain(job) if row is None else slurm_views.explain_wait(row)

    def view(self, jobs: Sequence[JobRecord]) -> SlurmView:
        return SlurmView(jobs, self)

    def log(self, job: JobRecord, attempt: int) -> LogFile | OwnerRead:
        """The file Slurm writes: read by the engine where it may (a personal engine, or the
        job's owner is the engine's), else by a process run as its owner, off the loop."""
        row = self.slurm.store.slurm_job(job.id)
        if row is None:
            return self.local.log(job, attempt)
        if not acts_for_other(job.owner):
            return LogFile(Path(row.output), job.owner.uid)
        # in her folder, every name of whose path is hers: read by a process run as her, off
        # the loop (the process may take up to slurm_logs.READ_S)
        output, owner = row.output, job.owner

        def read_hers(offset: int, limit: int) -> tuple[bytes, int]:
            try:
                read = slurm_logs.read_as_owner(owner, output, offset, limit)
            except slurm_logs.LogUnreadable as exc:
                raise ProtocolError(protocol.REFUSED, f"job {job.id}'s log: {exc}") from None
            return read.data, read.end

        return OwnerRead(
            read_hers, slurm_logs.READ_S + 5.0, f"reading job {job.id}'s log as {owner.name}"
        )
