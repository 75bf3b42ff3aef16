"""The desk's replay data: frames recorded from real engines by tests/tui/record_replay.py
(`python tests/tui/record_replay.py` records them again), decoded strictly through
gpudesk.api's models when loaded.

- `STATION`: a SIMULATED DGX Station A100 (GPUs 2 and 3 in MIG mode) running a sweep: jobs
  under MPS, on MIG slices, a shared loader with its consumer, succeeded, failed, cancelled,
  held and waiting jobs.
- `MPS_FAULT`: two GPUs on the faithful NVML and MPS fakes; GPU 0's MPS server is in FAULT and
  the engine routes new jobs around it.
"""

from __future__ import annotations

from pathlib import Path

from gpudesk.screens.feed import ReplayFeed

DATA = Path(__file__).resolve().parent / "data"
STATION = DATA / "station.json"
MPS_FAULT = DATA / "mps-fault.json"


def replay_feed(path: Path = STATION, readonly_reason: str | None = None) -> ReplayFeed:
    return ReplayFeed.load(path, readonly_reason=readonly_reason)
