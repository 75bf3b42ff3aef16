"""The kernel-active gap (`kernel_active_extra`: how far NVML's kernel-active time runs ahead of
SM activity) measured directly: a job alone on a whole GPU, read for both, tells it, so the
learner learns it on a station (the engine's telemetry), in the simulator (the truth's
readings) and from a calibration's alone probes, where before only a MIG slice's rate could
move it and it stayed at its assumed 0.20 (the H100 measured 0.028, docs/calibration.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudesk.core.calibration_records import AloneMeasurement
from gpudesk.policy.calibration import alone_observations, measured_gap
from gpudesk.policy.interference import (
    DEFAULT_PARAMS,
    KERNEL_ACTIVE_CUTOFF,
    PESSIMISTIC_FACTOR,
    Learner,
    Observation,
    Workload,
    estimate,
)
from gpudesk.policy.observation_wire import (
    observation_from_dict,
    observation_from_json,
    observation_to_json,
)
from gpudesk.policy.progress_intervals import MIN_ACTIVITY_SAMPLES, AloneActivity
from gpudesk.policy.simulator import Simulation
from gpudesk.policy.trace import load_trace, load_truth

REPO = Path(__file__).parents[2]
H100 = "NVIDIA H100 80GB HBM3"


def alone(sm: float, active: float) -> Observation:
    return Observation("exclusive", Workload(sm, sm / 2), (), 1.0, kernel_active=active)


def test_a_job_alone_read_for_both_measures_the_gap_and_nothing_else() -> None:
    assert estimate(DEFAULT_PARAMS, alone(0.40, 0.43)) == (
        "kernel_active_extra",
        pytest.approx(0.03),
    )
    # noise below zero says the gap is none, not negative
    assert estimate(DEFAULT_PARAMS, alone(0.40, 0.38)) == ("kernel_active_extra", 0.0)
    # a GPU (nearly) always kernel-active cuts the gap off: it says nothing
    assert estimate(DEFAULT_PARAMS, alone(0.90, KERNEL_ACTIVE_CUTOFF)) is None
    # an idle job says nothing
    assert estimate(DEFAULT_PARAMS, alone(0.0, 0.2)) is None
    # beside others, kernel-active time is theirs too: not the job's gap
    shared = Observation("mps", Workload(0.4, 0.2), (Workload(0.3, 0.1),), 0.9, kernel_active=0.5)
    assert estimate(DEFAULT_PARAMS, shared) is None


def test_the_learner_learns_the_gap_and_its_range_narrows() -> None:
    learner = Learner()
    assert learner.widths(H100)["kernel_active_extra"] == PESSIMISTIC_FACTOR
    for _ in range(27):
        assert learner.observe(H100, alone(0.5, 0.528)) == "kernel_active_extra"
    learned = learner.params(H100).kernel_active_extra
    # the prior (0.20, weighted as 3 observations) against 27 readings of 0.028
    assert learned == pytest.approx((3 * 0.20 + 27 * 0.028) / 30, abs=1e-9)
    assert learner.widths(H100)["kernel_active_extra"] == pytest.approx(1.05)
    # the other parameters were not touched
    assert learner.params(H100).mps_tenant_cost == DEFAULT_PARAMS.mps_tenant_cost
    # what `gpudesk model show` prints as the top of each range: where `auto` judges sharing
    shown = {p.name: p for p in learner.describe(H100)}
    assert shown["kernel_active_extra"].high == pytest.approx(learned * 1.05)
    assert shown["mps_tenant_cost"].high == pytest.approx(0.04 * PESSIMISTIC_FACTOR)
    assert shown["membw_per_sm"].high is None  # no mechanism's cost: never widened


def test_an_alone_reading_goes_over_the_wire_and_into_the_store_unchanged() -> None:
    obs = alone(0.5, 0.61)
    assert observation_from_json(observation_to_json(obs)) == obs
    raw = {"mechanism": "mps", "job": {"sm": 0.5, "membw": 0.2}, "rate": 0.9}
    raw["kernel_active"] = 0.6
    with pytest.raises(ValueError, match="kernel_active is read alone"):
        observation_from_dict(raw)
    raw["mechanism"] = "exclusive"
    raw["kernel_active"] = 1.5
    with pytest.raises(ValueError, match="kernel_active must be a number from 0 to 1"):
        observation_from_dict(raw)


def test_telemetry_alone_makes_one_reading_from_enough_samples() -> None:
    activity = AloneActivity()
    for i in range(MIN_ACTIVITY_SAMPLES - 1):
        activity.add(float(i), 0.40, 0.50)
    assert activity.observation(DEFAULT_PARAMS, min_s=1.0) is None  # too few samples
    assert activity.sm_pct is None
    activity.add(1.0, 0.99, 0.99)  # the same sample read again: not counted twice
    assert activity.samples == MIN_ACTIVITY_SAMPLES - 1
    activity.add(2.0, 0.40, 0.56)
    assert activity.sm_pct == pytest.approx(40.0)  # the command's steady SM share
    obs = activity.observation(DEFAULT_PARAMS, min_s=2.0)
    assert obs is not None and obs.mechanism == "exclusive" and obs.others == ()
    # the SM share measured, its bandwidth from it (as for any workload without a figure)
    assert obs.job == Workload(
        pytest.approx(0.40), pytest.approx(0.40 * DEFAULT_PARAMS.membw_per_sm)
    )
    assert obs.kernel_active == pytest.approx(0.52)
    assert activity.observation(DEFAULT_PARAMS, min_s=2.5) is None  # not long enough
    busy = AloneActivity()
    for i in range(5):
        busy.add(float(i), 0.95, 1.0)
    assert busy.observation(DEFAULT_PARAMS, min_s=1.0) is None  # always kernel-active: cut off
    assert busy.sm_pct == pytest.approx(95.0)  # its steady SM share is read all the same


def test_a_calibrations_alone_probes_tell_the_engine_what_its_fit_measured() -> None:
    probes = {
        "light": AloneMeasurement("light", 100.0, sm=0.08, membw=0.0, kernel_active=0.09),
        "heavy": AloneMeasurement("heavy", 50.0, sm=0.70, membw=0.23, kernel_active=0.75),
        "membw": AloneMeasurement("membw", 80.0, sm=0.30, membw=0.9, kernel_active=1.0),
        "old": AloneMeasurement("old", 80.0, sm=None, kernel_active=0.5),  # no GPM
    }
    observations = alone_observations(probes)
    assert [o.kernel_active for o in observations] == [0.09, 0.75]
    learner = Learner()
    for obs in observations:
        learner.observe(H100, obs)
    gaps = measured_gap(probes)
    assert gaps == pytest.approx([0.01, 0.05])
    # the engine's learner blends what the fit measured with its prior
    expected = (3 * 0.20 + sum(gaps)) / 5
    assert learner.params(H100).kernel_active_extra == pytest.approx(expected)


def test_the_simulator_learns_the_truths_gap_from_jobs_alone() -> None:
    trace = load_trace(REPO / "traces" / "carma-philly-t1.json")
    truth = load_truth(REPO / "bench" / "results" / "calibrate-h100-8s.json")
    assert truth.kernel_active_extra == pytest.approx(0.028, abs=5e-4)
    learned = Simulation(trace, policy="auto", truth=truth).run()
    # from the assumed 0.20 three quarters of the way to the H100's 0.028 (a dozen jobs ran
    # alone long enough to be read, against the prior's weight of three)
    assert learned.learned_params["kernel_active_extra"] < 0.20 - 0.75 * (0.20 - 0.028)
    frozen = Simulation(trace, policy="auto", truth=truth, learn=False).run()
    assert frozen.learned_params["kernel_active_extra"] == DEFAULT_PARAMS.kernel_active_extra
