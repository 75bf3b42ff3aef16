"""A submit's jobs as the station weighs them: refused at once when the station could never run
them (`check_station_fits`), told when they wait for a change of the station
(`waits_for_change`)."""

from __future__ import annotations

from collections.abc import Sequence

from gpudesk.core import protocol
from gpudesk.core.jobs import JobSpec
from gpudesk.core.protocol import ProtocolError
from gpudesk.core.records import JobRecord
from gpudesk.engine.scheduler import Scheduler
from gpudesk.engine.station.telemetry_sink import TelemetrySink
from gpudesk.policy.policy import gpu_job_impossible
from gpudesk.text import safe_text
from gpudesk.units import MIB_PER_GB

# How many job shapes of one submit are judged for waiting on a station change: a sweep's
# jobs share a few, and the loop does not weigh thousands of different ones at submit.
CHANGE_CHECKS = 100


def check_station_fits(
    specs: Sequence[JobSpec], telemetry: TelemetrySink, scheduler: Scheduler
) -> None:
    """Refuse, at once and whole, jobs this station could never run, whatever an admin
    changes on its GPUs: more GPUs than it has (placement.policy.gpu_job_impossible). They
    could only wait and then fail. A memory hint is never a reason: one above what a GPU
    offers is taken as unknown (policy.demand.hint_unknown) and the job runs. A job that
    fits only after such a change (leaving MIG mode on a GPU) is accepted and waits, its
    reason naming the change (placement.station_fit). Not while the GPUs cannot be read
    (they may come back): placement fails an impossible job then."""
    if not any(spec.gpus for spec in specs):
        return
    monitor = telemetry.monitor
    if not monitor.opened:
        return  # never waited for: the engine's one loop serves every client
    view = scheduler.station_view(queued_demands=False)
    kept_free = scheduler.policy.kept_free_mib
    for spec in specs:
        if not spec.gpus:
            continue
        need = spec.memory_gb * MIB_PER_GB if spec.memory_gb is not None else 0.0
        impossible = gpu_job_impossible(spec.gpus, need, view, kept_free, measured=False)
        if impossible:
            others = len(specs) - 1
            raise ProtocolError(
                protocol.INVALID_ARGS,
                f"job {safe_text(spec.name)!r} {impossible}. It could never "
                "run here, so nothing was submitted"
                + (f" (nor the {others} other job{'s' if others != 1 else ''})" if others else "")
                + ".",
            )


def waits_for_change(
    records: Sequence[JobRecord], telemetry: TelemetrySink, scheduler: Scheduler
) -> dict[int, str]:
    """The new GPU jobs that can start only once the station changes (an admin leaving MIG
    mode, a lost GPU coming back, a GPU set in MIG mode under policy mig), with the policy's
    reason: the submitter hears it at once, not from `queue` later. Judged once per shape
    (what the policy weighs of a new job: its GPUs and hints), for at most CHANGE_CHECKS
    shapes (a huge sweep is not judged job by job on the loop); a job of a shape judged is
    always told."""
    gpu_jobs = [r for r in records if r.spec.gpus]
    if not gpu_jobs or not telemetry.monitor.opened:
        return {}
    view = scheduler.station_view(queued_demands=False)
    policy = scheduler.policy
    reasons: dict[tuple[int, float | None, float | None], str] = {}
    changes = {}
    for record in gpu_jobs:
        spec = record.spec
        shape = (spec.gpus, spec.memory_gb, spec.sm_pct)
        reason = reasons.get(shape)
        if reason is None:
            if len(reasons) >= CHANGE_CHECKS:
                continue
            reason = reasons[shape] = policy.change_needed(record, view)
        if reason:
            changes[record.id] = reason
    return changes
