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
jobs `MAX_OVERTAKES` times (a multi-GPU job not at all); then the least-loaded GPUs it can run
on (never a fixed-layout MIG GPU for a job that needs whole GPUs) take no new job until it has
started, while later jobs still start on the others (bounded backfilling), so a large job is
never starved by a stream of small ones.

`CarmaPolicy` is the published baseline (CARMA): FIFO without backfilling, idle GPUs first, then
the GPU with the most free memory as measured; admit when free >= need + 2 GiB after a 512 MiB
reserve and SM activity < 80 %; a job that crashed reruns alone on an idle GPU.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from gpudesk.core.identity import user_name
from gpudesk.core.mig_profiles import COMPUTE_SLICES, MEMORY_SLICES, memory_slices
from gpudesk.core.records import JobRecord
from gpudesk.policy.demand import (
    HEAVY_SM_PCT,
    MARGIN_MIB,
    Demand,
    from_hints,
    hinted,
    margin_mib,
)
from gpudesk.policy.interference import (
    Joining,
    ModelParams,
    Prediction,
    Workload,
    mig_rate,
    workload,
)
from gpudesk.policy.policy import (
    RESERVE_MIB,
    Alternative,
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
from gpudesk.policy.station_fit import (
    AsIs,
    Ask,
    MigRules,
    mig_table,
    room_once_drained,
    runs_as_is,
    wait_for_change,
)
from gpudesk.units import gib

SATURATED_SM_PCT = 80.0  # CARMA: a GPU this busy over the window takes no new tenant
CARMA_WINDOW_S = 30.0  # CARMA judges a GPU over 30 one-second samples
MAX_OVERTAKES = 8  # later jobs may start ahead of a waiting job this many times
# Look-ahead: the jobs this far behind (per GPU) that can only use a whole idle GPU are counted
# before a job takes one (assumption: two rounds of the station).
LOOKAHEAD_PER_GPU = 2
KEPT_IDLE_VALUE = 1e-3  # an idle GPU the look-ahead keeps: last resort for a job ahead
ALTERNATIVES_KEPT = 6  # how many weighed placements a decision records

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
    mps_limits: bool = True  # an MPS client gets a pinned-memory limit
    alone: bool = False  # the GPU had no tenant: the job may use all of its memory
    free_mib: float = 0.0  # what the other tenants left free when it was admitted
    rate: float = 1.0  # the job's predicted speed there (1.0 = alone on a whole GPU)
    # work per second the station gains (its rate minus what tenants lose), less what it takes
    # from the jobs queued behind (look-ahead)
    value: float = 1.0
    rank: tuple[float, ...] = ()  # tie-breaks after value, smaller first
    alternatives: tuple[Alternative, ...] = ()
    why: Callable[[], str] | None = None  # writes `reason` for an option that is chosen

    def alternative(self, note: str = "") -> Alternative:
        return Alternative(_slot(self), self.mode, self.rate, self.value, note)


@dataclass
class _Host:
    """A GPU as a job placed by this pass sees it, computed once per GPU state (a long queue
    asks each GPU many times; a job placed there makes a new state)."""

    gpu: GpuState
    params: ModelParams
    share: str  # "mps" or "naive": how a new tenant would share it
    kind: int  # _IDLE, _SHARED (takes a tenant under `share`), _MIG, or _CLOSED
    room_mib: float  # idle: what a job may use alone; shared: what its tenants left free
    heavy_tenant: bool  # a tenant already saturates it (a heavy job gains nothing beside it)
    idle_whole: bool  # idle and usable whole (a multi-GPU or exclusive job may take it)
    joining: Joining | None = None  # the model's view of its shared tenants, when first asked
    # The least SM demand the model gave no gain here: a job's gain beside these tenants falls
    # as its SM share grows, so one at least as heavy gains nothing either (jobs without a
    # bandwidth figure only: theirs follows their SM share).
    gainless_sm: float = math.inf
    # The user whose jobs the GPU's MPS server serves, where that is not the placed job's
    # owner: the job may only time-slice beside them (`_FilledStation.foreign_host`).
    mps_user: int | None = None


_IDLE, _SHARED, _MIG, _CLOSED = range(4)


@dataclass
class _FilledStation:
    """The station as this pass has filled it so far."""

    gpus: dict[int, GpuState]
    placements: list[Placement] = field(default_factory=list)
    _hosts: dict[int, _Host] = field(default_factory=dict)
    _usable: list[_Host] | None = None  # the hosts of the GPUs not lost, in index order
    _mps_uids: tuple[int, ...] = ()  # the users the usable GPUs' MPS servers serve
    _foreign: dict[int, _Host] = field(default_factory=dict)  # GPU index -> its foreign host

    def hosts(self, station: StationView, mode: str, uid: int | None = None) -> list[_Host]:
        """Every GPU not lost as a `_Host` for a job of user `uid`, each cached until a job is
        placed there. A GPU whose MPS server serves another user's jobs is that GPU's
        `foreign_host` (one user's station never has one)."""
        if self._usable is None:
            self._usable = [self._host(g, station, mode) for g in self.gpus.values() if not g.lost]
            self._mps_uids = tuple(
                {h.gpu.mps_uid for h in self._usable if h.gpu.mps_uid is not None}
            )
        if uid is None or all(other == uid for other in self._mps_uids):
            return self._usable
        return [
            self.foreign_host(h.gpu, station)
            if h.gpu.mps_uid is not None and h.gpu.mps_uid != uid
            else h
            for h in self._usable
        ]

    def foreign_host(self, gpu: GpuState, station: StationView) -> _Host:
        """A GPU whose MPS server serves another user's jobs, as a job of a third user sees it.
        An MPS server serves one uid at a time (a second user's clients wait until the first
        user's have all left), so the job never joins it as an MPS client: it may only
        time-slice beside its clients (the server is one more context to the GPU), where the
        GPU would take a tenant at all. The model weighs it as time-slicing with every tenant."""
        cached = self._foreign.get(gpu.index)
        if cached is not None and cached.gpu is gpu:
            return cached
        shares = not (
            gpu.exclusive or station.config.isolation or not gpu.tenant_modes <= {"mps", "naive"}
        )
        host = _Host(
            gpu,
            station.interference.params(gpu.model),
            "naive",
            _SHARED if shares else _CLOSED,
            gpu.free_mib if shares else 0.0,
            gpu.heaviest_tenant_sm_pct >= HEAVY_SM_PCT,
            False,
            mps_user=gpu.mps_uid,
        )
        self._foreign[gpu.index] = host
        return host

    def _host(self, gpu: GpuState, station: StationView, mode: str) -> _Host:
        cached = self._hosts.get(gpu.index)
        if cached is not None and cached.gpu is gpu:
            return cached
        share = "mps" if mode in ("mps", "auto") and gpu.mps_usable else "naive"
        room = 0.0
        if gpu.mig_enabled or mode == "mig":
            kind = _MIG  # a GPU in MIG mode runs jobs on slices only: MIG mode is never toggled
        elif gpu.idle:
            kind, room = _IDLE, gpu.memory_total_mib - RESERVE_MIB
        elif (
            gpu.exclusive
            or station.config.isolation  # only MIG slices are shared
            or gpu.tenant_modes != {share}  # an MPS GPU takes MPS clients, a time-sliced one naive
        ):
            kind = _CLOSED
        else:
            kind, room = _SHARED, gpu.free_mib
        host = _Host(
            gpu,
            station.interference.params(gpu.model),
            share,
            kind,
            room,
            gpu.heaviest_tenant_sm_pct >= HEAVY_SM_PCT,
            gpu.idle and (not gpu.mig_enabled or gpu.mig_dynamic),
        )
        self._hosts[gpu.index] = host
        return host

    def joining(self, host: _Host) -> Joining:
        """What the model predicts for a job joining the host's shared tenants."""
        if host.joining is None:
            host.joining = Joining(
                host.params, host.share, _tenant_workloads(host.gpu, host.params)
            )
        return host.joining

    def take(
        self, job: JobRecord, demand: Demand, choice: _Choice, station: StationView
    ) -> Placement:
        memory = demand.memory_mib
        for index in choice.gpus:
            gpu = self.gpus[index]
            slice_key = choice.mig_slice.key if choice.mig_slice else None
            tenant = Tenant(
                job.id,
                choice.mode,
                memory,
                demand.sm_pct,
                slice_key,
                demand.membw_pct,
                uid=job.owner.uid,
            )
            slices = gpu.mig_slices
            if choice.mig_slice is not None:
                others = tuple(s for s in slices if s.key != slice_key)
                slices = (*others, replace(choice.mig_slice, busy=True))
            self.gpus[index] = replace(
                gpu, tenants=(*gpu.tenants, tenant), mig_slices=slices, placed_s_ago=0.0
            )
        self._usable = None
        placement = _placement(job, demand, choice, station)
        self.placements.append(placement)
        return placement


def _slot(choice: _Choice) -> str:
    """ "gpu:1" alone, "gpu:0/mps" or "gpu:0/naive" shared, "gpu:2/3g.20gb" on a MIG slice."""
    listed = ",".join(str(i) for i in choice.gpus)
    if choice.mig_slice:
        return f"gpu:{listed}/{choice.mig_slice.profile}"
    if choice.mode in ("mps", "naive"):
        return f"gpu:{listed}/{choice.mode}"
    return f"gpu:{listed}"


def _placement(job: JobRecord, demand: Demand, choice: _Choice, station: StationView) -> Placement:
    gpus = [station_gpu(station, i) for i in choice.gpus]
    env = gpu_env(station, gpus, choice.mig_slice.key if choice.mig_slice else None)
    limit: int | None = None
    if choice.mode == "mps" and choice.mps_limits:
        # Alone on a GPU a job may grow into all of it (an underestimate costs nobody); next to
        # others it may grow into what they left free, never into what they hold.
        limit = math.floor(
            gpus[0].memory_total_mib - RESERVE_MIB
            if choice.alone
            else max(demand.memory_mib + margin_mib(demand), choice.free_mib)
        )
    # No active-thread cap (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE): a cap is fixed when the client
    # starts and outlives the co-tenants it was meant for, and below a kernel's width it slows
    # the job (interference.cap_factor) while the model predicts nothing gained for the others.
    return Placement(
        job_id=job.id,
        slot=_slot(choice),
        mode=choice.mode,
        reason=choice.reason,
        gpus=choice.gpus,
        env=env,
        env_defaults={"OMP_NUM_THREADS": str(station.threads_per_gpu * len(choice.gpus))},
        demand=demand.to_dict(),
        mig_slice=choice.mig_slice.key if choice.mig_slice else None,
        mps_memory_limit_mib=limit,
        alternatives=choice.alternatives,
    )


def station_gpu(station: StationView, index: int) -> GpuState:
    for gpu in station.gpu_states:
        if gpu.index == index:
            return gpu
    raise KeyError(index)


def _collocated_reason(
    gpu: GpuState, share: str, demand: Demand, predicted: Prediction, margin: float
) -> str:
    slowed = max(
        (b - a for b, a in zip(predicted.tenants_before, predicted.tenants_after, strict=True)),
        default=0.0,
    )
    return (
        f"collocated on GPU {gpu.index} under {share}: predicted speed "
        f"{predicted.rate:.2f}, its {len(gpu.tenants)} tenant(s) slowed by at most "
        f"{slowed:.2f}, station gains {predicted.gain:.2f} GPU; {gib(gpu.free_mib)} free for "
        f"{gib(demand.memory_mib)} + {gib(margin)} margin"
    )


def idle_share_reason(gpu: GpuState, share: str, demand: Demand, mode: str) -> str:
    """Why a job alone on an idle GPU starts as a sharing tenant (`share`: "mps" or "naive")
    rather than holding the whole GPU: a one-GPU job that need not run alone leaves room for
    the jobs after it, under MPS where the GPU's server can take it."""
    asks = f"{demand.sm_pct:.0f}% SM and {gib(demand.memory_mib)} ({demand.source})"
    if share == "mps":
        return f"MPS, not the whole GPU: it asks for {asks}, so later jobs may share the GPU"
    if mode == "naive":
        return f"time-sliced, not the whole GPU (policy naive): it asks for {asks}"
    return (
        f"time-sliced, not the whole GPU: it asks for {asks}; no MPS server is usable on "
        f"GPU {gpu.index}"
    )


def mps_serves_other(gpu: GpuState, uid: int | None) -> str:
    """Why a job of `uid` only time-slices on the GPU: "" where its MPS server (if any) serves
    the job's own user."""
    other = gpu.mps_uid
    if other is None or uid is None or other == uid:
        return ""
    return (
        f"GPU {gpu.index}'s MPS server serves {user_name(other)}'s jobs; an MPS server serves "
        "one user at a time"
    )


def _foreign_reason(gpu: GpuState, uid: int, shared: str) -> str:
    return f"time-sliced: {mps_serves_other(gpu, uid)}; {shared}"


def _tenant_workloads(gpu: GpuState, params: ModelParams) -> list[Workload]:
    """The GPU's shared tenants as the model sees them, from their demands (hints, or SM
    measured by earlier runs). Not from the GPU's SM window: it still shows jobs that just
    left, and scaling the hints by it made GPUs look saturated after every departure."""
    loads = []
    for t in gpu.tenants:
        if t.mode in ("mps", "naive"):
            load = workload(t.sm_pct, t.membw_pct, params)
            if t.thread_pct:
                load = Workload(load.sm, load.membw, t.thread_pct / 100.0)
            loads.append(load)
    return loads


class _Lookahead:
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

    def behind(self, position: int) -> int:
        end = min(len(self.queue), position + 1 + self.window)
        return sum(self.need(i) for i in range(position + 1, end))


class SharingPolicy:
    """gpudesk's policy; `mode` forces one sharing mechanism, or "auto" picks per job."""

    def __init__(self, mode: str = "auto", max_overtakes: int = MAX_OVERTAKES) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown sharing mode {mode!r}; known: {', '.join(MODES)}")
        self.mode = mode
        self.name = mode
        self.max_overtakes = max_overtakes
        self.kept_free_mib = RESERVE_MIB
        # in the `mig` mode every one-GPU job runs on a slice
        self.rules = MigRules(slices_only=mode == "mig")

    # ---------------------------------------------------------------- placing
    def place(self, queue: Sequence[JobRecord], station: StationView) -> Decision:
        plan = _FilledStation({g.index: g for g in station.gpu_states})
        cpu_slots = station.free_slots
        rejections: list[Rejection] = []
        overtaken: dict[int, int] = {}
        waiting: JobRecord | None = None  # the first GPU job that could not start
        reserved: set[int] = set()  # GPUs held for it once it has been overtaken enough
        # Demands that found no room, by (GPUs, exclusive, measured): a job needing at least as
        # much memory and SM finds none either. A measured need fits with a smaller margin than
        # a guess (demand.margin_mib), so the two are kept apart; a job with its own bandwidth
        # figure is never judged by it (the frontier knows memory and SM only). Placing jobs
        # only ever fills GPUs within a pass, so this stays true to its end. Keeps a pass over
        # a long queue cheap.
        no_room: dict[tuple[int, bool, bool], _Frontier] = {}
        largest = max((g.memory_total_mib for g in station.gpu_states if not g.lost), default=0.0)
        # Jobs that certainly could run somewhere skip the full check (a long queue is mostly
        # such jobs, and this loop is the policy's hot path).
        fits_any = largest - RESERVE_MIB if station.gpu_problem is None and largest else -1.0
        gpu_total = len(station.gpu_states)
        demands = station.demands
        lookahead = _Lookahead(queue, station)
        as_is = AsIs(self.rules, station)
        for position, job in enumerate(queue):
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
                impossible = gpu_job_impossible(spec.gpus, memory, station, RESERVE_MIB)
                if impossible:
                    rejections.append(Rejection(job.id, f"the job {impossible}"))
                    continue
            shape = (spec.gpus, exclusive, known is not None and known.source == "history")
            frontier = no_room.get(shape)
            banded = known is not None and known.membw_pct is not None
            if frontier is not None and not banded and frontier.dominates(memory, sm):
                if waiting is None and as_is(spec.gpus, self._whole(spec.gpus, exclusive), memory):
                    waiting = job
                continue
            demand = known or from_hints(spec.memory_gb, spec.sm_pct)
            if (
                waiting is not None
                and not reserved
                and station.overtaken.get(waiting.id, 0) + overtaken.get(waiting.id, 0)
                >= self.overtake_budget(waiting)
            ):
                # Its turn: the GPUs that will free up first take nothing new until it starts.
                reserved = self.reserve(waiting, station, plan.gpus.values())
            choice = self.choose(
                job,
                demand,
                plan,
                station,
                exclude=reserved,
                behind=functools.partial(lookahead.behind, position),
            )
            if choice is None:
                whole = self._whole(spec.gpus, demand.exclusive)
                if waiting is None and as_is(spec.gpus, whole, demand.memory_mib):
                    # the first job that could start once GPUs drain: the one GPUs may be held
                    # for (a job that first needs an admin's change could not use them)
                    waiting = job
                if demand.membw_pct is None:  # the frontier knows memory and SM only
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

    def _whole(self, gpus: int, exclusive: bool) -> bool:
        """Whether a job needs whole GPUs to itself (`_whole_gpus`) under this policy."""
        return gpus > 1 or exclusive or self.mode == "exclusive"

    def ask(self, job: JobRecord, demand: Demand) -> Ask:
        """What the job needs of the station's GPUs under this policy."""
        return Ask(job.spec.gpus, demand.memory_mib, self._whole(job.spec.gpus, demand.exclusive))

    def reserve(
        self, job: JobRecord, station: StationView, gpus: Iterable[GpuState] | None = None
    ) -> set[int]:
        """The GPUs a long-waiting job will get: the least loaded of those it can run on once
        they drain (`gpus`: the station as this pass has filled it). A GPU in MIG mode runs
        jobs on its slices only, so it is never held for a job that needs whole GPUs, and for a
        one-GPU job only where one of its slices (or a profile the engine may carve) holds the
        job's memory: holding any other GPU would keep it idle for nothing while the job still
        waits for the GPUs it can use. None at all where too few could run it
        (station_fit.runs_as_is): it waits for an admin's change, not for GPUs to drain."""
        ask = self.ask(job, demand_of(job, station))
        usable = sorted(
            (
                g
                for g in (station.gpu_states if gpus is None else gpus)
                if room_once_drained(g, ask.whole, self.rules, station) >= ask.memory_mib
            ),
            key=lambda g: (g.sm_demand_pct, len(g.tenants), g.index),
        )
        need = max(1, job.spec.gpus)
        return {g.index for g in usable[:need]} if len(usable) >= need else set()

    def choose(
        self,
        job: JobRecord,
        demand: Demand,
        plan: _FilledStation,
        station: StationView,
        exclude: set[int] | frozenset[int] = frozenset(),
        behind: Callable[[], int] = lambda: 0,
    ) -> _Choice | None:
        """The best placement for the job now, or None (it waits). Every feasible placement is
        scored by the interference model: the work per second the station gains (the job's
        speed there, minus what it costs the tenants it joins), less, for an idle GPU, what
        it takes from the jobs behind that need one."""
        hosts = plan.hosts(station, self.mode, job.owner.uid)
        if exclude:
            hosts = [h for h in hosts if h.gpu.index not in exclude]
        if self._whole(job.spec.gpus, demand.exclusive):
            return self._whole_gpus(job, demand, [h.gpu for h in hosts])
        options: list[_Choice] = []
        idle_whole = sum(h.idle_whole for h in hosts)
        # The idle GPUs the jobs just behind will need: taking one of those costs them.
        keep_idle = bool(idle_whole) and not demand.heavy and behind() >= idle_whole
        memory = demand.memory_mib
        margin = margin_mib(demand)
        load: Workload | None = None  # the job's workload under `load_params`
        load_params: ModelParams | None = None  # (one GPU model on most stations)
        option: _Choice | None
        for host in hosts:
            kind = host.kind
            if kind == _SHARED:
                if memory + margin > host.room_mib:
                    continue
                if host.params is not load_params:
                    load_params = host.params
                    load = workload(demand.sm_pct, demand.membw_pct, load_params)
                assert load is not None
                option = self._shared_option(plan, host, demand, margin, load, job.owner.uid)
            elif kind == _IDLE:
                if memory > host.room_mib:
                    continue
                option = self._idle_option(host, keep_idle, demand)
            elif kind == _MIG:
                option = self._mig_option(host.gpu, demand, job.id, host.params)
            else:
                continue
            if option is not None:
                options.append(option)
        if not options:
            return None
        options.sort(key=lambda o: (-o.value, o.rank))
        best = options[0]
        if best.value <= 0.0:
            return None  # nowhere gains: waiting for a GPU is better than slowing others
        shown = [o.alternative("chosen" if o is best else "") for o in options[:ALTERNATIVES_KEPT]]
        best.alternatives = tuple(shown)
        if best.why is not None:
            best.reason = best.why()
        return best

    def _whole_gpus(self, job: JobRecord, demand: Demand, gpus: list[GpuState]) -> _Choice | None:
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

    def _idle_option(self, host: _Host, keep_idle: bool, demand: Demand) -> _Choice:
        """The job alone on an idle GPU. Kept for the jobs behind (`keep_idle`): any sharing
        placement that gains goes first, but a job with nowhere else to go still takes it (it
        is ahead of them in the queue)."""
        index = host.gpu.index
        where = f"GPU {index} idle" + (" (kept for the heavier jobs queued behind)" * keep_idle)
        # written out only for the option chosen: a pass weighs every idle GPU for every job
        share, mode = host.share, self.mode
        return _Choice(
            (index,),
            share,
            where,
            why=lambda: f"{where}; {idle_share_reason(host.gpu, share, demand, mode)}",
            alone=True,
            value=KEPT_IDLE_VALUE if keep_idle else 1.0,
            rank=(0.0, index),
        )

    def _shared_option(
        self,
        plan: _FilledStation,
        host: _Host,
        demand: Demand,
        margin: float,
        load: Workload,
        uid: int | None = None,
    ) -> _Choice | None:
        """The job beside the GPU's tenants under MPS or time-slicing (its memory fits with
        the margin), if the model predicts the station gains. `uid`: the job's owner (named
        in the reason where another user's MPS server makes it time-slice)."""
        if demand.heavy and host.heavy_tenant:
            return None  # two compute-heavy jobs: no gain (published)
        bounded = demand.membw_pct is None
        if bounded and demand.sm_pct >= host.gainless_sm:
            return None
        predicted = plan.joining(host)(load)
        if predicted.gain <= 0.0:
            if bounded:
                host.gainless_sm = min(host.gainless_sm, demand.sm_pct)
            return None
        gpu = host.gpu
        why = functools.partial(_collocated_reason, gpu, host.share, demand, predicted, margin)
        if host.mps_user is not None and uid is not None:
            why = functools.partial(lambda w, u: _foreign_reason(gpu, u, w()), why, uid)
        return _Choice(
            (gpu.index,),
            host.share,
            "",  # written only if this option is chosen (a pass weighs many)
            why=why,
            free_mib=host.room_mib,
            rate=predicted.rate,
            value=predicted.gain,
            rank=(1.0, -host.room_mib, gpu.index),
        )

    def _mig_option(
        self, gpu: GpuState, demand: Demand, job_id: int, params: ModelParams
    ) -> _Choice | None:
        """The best MIG slice for the job on this GPU (`best_slice`), among its free instances
        and, where slices may be carved, the profiles that still fit."""
        need = demand.memory_mib
        job_load = workload(demand.sm_pct, demand.membw_pct, params)
        table = mig_table(gpu)
        fitting: list[SliceOption[MigSlice]] = []
        for mig in gpu.mig_slices:
            if not mig.busy and mig.memory_mib >= need:
                memory = memory_slices(mig.profile, table or None)
                rate = mig_rate(params, job_load, mig.compute_slices, memory)
                fitting.append(SliceOption(mig, rate, mig.compute_slices, mig.memory_mib))
        if gpu.mig_dynamic:
            used_compute = sum(s.compute_slices for s in gpu.mig_slices)
            used_memory = sum(memory_slices(s.profile, table or None) for s in gpu.mig_slices)
            for profile in table:
                if (
                    profile.memory_mib >= need
                    and used_compute + profile.compute_slices <= COMPUTE_SLICES
                    and used_memory + profile.memory_slices <= MEMORY_SLICES
                ):
                    carved = MigSlice(
                        f"gpu{gpu.index}/{profile.name}/job{job_id}",
                        profile.name,
                        profile.memory_mib,
                        profile.compute_slices,
                    )
                    rate = mig_rate(params, job_load, profile.compute_slices, profile.memory_slices)
                    fitting.append(
                        SliceOption(carved, rate, carved.compute_slices, carved.memory_mib, True)
                    )
        best = best_slice(fitting, job_load.sm)
        if best is None:
            return None
        rate, mig, carved_new = best.rate, best.slice, best.new
        verb = "new MIG" if carved_new else "MIG"
        return _Choice(
            (gpu.index,),
            "mig",
            f"{verb} {mig.profile} on GPU {gpu.index}: fits {gib(need)}, predicted speed "
            f"{rate:.2f} (isolated: slows nobody)",
            mig,
            rate=rate,
            value=rate,
            rank=(0.5 if not carved_new else 2.0, mig.compute_slices, gpu.index),
        )

    # ----------------------------------------------------------- explaining
    def change_needed(self, job: JobRecord, station: StationView) -> str:
        """station_fit's reason when the job can start only once the station changes (an admin
        leaving MIG mode, a lost GPU back); "" when it can start as the GPUs are set up."""
        if not job.spec.gpus or station.gpu_problem:
            return ""
        ask = self.ask(job, demand_of(job, station))
        return wait_for_change(ask, self.rules, station, self.name)

    def explain_wait(self, job: JobRecord, queue: Sequence[JobRecord], station: StationView) -> str:
        if not job.spec.gpus:
            return cpu_wait(job, queue, station)
        if station.gpu_problem:
            return f"waiting: the GPUs cannot be read ({station.gpu_problem})"
        change = self.change_needed(job, station)
        if change:
            return change
        demand = demand_of(job, station)
        need = (
            f"needs {job.spec.gpus} idle GPUs"
            if job.spec.gpus > 1 or demand.exclusive
            else f"needs {gib(demand.memory_mib)} + {gib(margin_mib(demand))} margin and "
            f"{demand.sm_pct:.0f}% SM, and a GPU where sharing is predicted to gain"
        )
        parts = [f"waiting ({demand.source} demand: {need})"]
        for gpu in station.gpu_states:
            if gpu.lost:
                parts.append(f"GPU {gpu.index} lost")
            elif gpu.exclusive:
                parts.append(f"GPU {gpu.index} held exclusively")
            elif not gpu.idle:
                other_user = mps_serves_other(gpu, job.owner.uid)
                parts.append(
                    f"GPU {gpu.index}: {gib(max(0.0, gpu.free_mib))} free, SM "
                    f"demand {gpu.sm_demand_pct:.0f}%" + (f" ({other_user})" if other_user else "")
                )
        ahead = sum(1 for o in queue if o.id != job.id and queued_before(o, job) and o.spec.gpus)
        if ahead:
            parts.append(f"{ahead} GPU job(s) ahead")
        return "; ".join(parts)


SliceT = TypeVar("SliceT")


@dataclass(frozen=True)
class SliceOption(Generic[SliceT]):
    """A MIG slice a job could run on (an existing instance, or one that may be carved)."""

    slice: SliceT
    rate: float  # the job's predicted rate on it
    compute_slices: int
    memory_mib: float
    new: bool = False  # to be carved for it: existing instances come first


def best_slice(options: Sequence[SliceOption[SliceT]], sm: float) -> SliceOption[SliceT] | None:
    """The slice placement gives a job whose SM activity is `sm` (0..1): the smallest whose
    share of the SMs covers it (the MIG planner's rule, so placement takes the slices the
    planner carved for each job), existing slices before new ones; where none covers it, the
    fastest by the model. The one home of the rule: policy.mig_payoff predicts with it what
    a layout would start."""
    if not options:
        return None
    covering = [o for o in options if o.compute_slices / COMPUTE_SLICES >= sm]
    if covering:
        return min(covering, key=lambda o: (o.new, o.compute_slices, o.memory_mib))
    return max(options, key=lambda o: (o.rate, not o.new, -o.memory_mib))


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


class CarmaPolicy(SharingPolicy):
    """CARMA's published rules, as the baseline gpudesk is measured against."""

    def __init__(self) -> None:
        super().__init__("auto")
        self.name = "carma"
        # CARMA places processes on whole GPUs: a GPU in MIG mode runs none of its jobs
        self.rules = MigRules(slices=False, whole_when_dynamic=False)

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
            impossible = gpu_job_impossible(job.spec.gpus, demand.memory_mib, station, RESERVE_MIB)
            if impossible:
                rejections.append(Rejection(job.id, f"the job {impossible}"))
                continue
            choice = self.choose(job, demand, plan, station)
            if choice is None:
                if not runs_as_is(self.ask(job, demand), self.rules, station):
                    continue  # it cannot start before an admin's change: it blocks nobody
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
        behind: Callable[[], int] = lambda: 0,
    ) -> _Choice | None:
        # CARMA places processes on whole GPUs: a GPU in MIG mode cannot run them
        gpus = [g for g in plan.gpus.values() if not g.lost and not g.mig_enabled]
        idle = [g for g in gpus if g.idle]
        if job.spec.gpus > 1 or demand.exclusive:
            if len(idle) < job.spec.gpus:
                return None
            chosen = tuple(g.index for g in idle[: job.spec.gpus])
            return _Choice(chosen, "exclusive", "CARMA: idle GPU, alone")
        if idle:
            gpu = idle[0]
            share = "mps" if gpu.mps_usable else "naive"
            why = idle_share_reason(gpu, share, demand, "auto")
            return _Choice(
                (gpu.index,), share, f"CARMA: GPU {gpu.index} idle; {why}", mps_limits=False
            )
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
        reason = f"CARMA: GPU {gpu.index} has the most free memory"
        other_user = mps_serves_other(gpu, job.owner.uid)
        if other_user:  # never an MPS client of another user's server
            share, reason = "naive", f"time-sliced: {other_user}; {reason}"
        return _Choice((gpu.index,), share, reason, mps_limits=False)


def make_sharing_policy(name: str) -> SharingPolicy:
    if name == "carma":
        return CarmaPolicy()
    return SharingPolicy(name)
