"""Selection pre-passes as engine jobs: `gpudesk select run` for one dataset and preset, queued
like any job, so the engine measures its wall time, CPU time and energy, and those are written
into the cache entry it computed. The submit workflow (gpudesk.api.submit) queues the pre-passes
a profile's datasets need before their training jobs; `gpudesk select compare` one per preset
and seed."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from gpudesk import joblog
from gpudesk.core.datasets import DatasetSpec
from gpudesk.core.jobs import JobSpec
from gpudesk.profile import Profile
from gpudesk.selection.cache import SelectionCache
from gpudesk.selection.preset_names import parse_preset

if TYPE_CHECKING:
    from gpudesk.api.models import JobView

NO_PREPASS = ("full", "rs2")
PREPASS_COMMAND = ("-m", "gpudesk", "select", "run")  # after the interpreter
# What of a pre-pass job's log is searched for its output line (printed last): 1 MiB.
PREPASS_TAIL_BYTES = 1 << 20


def needs_prepass(selection: str | None) -> bool:
    return bool(selection) and parse_preset(selection or "").method not in NO_PREPASS


def prepass_job(
    dataset: DatasetSpec, preset: str, workdir: str | None, name: str | None = None
) -> JobSpec:
    """The job that runs `preset`'s pre-pass for `dataset` as its loader will ask for it (same
    factory, arguments, seed and target, hence the same cache key). A cache hit is not counted
    as a use: only training jobs are."""
    command = [
        sys.executable,
        *PREPASS_COMMAND,
        dataset.factory,
        "--preset",
        preset,
        "--seed",
        str(dataset.seed),
        "--json",
        "--no-record-reuse",
    ]
    for key, value in dataset.args.items():
        command += ["--arg", f"{key}={json.dumps(value)}"]
    if parse_preset(preset).method == "less" and dataset.selection_target:
        command += ["--target", dataset.selection_target]
        for key, value in dataset.selection_target_args.items():
            command += ["--target-arg", f"{key}={json.dumps(value)}"]
    return JobSpec.from_dict(
        {
            "name": name or f"prepass-{dataset.name}-{preset}"[:100],
            "command": command,
            "workdir": workdir,
        }
    )


@dataclass(frozen=True)
class Prepass:
    """One selection pre-pass a profile needs: the loader's dataset spec and its preset."""

    dataset: DatasetSpec
    preset: str

    def job(self, workdir: str | None, name: str | None = None) -> JobSpec:
        return prepass_job(self.dataset, self.preset, workdir, name)


def profile_prepasses(profile: Profile) -> list[Prepass]:
    """The pre-pass of each selection the profile's jobs train on that has one, once each."""
    return _once(prepass_of(profile, spec) for spec in profile.jobs)


def profile_selections(profile: Profile) -> list[Prepass]:
    """Each data selection the profile's jobs train on, once each, with a pre-pass or not
    (`full`, the whole dataset, is none): what a producer serves them and nothing else does."""
    return _once(selection_of(profile, spec) for spec in profile.jobs)


def _once(selections: Iterable[Prepass | None]) -> list[Prepass]:
    """Each selection once (by the name of the variant the loader serves), in order."""
    wanted: dict[str, Prepass] = {}
    for selection in selections:
        if selection is not None:
            wanted.setdefault(selection.dataset.name, selection)
    return list(wanted.values())


def selection_of(profile: Profile, spec: JobSpec) -> Prepass | None:
    """The data selection `spec` trains on (its `dataset.name`: the variant the loader serves,
    one name for every job on that selection); None where it trains on the whole dataset or on
    none of the profile's."""
    config = profile.datasets.get(spec.dataset or "")
    if config is None or config.loader is None:
        return None
    served = config.loader.variant(spec.selection) if spec.selection else config.loader
    if served.selection and parse_preset(served.selection).method != "full":
        return Prepass(served, served.selection)
    return None


def prepass_of(profile: Profile, spec: JobSpec) -> Prepass | None:
    """The pre-pass the selection `spec` trains on needs; None where it needs none."""
    selection = selection_of(profile, spec)
    return selection if selection is not None and needs_prepass(selection.preset) else None


def prepass_workdir(profile: Profile) -> str:
    """Where a profile's pre-pass jobs run: beside the profile, as its jobs do (a bundled
    example's and a streamed one's: here)."""
    return os.getcwd() if profile.streamed or profile.bundled else str(profile.path.parent)


def prepasses_first(
    profile: Profile, prepasses: Sequence[Prepass], prepass_jobs: Sequence[JobSpec]
) -> list[JobSpec]:
    """The pre-pass jobs (`prepass_jobs[k]` runs `prepasses[k]`), then the profile's jobs, each
    also `after` (afterok) the pre-pass its selection needs, and that one alone: as one
    submission, where -k names its k-th job (`gpudesk run --detach`, `gpudesk export slurm`)."""
    # the profile's own references to its jobs move past the pre-passes, which come first
    moved = len(prepass_jobs)
    ref = {p.dataset.name: -(k + 1) for k, p in enumerate(prepasses)}

    def past(refs: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(r - moved if r < 0 else r for r in refs)

    training: list[JobSpec] = []
    for spec in profile.jobs:
        needed = prepass_of(profile, spec)
        own = () if needed is None else (ref[needed.dataset.name],)
        training.append(
            msgspec.structs.replace(
                spec,
                after=(*past(spec.after), *own),
                after_any=past(spec.after_any),
                after_notok=past(spec.after_notok),
            )
        )
    return [*prepass_jobs, *training]


def is_prepass_job(command: Sequence[str]) -> bool:
    """Whether a job's command is a pre-pass's (`prepass_job`: `PYTHON -m gpudesk select run
    ... --no-record-reuse`): what `gpudesk run --attach` records, as `gpudesk run` does. Told
    by what it runs, not by its name, which a profile's own job may share (a job that runs
    this command is a pre-pass, and prints the entry `record_prepass` reads)."""
    return tuple(command[1:5]) == PREPASS_COMMAND and "--no-record-reuse" in command[5:]


def prepass_output(job: JobView) -> dict[str, Any] | None:
    """What the finished pre-pass job printed (its last JSON line with a cache key)."""
    if not job.log:
        return None
    try:
        # its stream's end, never the whole file: after a rotation on tmpfs or NFS, output.log
        # begins with a hole as large as all the job printed before (gpudesk.joblog)
        text = joblog.tail(job.log, PREPASS_TAIL_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except (ValueError, RecursionError):  # the job's output: `[[[[…` is not its entry
                continue
            if isinstance(value, dict) and value.get("key"):
                return value
    return None


def record_prepass(cache: SelectionCache, job: JobView) -> dict[str, Any] | None:
    """After a pre-pass job: its output, and, when it computed the entry (not a cache hit),
    the engine's measurement of the job (asked `with usage`) written into the entry. None if
    it failed."""
    output = prepass_output(job) if job.state == "succeeded" else None
    if output is None:
        return None
    if not output.get("reused"):
        usage = job.usage
        cache.record_job_cost(
            output["key"],
            job=job.id,
            wall_s=job_wall(job),
            cpu_s=None if usage is None else usage.cpu_s,
            energy_j=None if usage is None else usage.total_j,
        )
    return output


def job_wall(job: JobView) -> float | None:
    """A finished job's wall time, from its start to its end (None if it never ran)."""
    if job.started_at is None or job.ended_at is None:
        return None
    return job.ended_at - job.started_at
