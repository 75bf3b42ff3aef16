"""Collocation-aware placement: which GPU each job goes to, and how it shares it.

Modes: `exclusive` (a GPU to itself), `naive` (time-slicing with the GPU's other processes),
`mps` (a client of the GPU's MPS server, with a pinned-memory limit and an active-thread share)
and `mig` (a MIG slice of a fitting profile). The policies here are pure functions of the queue
and a `StationView`, so the live engine and `gpudesk simulate` run the same code.

`SharingPolicy` is gpudesk's own. In `auto` mode, per job and per GPU:
- a job that would saturate a GPU takes an idle one; a lighter job first fills the gaps on busy
  GPUs, keeping idle GPUs for heavy jobs;
- collocation only where memory fits with a margin (need + 2 GiB free after a 512 MiB reserve,
  counting both what tenants reserved and what the GPU measures; a tenant's reservation is its
  estimate until its real peak is known) and compute does too: the GPU is not saturated over the
  recent window and the tenants' combined SM demand stays within 120 %; among those GPUs, the
  one left least loaded;
- MPS where the GPU's MPS server is usable, else naive time-slicing (admitted by kernel-active
  time, which is what time-slicing shares out); a MIG slice where the GPU
  is in MIG mode; whole idle GPUs for multi-GPU jobs and after an out-of-memory death. An MPS
  client may grow into the memory its co-tenants left free (all of it, alone), never into theirs.
Jobs go in priority and arrival order. A job that cannot start yet may be overtaken by later
jobs `MAX_OVERTAKES` times (a multi-GPU job not at all); then the least-loaded GPUs it needs take
no new job until it has started, while later jobs still start on the others (bounded
backfilling), so a large job is never starved by a stream of small ones.

`CarmaPolicy` is the published baseline (CARMA): FIFO without backfilling, idle GPUs first, then
the GPU with the most free memory as measured; admit when free >= need + 2 GiB after a 512 MiB
reserve and SM activity < 80 %; a job that crashed reruns alone on an idle GPU.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from gpudesk.engine.mig.profiles import (
    CARVED_PROFILES,
    COMPUTE_SLICES,
    MEMORY_SLICES,
    memory_slices,
)
from gpudesk.engine.placement.demand import (
    Demand,
    from_hints,
    hinted,
)
from gpudesk.engine.placement.policy import (
    RESERVE_MIB,
    Decision,
    GpuState,
    MigSlice,
    Placement,
    Rejection,
    StationView,
    Tenant,
    cpu_placement,
    cpu_wait,
    gpu_env,
    gpu_job_impossible,
    queued_before,
)
from gpudesk.engine.store.records import JobRecord
from gpudesk.units import MIB_PER_GIB

MARGIN_MIB = 2048.0  # a collocated job's need must fit with this much to spare
SATURATED_SM_PCT = 80.0  # a GPU this busy over the window takes no new tenant
KERNEL_ACTIVE_EXTRA_PCT = 20.0  # how far kernel-active time runs ahead of SM activity
SM_CAPACITY_PCT = 120.0  # tenants' combined SM demand may exceed a full GPU by this little
CARMA_WINDOW_S = 30.0  # CARMA judges a GPU over 30 one-second samples
MAX_OVERTAKES = 8  # later jobs may start ahead of a waiting job this many times
MPS_THREAD_HEADROOM = 1.5  # an MPS client may use this much more than its SM demand

MODES = ("exclusive", "naive", "mps", "mig", "auto")


def demand_of(job: JobRecord, station: StationView) -> Demand:
    known = station.demands.get(job.id)
    return known if known is not None else from_hints(job.spec.memory_gb, job.spec.sm_pct)


@dataclass
class _Choice:
    gpus: tuple[int, ...]
    mode: str
    reason: str
    mig_slice: MigSlice | None = None
    mps_limits: bool = True  # an MPS client gets a pinned-memory limit and a thread share
    alone: bool = False  # the GPU had no tenant: the job may use all of its memory
    free_mib: float = 0.0  # what the other tenants left free when it was admitted


@dataclass
class _FilledStation:
    """The station as this pass has filled it so far."""

    gpus: dict[int, GpuState]
    placements: list[Placement] = field(default_factory=list)

    def take(
        self, job: JobRecord, demand: Demand, choice: _Choice, station: StationView
    ) -> Placement:
        memory = demand.memory_mib
        for index in choice.gpus:
            gpu = self.gpus[index]
            slice_key = choice.mig_slice.key if choice.mig_slice else None
            tenant = Tenant(job.id, choice.mode, memory, demand.sm_pct, slice_key)
            slices = gpu.mig_slices
            if choice.mig_slice is not None:
                others = tuple(s for s in slices if s.key != slice_key)
                slices = (*others, replace(choice.mig_slice, busy=True))
            self.gpus[index] = replace(
                gpu, tenants=(*gpu.tenants, tenant), mig_slices=slices, placed_s_ago=0.0
            )
        placement = _placement(job, demand, choice, station)
        self.placements.append(placement)
        return placement


def _placement(job: JobRecord, demand: Demand, choice: _Choice, station: StationView) -> Placement:
    gpus = [station_gpu(station, i) for i in choice.gpus]
    listed = ",".join(str(i) for i in choice.gpus)
    env = gpu_env(station, gpus, choice.mig_slice.key if choice.mig_slice else None)
    # "gpu:1" alone, "gpu:0/mps" or "gpu:0/naive" shared, "gpu:2/3g.20gb" on a MIG slice
    slot = (
        "gpu:"
        + listed
        + (
            f"/{choice.mig_slice.profile}"
            if choice.mig_slice
            else f"/{choice.mode}"
            if choice.mode in ("mps", "naive")
            else ""
        )
    )
    mps: dict[str, int] = {}
    if choice.mode == "mps" and choice.mps_limits:
        # Alone on a GPU a job may grow into all of it (an underestimate costs nobody); next to
        # others it may grow into what they left free, never into what they hold.
        limit = (
            gpus[0].memory_total_mib - RESERVE_MIB
            if choice.alone
            else max(demand.memory_mib + MARGIN_MIB, choice.free_mib)
        )
        mps = {
            "mps_thread_pct": min(100, max(10, math.ceil(demand.sm_pct * MPS_THREAD_HEADROOM))),
            "mps_memory_limit_mib": math.floor(limit),
        }
    return Placement(
        job_id=job.id,
        slot=slot,
        mode=choice.mode,
        reason=choice.reason,
        gpus=choice.gpus,
        env=env,
        env_defaults={"OMP_NUM_THREADS": str(station.threads_per_gpu * len(choice.gpus))},
        demand=demand.to_dict(),
        mig_slice=choice.mig_slice.key if choice.mig_slice else None,
        mps_thread_pct=mps.get("mps_thread_pct"),
        mps_memory_limit_mib=mps.get("mps_memory_limit_mib"),
    )


def station_gpu(station: StationView, index: int) -> GpuState:
    for gpu in station.gpu_states:
        if gpu.index == index:
            return gpu
    raise KeyError(index)


def _mib(value: float) -> str:
    return f"{value / MIB_PER_GIB:.1f} GiB"


class SharingPolicy:
    """gpudesk's policy; `mode` forces one sharing mechanism, or "auto" picks per job."""

    def __init__(self, mode: str = "auto", max_overtakes: int = MAX_OVERTAKES) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown sharing mode {mode!r}; known: {', '.join(MODES)}")
        self.mode = mode
        self.name = mode
        self.max_overtakes = max_overtakes

    # ---------------------------------------------------------------- placing
    def place(self, queue: Sequence[JobRecord], station: StationView) -> Decision:
        plan = _FilledStation({g.index: g for g in station.gpu_states})
        cpu_slots = station.free_slots
        rejections: list[Rejection] = []
        overtaken: dict[int, int] = {}
        waiting: JobRecord | None = None  # the first GPU job that could not start
        reserved: set[int] = set()  # GPUs held for it once it has been overtaken enough
        # Demands that found no room, by (GPUs, exclusive): a job needing at least as much
        # memory and SM finds none either. Placing jobs only ever fills GPUs within a pass, so
        # this stays true to its end. Keeps a pass over a long queue cheap.
        no_room: dict[tuple[int, bool], _Frontier] = {}
        largest = max((g.memory_total_mib for g in station.gpu_states if not g.lost), default=0.0)
        # Jobs that certainly could run somewhere skip the full check (a long queue is mostly
        # such jobs, and this loop is the policy's hot path).
        fits_any = largest - RESERVE_MIB if station.gpu_problem is None and largest else -1.0
        gpu_total = len(station.gpu_states)
        demands = station.demands
        for job in queue:
            spec = job.spec
            if not spec.gpus:
                if cpu_slots:
                    plan.placements.append(cpu_placement(job, cpu_slots.pop(0), station))
                continue
            # The hot path of a long queue: no Demand object until the job may fit.
            known = demands.get(job.id)
            if known is not None:
                memory, sm, exclusive = known.memory_mib, known.sm_pct, known.exclusive
            else:
                memory, sm = hinted(spec.memory_gb, spec.sm_pct)
                exclusive = False
            if not (spec.gpus <= gpu_total and memory <= fits_any):
                impossible = gpu_job_impossible(job, memory, station, RESERVE_MIB)
                if impossible:
                    rejections.append(Rejection(job.id, impossible))
                    continue
            shape = (spec.gpus, exclusive)
            frontier = no_room.get(shape)
            if frontier is not None and frontier.dominates(memory, sm):
                waiting = waiting or job
                continue
            demand = known or from_hints(spec.memory_gb, spec.sm_pct)
            if (
                waiting is not None
                and not reserved
                and station.overtaken.get(waiting.id, 0) + overtaken.get(waiting.id, 0)
                >= self.overtake_budget(waiting)
            ):
                # Its turn: the GPUs that will free up first take nothing new until it starts.
                reserved = self.reserve(waiting, plan)
            choice = self.choose(job, demand, plan, station, exclude=reserved)
            if choice is None:
                waiting = waiting or job
                no_room.setdefault(shape, _Frontier()).add(memory, sm)
                continue
            plan.take(job, demand, choice, station)
            if waiting is not None:
                overtaken[waiting.id] = overtaken.get(waiting.id, 0) + 1
        return Decision(plan.placements, rejections, overtaken)

    def overtake_budget(self, job: JobRecord) -> int:
        """How often later jobs may start first. A multi-GPU job needs whole idle GPUs, which a
        stream of small jobs never leaves, and every minute it waits costs several GPUs' worth:
        like Slurm's backfill for the top job, its GPUs are held from the first time it waits
        (later jobs still start on the others)."""
        return self.max_overtakes if job.spec.gpus <= 1 else 0

    def reserve(self, job: JobRecord, plan: _FilledStation) -> set[int]:
        """The GPUs a long-waiting job will get: the least loaded ones."""
        gpus = sorted(
            (g for g in plan.gpus.values() if not g.lost),
            key=lambda g: (g.sm_demand_pct, len(g.tenants), g.index),
        )
        return {g.index for g in gpus[: max(1, job.spec.gpus)]}

    def choose(
        self,
        job: JobRecord,
        demand: Demand,
        plan: _FilledStation,
        station: StationView,
        exclude: set[int] | frozenset[int] = frozenset(),
    ) -> _Choice | None:
        gpus = [g for g in plan.gpus.values() if not g.lost and g.index not in exclude]
        if job.spec.gpus > 1 or demand.exclusive or self.mode == "exclusive":
            # A simulated MIG GPU that is idle can be set whole again.
            idle = [g for g in gpus if g.idle and (not g.mig_enabled or g.mig_dynamic)]
            if len(idle) < job.spec.gpus:
                return None
            chosen = tuple(g.index for g in idle[: job.spec.gpus])
            why = (
                "after an out-of-memory death it runs alone"
                if demand.source == "after OOM"
                else "multi-GPU jobs get whole GPUs"
                if job.spec.gpus > 1
                else "exclusive placement"
            )
            return _Choice(chosen, "exclusive", f"GPU {','.join(map(str, chosen))} idle; {why}")
        best: tuple[tuple[float, ...], _Choice] | None = None
        for gpu in gpus:
            option = self._option(gpu, demand, job.id, station.config.isolation)
            if option is not None and (best is None or option[0] < best[0]):
                best = option
        return best[1] if best else None

    def _option(
        self, gpu: GpuState, demand: Demand, job_id: int, isolation: bool = False
    ) -> tuple[tuple[float, ...], _Choice] | None:
        if gpu.mig_enabled or self.mode == "mig":
            return self._mig_option(gpu, demand, job_id)
        if gpu.exclusive:
            return None
        if isolation and not gpu.idle:
            return None  # the station asks for isolation: only MIG slices are shared
        share = "mps" if self.mode in ("mps", "auto") and gpu.mps_usable else "naive"
        if gpu.idle:
            if demand.memory_mib > gpu.memory_total_mib - RESERVE_MIB:
                return None
            # A job that would saturate a GPU takes an idle one first; a light one fills the
            # gaps on busy GPUs first and keeps idle GPUs for the heavy ones.
            rank = 0.0 if demand.heavy else 2.0
            return (rank, demand.sm_pct, gpu.index), _Choice(
                (gpu.index,), share, f"GPU {gpu.index} idle", alone=True
            )
        free = gpu.free_mib
        if free < demand.memory_mib + MARGIN_MIB:
            return None
        measured = gpu.sm_activity_pct or 0.0
        if measured >= SATURATED_SM_PCT:
            return None
        combined = gpu.sm_demand_pct + demand.sm_pct
        if combined > SM_CAPACITY_PCT:
            return None
        if (
            share == "naive"
            and sum(_kernel_active(t.sm_pct) for t in gpu.tenants) + _kernel_active(demand.sm_pct)
            > 100.0
        ):
            return None  # time-slicing runs one context at a time: kernel-active time adds up
        if any(t.mode != share for t in gpu.tenants):
            return None  # an MPS GPU takes MPS clients, a time-sliced one naive ones
        reason = (
            f"collocated on GPU {gpu.index} under {share}: {_mib(free)} free for "
            f"{_mib(demand.memory_mib)} + {_mib(MARGIN_MIB)} margin, SM demand "
            f"{combined:.0f}% with its {len(gpu.tenants)} tenant(s), measured "
            f"{measured:.0f}%"
        )
        return (1.0, combined, -free, gpu.index), _Choice(
            (gpu.index,), share, reason, free_mib=free
        )

    def _mig_option(
        self, gpu: GpuState, demand: Demand, job_id: int
    ) -> tuple[tuple[float, ...], _Choice] | None:
        need = demand.memory_mib
        free_slices = sorted(
            (s for s in gpu.mig_slices if not s.busy),
            key=lambda s: (s.memory_mib, s.compute_slices),
        )
        # A free slice that fits comes before sharing a GPU: the job is isolated and slows
        # nobody. A saturating job still prefers a whole idle GPU (rank 0).
        for mig in free_slices:
            if mig.memory_mib >= need:
                return (0.5, mig.memory_mib, gpu.index), _Choice(
                    (gpu.index,),
                    "mig",
                    f"MIG {mig.profile} on GPU {gpu.index} fits {_mib(need)}",
                    mig,
                )
        if not gpu.mig_dynamic:
            return None
        used_compute = sum(s.compute_slices for s in gpu.mig_slices)
        used_memory = sum(memory_slices(s.profile) for s in gpu.mig_slices)
        # A simulated MIG GPU is carved with the A100 40GB's profiles, smallest first.
        for profile in CARVED_PROFILES:
            name, memory = profile.name, profile.memory_mib
            if (
                memory >= need
                and used_compute + profile.compute_slices <= COMPUTE_SLICES
                and used_memory + profile.memory_slices <= MEMORY_SLICES
            ):
                carved = MigSlice(
                    f"gpu{gpu.index}/{name}/job{job_id}", name, memory, profile.compute_slices
                )
                return (2.0, memory, gpu.index), _Choice(
                    (gpu.index,),
                    "mig",
                    f"new MIG {name} on GPU {gpu.index} fits {_mib(need)}",
                    carved,
                )
        return None

    # ----------------------------------------------------------- explaining
    def explain_wait(self, job: JobRecord, queue: Sequence[JobRecord], station: StationView) -> str:
        if not job.spec.gpus:
            return cpu_wait(job, queue, station)
        if station.gpu_problem:
            return f"waiting: the GPUs cannot be read ({station.gpu_problem})"
        demand = demand_of(job, station)
        ahead = [o for o in queue if o.id != job.id and queued_before(o, job) and o.spec.gpus]
        reasons = []
        for gpu in station.gpu_states:
            if gpu.lost:
                reasons.append(f"GPU {gpu.index} lost")
            elif gpu.exclusive:
                reasons.append(f"GPU {gpu.index} held exclusively")
            elif not gpu.idle:
                reasons.append(
                    f"GPU {gpu.index}: {_mib(max(0.0, gpu.free_mib))} free, SM "
                    f"demand {gpu.sm_demand_pct:.0f}%"
                )
        need = (
            f"needs {job.spec.gpus} idle GPUs"
            if job.spec.gpus > 1 or demand.exclusive
            else f"needs {_mib(demand.memory_mib)} + {_mib(MARGIN_MIB)} margin and "
            f"{demand.sm_pct:.0f}% SM"
        )
        text = f"waiting ({demand.source} demand: {need}); " + "; ".join(reasons)
        if ahead:
            text += f"; {len(ahead)} GPU job(s) ahead"
        return text


class _Frontier:
    """The smallest (memory, SM) demands that found no room. Sorted by memory, SM falling: the
    point with the largest memory not above a demand's has the lowest SM of those, so one
    bisection says whether the demand is at least as large as a point."""

    def __init__(self) -> None:
        self.memory: list[float] = []
        self.sm: list[float] = []

    def dominates(self, memory: float, sm: float) -> bool:
        index = bisect.bisect_right(self.memory, memory) - 1
        return index >= 0 and self.sm[index] <= sm

    def add(self, memory: float, sm: float) -> None:
        if self.dominates(memory, sm):
            return
        keep = [
            (m, s)
            for m, s in zip(self.memory, self.sm, strict=True)
            if not (m >= memory and s >= sm)
        ]
        keep.append((memory, sm))
        keep.sort()
        self.memory = [m for m, _ in keep]
        self.sm = [s for _, s in keep]


def _kernel_active(sm_pct: float) -> float:
    """Kernel-active time runs ahead of SM activity (a kernel on a few SMs counts as busy)."""
    return min(100.0, sm_pct + KERNEL_ACTIVE_EXTRA_PCT)


class CarmaPolicy(SharingPolicy):
    """CARMA's published rules, as the baseline gpudesk is measured against."""

    def __init__(self) -> None:
        super().__init__("auto")
        self.name = "carma"

    def place(self, queue: Sequence[JobRecord], station: StationView) -> Decision:
        plan = _FilledStation({g.index: g for g in station.gpu_states})
        cpu_slots = station.free_slots
        rejections: list[Rejection] = []
        for job in queue:
            if not job.spec.gpus:
                if cpu_slots:
                    plan.placements.append(cpu_placement(job, cpu_slots.pop(0), station))
                continue
            demand = demand_of(job, station)
            impossible = gpu_job_impossible(job, demand.memory_mib, station, RESERVE_MIB)
            if impossible:
                rejections.append(Rejection(job.id, impossible))
                continue
            choice = self.choose(job, demand, plan, station)
            if choice is None:
                break  # FIFO without backfilling: the head of the queue blocks the rest
            plan.take(job, demand, choice, station)
        return Decision(plan.placements, rejections)

    def choose(
        self,
        job: JobRecord,
        demand: Demand,
        plan: _FilledStation,
        station: StationView,
        exclude: set[int] | frozenset[int] = frozenset(),
    ) -> _Choice | None:
        gpus = [g for g in plan.gpus.values() if not g.lost]
        idle = [g for g in gpus if g.idle]
        if job.spec.gpus > 1 or demand.exclusive:
            if len(idle) < job.spec.gpus:
                return None
            chosen = tuple(g.index for g in idle[: job.spec.gpus])
            return _Choice(chosen, "exclusive", "CARMA: idle GPU, alone")
        if idle:
            gpu = idle[0]
            share = "mps" if gpu.mps_usable else "naive"
            return _Choice((gpu.index,), share, f"CARMA: GPU {gpu.index} idle", mps_limits=False)
        # The GPU with the most free memory as measured (CARMA reads nvidia-smi).
        busy = sorted(
            (g for g in gpus if not g.exclusive),
            key=lambda g: (-(g.memory_total_mib - g.memory_used_mib), g.index),
        )
        if not busy:
            return None
        gpu = busy[0]
        if gpu.placed_s_ago is not None and gpu.placed_s_ago < CARMA_WINDOW_S:
            return None  # its measurements do not show the last job yet
        free = gpu.memory_total_mib - gpu.memory_used_mib - RESERVE_MIB
        if (
            free < demand.memory_mib + MARGIN_MIB
            or (gpu.sm_activity_pct or 0.0) >= SATURATED_SM_PCT
        ):
            return None
        share = gpu.tenants[0].mode if gpu.tenants else "naive"
        return _Choice(
            (gpu.index,),
            share,
            f"CARMA: GPU {gpu.index} has the most free memory",
            mps_limits=False,
        )


def make_sharing_policy(name: str) -> SharingPolicy:
    if name == "carma":
        return CarmaPolicy()
    return SharingPolicy(name)
