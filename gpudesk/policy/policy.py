"""Placement: which queued jobs start now, and where.

The engine calls a policy every time something changes (a submission, a job ending, a cancel,
a reconfiguration) with the queue in priority order and a view of the station. The policy returns
placements for jobs to start and rejections for jobs that can never run on this station. It must
be pure: the same queue and station give the same decision, so the simulator can reuse it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Generic, Protocol, TypeVar, overload

import msgspec

from gpudesk.core.mig_profiles import COMPUTE_SLICES
from gpudesk.core.records import JobRecord
from gpudesk.core.station import StationConfig
from gpudesk.policy.interference import PRIOR_MODEL, InterferenceModel
from gpudesk.units import gib

RESERVE_MIB = 512.0  # kept free on every GPU (driver, fragmentation)

_T = TypeVar("_T")


class _memo(Generic[_T]):
    """`functools.cached_property` without its lock: before Python 3.12 it takes one lock,
    shared by every instance, on each first access, which doubled the cost of a new
    `GpuState` on the placement hot path (a pass makes one per job it places). A value
    computed twice by racing threads is the same value: the state is frozen."""

    def __init__(self, func: Callable[[Any], _T]) -> None:
        self.func = func
        self.__doc__ = func.__doc__
        self.name = func.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> _memo[_T]: ...
    @overload
    def __get__(self, instance: object, owner: type | None = None) -> _T: ...
    def __get__(self, instance: object | None, owner: type | None = None) -> _T | _memo[_T]:
        if instance is None:
            return self
        value = instance.__dict__[self.name] = self.func(instance)
        return value


def made_frozen(cls: type[_T], values: dict[str, Any]) -> _T:
    """An instance of the frozen dataclass `cls` whose fields are `values` (every field named,
    none defaulted; no `__post_init__` run), made without `__init__`, which sets each field
    through `object.__setattr__`: a placement pass makes a `Tenant` for each job it places and
    a `GpuState` for each GPU it fills. (Its `Placement`s and `Alternative`s are msgspec Structs,
    whose `__init__` is C and needs no such shortcut; these two stay dataclasses: `Tenant`
    leaves `login` out of its equality and `GpuState` memoizes in its `__dict__`.) The same
    object as `cls(**values)` (tests/policy/test_made_frozen.py)."""
    made = object.__new__(cls)
    made.__dict__.update(values)
    return made


@dataclass(frozen=True)
class Tenant:
    job_id: int
    mode: str
    memory_mib: float  # what it reserved
    sm_pct: float
    mig_slice: str | None = None
    membw_pct: float | None = None  # DRAM bandwidth share alone (None: from its SM share)
    thread_pct: int | None = None  # its MPS active-thread cap, fixed when it started
    uid: int | None = None  # its owner: a GPU's MPS server serves one user at a time
    # her name as stored with her job: a wait reason names her without asking the user
    # database (NSS, which may hang) during placement
    login: str | None = field(default=None, compare=False, repr=False)
    # how long it has left (None: unknown), from its progress else its family's history
    # (gpudesk.policy.remaining): which GPU drains first
    remaining_s: float | None = None
    # what the engine's own measurements give, whatever the job prints (Remaining.measured_s):
    # what a rule acting on another member's behalf may believe
    measured_remaining_s: float | None = None


class MigSlice(msgspec.Struct, frozen=True):
    key: str  # the MIG device's UUID (live), or a name the simulator gave it
    profile: str  # "3g.20gb"
    memory_mib: float
    compute_slices: int
    busy: bool = False

    @property
    def holds_all_compute(self) -> bool:
        """All of its GPU's compute in one slice (a 7g profile): a GPU to itself but in name."""
        return self.compute_slices >= COMPUTE_SLICES


@dataclass(frozen=True)
class GpuState:
    """One GPU as a placement policy sees it."""

    index: int
    uuid: str | None
    memory_total_mib: float
    model: str = ""  # the GPU's name ("NVIDIA A100-SXM4-40GB"): its MIG table and model params
    memory_used_mib: float = 0.0  # measured now
    sm_activity_pct: float | None = None  # measured, mean over the recent window
    tenants: tuple[Tenant, ...] = ()
    mps_usable: bool = False
    mig_enabled: bool = False
    mig_slices: tuple[MigSlice, ...] = ()
    mig_dynamic: bool = False  # slices may be carved from free capacity (simulated stations)
    lost: bool = False
    placed_s_ago: float | None = None  # since the last job started on it (None: long ago)

    @_memo  # a placement pass asks each GPU many times
    def idle(self) -> bool:
        return not self.tenants

    @_memo
    def exclusive(self) -> bool:
        return any(t.mode == "exclusive" for t in self.tenants)

    @property
    def runs_whole(self) -> bool:
        """It can run a job whole: not lost, not in MIG mode (which gpudesk never leaves)."""
        return not self.lost and not self.mig_enabled

    @property
    def whole_once_idle(self) -> bool:
        """A job needing whole GPUs may take it once it is idle: `runs_whole`, or a simulated
        MIG GPU whose slices are carved as needed (it may be set whole again)."""
        return not self.lost and (not self.mig_enabled or self.mig_dynamic)

    @_memo
    def reserved_mib(self) -> float:
        return sum(t.memory_mib for t in self.tenants)

    @_memo
    def sm_demand_pct(self) -> float:
        return sum(t.sm_pct for t in self.tenants)

    @_memo
    def drains_in_s(self) -> float | None:
        """When its last tenant is expected to end (0: idle; None: some tenant's remaining time
        is unknown; gpudesk.policy.remaining)."""
        times = [t.remaining_s for t in self.tenants]
        if any(t is None for t in times):
            return None
        return max((t for t in times if t is not None), default=0.0)

    @_memo
    def tenant_modes(self) -> frozenset[str]:
        return frozenset(t.mode for t in self.tenants)

    @_memo
    def mps_uid(self) -> int | None:
        """The user whose jobs the GPU's MPS server serves now (None: no MPS client runs). An
        MPS server serves one uid at a time: another user's clients would wait until all of
        these have left (NVIDIA's multi-user MPS guidance)."""
        return next((t.uid for t in self.tenants if t.mode == "mps"), None)

    @_memo
    def heaviest_tenant_sm_pct(self) -> float:
        return max((t.sm_pct for t in self.tenants), default=0.0)

    @_memo
    def free_mib(self) -> float:
        """Free memory counting both reservations and measurements: a tenant that has not yet
        allocated still holds its share, and one that took more than it said is counted."""
        return self.memory_total_mib - max(self.reserved_mib, self.memory_used_mib) - RESERVE_MIB

    def joined(self, tenant: Tenant, mig_slices: tuple[MigSlice, ...]) -> GpuState:
        """The GPU once `tenant` has started on it (`mig_slices`: its slices then). A placement
        pass makes one for each job it places, and its next job asks the new state what a
        `filled_station.Host` reads. So it is made without `__init__` (which sets each field
        of a frozen dataclass through `object.__setattr__`; `dataclasses.replace` took twice
        as long again, walking `fields()`), and what `_memo` kept that one more tenant changes
        by one step of the same rule is carried forward: the value the rule gives over the new
        tenants, to the bit (a sum is not carried: `sum` may compensate, Python 3.12). The
        rest is worked out again when asked: the tenants changed."""
        known = self.__dict__
        values = {name: known[name] for name in _GPU_STATE_FIELDS}
        values.update(tenants=(*self.tenants, tenant), mig_slices=mig_slices, placed_s_ago=0.0)
        values["idle"] = False
        mode, had = tenant.mode, bool(self.tenants)
        # what `_memo` kept of the tenants before (None: not asked), all known where none were
        exclusive = known.get("exclusive") if had else False
        modes = known.get("tenant_modes") if had else frozenset()
        if exclusive is not None:
            values["exclusive"] = exclusive or mode == "exclusive"
        if modes is not None:
            values["tenant_modes"] = modes | {mode}
        if not had:
            values["heaviest_tenant_sm_pct"] = tenant.sm_pct
        elif "heaviest_tenant_sm_pct" in known:  # the first of the largest, as `max` keeps it
            values["heaviest_tenant_sm_pct"] = max(known["heaviest_tenant_sm_pct"], tenant.sm_pct)
        if known.get("mps_uid") is not None:  # the first MPS client's
            values["mps_uid"] = known["mps_uid"]
        elif modes is not None and "mps" not in modes:  # the new tenant is the first, if any
            values["mps_uid"] = tenant.uid if mode == "mps" else None
        return made_frozen(GpuState, values)


_GPU_STATE_FIELDS = tuple(f.name for f in fields(GpuState))


class Alternative(msgspec.Struct, frozen=True):
    """A placement the policy weighed for a job, with what the interference model predicted:
    the job's speed there (1.0 = alone on a whole GPU) and the work per second the station
    gains (the job's speed minus what it costs the tenants it would join)."""

    slot: str
    mode: str
    rate: float
    gain: float
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "slot": self.slot,
            "mode": self.mode,
            "rate": round(self.rate, 3),
            "gain": round(self.gain, 3),
            "note": self.note,
        }


class Placement(msgspec.Struct, frozen=True):
    job_id: int
    slot: str
    mode: str  # "cpu", "exclusive", "naive", "mps" or "mig"
    reason: str
    gpus: tuple[int, ...] = ()
    env: Mapping[str, str] = msgspec.field(default_factory=dict)  # set as given (device visibility)
    # unless the job sets them
    env_defaults: Mapping[str, str] = msgspec.field(default_factory=dict)
    demand: Mapping[str, Any] | None = None  # what the policy assumed the job needs
    mig_slice: str | None = None  # the MIG device it runs on
    mps_thread_pct: int | None = None  # CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for an MPS client
    mps_memory_limit_mib: int | None = None  # CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
    alternatives: tuple[Alternative, ...] = ()  # what else was weighed, best first

    def to_dict(self) -> dict[str, Any]:
        data = {
            "slot": self.slot,
            "mode": self.mode,
            "reason": self.reason,
            "gpus": list(self.gpus),
            "env": dict(self.env),
            "env_defaults": dict(self.env_defaults),
        }
        for key in ("demand", "mig_slice", "mps_thread_pct", "mps_memory_limit_mib"):
            value = getattr(self, key)
            if value is not None:
                data[key] = dict(value) if key == "demand" else value
        if self.alternatives:
            data["alternatives"] = [a.to_dict() for a in self.alternatives]
        return data


class Rejection(msgspec.Struct, frozen=True):
    job_id: int
    reason: str


class Decision(msgspec.Struct, frozen=True):
    placements: list[Placement] = msgspec.field(default_factory=list)
    rejections: list[Rejection] = msgspec.field(default_factory=list)
    # job id -> later jobs started first
    overtaken: dict[int, int] = msgspec.field(default_factory=dict)
    # GPU index -> the waiting job it is held for (no new job starts there until that one has)
    held: dict[int, int] = msgspec.field(default_factory=dict)


class StationView(msgspec.Struct, frozen=True):
    """What a policy may know about the station right now."""

    config: StationConfig
    cores: int
    busy_slots: frozenset[str] = frozenset()
    backend: str = "none"  # the backend in use (auto resolved)
    gpu_states: tuple[GpuState, ...] = ()  # memory, SM window, tenants, MIG slices, lost
    gpu_problem: str | None = None  # the backend cannot read the GPUs right now
    simulated: bool = False
    demands: Mapping[int, Any] = msgspec.field(default_factory=dict)  # job id -> demand.Demand
    overtaken: Mapping[int, int] = msgspec.field(default_factory=dict)  # job id -> times overtaken
    # GPU index -> the waiting job the last placement pass held it for (`Decision.held`): what
    # `show` says of a waiting job; a pass works out its own
    held: Mapping[int, int] = msgspec.field(default_factory=dict)
    interference: InterferenceModel = PRIOR_MODEL  # speeds under sharing, learned or prior
    # The GPUs were read at least once: before, their MIG mode and slices are not known yet.
    gpus_read: bool = True
    # A queued job's expected run time: its command family's measured runs (None: unknown;
    # never what the job says of itself). The tail rule uses it (gpudesk.policy.tail_join).
    run_time_of: Callable[[JobRecord], float | None] = lambda job: None

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_states)

    @property
    def free_gpus(self) -> list[GpuState]:
        return [g for g in self.gpu_states if g.idle and not g.lost]

    @property
    def busy_gpus(self) -> frozenset[int]:
        return frozenset(g.index for g in self.gpu_states if not g.idle)

    @property
    def lost_gpus(self) -> frozenset[int]:
        return frozenset(g.index for g in self.gpu_states if g.lost)

    @property
    def slots(self) -> list[str]:
        return [f"cpu:{i}" for i in range(self.config.effective_slots)]

    @property
    def free_slots(self) -> list[str]:
        return [s for s in self.slots if s not in self.busy_slots]

    @property
    def threads_per_slot(self) -> int:
        return max(1, self.cores // self.config.effective_slots)

    @property
    def threads_per_gpu(self) -> int:
        return max(1, self.cores // max(1, self.gpu_count))


class PlacementPolicy(Protocol):
    name: str
    kept_free_mib: float  # what it keeps free on every GPU: a job may use the rest

    def place(self, queue: Sequence[JobRecord], station: StationView) -> Decision: ...

    def explain_wait(
        self, job: JobRecord, queue: Sequence[JobRecord], station: StationView
    ) -> str: ...

    def change_needed(self, job: JobRecord, station: StationView) -> str:
        """Why the job can start only once the station changes (an admin leaving MIG mode, a
        lost GPU back); "" when it can start as the GPUs are set up, once they drain."""
        ...


class FifoPolicy:
    """First come, first served (higher priority first), over two pools: CPU slots for jobs
    that need no GPU, and whole GPUs, held exclusively, for jobs that do. Within a pool a job
    never overtakes an earlier one that is still waiting."""

    name = "fifo"
    kept_free_mib = 0.0  # whole GPUs to one job each

    def place(self, queue: Sequence[JobRecord], station: StationView) -> Decision:
        free_slots = station.free_slots
        free_gpus = station.free_gpus
        gpu_pool_blocked = station.gpu_problem is not None
        placements: list[Placement] = []
        rejections: list[Rejection] = []
        for job in queue:
            if job.spec.gpus:
                need = job.spec.memory_gb * 1024 if job.spec.memory_gb is not None else 0.0
                impossible = gpu_job_impossible(job.spec.gpus, need, station, self.kept_free_mib)
                if impossible:
                    rejections.append(Rejection(job.id, f"the job {impossible}"))
                    continue
                if gpu_pool_blocked or len(free_gpus) < job.spec.gpus:
                    gpu_pool_blocked = True  # keep scanning only to reject impossible jobs
                    continue
                taken, free_gpus = free_gpus[: job.spec.gpus], free_gpus[job.spec.gpus :]
                listed = ",".join(str(g.index) for g in taken)
                placements.append(
                    Placement(
                        job_id=job.id,
                        slot="gpu:" + listed,
                        mode="exclusive",
                        reason=f"first come, first served: GPU {listed} free",
                        gpus=tuple(g.index for g in taken),
                        env=gpu_env(station, taken),
                        env_defaults={"OMP_NUM_THREADS": str(station.threads_per_gpu * len(taken))},
                    )
                )
                continue
            if free_slots:
                placements.append(cpu_placement(job, free_slots.pop(0), station))
        return Decision(placements, rejections)

    def change_needed(self, job: JobRecord, station: StationView) -> str:
        return ""  # whole GPUs, first come first served: it weighs no MIG setup

    def explain_wait(self, job: JobRecord, queue: Sequence[JobRecord], station: StationView) -> str:
        wants_gpu = bool(job.spec.gpus)
        ahead = sum(
            1
            for other in queue
            if other.id != job.id
            and queued_before(other, job)
            and bool(other.spec.gpus) == wants_gpu
        )
        if wants_gpu:
            if station.gpu_problem:
                return f"waiting: the GPUs cannot be read ({station.gpu_problem})"
            usable = station.gpu_count - len(station.lost_gpus)
            text = f"waiting for {_gpus(job.spec.gpus)} ({len(station.free_gpus)} of {usable} free"
        else:
            return cpu_wait(job, queue, station)
        return text + (f", {ahead} queued ahead of it)" if ahead else ")")


def cpu_wait(job: JobRecord, queue: Sequence[JobRecord], station: StationView) -> str:
    """Why a CPU job waits: every policy places CPU jobs the same way."""
    ahead = sum(
        1
        for other in queue
        if other.id != job.id and queued_before(other, job) and not other.spec.gpus
    )
    total = len(station.slots)
    busy = total - len(station.free_slots)
    return f"waiting for a free CPU slot ({busy}/{total} busy" + (
        f", {ahead} queued ahead of it)" if ahead else ")"
    )


def cpu_placement(job: JobRecord, slot: str, station: StationView) -> Placement:
    return Placement(
        job_id=job.id,
        slot=slot,
        mode="cpu",
        reason=f"first come, first served: {slot} was free",
        env={"CUDA_VISIBLE_DEVICES": ""},
        # Without this each torch job starts one thread per core and they fight.
        env_defaults={"OMP_NUM_THREADS": str(station.threads_per_slot)},
    )


def gpu_env(
    station: StationView, gpus: Sequence[GpuState], mig_slice: str | None = None
) -> dict[str, str]:
    """What makes a job see the GPUs (or the MIG device) it was given, and only those."""
    listed = ",".join(str(g.index) for g in gpus)
    env = {"GPUDESK_GPUS": listed}
    if station.simulated:
        # Simulated GPUs do not exist: the job runs on the CPU and the simulator plays its load.
        env.update({"CUDA_VISIBLE_DEVICES": "", "GPUDESK_SIMULATED_GPUS": listed})
    elif mig_slice is not None:
        env["CUDA_VISIBLE_DEVICES"] = mig_slice
    elif all(g.uuid for g in gpus):
        env["CUDA_VISIBLE_DEVICES"] = ",".join(g.uuid for g in gpus)  # type: ignore[misc]
    else:
        env.update({"CUDA_VISIBLE_DEVICES": listed, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    return env


def queued_before(a: JobRecord, b: JobRecord) -> bool:
    return (-a.spec.priority, a.id) < (-b.spec.priority, b.id)


def _gpus(count: int) -> str:
    return f"{count} GPU{'s' if count != 1 else ''}"


def index_list(indices: Iterable[int]) -> str:
    """GPU indices as people write them: runs of three or more as "0-2", the rest by commas
    ("0-2, 5", "1, 3")."""
    runs: list[list[int]] = []
    for index in sorted(indices):
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ", ".join(
        f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs
    )


def in_words(parts: Sequence[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    return " and ".join(p for p in (", ".join(parts[:-1]), parts[-1] if parts else "") if p)


def describe_gpus(station: StationView) -> str:
    """What the station's GPUs are, as they are set up now: "3 whole GPUs (0-2) and GPU 3 in
    MIG mode (slices 3g.20gb, 2g.10gb, 2g.10gb)"; "2 GPUs (0, 1)" where none is in MIG mode;
    lost GPUs named. Before the GPUs were first read (`gpus_read`) only how many there are."""
    gpus = station.gpu_states
    indices = [g.index for g in gpus]
    if not station.gpus_read:
        return f"{_gpus(len(gpus))} ({index_list(indices)})"
    lost = [g.index for g in gpus if g.lost]
    mig = [g for g in gpus if g.mig_enabled and not g.lost]
    whole = [g.index for g in gpus if not g.mig_enabled and not g.lost]
    if whole:
        kind = "whole " if mig else ""
        plural = "s" if len(whole) != 1 else ""
        parts = [f"{len(whole)} {kind}GPU{plural} ({index_list(whole)})"]
    else:
        parts = ["no whole GPU"]
    for gpu in mig:
        slices = ", ".join(s.profile for s in gpu.mig_slices)
        parts.append(
            f"GPU {gpu.index} in MIG mode ({'slices ' + slices if slices else 'no slices'})"
        )
    if lost:
        parts.append(f"{gpus_named(lost)} lost")
    return in_words(parts)


def gpus_named(indices: Sequence[int]) -> str:
    """ "GPU 2", "GPUs 0-2, 5": GPUs named by their indices."""
    return f"GPU{'s' if len(indices) != 1 else ''} {index_list(indices)}"


def gpus_missing(wanted: int, station: StationView) -> str | None:
    """ "asks for N GPUs but this station has only M: what they are" when a job can never get
    the GPUs it asks for, whatever is changed on them, else None."""
    have = station.gpu_count
    if wanted <= have:
        return None
    if have == 0:
        return (
            f"asks for {_gpus(wanted)} but this station has none (backend {station.backend}); "
            "submit it with gpus = 0 to run on the CPU"
        )
    return (
        f"asks for {_gpus(wanted)} but this station has only {have}: {describe_gpus(station)}; "
        f"ask for at most {have}"
    )


def gpu_job_impossible(
    gpus: int,
    need_mib: float,
    station: StationView,
    kept_free_mib: float = 0.0,
    measured: bool = False,
) -> str | None:
    """Why a job asking for `gpus` GPUs with `need_mib` on each can never run on this station,
    whatever an admin changes on its GPUs (MIG mode, layouts), or None: more GPUs than it has,
    or a need *measured* (`measured`: raised after it ran out of memory alone on a whole GPU,
    demand.beyond_every_gpu) above what its largest GPU offers a job alone (every MIG slice
    offers less). A hint never makes a job impossible: one above what a GPU offers is taken as
    unknown and the job is placed for the room it gets (demand.hint_unknown). Said without a
    subject ("asks for ...", "needs ..."). Placement fails such a queued job; submission
    refuses it. `kept_free_mib` is what a policy keeps free on every GPU."""
    if station.gpu_problem is not None:
        return None  # the GPUs may come back: wait
    too_many = gpus_missing(gpus, station)
    if too_many:
        return too_many
    if not measured:
        return None
    # lost GPUs count: one may come back, and a job it would hold waits for it
    # (station_fit.wait_for_change) rather than being refused or failed
    largest = max((g.memory_total_mib for g in station.gpu_states), default=0.0)
    offered = largest - kept_free_mib
    if need_mib > offered:
        return (
            f"ran out of GPU memory alone on a whole GPU: it needs more than {gib(offered)}, "
            f"and the largest GPU here has {gib(largest)} (this station has "
            f"{describe_gpus(station)}); it cannot run on this station"
        )
    return None
