"""`telemetry`: the latest station view, its history and today's energy per GPU."""

from __future__ import annotations

from gpudesk.core import protocol
from gpudesk.core.identity import Caller
from gpudesk.core.protocol import ProtocolError
from gpudesk.engine.requests.common import Args, Handler, Reply, Requests, whole_number

MAX_HISTORY_POINTS = 600


class TelemetryRequests(Requests):
    """The telemetry op."""

    def ops(self) -> dict[str, Handler]:
        return {
            "telemetry": self.telemetry,
        }

    def telemetry(self, args: Args, _caller: Caller) -> Reply:
        """The latest station view (None before the first sample) and, on request, the last
        `history` points of each GPU's series.

        `energy_today_j` is {GPU index: joules} (the index a string on the wire, as JSON keys
        are): what each GPU used since local midnight, from the energy points the store keeps
        (one per STORE_SAMPLES_EVERY_S window, so across engine restarts) plus what the monitor
        counted since the last of them. It counts only while an engine samples, and a window
        that spans midnight counts for the new day."""
        telemetry = self.parts.telemetry
        points = whole_number(args.get("history", 0), 0, MAX_HISTORY_POINTS)
        if points is None:
            raise ProtocolError(
                protocol.INVALID_ARGS, f"'history' must be 0 to {MAX_HISTORY_POINTS} points"
            )
        telemetry.ingest()  # anything the sampler delivered since the loop last looked
        snapshot = telemetry.snapshot()
        history = list(telemetry.monitor.history)[-points:] if points else []
        return {
            "snapshot": snapshot,
            "history": history,
            "energy_today_j": telemetry.energy_today(),
        }
