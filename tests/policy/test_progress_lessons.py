"""Learning on the station, the pure parts beside the intervals (policy/progress_intervals.py):
a MIG slice's size from a telemetry sample, and a command's rate alone over its runs (the same
mean the store keeps: tests/engine/test_learning.py)."""

from __future__ import annotations

from gpudesk.policy.progress_intervals import AloneRate, alone_rate_after, slice_size

SAMPLE = {
    "gpus": [
        {"index": 0, "name": "NVIDIA A100-SXM4-40GB", "mig_devices": []},
        {
            "index": 1,
            "name": "NVIDIA A100-SXM4-40GB",
            "mig_devices": [{"uuid": "MIG-a", "name": "3g.20gb"}, {"uuid": "MIG-b", "name": None}],
        },
    ]
}


def test_a_slices_size_is_read_from_the_latest_sample() -> None:
    assert slice_size(SAMPLE, 1, "MIG-a") == (3, 4)
    assert slice_size(SAMPLE, 1, "MIG-b") == (0, 0)  # a device the sample does not name
    assert slice_size(SAMPLE, 0, "MIG-a") == (0, 0)  # not on that GPU
    assert slice_size(None, 1, "MIG-a") == (0, 0)  # no sample yet


def test_a_commands_rate_alone_is_the_mean_over_its_runs() -> None:
    first = alone_rate_after(None, 10.0, 5.0)
    assert first == AloneRate(10.0, 1, 5.0)
    assert alone_rate_after(first, 20.0, 6.0) == AloneRate(15.0, 2, 6.0)
