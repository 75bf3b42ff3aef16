"""gpudesk.policy.mig_payoff: when `auto` gives an idle MIG-mode GPU the planner's
layout, by the interference model. The GPUs are a real A100 40GB as nvidia-smi describes it
(tests/fixtures), as in test_mig_planner."""

from __future__ import annotations

import pytest
from test_mig_planner import a100, job

from gpudesk.hw.mig.manager import MigManager
from gpudesk.policy.interference import DEFAULT_PARAMS, ModelParams
from gpudesk.policy.mig_payoff import (
    HORIZON_S,
    RECONFIG_S,
    LayoutChoice,
    LayoutPayoff,
    SliceStart,
    choose_layouts,
)
from gpudesk.policy.mig_planner import GpuMigState, QueuedDemand


def choose(gpus: list[GpuMigState], queue: list[QueuedDemand]) -> list[LayoutChoice]:
    def params_for(_: str) -> ModelParams:
        return DEFAULT_PARAMS

    return choose_layouts(
        gpus, queue, params_for, simulated=False, commands_from=MigManager("nvidia-smi")
    )


def test_a_whole_gpu_instance_is_recarved_for_many_light_jobs() -> None:
    queue = [job(i, 2, 10) for i in range(1, 5)]
    (choice,) = choose([a100(current=("7g.40gb",))], queue)
    payoff = choice.payoff
    # kept: one job on the whole-GPU instance; carved: all four on 1g.5gb slices
    assert [s.job_id for s in payoff.kept] == [1] and payoff.kept_rate == pytest.approx(1.0)
    assert [s.job_id for s in payoff.carved] == [1, 2, 3, 4]
    assert payoff.carved_rate > 2.5 and payoff.worth
    # the room the four leave is carved too, for jobs to come
    assert choice.payoff.planned == ("1g.5gb",) * 7
    assert "it pays" in payoff.summary() and "1.00 (jobs 1)" in payoff.summary()


def test_one_heavy_job_keeps_the_whole_gpu_instance() -> None:
    (choice,) = choose([a100(current=("7g.40gb",))], [job(1, 20, 80)])
    assert not choice.payoff.worth and choice.payoff.claimed == (1,)


def test_a_layout_that_already_serves_the_queue_stays() -> None:
    queue = [job(1, 2, 10), job(2, 2, 10)]
    (choice,) = choose([a100(current=("1g.5gb",) * 7)], queue)
    assert choice.payoff.kept == choice.payoff.carved and not choice.payoff.worth


def test_instances_too_small_for_the_queue_are_replaced() -> None:
    # 12 GB jobs fit no 1g.5gb: nothing starts on the current layout
    queue = [job(1, 12, 30), job(2, 12, 30)]
    (choice,) = choose([a100(current=("1g.5gb",) * 7)], queue)
    assert choice.payoff.kept == () and choice.payoff.worth
    assert {s.profile for s in choice.payoff.carved} == {"3g.20gb"}


def test_a_small_gain_does_not_pay_for_the_change() -> None:
    # the change costs RECONFIG_S of the horizon: a gain below that share is not worth it
    kept = (SliceStart(1, "3g.20gb", 1.0),)
    just_below = 1.0 * HORIZON_S / (HORIZON_S - RECONFIG_S) * 0.999
    assert not LayoutPayoff(
        0, ("3g.20gb",), ("4g.20gb",), kept, ((SliceStart(1, "x", just_below)),)
    ).worth
    just_above = just_below / 0.999 * 1.001
    assert LayoutPayoff(
        0, ("3g.20gb",), ("4g.20gb",), kept, ((SliceStart(1, "x", just_above)),)
    ).worth


def test_busy_held_and_non_mig_gpus_are_left_alone() -> None:
    queue = [job(1, 2, 10), job(2, 2, 10, held=True)]
    gpus = [
        a100(0, current=("7g.40gb",), running=(9,)),  # busy
        a100(1, mode="disabled"),  # MIG mode off: never toggled
        a100(2, current=("7g.40gb",)),
    ]
    choices = choose(gpus, queue)
    assert [c.plan.gpu for c in choices] == [2]
    assert [s.job_id for s in choices[0].payoff.carved] == [1]  # the held job cannot start


def test_each_gpu_plans_for_the_jobs_the_ones_before_it_left() -> None:
    queue = [job(i, 12, 30) for i in range(1, 5)]
    first, second = choose([a100(0, current=("1g.5gb",)), a100(1, current=("1g.5gb",))], queue)
    assert [s.job_id for s in first.payoff.carved] == [1, 2]
    assert [s.job_id for s in second.payoff.carved] == [3, 4]
    assert first.payoff.worth and second.payoff.worth
