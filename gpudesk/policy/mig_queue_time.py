"""What a MIG layout costs the queue: how long the queue as it is takes to drain with the layout,
against the same GPU whole, shared under MPS or one job at a time — SIMULATED, by the simulator's
own replay (`Simulation`) of the queued jobs (`queue_trace`) with the station's current model
parameters as the truth, so the prediction is only as good as the model (docs/calibration.md:
its error on a pair under MPS is ~0.2 in rate). Issue 39's evidence for it: on one H100 in MIG
mode a mixed day took 14h13 that runs in 13h52 exclusively (a 38 GB job and an 85 % SM one
squeezed onto 3g/4g slices).

The replayer is passed in (`Replay`: the simulator's `Simulation`), not imported: the simulator
itself weighs its `--mig-repartition` changes with `layout_drain`, as the engine does.

The replay starts from an idle GPU with every queued job there at once; the jobs running now are
not in it. `gpudesk mig plan` and the desk show `QueueTimes.summary`; the engine's own
repartitioning asks `layout_drain` (mig_payoff.choose_layouts' `drain`) and keeps the layout it
has where the new one would drain the queue later.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import msgspec

from gpudesk import render
from gpudesk.core.wire.mig import QueueTimeView
from gpudesk.policy.interference import ModelParams
from gpudesk.policy.mig_payoff import QueueDrain
from gpudesk.policy.mig_planner import (
    GpuMigState,
    PlansOnly,
    QueuedDemand,
    plan_gpu,
    simulated_profiles,
)
from gpudesk.policy.queue_trace import QueueTrace, model_station, queue_trace
from gpudesk.policy.sim_records import SimResult
from gpudesk.policy.trace import Trace

# A difference smaller than this share of the whole-GPU figure is within the simulator's own
# noise: docs/benchmarks.md (issue 39) measured t1's makespan moving ~2 % on small changes.
NOISE_SHARE = 0.02
CAVEAT = "SIMULATED from the model; the model's error on MPS pairs is large: docs/calibration.md"


class Replaying(Protocol):
    def run(self) -> SimResult: ...


class Replay(Protocol):
    """The simulator's `Simulation`, as this module builds one."""

    def __call__(
        self,
        trace: Trace,
        *,
        policy: str,
        station: str,
        estimator: str,
        truth: ModelParams,
        policy_params: ModelParams | None,
        learn: bool,
        mig: Mapping[int, Sequence[str]] | None,
    ) -> Replaying: ...


def _replay(
    replay: Replay,
    qt: QueueTrace,
    policy: str,
    layout: tuple[str, ...] | None,
    params: ModelParams,
) -> QueueDrain:
    sim = replay(
        qt.trace,
        policy=policy,
        station=qt.station,
        estimator="measured",  # the demand placement assumes is the replay's truth
        truth=params,
        policy_params=params,
        learn=False,
        mig=None if layout is None else {0: layout},
    )
    result = sim.run()
    return QueueDrain(result.makespan_s, result.lost + result.impossible)


# The engine asks again for the same queue every few seconds (the desk's MIG screen refreshes
# its plan every 5 s): the same queue, layout and parameters give the same replay.
@lru_cache(maxsize=64)
def _cached(
    replay: Replay,
    gpu_name: str,
    queue: tuple[QueuedDemand, ...],
    policy: str,
    layout: tuple[str, ...] | None,
    params: ModelParams,
) -> tuple[QueueDrain, QueueTrace] | None:
    qt = queue_trace(gpu_name, queue)
    if qt is None:
        return None
    return _replay(replay, qt, policy, layout, params), qt


def drain_time(
    replay: Replay,
    gpu_name: str,
    queue: Sequence[QueuedDemand],
    params: ModelParams,
    *,
    layout: Sequence[str] | None,
    policy: str = "auto",
) -> tuple[QueueDrain, QueueTrace] | None:
    """The queue's drain time on one GPU of this model: with `layout` fixed (the GPU in MIG
    mode, placed by `policy`), or whole (`layout` None). None where the simulator has no model
    of the GPU or nothing is queued."""
    fixed = None if layout is None else tuple(layout)
    # a class (the simulator's Simulation) is hashable, as the cache needs
    return _cached(replay, gpu_name, tuple(queue), policy, fixed, params)  # type: ignore[arg-type]


def layout_drain(
    replay: Replay, params_for: Callable[[str], ModelParams]
) -> Callable[[GpuMigState, tuple[str, ...], Sequence[QueuedDemand]], QueueDrain | None]:
    """mig_payoff's `drain` for `auto`'s own repartitioning: the queue's drain time with a
    layout on a MIG-mode GPU, by the model the station has learnt for that GPU."""

    def drain(
        gpu: GpuMigState, layout: tuple[str, ...], queue: Sequence[QueuedDemand]
    ) -> QueueDrain | None:
        found = drain_time(replay, gpu.name, queue, params_for(gpu.name), layout=layout)
        return None if found is None else found[0]

    return drain


@dataclass(frozen=True)
class QueueTimes:
    """One GPU's queue under a MIG layout and whole."""

    gpu: int
    layout: tuple[str, ...]
    mig: QueueDrain
    mps: QueueDrain
    exclusive: QueueDrain
    trace: QueueTrace
    current: tuple[str, ...] = ()
    current_drain: QueueDrain | None = None  # the layout the GPU has, where it differs
    running: int = 0  # jobs running on the GPU now, not in the replay
    from_table: bool = False  # MIG mode is off: the layout is planned on the model's table
    station_gpus: int = 1  # the GPUs of the station: on more than one, the others share the queue

    @property
    def cost_s(self) -> float:
        """What the layout costs the queue against the whole GPU under MPS (< 0: it gains)."""
        return self.mig.seconds - self.mps.seconds

    @property
    def costs_queue_time(self) -> bool:
        if self.mig.cannot_run > self.mps.cannot_run:
            return True
        return self.cost_s > NOISE_SHARE * self.mps.seconds

    @property
    def gains_queue_time(self) -> bool:
        return (
            self.mig.cannot_run <= self.mps.cannot_run
            and -self.cost_s > NOISE_SHARE * self.mps.seconds
        )

    def verdict(self) -> str:
        if self.mig.cannot_run > self.mps.cannot_run:
            return (
                f"{self.mig.cannot_run} queued job(s) fit no slice of it and never start: "
                "MIG is not recommended for this queue"
            )
        if self.costs_queue_time:
            return (
                f"MIG costs the queue {render.duration(self.cost_s)}: not recommended for this "
                "queue"
            )
        if self.gains_queue_time:
            return f"MIG saves the queue {render.duration(-self.cost_s)}"
        return "MIG and the whole GPU are about even (within 2 %, the simulator's noise)"

    def summary(self) -> str:
        """One line, as `gpudesk mig plan` and the desk show it."""
        layout = "+".join(self.layout) or "no slices"
        return (
            f"MIG {layout}: queue drains in {self.mig.text()}; the whole GPU under MPS: "
            f"{self.mps.text()} — {self.verdict()} ({CAVEAT})"
        )

    def notes(self) -> list[str]:
        """What the figures rest on, beyond the model."""
        qt, jobs = self.trace, len(self.trace.trace.jobs)
        said = [f"{jobs} queued job(s), all started from an idle GPU"]
        if self.station_gpus > 1:
            said.append(
                f"as if this GPU alone ran them: the station's {self.station_gpus} GPUs share "
                "the queue"
            )
        if self.from_table:
            said.append(
                "MIG mode is off: the layout is the one the planner would want from the "
                "model's profile table"
            )
        if self.running:
            said.append(f"the {self.running} job(s) running on it now are not counted")
        if qt.left_out:
            said.append(f"{qt.left_out} more queued job(s) left out of the replay")
        if qt.unknown:
            said.append(
                f"{qt.unknown} job(s) with no run-time history: each ASSUMED "
                f"{render.duration(qt.assumed_run_s)} alone (the Philly trace's median)"
            )
        return said

    def view(self) -> QueueTimeView:
        return QueueTimeView(
            layout=list(self.layout),
            mig_s=self.mig.seconds,
            mig_cannot_run=self.mig.cannot_run,
            mps_s=self.mps.seconds,
            mps_cannot_run=self.mps.cannot_run,
            exclusive_s=self.exclusive.seconds,
            exclusive_cannot_run=self.exclusive.cannot_run,
            cost_s=self.cost_s,
            costs_queue_time=self.costs_queue_time,
            recommended=not self.costs_queue_time,
            current=list(self.current),
            current_s=None if self.current_drain is None else self.current_drain.seconds,
            current_cannot_run=0 if self.current_drain is None else self.current_drain.cannot_run,
            jobs=len(self.trace.trace.jobs),
            left_out=self.trace.left_out,
            run_time_unknown=self.trace.unknown,
            assumed_run_s=self.trace.assumed_run_s,
            running_not_counted=self.running,
            summary=self.summary(),
            notes=self.notes(),
        )


def off_gpu_layout(
    gpu: GpuMigState, queue: Sequence[QueuedDemand]
) -> tuple[GpuMigState, tuple[str, ...]] | None:
    """A GPU whose MIG mode is off and that lists no profiles (a real GPU lists them only in MIG
    mode): the GPU as its model's profile table would give it, and the layout the planner would
    want for the queue there, so what MIG would cost is said before anyone turns it on. None
    for a GPU the simulator has no model of, or that needs no slice."""
    found = model_station(gpu.name)
    if found is None or gpu.profiles or gpu.mig_enabled:
        return None
    profiles, placements = simulated_profiles(found[1], gpu.index)
    state = msgspec.structs.replace(gpu, profiles=profiles, placements=placements)
    plan = plan_gpu(
        state, queue, repartition_allowed=False, simulated=True, commands_from=PlansOnly()
    )
    return (state, tuple(plan.wanted_profiles)) if plan.wanted else None


def queue_times(
    replay: Replay,
    gpu: GpuMigState,
    layout: Sequence[str],
    queue: Sequence[QueuedDemand],
    params: ModelParams,
    station_gpus: int = 1,
) -> QueueTimes | None:
    """The queue's drain time on `gpu` with `layout` (the plan's), with the layout it has where
    that differs, and whole under MPS and exclusively. With no layout, a GPU whose MIG mode is
    off is weighed with the layout the planner would want on its model's table
    (`off_gpu_layout`). None where there is nothing to weigh: no layout, nothing queued, or a
    GPU the simulator has no model of."""
    wanted, from_table = tuple(layout), False
    if not wanted:
        off = off_gpu_layout(gpu, queue)
        if off is None:
            return None
        (gpu, wanted), from_table = off, True
    mig = drain_time(replay, gpu.name, queue, params, layout=wanted)
    mps = drain_time(replay, gpu.name, queue, params, layout=None, policy="mps")
    exclusive = drain_time(replay, gpu.name, queue, params, layout=None, policy="exclusive")
    if mig is None or mps is None or exclusive is None:
        return None
    current_drain = None
    if gpu.current and sorted(gpu.current) != sorted(wanted):
        found = drain_time(replay, gpu.name, queue, params, layout=gpu.current)
        current_drain = None if found is None else found[0]
    return QueueTimes(
        gpu.index,
        wanted,
        mig[0],
        mps[0],
        exclusive[0],
        mig[1],
        gpu.current,
        current_drain,
        len(gpu.running_job_ids),
        from_table,
        station_gpus,
    )
