"""gpudesk.policy.mig_queue_time: what a MIG layout costs the queue against the whole GPU under
MPS, by the simulator's own replay of the queued jobs (SIMULATED), and the payoff's check that
`auto` does not repartition where the replay says the queue drains later. One simulated H100,
the published defaults as the model. No figure here is written down: each is compared with the
replay's other figures, so a change of the model moves both sides."""

from __future__ import annotations

from collections.abc import Sequence

from gpudesk.core.gpu_models import H100_SXM5_80GB
from gpudesk.policy.interference import DEFAULT_PARAMS, ModelParams
from gpudesk.policy.mig_payoff import QueueDrain, choose_layouts
from gpudesk.policy.mig_planner import (
    GpuMigState,
    PlansOnly,
    QueuedDemand,
    plan_gpu,
    simulated_profiles,
)
from gpudesk.policy.mig_queue_time import NOISE_SHARE, layout_drain, queue_times
from gpudesk.policy.queue_trace import MAX_JOBS, UNKNOWN_RUN_S, queue_trace, sim_station_for
from gpudesk.policy.simulator import Simulation
from gpudesk.render import duration

GIB = 1024.0


def h100(current: tuple[str, ...] = (), running: tuple[int, ...] = ()) -> GpuMigState:
    profiles, placements = simulated_profiles(H100_SXM5_80GB, 0)
    return GpuMigState(
        0,
        H100_SXM5_80GB.name,
        "enabled",
        profiles,
        placements,
        current,
        has_gpu_instances=bool(current),
        has_compute_instances=bool(current),
        running_job_ids=running,
    )


def demand(job_id: int, gib: float, sm: float, minutes: float | None) -> QueuedDemand:
    run_s = None if minutes is None else minutes * 60.0
    return QueuedDemand(job_id, f"j{job_id}", gib * GIB, sm, run_s=run_s)


# Issue 39's mixed day on one H100: a 38 GB LoRA fine-tune and a ViT at 85 % SM, hours each,
# among light CIFAR-sized jobs of 10-20 minutes.
MIXED_DAY = [
    demand(1, 38, 60, 240),
    demand(2, 14, 85, 180),
    *(demand(i, 2, 10, 10 + i) for i in range(3, 9)),
]
# Many small jobs that barely use the GPU (5 % SM: DLRM's published figure): by the model, the
# only light queue where 1g slices beat MPS, whose per-tenant cost then outweighs what a slice's
# share takes (at 10 % SM and up the whole GPU under MPS drains such a queue sooner).
LIGHT = [demand(i, 2, 5, 15) for i in range(1, 15)]


def planned(queue: Sequence[QueuedDemand], gpu: GpuMigState | None = None) -> list[str]:
    plan = plan_gpu(
        gpu or h100(), queue, repartition_allowed=True, simulated=True, commands_from=PlansOnly()
    )
    return plan.wanted_profiles


def test_the_mixed_day_costs_queue_time_on_mig_and_says_how_much() -> None:
    layout = planned(MIXED_DAY)
    times = queue_times(Simulation, h100(), layout, MIXED_DAY, DEFAULT_PARAMS)
    assert times is not None
    assert times.mig.cannot_run == 0 and times.mps.cannot_run == 0
    assert times.cost_s == times.mig.seconds - times.mps.seconds
    assert times.costs_queue_time and not times.view().recommended
    assert times.cost_s > NOISE_SHARE * times.mps.seconds
    line = times.summary()
    assert line.startswith(f"MIG {'+'.join(layout)}: queue drains in ~")
    assert f"the whole GPU under MPS: ~{duration(times.mps.seconds)}" in line
    assert f"MIG costs the queue {duration(times.cost_s)}: not recommended" in line
    assert "SIMULATED" in line and "docs/calibration.md" in line
    view = times.view()
    assert (view.mig_s, view.mps_s, view.cost_s) == (
        times.mig.seconds,
        times.mps.seconds,
        times.cost_s,
    )
    assert view.run_time_unknown == 0 and view.jobs == len(MIXED_DAY)


def test_many_light_jobs_gain_on_mig_and_it_says_so() -> None:
    layout = planned(LIGHT)
    assert set(layout) == {"1g.10gb"}
    times = queue_times(Simulation, h100(), layout, LIGHT, DEFAULT_PARAMS)
    assert times is not None and not times.costs_queue_time and times.gains_queue_time
    assert times.view().recommended and times.cost_s < 0
    assert times.verdict() == f"MIG saves the queue {duration(-times.cost_s)}"
    assert "not recommended" not in times.summary()


def test_light_jobs_at_ten_per_cent_drain_sooner_under_mps() -> None:
    """The same queue at 10 % SM: the model's MPS cost per tenant no longer outweighs a 1g
    slice's share, and the line says what the slices cost."""
    queue = [demand(i, 2, 10, 15) for i in range(1, 15)]
    times = queue_times(Simulation, h100(), planned(queue), queue, DEFAULT_PARAMS)
    assert times is not None and times.mig.seconds > times.mps.seconds


def test_a_job_no_slice_holds_is_counted_and_the_layout_not_recommended() -> None:
    queue = [demand(1, 60, 50, 30), demand(2, 2, 10, 15)]
    times = queue_times(Simulation, h100(), ["1g.10gb", "1g.10gb"], queue, DEFAULT_PARAMS)
    assert times is not None
    assert times.mig.cannot_run == 1 and times.mps.cannot_run == 0
    assert times.costs_queue_time and "1 queued job(s) fit no slice" in times.summary()


def test_unknown_run_times_are_assumed_and_said() -> None:
    queue = [demand(1, 2, 10, None), demand(2, 2, 10, 15)]
    times = queue_times(Simulation, h100(), ["1g.10gb", "1g.10gb"], queue, DEFAULT_PARAMS)
    assert times is not None
    assert times.trace.unknown == 1
    assert times.trace.trace.jobs[0].exclusive_s == UNKNOWN_RUN_S
    assert any(
        "ASSUMED" in note and "1 job(s) with no run-time history" in note for note in times.notes()
    )


def test_held_jobs_and_a_long_queue() -> None:
    queue = [demand(i, 2, 10, 5) for i in range(MAX_JOBS + 5)]
    held = QueuedDemand(999, "held", 2 * GIB, 10, held=True, run_s=60)
    qt = queue_trace(H100_SXM5_80GB.name, [held, *queue])
    assert qt is not None and len(qt.trace.jobs) == MAX_JOBS and qt.left_out == 5
    assert 999 not in {j.id for j in qt.trace.jobs}


def test_the_station_of_a_gpu_by_its_name() -> None:
    assert sim_station_for("NVIDIA H100 80GB HBM3") == "sim:h100x1"
    assert sim_station_for("NVIDIA H100 PCIe") == "sim:h100x1"
    assert sim_station_for("NVIDIA H200") == "sim:h200x1"
    assert sim_station_for("NVIDIA A100 80GB PCIe") == "sim:a100-80gbx1"
    assert sim_station_for("Tesla V100-SXM2-16GB") is None
    assert queue_trace("Tesla V100-SXM2-16GB", LIGHT) is None


def test_a_gpu_with_mig_mode_off_is_weighed_on_its_models_table() -> None:
    """A real H100 with MIG mode off lists no profiles: the layout is planned on the model's
    table, and the notes say so."""
    off = GpuMigState(0, "NVIDIA H100 PCIe", "disabled")
    times = queue_times(Simulation, off, [], MIXED_DAY, DEFAULT_PARAMS)
    assert times is not None and times.layout == tuple(planned(MIXED_DAY))
    assert times.costs_queue_time and any("MIG mode is off" in n for n in times.notes())


def test_nothing_to_weigh_without_a_layout() -> None:
    assert queue_times(Simulation, h100(), [], MIXED_DAY, DEFAULT_PARAMS) is None
    assert queue_times(Simulation, h100(), ["1g.10gb"], [], DEFAULT_PARAMS) is None


# ------------------------------------------------------------------------------ the payoff
def params_for(_: str) -> ModelParams:
    return DEFAULT_PARAMS


def test_a_change_the_replay_says_slows_the_queue_is_not_made() -> None:
    """The rates say carving pays (more jobs start now); the drain says the queue ends later:
    no change."""
    queue = [demand(1, 2, 10, 15), demand(2, 2, 10, 15)]

    def slower(gpu: GpuMigState, layout: tuple[str, ...], _q: Sequence[QueuedDemand]) -> QueueDrain:
        return QueueDrain(1000.0 if layout == gpu.current else 1001.0)

    (choice,) = choose_layouts(
        [h100(current=("7g.80gb",))],
        queue,
        params_for,
        simulated=True,
        commands_from=PlansOnly(),
        drain=slower,
    )
    payoff = choice.payoff
    assert payoff.rate_pays and payoff.slows_the_queue and not payoff.worth
    assert "the queue drains in ~16m41s with it against ~16m40s as it is" in payoff.summary()
    assert payoff.summary().endswith("it does not pay")
    assert payoff.claimed == tuple(s.job_id for s in payoff.kept)


def test_the_drain_is_not_asked_where_the_layout_stays() -> None:
    asked: list[tuple[str, ...]] = []

    def drain(gpu: GpuMigState, layout: tuple[str, ...], _q: Sequence[QueuedDemand]) -> QueueDrain:
        asked.append(layout)
        return QueueDrain(1.0)

    # one heavy job keeps the whole GPU instance: the planned layout is the one it has
    (choice,) = choose_layouts(
        [h100(current=("7g.80gb",))],
        [demand(1, 20, 80, 60)],
        params_for,
        simulated=True,
        commands_from=PlansOnly(),
        drain=drain,
    )
    assert not choice.payoff.worth and asked == [] and choice.payoff.kept_drain is None


def test_a_layout_on_which_jobs_never_start_is_changed_whatever_the_rates() -> None:
    """Seven 1g slices hold light jobs but never the 38 GB LoRA queued first: the rates of what
    each layout starts now favour the slices (the planner's 7g.80gb starts the LoRA alone), but
    kept, the LoRA never runs (the GPU changes only while idle), so the change is made."""
    queue = [demand(1, 38, 60, 240), *(demand(i, 2, 10, 15) for i in range(2, 9))]
    (choice,) = choose_layouts(
        [h100(current=("1g.10gb",) * 7)],
        queue,
        params_for,
        simulated=True,
        commands_from=PlansOnly(),
        drain=layout_drain(Simulation, params_for),
    )
    payoff = choice.payoff
    assert payoff.planned == ("7g.80gb",) and not payoff.rate_pays
    assert payoff.kept_drain is not None and payoff.kept_drain.cannot_run == 1
    assert payoff.carved_drain is not None and payoff.carved_drain.cannot_run == 0
    assert payoff.unblocks_the_queue and payoff.worth


def test_light_jobs_ahead_of_a_lora_do_not_get_the_gpu_carved() -> None:
    """The issue's case, by the real replay: light jobs queued ahead of a 38 GB LoRA. Carving the
    whole-GPU instance into 1g slices starts seven now (the rates say it pays), but then the
    LoRA fits no slice and never starts: no change."""
    queue = [*(demand(i, 2, 10, 15) for i in range(1, 7)), demand(7, 38, 60, 240)]
    (choice,) = choose_layouts(
        [h100(current=("7g.80gb",))],
        queue,
        params_for,
        simulated=True,
        commands_from=PlansOnly(),
        drain=layout_drain(Simulation, params_for),
    )
    payoff = choice.payoff
    assert set(payoff.planned) == {"1g.10gb"} and payoff.rate_pays
    assert payoff.kept_drain is not None and payoff.carved_drain is not None
    assert payoff.carved_drain.cannot_run == 1 and payoff.kept_drain.cannot_run == 0
    assert payoff.slows_the_queue and not payoff.worth
    assert "1 job(s) never start" in payoff.summary()


def test_many_light_jobs_get_the_gpu_carved_where_the_queue_drains_sooner() -> None:
    (choice,) = choose_layouts(
        [h100(current=("7g.80gb",))],
        LIGHT,
        params_for,
        simulated=True,
        commands_from=PlansOnly(),
        drain=layout_drain(Simulation, params_for),
    )
    payoff = choice.payoff
    assert payoff.kept_drain is not None and payoff.carved_drain is not None
    assert payoff.carved_drain.seconds < payoff.kept_drain.seconds and payoff.worth
