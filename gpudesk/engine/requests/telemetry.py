"""`telemetry`: the latest station view, its history and today's energy per GPU."""

from __future__ import annotations

from gpudesk.core.identity import Caller
from gpudesk.core.wire.requests import TelemetryArgs
from gpudesk.core.wire.telemetry import TelemetryResult
from gpudesk.engine.requests.common import Handler, Requests


class TelemetryRequests(Requests):
    """The telemetry op."""

    def ops(self) -> dict[str, Handler]:
        return {
            "telemetry": self.telemetry,
        }

    def telemetry(self, args: TelemetryArgs, _caller: Caller) -> TelemetryResult:
        """The latest station view (None before the first sample) and, on request, the last
        `history` points of each GPU's series.

        `energy_today_j` is {GPU index: joules} (the index a string on the wire, as JSON keys
        are): what each GPU used since local midnight, from the energy points the store keeps
        (one per STORE_SAMPLES_EVERY_S window, so across engine restarts) plus what the monitor
        counted since the last of them. It counts only while an engine samples, and a window
        that spans midnight counts for the new day."""
        telemetry = self.parts.telemetry
        points = args.history
        telemetry.ingest()  # anything the sampler delivered since the loop last looked
        snapshot = telemetry.snapshot()
        history = list(telemetry.monitor.history)[-points:] if points else []
        return TelemetryResult(
            snapshot=snapshot,
            history=history,
            energy_today_j=telemetry.energy_today(),
        )
