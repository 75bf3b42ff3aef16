"""`gpudesk top --json` names every field of the station's snapshot, null where unknown (a
field the wire leaves out at its default is printed all the same), then top's own."""

from __future__ import annotations

import json

from gpudesk.api.models import GpuView, JobTelemetry, ProcessView, Snapshot
from gpudesk.cli.top_view import TopView
from gpudesk.hw.telemetry.monitor import Monitor, TrackedAttempt
from gpudesk.hw.telemetry.sim import SimBackend


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_every_field_is_printed_null_where_unknown() -> None:
    clock = Clock()
    monitor = Monitor(SimBackend("a100-80gb", clock=clock))
    job = TrackedAttempt(1, 10, "train", 2**22 + 1, "gpu:0", (0,), 8.0, 60.0, 0.0)
    for _ in range(3):
        snapshot = monitor.ingest(monitor.collect([job]))
        clock.now += 1.0
    view = TopView(snapshot, "direct", None, None, jobs_known=False, mig_unknown=frozenset({0}))
    data = json.loads(json.dumps(view.to_json()))
    assert set(data) == {*Snapshot.__struct_fields__, "source", "engine", "note", "jobs_known"}
    assert data["interval_s"] is None and data["source"] == "direct" and not data["jobs_known"]
    (gpu,) = data["gpus"]
    assert set(gpu) == {*GpuView.__struct_fields__, "mig_unknown"}
    assert gpu["mig_pending"] is None and (gpu["mig_enabled"], gpu["mig_unknown"]) == (None, True)
    assert gpu["processes"] and all(
        set(p) == set(ProcessView.__struct_fields__) for p in gpu["processes"]
    )
    assert all(p["mps"] is None and p["user"] is None for p in gpu["processes"])
    (running,) = data["jobs"]
    assert set(running) == set(JobTelemetry.__struct_fields__) and running["suspended"] is False
