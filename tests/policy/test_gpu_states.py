"""The GPUs as placement sees them (gpudesk.policy.gpu_states): what the scheduler's station view
is built from."""

from __future__ import annotations

import pytest

from gpudesk.policy.gpu_states import RunningAttempt, tenants_by_gpu
from gpudesk.policy.policy import GpuState
from gpudesk.policy.remaining import RecentProgress, estimate


def test_placement_sees_each_tenants_remaining_time() -> None:
    """What the scheduler's station view is built from: a running attempt with its estimate
    gives its tenant on each of its GPUs that estimate and the engine's own figure beside it."""
    recent = RecentProgress()
    recent.add(0.0, 100.0, 1000.0)
    recent.add(10.0, 200.0, 1000.0)
    running = RunningAttempt(
        7, 3, (0, 1), "exclusive", None, 8192.0, 60.0, remaining_s=80.0, measured_remaining_s=120.0
    )
    tenants = tenants_by_gpu([running, RunningAttempt(8, 4, (1,), "mps", None, 1.0, 1.0)], {}, 0.0)
    assert [(t.job_id, t.remaining_s, t.measured_remaining_s) for t in tenants[0]] == [
        (3, 80.0, 120.0)
    ]
    gpu1 = GpuState(1, None, 40960.0, tenants=tuple(tenants[1]))
    assert gpu1.drains_in_s is None  # job 4's end is unknown
    assert GpuState(0, None, 40960.0, tenants=tuple(tenants[0])).drains_in_s == 80.0
    assert estimate(recent, None, 10.0).seconds == pytest.approx(80.0)
