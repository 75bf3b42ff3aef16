"""The burst term of the simulator's lower bound (gpudesk/policy/sim_bound_burst.py): the last
jobs of one program packed whole onto the GPUs and slices. Hand-computed on small cases, never
above what any policy reaches on random sweeps or the bundled sweep day, and what it says of
that day with a MIG GPU: no schedule reaches 0.93 x CARMA's makespan there."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
from test_simulator import write_trace

from gpudesk.examples import folder
from gpudesk.policy.interference import DEFAULT_PARAMS
from gpudesk.policy.rates import mig_rate, workload
from gpudesk.policy.sim_bound_burst import Slice, burst_term, throughputs
from gpudesk.policy.sim_bounds import bound_of
from gpudesk.policy.simulator import Simulation, load_trace, load_truth
from gpudesk.policy.trace import TraceJob

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ("exclusive", "naive", "mps", "mig", "carma", "auto")
H100 = load_truth(str(ROOT / "bench" / "results" / "calibrate-h100-8s.json"))
SWEEP_MIG = "3=3g.20gb,2g.10gb,1g.5gb,1g.5gb"
THIRTY = workload(30.0, None, DEFAULT_PARAMS)


def sweep(
    tmp_path: Path, minutes: list[float], memory_mb: float = 4000, at: float = 0.0
) -> tuple[TraceJob, ...]:
    jobs = [
        {"arrival_s": at, "exclusive_minutes": m, "sm_pct": 30.0, "peak_memory_mb": memory_mb}
        for m in minutes
    ]
    return load_trace(write_trace(tmp_path, jobs, "a100-40gb")).jobs


def test_five_hour_jobs_on_one_gpu_take_five_hours_of_work_at_its_best_rate(
    tmp_path: Path,
) -> None:
    """Five one-hour 30 % SM jobs on one whole GPU: four MPS tenants of the class run at 0.70
    each, the most a GPU does for them (T* = 2.80 job-seconds a second; five run at 0.50), so
    all five need 5 h ÷ 2.80; the fluid terms, which a fifth job's share of a second GPU would
    satisfy, do not see that a GPU does them all."""
    top = throughputs(THIRTY, DEFAULT_PARAMS, 5)[5]
    assert top == pytest.approx(4 * 0.7, abs=1e-3)
    term = burst_term(sweep(tmp_path, [60] * 5), 1, DEFAULT_PARAMS, [])
    assert term is not None and term.jobs == 5 and term.from_s == 0.0
    assert term.makespan_s == pytest.approx(5 * 3600 / top, abs=1.0)
    # the model floors each of many tenants at MIN_RATE (0.05): sixty of them do 3.0 a second,
    # so a count of jobs is bound by the most for that count, not for the class's largest
    tops = throughputs(THIRTY, DEFAULT_PARAMS, 60)
    assert tops[12] == pytest.approx(top) and tops[60] == pytest.approx(60 * 0.05)


def test_a_slice_takes_the_jobs_it_holds_one_at_a_time(tmp_path: Path) -> None:
    """One whole GPU and a 3g.20gb slice, five one-hour jobs: the slice finishes one in
    3600 / 0.833 = 4320 s, the GPU four in 4 h ÷ 2.80 = 5143 s, so all five need 5143 s (the
    GPU alone would need 6429). A slice too small for the jobs' memory takes none of them."""
    jobs = sweep(tmp_path, [60] * 5, memory_mb=12000)
    rate = mig_rate(DEFAULT_PARAMS, THIRTY, 3, 4)
    top = throughputs(THIRTY, DEFAULT_PARAMS, 5)[5]
    assert 3600 / rate < 4 * 3600 / top
    term = burst_term(jobs, 1, DEFAULT_PARAMS, [Slice(3, 4, 20 * 1024)])
    assert term is not None and term.makespan_s == pytest.approx(4 * 3600 / top, abs=1.0)
    small = burst_term(jobs, 1, DEFAULT_PARAMS, [Slice(1, 1, 5 * 1024)])
    assert small is not None and small.makespan_s == pytest.approx(5 * 3600 / top, abs=1.0)
    # a GPU that may be re-carved has no known slices: no term
    assert burst_term(jobs, 1, DEFAULT_PARAMS, None) is None


def test_on_slices_alone_each_takes_its_jobs_one_after_another(tmp_path: Path) -> None:
    """A station of MIG slices only (the H100 day in MIG mode): four one-hour jobs on two
    3g.20gb slices take two in a row each, 2 x 3600 / 0.833 s; a job no slice holds (one the
    station cannot run, which the simulator leaves out first) gives no bound beyond its arrival."""
    rate = mig_rate(DEFAULT_PARAMS, THIRTY, 3, 4)
    two = [Slice(3, 4, 20 * 1024)] * 2
    term = burst_term(sweep(tmp_path, [60] * 4), 0, DEFAULT_PARAMS, two)
    assert term is not None and term.makespan_s == pytest.approx(2 * 3600 / rate, abs=1.0)
    huge = burst_term(sweep(tmp_path, [60] * 4, memory_mb=30000), 0, DEFAULT_PARAMS, two)
    assert huge is not None and huge.makespan_s == 0.0


def test_each_program_is_packed_on_its_own_and_a_preemptible_job_never(tmp_path: Path) -> None:
    """The jobs packed are one program's: a job of another program only slows them (so five
    one-hour jobs beside a 70 % SM one bound as five alone), and a preemptible one is left out
    (its checkpoint may move its work to another GPU)."""
    jobs = list(sweep(tmp_path, [60] * 6))
    top = throughputs(THIRTY, DEFAULT_PARAMS, 5)[5]
    other = dataclasses.replace(jobs[0], sm_pct=70.0)
    term = burst_term([other, *jobs[1:]], 1, DEFAULT_PARAMS, [])
    assert term is not None and term.jobs == 5
    assert term.makespan_s == pytest.approx(5 * 3600 / top, abs=1.0)
    kept = dataclasses.replace(jobs[1], preemptible=True)
    term = burst_term([kept, *jobs[2:]], 1, DEFAULT_PARAMS, [])
    assert term is not None and term.jobs == 4


def test_no_policy_ends_a_random_sweep_before_its_burst_term(tmp_path: Path) -> None:
    """Seeded random sweeps of one program (two bursts, run times and memory random), on two
    A100s whole and with one in MIG mode, under the defaults and the H100 calibration as the
    truth: every policy that ran every job (on the station as given) ends at or after it."""
    rng = random.Random(24)
    checked = 0
    for case in range(4):
        sm = rng.choice((10.0, 30.0, 70.0))
        jobs = [
            {
                "arrival_s": rng.choice((0, 1800)) + rng.randint(0, 30),
                "exclusive_minutes": round(rng.uniform(10, 40), 1),
                "sm_pct": sm,
                "peak_memory_mb": rng.choice((3000, 8000, 15000)),
            }
            for _ in range(rng.randint(6, 12))
        ]
        trace = load_trace(write_trace(tmp_path, jobs))
        mig = "1=3g.20gb,2g.10gb,1g.5gb,1g.5gb" if case % 2 else None
        for truth in (DEFAULT_PARAMS, H100):
            for policy in POLICIES:
                sim = Simulation(
                    trace, policy=policy, station="sim:a100-40gbx2", truth=truth, mig=mig
                )
                bound = bound_of(sim)
                result = sim.run()
                if result.lost or result.mig_violations or result.not_runnable is not None:
                    continue
                assert bound.burst_term is not None
                assert result.makespan_s >= bound.burst_term_s * (1 - 1e-9), (case, policy)
                checked += 1
    assert checked >= 30


@pytest.mark.parametrize("truth", [DEFAULT_PARAMS, H100], ids=["defaults", "h100"])
@pytest.mark.parametrize("mig", [SWEEP_MIG, None], ids=["mig", "whole"])
def test_the_sweep_day_is_never_beaten_and_with_a_mig_gpu_is_above_093_carma(
    truth: object, mig: str | None
) -> None:
    trace = load_trace(str(folder("traces") / "sweep-day-a100x4.json"))
    ends = {}
    for policy in (*POLICIES, "fifo"):
        sim = Simulation(trace, policy=policy, station=trace.sim_station, truth=truth, mig=mig)  # type: ignore[arg-type]
        bound = bound_of(sim)
        result = sim.run()
        ends[policy] = result.makespan_s
        if not result.lost and result.not_runnable is None:
            assert result.makespan_s >= bound.makespan_s * (1 - 1e-9), policy
    if mig:  # it binds there, above the fluid and class terms, and above 0.93 x carma
        assert bound.makespan_s == bound.burst_term_s > bound.class_term_s
        assert bound.burst_term_s > 0.93 * ends["carma"]
