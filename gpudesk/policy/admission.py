"""A submit's GPU jobs as the station weighs them, given a view of it and its placement policy:
refused at once when the station could never run them (`never_runs`), told when they wait for
a change of the station (`changes_awaited`). The engine asks while the GPUs can be read
(engine/backends/local/admission.py)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import msgspec

from gpudesk.core.jobs import JobSpec
from gpudesk.core.records import JobRecord
from gpudesk.policy.policy import PlacementPolicy, StationView, gpu_job_impossible
from gpudesk.text import safe_text
from gpudesk.units import MIB_PER_GB

# How many job shapes of one submit are judged for waiting on a station change: a sweep's
# jobs share a few, and the loop does not weigh thousands of different ones at submit.
CHANGE_CHECKS = 100


def never_runs(
    specs: Sequence[JobSpec],
    view: StationView,
    kept_free_mib: float,
    undone: str = "nothing was submitted",
) -> str | None:
    """Why these jobs are refused, whole: one this station could never run, whatever an admin
    changes on its GPUs: more GPUs than it has (policy.gpu_job_impossible). It could only wait
    and then fail. A memory hint is never a reason: one above what a GPU offers is taken as
    unknown (policy.demand.hint_unknown) and the job runs. A job that fits only after such a
    change (leaving MIG mode on a GPU) is accepted and waits, its reason naming the change
    (policy.station_fit). None when none is refused. `undone`: what was not done (an edit's:
    the job was left as it was)."""
    for spec in specs:
        if not spec.gpus:
            continue
        need = spec.memory_gb * MIB_PER_GB if spec.memory_gb is not None else 0.0
        impossible = gpu_job_impossible(spec.gpus, need, view, kept_free_mib, measured=False)
        if impossible:
            others = len(specs) - 1
            return (
                f"job {safe_text(spec.name)!r} {impossible}. It could never "
                f"run here, so {undone}"
                + (f" (nor the {others} other job{'s' if others != 1 else ''})" if others else "")
                + "."
            )
    return None


def changes_awaited(
    records: Sequence[JobRecord], view: StationView, policy: PlacementPolicy
) -> dict[int, str]:
    """The new GPU jobs that can start only once the station changes (an admin leaving MIG
    mode, a lost GPU coming back, a GPU set in MIG mode under policy mig), with the policy's
    reason: the submitter hears it at once, not from `queue` later. Judged by ChangeJudge:
    once per shape, for at most CHANGE_CHECKS shapes; a job of a shape judged is always
    told."""
    judge = ChangeJudge(policy, view)
    return {r.id: reason for r in records if r.spec.gpus and (reason := judge(r))}


class ChangeJudge(msgspec.Struct):
    """`PlacementPolicy.change_needed` over one look at the station, judged once per job shape
    (what the policy weighs of a job: its GPUs, its hints, and its demand where the station
    knows it), for at most `limit` shapes: a sweep's jobs share a few, and the loop never
    weighs thousands of different ones. A job of a shape past the limit is not judged ("")."""

    policy: PlacementPolicy
    view: StationView
    limit: int = CHANGE_CHECKS
    reasons: dict[Hashable, str] = msgspec.field(default_factory=dict)

    def __call__(self, record: JobRecord) -> str:
        """Why the job can start only once the station changes; "" when it can start as the
        GPUs are set up (or was not judged)."""
        spec = record.spec
        shape = (spec.gpus, spec.memory_gb, spec.sm_pct, self.view.demands.get(record.id))
        reason = self.reasons.get(shape)
        if reason is None:
            if len(self.reasons) >= self.limit:
                return ""
            reason = self.reasons[shape] = self.policy.change_needed(record, self.view)
        return reason
