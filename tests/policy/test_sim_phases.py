"""A job's phases in the simulator: its start-up (`startup_s`: no share of the GPU taken, none
given up, paid again on each attempt) and its steady work, and the SM hint the policy is told
(`hint_sm_pct`) apart from the truth the simulated GPU runs (`sm_pct`). docs/simulator.md,
"Start-up and hints"."""

from __future__ import annotations

import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_simulator import write_trace

from gpudesk.policy.interference import DEFAULT_PARAMS, shared_rates, workload
from gpudesk.policy.sim_bounds import bound_of, lower_bound
from gpudesk.policy.sim_rates import job_workload
from gpudesk.policy.simulator import Simulation, Trace, TraceError, load_trace

H200 = "sim:h200"
POLICIES = ("exclusive", "naive", "mps", "mig", "carma", "auto")


def h200_trace(tmp_path: Path, jobs: list[dict[str, Any]]) -> Trace:
    """One H200's trace: small jobs whose memory hints are right (no OOM unless asked)."""
    sized = [{"peak_memory_mb": 1000, "estimate_gpumemnet_mb": 1000, **job} for job in jobs]
    return load_trace(write_trace(tmp_path, sized, station="h200"))


def finished(sim: Simulation) -> dict[int, tuple[float | None, float | None]]:
    """Each job's (first start, end) after the replay."""
    sim.run()
    return {r.job.id: (r.first_start, r.finished_at) for r in sim.runs}


# ----------------------------------------------------------------------------- the fields
@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("startup_s", "-1", "startup_s: expected a number from 0 to 315360000, found -1"),
        ("startup_s", "null", "startup_s: expected a number from 0 to 315360000, found null"),
        ("startup_s", '"9"', "startup_s: expected a number from 0 to 315360000, found '9'"),
        ("startup_s", "NaN", "startup_s: expected a number from 0 to 315360000, found nan"),
        # a start-up is part of the job's run alone (exclusive_minutes 1 = 60 s)
        (
            "startup_s",
            "60",
            "startup_s: expected less than the job's run time alone (60 s: exclusive_minutes x "
            "60), found 60",
        ),
        ("hint_sm_pct", "150", "hint_sm_pct: expected a number from 0 to 100, found 150"),
        ("hint_sm_pct", "true", "hint_sm_pct: expected a number from 0 to 100, found true"),
    ],
)
def test_a_bad_phase_field_is_one_trace_error(
    tmp_path: Path, field: str, value: str, words: str
) -> None:
    path = write_trace(tmp_path, [{}, {"exclusive_minutes": 1, field: "SENTINEL"}])
    path.write_text(path.read_text().replace('"SENTINEL"', value))
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert str(caught.value).startswith(f"{path}: jobs[1] (id 2): {words}")
    assert "\n" not in str(caught.value)


def test_gpudesk_simulate_says_a_bad_startup_in_one_line_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(
        '{"jobs":[{"id":7,"arrival_s":0,"exclusive_minutes":0.5,"peak_memory_mb":100,'
        '"startup_s":45}]}'
    )
    out = subprocess.run(
        [sys.executable, "-m", "gpudesk", "simulate", str(path)], capture_output=True, text=True
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == (
        f"error: {path}: jobs[0] (id 7): startup_s: expected less than the job's run time "
        "alone (30 s: exclusive_minutes x 60), found 45\n"
    )


def test_the_phase_fields_are_read_and_default_to_none(tmp_path: Path) -> None:
    given, plain, null_hint = load_trace(
        write_trace(
            tmp_path,
            [
                {"startup_s": 12.5, "sm_pct": 79, "hint_sm_pct": 53},
                {"sm_pct": 40},
                {"sm_pct": 40, "hint_sm_pct": None},
            ],
        )
    ).jobs
    assert (given.startup_s, given.steady_s, given.sm_pct, given.told_sm_pct) == (
        12.5,
        1800 - 12.5,
        79.0,
        53.0,
    )
    for job in (plain, null_hint):
        assert (job.startup_s, job.steady_s, job.told_sm_pct) == (0.0, 1800.0, 40.0)


# ------------------------------------------------------------------------------- start-up
def test_a_start_up_takes_no_share_and_is_not_slowed(tmp_path: Path) -> None:
    """Two 40 % SM jobs under MPS: together each runs at 0.96 (one co-tenant's cost, 0.04).
    Job 2 starts up for 60 s: job 1 runs alone meanwhile, at 1.0, and ends at 60 s exactly (it
    was 62.5 s, slowed by a job doing no work); job 2's start-up takes 60 s of wall clock,
    then its 60 s of steady work runs alone: it ends at 120 s (was 122.5 s)."""
    trace = h200_trace(
        tmp_path,
        [
            {"exclusive_minutes": 1, "sm_pct": 40},
            {"exclusive_minutes": 2, "sm_pct": 40, "startup_s": 60},
        ],
    )
    assert finished(Simulation(trace, policy="mps", station=H200)) == {
        1: (0.0, 60.0),
        2: (0.0, 120.0),
    }


def test_a_start_up_beside_a_long_tenant_then_shares_its_steady_work(tmp_path: Path) -> None:
    """Job 1 (10 min) beside job 2 (2 min, 60 s of it start-up): job 2's start-up ends at 60 s
    whoever shares the GPU; its 60 s of steady work then runs at the shared rate r (0.96), so
    it ends at 60 + 60 / r = 122.5 s; job 1 was slowed only while both were steady: 600 +
    62.5 x (1 - r) = 602.5 s (sharing all of job 2's run, it was 605 s)."""
    trace = h200_trace(
        tmp_path,
        [
            {"exclusive_minutes": 10, "sm_pct": 40},
            {"exclusive_minutes": 2, "sm_pct": 40, "startup_s": 60},
        ],
    )
    r = shared_rates(DEFAULT_PARAMS, "mps", [workload(40.0, None, DEFAULT_PARAMS)] * 2)[0]
    assert r == pytest.approx(0.96)
    ends = finished(Simulation(trace, policy="mps", station=H200))
    assert ends[2] == pytest.approx((0.0, 60 + 60 / r))
    assert ends[1] == pytest.approx((0.0, 600 + (60 / r) * (1 - r)))


def test_a_preempted_job_pays_its_start_up_again(tmp_path: Path) -> None:
    """tests/policy/test_preemption.py's day with start-ups: the long job (4 h, 120 s of it
    start-up) is preempted at 1800 s for the short one (10 min, 30 s start-up), which starts at
    1860 s when the checkpoint is saved and ends 600 s later; the long job resumes at 2460 s,
    starts up again (120 s), restores (60 s), and does its remaining steady work: it ends 120 s
    later than without start-ups (240 min + 60 + 600 + 60 s)."""
    jobs = [
        {
            "task": "long",
            "exclusive_minutes": 240,
            "peak_memory_mb": 60000,
            "sm_pct": 95,
            "preemptible": True,
            "checkpoint_s": 60,
            "startup_s": 120,
        },
        {
            "arrival_s": 1800,
            "task": "short",
            "exclusive_minutes": 10,
            "peak_memory_mb": 50000,
            "sm_pct": 90,
            "priority": 10,
            "startup_s": 30,
        },
    ]
    trace = load_trace(write_trace(tmp_path, jobs, station="h100"))
    sim = Simulation(trace, policy="auto", station="sim:h100", estimator="measured")
    ends = finished(sim)
    assert sim.preemptions == 1
    assert ends[2] == pytest.approx((1860.0, 2460.0))
    assert ends[1] == pytest.approx((0.0, 240 * 60 + 60 + 600 + 60 + 120))


def test_an_oom_rerun_pays_its_start_up_again(tmp_path: Path) -> None:
    """Job 2's memory grows over its first epoch of steady work (60 s), past its 30 s start-up:
    it dies at 90 s (its peak beside job 1's is more than an H200 holds) and runs again alone,
    start-up and all: 30 + 570 s."""
    trace = h200_trace(
        tmp_path,
        [
            {"exclusive_minutes": 10, "sm_pct": 40, "peak_memory_mb": 30000},
            {"exclusive_minutes": 10, "sm_pct": 40, "peak_memory_mb": 120000, "startup_s": 30},
        ],
    )
    sim = Simulation(trace, policy="mps", station=H200)
    result = sim.run()
    attempts = [(o.start_s, o.end_s, o.ended) for o in result.occupancies if o.job_id == 2]
    assert attempts[0] == (0.0, 90.0, "oom")
    start, end, ended = attempts[1]
    assert (ended, end - start) == ("finished", pytest.approx(600.0))


def test_the_learner_hears_no_start_up(tmp_path: Path) -> None:
    """A job alone whose start-up (120 s) is longer than the learner's shortest stretch (60 s)
    and whose steady work is shorter teaches nothing (alone for 150 s it was observed)."""
    trace = h200_trace(tmp_path, [{"exclusive_minutes": 2.5, "sm_pct": 40, "startup_s": 120}])
    result = Simulation(trace, policy="mps", station=H200).run()
    assert (result.makespan_s, result.observations) == (150.0, 0)


# ---------------------------------------------------------------------------------- hints
def test_the_policy_is_told_the_hint_and_the_gpu_runs_the_truth(tmp_path: Path) -> None:
    """Two jobs that fill the GPU (100 % SM each) hinted at 40 %: forced MPS, told 40 + 40,
    starts both at once (told 100 + 100 it runs them one after the other), and they run at
    the rates of two full-GPU tenants."""
    jobs: list[dict[str, Any]] = [
        {"exclusive_minutes": 1, "sm_pct": 100, "hint_sm_pct": 40},
        {"exclusive_minutes": 2, "sm_pct": 100, "hint_sm_pct": 40},
    ]
    sim = Simulation(h200_trace(tmp_path, jobs), policy="mps", station=H200)
    run = sim.runs[0]
    assert (run.record.spec.sm_pct, run.demand.sm_pct) == (40.0, 40.0)
    assert job_workload(run, DEFAULT_PARAMS).sm == 1.0
    full = workload(100.0, None, DEFAULT_PARAMS)
    r = shared_rates(DEFAULT_PARAMS, "mps", [full, full])[0]
    assert r < 0.5  # two full-GPU tenants: each below half its speed alone
    sim._arrive()
    sim._schedule()
    view = sim.view()
    assert [t.sm_pct for t in view.gpu_states[0].tenants] == [40.0, 40.0]
    assert sim.rate(run) == pytest.approx(r)
    ends = finished(sim)
    assert ends[1] == pytest.approx((0.0, 60 / r))
    assert ends[2] == pytest.approx((0.0, 60 / r + 60))
    told_truth = [{k: v for k, v in j.items() if k != "hint_sm_pct"} for j in jobs]
    plain = finished(Simulation(h200_trace(tmp_path, told_truth), policy="mps", station=H200))
    assert plain == {1: (0.0, 60.0), 2: (60.0, 180.0)}


def test_the_learner_is_fed_the_steady_shares_as_the_engine_measures_them(tmp_path: Path) -> None:
    """Two jobs sharing for over a minute, after one of their family ran alone (as the engine
    needs, to know the family's steady share): the observation the learner keeps describes each
    by the steady share it ran (40 %), which the engine measures alone, not by its hint (20 %):
    read against the hints, the learner would put the hints' error into the mechanism."""
    trace = h200_trace(
        tmp_path,
        [
            {"exclusive_minutes": 2, "sm_pct": 40, "hint_sm_pct": 20},
            {"arrival_s": 150, "exclusive_minutes": 5, "sm_pct": 40, "hint_sm_pct": 20},
            {"arrival_s": 150, "exclusive_minutes": 5, "sm_pct": 40, "hint_sm_pct": 20},
        ],
    )
    sim = Simulation(trace, policy="mps", station=H200)
    sim.run()
    kept = sim.learner.kept("NVIDIA H200")
    shared = [k.obs for k in kept if k.obs.mechanism == "mps"]
    assert shared, kept
    for obs in shared:
        assert obs.job.sm == 0.4 and [o.sm for o in obs.others] == [0.4]


# -------------------------------------------------------------------------- lower bounds
def test_start_ups_overlap_for_free_and_the_bound_knows_it(tmp_path: Path) -> None:
    """Eight 100 s jobs at 100 % SM, 90 s of each start-up, hinted at 10 % so that forced MPS
    starts them all at once: their start-ups overlap and only 8 x 10 s of steady work shares
    the GPU. The bound counts steady work only: it stays below the run, where the fluid term
    on run times alone (800 s of SM work) would not."""
    jobs = [
        {"exclusive_minutes": 100 / 60, "sm_pct": 100, "hint_sm_pct": 10, "startup_s": 90}
        for _ in range(8)
    ]
    trace = h200_trace(tmp_path, jobs)
    sim = Simulation(trace, policy="mps", station=H200)
    bound = bound_of(sim)
    result = sim.run()
    assert result.makespan_s < 400
    assert bound.makespan_s <= result.makespan_s
    assert bound.fluid_term_s == pytest.approx(80.0)  # 8 x 10 s of SM work on one GPU
    assert bound.arrival_term_s == pytest.approx(100.0)
    without_phases = [replace(j, startup_s=0.0) for j in trace.jobs]
    assert lower_bound(without_phases, 1, DEFAULT_PARAMS).makespan_s > result.makespan_s


def test_no_policy_beats_the_bound_with_start_ups(tmp_path: Path) -> None:
    """Seeded random traces of short jobs, most of each run start-up, arriving in bursts, with
    hints below the truth, on two whole GPUs or one beside a MIG GPU: every policy's makespan
    and mean JCT are at least the bounds. Some runs end before the bound on run times alone
    (every start-up counted as work) allows: the check is not empty."""
    checked = beaten = 0
    for seed in range(3):
        rng = random.Random(4200 + seed)
        jobs = []
        for _ in range(16):
            minutes = round(rng.uniform(1, 5), 2)
            sm = rng.choice((5.0, 10.0, 30.0, 70.0, 95.0))
            jobs.append(
                {
                    "arrival_s": float(rng.choice((0, 0, 120)) + rng.randrange(0, 30)),
                    "exclusive_minutes": minutes,
                    "startup_s": round(rng.uniform(0.5, 0.9) * minutes * 60, 1),
                    "sm_pct": sm,
                    "hint_sm_pct": round(sm * rng.uniform(0.3, 1.0), 1),
                    "peak_memory_mb": rng.choice((1000, 4000, 12000)),
                    "estimate_gpumemnet_mb": 4000,
                    "gpus": 2 if rng.random() < 0.1 else 1,
                }
            )
        trace = load_trace(write_trace(tmp_path, jobs))
        mig = "1=3g.20gb,2g.10gb,1g.5gb,1g.5gb" if seed % 2 else None
        without_phases = [replace(j, startup_s=0.0) for j in trace.jobs]
        old = lower_bound(without_phases, 2, DEFAULT_PARAMS).makespan_s
        for policy in POLICIES:
            sim = Simulation(trace, policy=policy, station="sim:a100-40gbx2", mig=mig)
            bound = bound_of(sim)
            result = sim.run()
            if result.lost or result.mig_violations:
                continue
            assert result.makespan_s >= bound.makespan_of(result) * (1 - 1e-9), (seed, policy)
            jct_floor = bound.mean_jct_queue_of(result)
            assert result.mean_jct_s >= jct_floor * (1 - 1e-9), (seed, policy)
            checked += 1
            beaten += result.makespan_s < old
    assert checked >= 12 and beaten > 0


def test_the_class_and_burst_terms_count_steady_work(tmp_path: Path) -> None:
    """Twelve jobs of one kind (a burst of one program), all start-up but 1 s: the class and
    burst terms, which count steady work, stay below what running them together takes."""
    jobs = [
        {"exclusive_minutes": 1, "sm_pct": 70, "hint_sm_pct": 5, "startup_s": 59} for _ in range(12)
    ]
    trace = h200_trace(tmp_path, jobs)
    sim = Simulation(trace, policy="mps", station=H200)
    bound = bound_of(sim)
    result = sim.run()
    assert result.makespan_s < 120
    for term in (bound.class_term_s, bound.burst_term_s, bound.makespan_s):
        assert term <= result.makespan_s, bound
