"""What the engine's MIG control asks of the simulator (`gpudesk mig plan`'s predictions, `auto`'s
own repartitioning), in one module the engine imports only when one of those is asked for: the
simulator and what it brings (its records, the trace reader, the layout payoff) were about a
tenth of the CPU an engine's start spends importing (docs/benchmarks.md, session 55), and most
stations never ask."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpudesk.policy.interference import ModelParams
from gpudesk.policy.mig_payoff import auto_note, auto_said, choose_layouts
from gpudesk.policy.mig_planner import GpuMigState, QueuedDemand
from gpudesk.policy.mig_queue_time import QueueDrain, QueueTimes, layout_drain, queue_times
from gpudesk.policy.simulator import Simulation


def drain(
    params_for: Callable[[str], ModelParams],
) -> Callable[[GpuMigState, tuple[str, ...], Sequence[QueuedDemand]], QueueDrain | None]:
    """`choose_layouts`' `drain`: the simulator's replay of the queue on a layout."""
    return layout_drain(Simulation, params_for)


def times(
    gpu: GpuMigState,
    layout: Sequence[str],
    queue: Sequence[QueuedDemand],
    params: ModelParams,
    station_gpus: int,
) -> QueueTimes | None:
    """The queue's drain time on `layout` against the whole GPU (`queue_times`, replayed)."""
    return queue_times(Simulation, gpu, layout, queue, params, station_gpus=station_gpus)


__all__ = ["auto_note", "auto_said", "choose_layouts", "drain", "times"]
