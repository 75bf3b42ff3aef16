"""`gpudesk simulate`'s results table: a policy that lost jobs shows how many instead of a
makespan, which would compare a shorter day's work with the others'."""

from __future__ import annotations

from gpudesk.cli.simulate import _results_table
from gpudesk.policy.simulator import SimResult


def result(policy: str, makespan_s: float, lost: int = 0) -> SimResult:
    return SimResult(
        policy=policy,
        estimator="hint",
        station="sim:dgx-station-a100",
        jobs=10,
        makespan_s=makespan_s,
        mean_jct_s=600.0,
        p95_jct_s=900.0,
        mean_wait_s=60.0,
        gpu_busy_hours=2.0,
        energy_kwh=1.5,
        oom_crashes=lost,
        oom_recovered=0,
        lost=lost,
        decisions=10,
        decision_p99_ms=1.0,
    )


def row(table: str, policy: str) -> list[str]:
    return next(line.split() for line in table.splitlines() if line.startswith(policy))


def test_a_policy_that_lost_jobs_shows_lost_n_where_the_makespan_would_be() -> None:
    table = _results_table([result("exclusive", 7200.0), result("mps", 3600.0, lost=3)])
    assert row(table, "mps")[1:4] == ["lost", "3", "-"]
    assert row(table, "exclusive")[2] == "1.00"


def test_the_ratios_compare_with_a_policy_that_lost_none() -> None:
    """The exclusive policy lost jobs: the ratios are against the one that lost none."""
    table = _results_table(
        [result("exclusive", 7200.0, lost=2), result("mps", 3600.0), result("naive", 5400.0)]
    )
    assert row(table, "exclusive")[1:4] == ["lost", "2", "-"]
    assert row(table, "mps")[2] == "1.00" and row(table, "naive")[2] == "1.50"


def test_with_a_lower_bound_a_lost_policy_has_no_ratio_to_it() -> None:
    from gpudesk.policy.sim_bounds import LowerBound

    bound = LowerBound(
        makespan_s=3600.0,
        arrival_term_s=3600.0,
        arrival_job=1,
        fluid_term_s=1800.0,
        fluid_weight=(1.0, 0.0),
        fluid_from_s=0.0,
        fluid_throughput=1.0,
        class_term=None,
        mean_jct_s=300.0,
        mean_jct_queue_s=300.0,
        mean_jct_queue_any_s=300.0,
        jobs=10,
        gpus=4,
    )
    table = _results_table(
        [result("exclusive", 7200.0), result("mps", 3600.0, lost=3)], None, bound
    )
    assert row(table, "exclusive")[1:6] == ["2h00m", "1.00", "2.00", "10m00s", "2.00"]
    assert row(table, "mps")[1:7] == ["lost", "3", "-", "-", "10m00s", "-"]


def test_a_policy_that_lost_every_job_shows_no_completion_times() -> None:
    table = _results_table([result("auto", 7200.0), result("carma", 100.0, lost=10)])
    assert row(table, "carma")[1:7] == ["lost", "10", "-", "-", "-", "-"]
