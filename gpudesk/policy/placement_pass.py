"""One placement pass of `SharingPolicy` as it goes (`Pass`: the station as it fills, the jobs
left waiting, the demands that found no room), and the look-ahead over the jobs just behind a
queue position (`Lookahead`): what `collocation.SharingPolicy.place` keeps between jobs.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from gpudesk.core.records import JobRecord
from gpudesk.policy.demand import HEAVY_SM_PCT, MARGIN_MIB, hinted
from gpudesk.policy.filled_station import FilledStation, Frontier
from gpudesk.policy.policy import Rejection, StationView
from gpudesk.policy.station_fit import AsIs

# Look-ahead: the jobs this far behind (per GPU) that can only use a whole idle GPU are counted
# before a job takes one (assumption: two rounds of the station).
LOOKAHEAD_PER_GPU = 2


class Lookahead:
    """How many whole idle GPUs the jobs just behind a queue position need (multi-GPU, after
    an OOM, compute-heavy, or more than half a GPU's memory): a light job does not take the
    last idle GPUs they will want if it can share instead. Computed only where asked, over a
    window of `LOOKAHEAD_PER_GPU` jobs per GPU (a pass over a long queue asks rarely)."""

    def __init__(self, queue: Sequence[JobRecord], station: StationView) -> None:
        self.queue = queue
        self.demands = station.demands
        self.window = LOOKAHEAD_PER_GPU * len(station.gpu_states)
        # a job that needs more than half of the largest GPU cannot share it with a job like
        # itself: it is counted as needing a GPU of its own
        self.half = max((g.memory_total_mib for g in station.gpu_states), default=0.0) / 2
        self.needs: dict[int, int] = {}

    def need(self, position: int) -> int:
        known = self.needs.get(position)
        if known is not None:
            return known
        job = self.queue[position]
        need = 0
        if job.spec.gpus:
            demand = self.demands.get(job.id)
            if demand is not None:
                memory, whole = demand.memory_mib, demand.exclusive or demand.heavy
            else:
                memory, sm = hinted(job.spec.memory_gb, job.spec.sm_pct)
                whole = sm >= HEAVY_SM_PCT
            if whole or job.spec.gpus > 1 or memory + MARGIN_MIB > self.half:
                need = job.spec.gpus
        self.needs[position] = need
        return need

    def multi_behind(self, position: int) -> JobRecord | None:
        """The first multi-GPU job in the window behind `position`, if any."""
        end = min(len(self.queue), position + 1 + self.window)
        return next((j for j in self.queue[position + 1 : end] if j.spec.gpus > 1), None)

    def behind(self, position: int) -> int:
        end = min(len(self.queue), position + 1 + self.window)
        return sum(self.need(i) for i in range(position + 1, end))


# A job's shape for the no-room frontier: (GPUs, exclusive, measured, unknown, owner's uid)
Shape = tuple[int, bool, bool, bool, int]


class Pass(msgspec.Struct):
    """One placement pass as it goes.

    `no_room`: the demands that found no room, by shape (`Shape`): a job needing at least as
    much memory and SM finds none either. A measured need fits with a smaller margin than a
    guess (demand.margin_mib), a job whose figure is unknown is weighed for its admitted memory
    and placed differently, and a GPU whose MPS server serves one user offers another only
    time-slicing (FilledStation.foreign_host), so each is kept apart; a job with its own
    bandwidth figure is never judged by it (the frontier knows memory and SM only). Placing
    jobs only ever fills GPUs within a pass, so this stays true to its end. Keeps a pass over
    a long queue cheap."""

    plan: FilledStation
    station: StationView
    lookahead: Lookahead
    as_is: AsIs
    rejections: list[Rejection] = msgspec.field(default_factory=list)
    overtaken: dict[int, int] = msgspec.field(default_factory=dict)
    waiting: JobRecord | None = None  # the first GPU job that could not start
    # GPUs held for it once overtaken enough
    reserved: set[int] = msgspec.field(default_factory=set)
    reserved_for: int | None = None  # the job they are held for
    no_room: dict[Shape, Frontier] = msgspec.field(default_factory=dict)
