"""A submit's jobs as the station weighs them (policy/admission.py), while its GPUs can be read:
never waited for, as the engine's one loop serves every client (they may come back: placement
fails an impossible job then)."""

from __future__ import annotations

from collections.abc import Sequence

from gpudesk.core import protocol
from gpudesk.core.jobs import JobSpec
from gpudesk.core.protocol import ProtocolError
from gpudesk.core.records import JobRecord
from gpudesk.engine.scheduler import Scheduler
from gpudesk.engine.station.telemetry_sink import TelemetrySink
from gpudesk.policy import admission


def check_station_fits(
    specs: Sequence[JobSpec], telemetry: TelemetrySink, scheduler: Scheduler, undone: str
) -> None:
    """Refuse, at once and whole, jobs this station could never run (`admission.never_runs`)."""
    if any(spec.gpus for spec in specs) and telemetry.monitor.opened:
        view = scheduler.station_view(queued_demands=False)
        refusal = admission.never_runs(specs, view, scheduler.policy.kept_free_mib, undone)
        if refusal:
            raise ProtocolError(protocol.INVALID_ARGS, refusal)


def waits_for_change(
    records: Sequence[JobRecord], telemetry: TelemetrySink, scheduler: Scheduler
) -> dict[int, str]:
    """The new GPU jobs that can start only once the station changes, and why
    (`admission.changes_awaited`)."""
    if not any(r.spec.gpus for r in records) or not telemetry.monitor.opened:
        return {}
    view = scheduler.station_view(queued_demands=False)
    return admission.changes_awaited(records, view, scheduler.policy)
