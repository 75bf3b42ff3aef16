"""The station as one placement pass fills it: each GPU as a job sees it (`Host`: idle, shared
under MPS or time-slicing, MIG, or closed), a job's chosen option (`Choice`) and the
`Placement` made of it, the jobs placed so far (`FilledStation`), and the demands that found no
room (`Frontier`).
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import msgspec

from gpudesk.core.records import JobRecord
from gpudesk.policy.demand import HEAVY_SM_PCT, Demand
from gpudesk.policy.interference import (
    MIN_RATE,
    Joining,
    ModelParams,
    Prediction,
    Workload,
    workload,
)
from gpudesk.policy.policy import (
    RESERVE_MIB,
    Alternative,
    GpuState,
    MigSlice,
    Placement,
    StationView,
    Tenant,
    gpu_env,
    made_frozen,
)


class Choice(msgspec.Struct):
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
        # a placed job records up to six
        return Alternative(slot_of(self), self.mode, self.rate, self.value, note)


class Host(msgspec.Struct):
    """A GPU as a job placed by this pass sees it, computed once per GPU state (a long queue
    asks each GPU many times; a job placed there makes a new state)."""

    gpu: GpuState
    params: ModelParams
    share: str  # "mps" or "naive": how a new tenant would share it
    kind: int  # IDLE, SHARED (takes a tenant under `share`), MIG, or CLOSED
    room_mib: float  # idle: what a job may use alone; shared: what its tenants left free
    heavy_tenant: bool  # a tenant already saturates it (a heavy job gains nothing beside it)
    idle_whole: bool  # idle and usable whole (a multi-GPU or exclusive job may take it)
    joining: Joining | None = None  # the model's view of its shared tenants, when first asked
    slicing: Slicing | None = None  # ... and of a job time-slicing beside its MPS clients
    # The parameters with each mechanism's costs at the top of their plausible range (the
    # robust rule: `InterferenceModel.pessimistic`), and the model's view of the shared
    # tenants under them for `share`
    worst_params: dict[str, ModelParams] = msgspec.field(default_factory=dict)
    worst_joining: Joining | None = None
    # The least SM demand the model gave no gain here: a job's gain beside these tenants falls
    # as its SM share grows, so one at least as heavy gains nothing either (jobs without a
    # bandwidth figure only: theirs follows their SM share).
    gainless_sm: float = math.inf
    # The user whose jobs the GPU's MPS server serves, where that is not the placed job's
    # owner: the job may only time-slice beside them (`FilledStation.foreign_host`).
    mps_user: int | None = None
    # What a job of each (SM %, bandwidth %) was scored here, by policy (robust or not): the
    # score depends on the tenants and the job's workload alone, and a long queue asks each GPU
    # for the same few workloads again and again (`collocation.SharingPolicy._shared_option`).
    # A shared host's is every alike host's (`shared_scores`).
    scored: dict[ScoreKey, Scored] = msgspec.field(default_factory=dict)


IDLE, SHARED, MIG, CLOSED = range(4)

# A job's workload as a host's scores are keyed: (SM %, bandwidth %, robust rule)
ScoreKey = tuple[float, float | None, bool]
# The model's parameters a score is worked out with: nominal, and with each mechanism's costs at
# the top of their range (`worst_params`: MPS, time-slicing)
ParamsKey = tuple[ModelParams, ModelParams, ModelParams]

# Hosts' scores (`Host.scored`), shared by every host alike in all that `FilledStation.score`
# reads: the parameters (`ParamsKey`), how a new tenant would share the GPU, whether its MPS
# server serves another user, and its shared tenants' SM, bandwidth and thread cap, in order
# (`score_signature`). A score is a pure function of those, so it holds in any pass, and no
# pass or GPU state invalidates it: the GPUs that keep their tenants from one pass to the next,
# and the few tenant mixes a long queue's placements make again and again, are scored once
# each. New parameters (a learned model's, a range the station's measurements narrowed) are a
# new key. Bounded, each level emptied whole once full: `PARAMS_KEPT` parameter sets (a model
# that learns as it goes makes a new one at each refit; the old ones are not asked again) and
# `SIGNATURES_KEPT` signatures under each (bench/policy.py's 200 random stations make about 800).
_SCORES: dict[ParamsKey, dict[Hashable, dict[ScoreKey, Scored]]] = {}
PARAMS_KEPT = 8
SIGNATURES_KEPT = 2048


_K = TypeVar("_K")
_V = TypeVar("_V")


def _kept(cache: dict[_K, _V], key: _K, limit: int, new: Callable[[], _V]) -> _V:
    """`cache[key]`, made by `new` when missing; the cache emptied whole once it holds `limit`."""
    value = cache.get(key)
    if value is None:
        if len(cache) >= limit:
            cache.clear()
        value = cache[key] = new()
    return value


def params_scores(key: ParamsKey) -> dict[Hashable, dict[ScoreKey, Scored]]:
    """The hosts' shared scores under these parameters, by `score_signature`."""
    return _kept(_SCORES, key, PARAMS_KEPT, dict)


def score_signature(gpu: GpuState, share: str, foreign: bool) -> Hashable:
    """What `FilledStation.score` reads of a shared host besides the parameters: `share`, a
    foreign MPS server (`foreign`: it is another user's), and the tenants `tenant_workloads`
    takes, as their figures (their order too: the model sums them in it)."""
    tenants = tuple(
        (t.sm_pct, t.membw_pct, t.thread_pct) for t in gpu.tenants if t.mode in ("mps", "naive")
    )
    return (share, foreign, tenants)


def shared_scores(
    scores: dict[Hashable, dict[ScoreKey, Scored]], signature: Hashable
) -> dict[ScoreKey, Scored]:
    """The scores every host of this `signature` shares (under one `params_scores`)."""
    return _kept(scores, signature, SIGNATURES_KEPT, dict)


class Scored(msgspec.Struct, frozen=True):
    """A job's workload scored beside a host's shared tenants: how it would share (`share`),
    the work per second the station gains by the policy's rule (`value`), the model's
    prediction at its own values (`predicted`: None where `value` is no gain), and, where
    time-slicing beside MPS clients was chosen over joining them, the prediction under MPS."""

    share: str
    value: float
    predicted: Prediction | None = None
    under_mps: Prediction | None = None


@dataclass(frozen=True)
class Slicing:
    """A job time-slicing beside a GPU's MPS clients rather than joining them: the MPS server
    is one more context, so every tenant time-slices (as `FilledStation.foreign_host` weighs
    it), and the tenants lose against their MPS rates now (`before`). Predicted under the GPU's
    parameters (`nominal`) and with time-slicing's own costs at the top of their range
    (`worst`), each made when first asked; `ceiling`: no job gains more than this under `worst`
    (a bound that spares the model's call where MPS already gains as much, and most GPUs' the
    two predictions)."""

    params: ModelParams
    worst_params: ModelParams
    tenants: Sequence[Workload]
    before: tuple[float, ...]
    ceiling: float

    @functools.cached_property
    def nominal(self) -> Joining:
        return Joining(self.params, "naive", self.tenants, self.before)

    @functools.cached_property
    def worst(self) -> Joining:
        return Joining(self.worst_params, "naive", self.tenants, self.before)


class FilledStation(msgspec.Struct):
    """The station as this pass has filled it so far."""

    gpus: dict[int, GpuState]
    placements: list[Placement] = msgspec.field(default_factory=list)
    _hosts: dict[int, Host] = msgspec.field(default_factory=dict)
    _usable: list[Host] | None = None  # the hosts of the GPUs not lost, in index order
    # GPUs placed on since `_usable` was made
    _placed: set[int] = msgspec.field(default_factory=set)
    _mps_uids: tuple[int, ...] = ()  # the users the usable GPUs' MPS servers serve
    _idle: set[int] | None = None  # the GPUs no job has joined (`idle_indices`)
    _foreign: dict[int, Host] = msgspec.field(default_factory=dict)  # GPU index -> its foreign host
    # the last `hosts` without GPUs held: (the hosts, the GPUs left out, what was left)
    _excluded: tuple[list[Host], frozenset[int], list[Host]] | None = None
    # (GPUs, MIG slice) -> the first GPU as the station has it, its environment and the threads
    # a job there gets: the same for every placement of the pass there (`_placement`)
    _placing: dict[tuple[tuple[int, ...], str | None], tuple[GpuState, dict[str, str], str]] = (
        msgspec.field(default_factory=dict)
    )
    # GPU model -> its parameters, with each mechanism's costs at the top of their range
    # (`worst_params`), and the hosts' shared scores under them (`params_scores`): asked for
    # every new state of a GPU, the same within a pass
    _params: dict[
        str,
        tuple[ModelParams, dict[str, ModelParams], dict[Hashable, dict[ScoreKey, Scored]]],
    ] = msgspec.field(default_factory=dict)

    def params(
        self, gpu: GpuState, station: StationView
    ) -> tuple[ModelParams, dict[str, ModelParams], dict[Hashable, dict[ScoreKey, Scored]]]:
        """The GPU's model parameters, `worst_params` and `params_scores`, once per GPU model
        and pass (a pass never changes the station's interference model)."""
        known = self._params.get(gpu.model)
        if known is None:
            params, worst = station.interference.params(gpu.model), worst_params(station, gpu)
            scores = params_scores((params, worst["mps"], worst["naive"]))
            known = self._params[gpu.model] = (params, worst, scores)
        return known

    def hosts(
        self,
        station: StationView,
        mode: str,
        uid: int | None = None,
        exclude: set[int] | frozenset[int] = frozenset(),
    ) -> list[Host]:
        """Every GPU not lost as a `Host` for a job of user `uid`, each cached until a job is
        placed there, but those in `exclude`. A GPU whose MPS server serves another user's
        jobs is that GPU's `foreign_host` (one user's station never has one)."""
        hosts = self._hosts_of(station, mode, uid)
        if not exclude:
            return hosts
        # The GPUs held for a waiting job are the same for most jobs of a pass after it: the
        # list without them is kept until the hosts or the GPUs held change.
        kept = self._excluded
        if kept is not None and kept[0] is hosts and kept[1] == exclude:
            return kept[2]
        left = [h for h in hosts if h.gpu.index not in exclude]
        self._excluded = (hosts, frozenset(exclude), left)
        return left

    def _hosts_of(self, station: StationView, mode: str, uid: int | None) -> list[Host]:
        if self._usable is None or self._placed:
            if self._usable is None:
                usable = [self._host(g, station, mode) for g in self.gpus.values() if not g.lost]
                uids = {h.gpu.mps_uid for h in usable if h.gpu.mps_uid is not None}
            else:  # only the GPUs jobs were placed on have changed (none of them is lost)
                placed, gpus = self._placed, self.gpus
                usable = [
                    self._host(gpus[h.gpu.index], station, mode) if h.gpu.index in placed else h
                    for h in self._usable
                ]
                # a GPU's MPS server serves its first client's user while tenants only join:
                # the users are those before and any a placed GPU's first client brought
                uids = set(self._mps_uids)
                uids.update(u for i in placed if (u := gpus[i].mps_uid) is not None)
                self._placed = set()
            self._usable = usable
            self._mps_uids = tuple(uids)
        # the uids are distinct: every one is `uid` only where there is none, or it alone
        if uid is None or not self._mps_uids or self._mps_uids == (uid,):
            return self._usable
        return [
            self.foreign_host(h.gpu, station)
            if h.gpu.mps_uid is not None and h.gpu.mps_uid != uid
            else h
            for h in self._usable
        ]

    def idle_indices(self) -> set[int]:
        """The GPUs no job has joined, before this pass or in it (kept as jobs are placed: a
        pass only ever adds tenants)."""
        if self._idle is None:
            self._idle = {index for index, gpu in self.gpus.items() if gpu.idle}
        return self._idle

    def foreign_host(self, gpu: GpuState, station: StationView) -> Host:
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
        params, worst, scores = self.params(gpu, station)
        host = Host(
            gpu,
            params,
            "naive",
            SHARED if shares else CLOSED,
            gpu.free_mib if shares else 0.0,
            gpu.heaviest_tenant_sm_pct >= HEAVY_SM_PCT,
            False,
            mps_user=gpu.mps_uid,
            worst_params=worst,
        )
        if shares:
            signature = score_signature(gpu, "naive", gpu.mps_uid is not None)
            host.scored = shared_scores(scores, signature)
        self._foreign[gpu.index] = host
        return host

    def _host(self, gpu: GpuState, station: StationView, mode: str) -> Host:
        cached = self._hosts.get(gpu.index)
        if cached is not None and cached.gpu is gpu:
            return cached
        share = "mps" if mode in ("mps", "auto") and gpu.mps_usable else "naive"
        room = 0.0
        if gpu.mig_enabled or mode == "mig":
            kind = MIG  # a GPU in MIG mode runs jobs on slices only: MIG mode is never toggled
        elif gpu.idle:
            kind, room = IDLE, gpu.memory_total_mib - RESERVE_MIB
        elif (
            gpu.exclusive
            or station.config.isolation  # only MIG slices are shared
            or gpu.tenant_modes != {share}  # an MPS GPU takes MPS clients, a time-sliced one naive
        ):
            kind = CLOSED
        else:
            kind, room = SHARED, gpu.free_mib
        params, worst, scores = self.params(gpu, station)
        host = Host(
            gpu,
            params,
            share,
            kind,
            room,
            gpu.heaviest_tenant_sm_pct >= HEAVY_SM_PCT,
            gpu.idle and gpu.whole_once_idle,
            worst_params=worst if kind == SHARED else {},
        )
        if kind == SHARED:
            host.scored = shared_scores(scores, score_signature(gpu, share, False))
        self._hosts[gpu.index] = host
        return host

    def joining(self, host: Host) -> Joining:
        """What the model predicts for a job joining the host's shared tenants."""
        if host.joining is None:
            host.joining = Joining(host.params, host.share, tenant_workloads(host.gpu, host.params))
        return host.joining

    def worst(self, host: Host) -> Joining:
        """What the model predicts for a job joining the host's shared tenants under its share,
        with that mechanism's costs at the top of their range."""
        if host.worst_joining is None:
            params = host.worst_params[host.share]
            tenants = tenant_workloads(host.gpu, params)
            host.worst_joining = Joining(params, host.share, tenants)
        return host.worst_joining

    def slicing(self, host: Host) -> Slicing:
        """What the model predicts for a job time-slicing beside the host's MPS clients rather
        than joining them (`Slicing`)."""
        if host.slicing is None:
            joining = self.joining(host)
            before, tenants = joining.before, joining.tenants  # (its workloads, under host.params)
            worst = host.worst_params["naive"]
            n = len(tenants)
            # time-sliced, no job runs faster than the switches between n + 1 contexts allow
            fastest = max(MIN_RATE, 1.0 - worst.naive_switch_cost * n)
            host.slicing = Slicing(
                host.params, worst, tenants, before, fastest * (n + 1) - sum(before)
            )
        return host.slicing

    def score(self, host: Host, load: Workload, robust: bool) -> Scored:
        """`load` beside the host's shared tenants (`Scored`): MPS or time-slicing, and what
        the station gains, with the mechanism's costs at the top of their range (`robust`) or
        at the model's values."""
        share = host.share
        under_mps: Prediction | None = None
        predicted: Prediction | None = None  # at the model's values: what the reason shows
        if robust:
            # The robust rule: the model's costs are mostly assumed (model_params.PROVENANCE),
            # so `auto` scores sharing with the mechanism's costs at the top of their range
            # (narrowing as the station measures them), and shares only where the station
            # gains even there.
            value = self.worst(host)(load).gain
        else:
            predicted = self.joining(host)(load)
            value = predicted.gain
        if robust and share == "mps" and host.mps_user is None:
            # Per job, MPS or time-slicing beside the same tenants: bandwidth-bound pairs can
            # do better time-sliced (kernel-active time adds up there, bandwidth under MPS, as
            # the H100 calibration measured for membw + heavy), scored the same way. (Each
            # score falls as the job's SM share grows, and so does the larger of the two, as
            # `gainless_sm` needs.)
            slicing = self.slicing(host)
            if slicing.ceiling > value:
                worst = slicing.worst(load).gain
                if worst > value:
                    under_mps, predicted = self.joining(host)(load), slicing.nominal(load)
                    share, value = "naive", worst
        if value <= 0.0:
            return Scored(share, value)
        if predicted is None:  # only for an option that may be chosen (a pass weighs many)
            predicted = self.joining(host)(load)
        return Scored(share, value, predicted, under_mps)

    def take(
        self, job: JobRecord, demand: Demand, choice: Choice, station: StationView
    ) -> Placement:
        memory = demand.memory_mib
        for index in choice.gpus:
            gpu = self.gpus[index]
            slice_key = choice.mig_slice.key if choice.mig_slice else None
            tenant = made_frozen(
                Tenant,
                {
                    "job_id": job.id,
                    "mode": choice.mode,
                    "memory_mib": memory,
                    "sm_pct": demand.sm_pct,
                    "mig_slice": slice_key,
                    "membw_pct": demand.membw_pct,
                    "thread_pct": None,
                    "uid": job.owner.uid,
                    "login": job.owner.login,
                    "remaining_s": None,
                    "measured_remaining_s": None,
                },
            )
            slices = gpu.mig_slices
            if choice.mig_slice is not None:
                others = tuple(s for s in slices if s.key != slice_key)
                slices = (*others, msgspec.structs.replace(choice.mig_slice, busy=True))
            self.gpus[index] = gpu.joined(tenant, slices)
        self._placed.update(choice.gpus)
        if self._idle is not None:
            self._idle.difference_update(choice.gpus)
        placement = self._placement(job, demand, choice, station)
        self.placements.append(placement)
        return placement

    def _placement(
        self, job: JobRecord, demand: Demand, choice: Choice, station: StationView
    ) -> Placement:
        """The `Placement` of the job as `choice` says, its environment from the station's
        GPUs as they were before this pass (`gpu_env`: their indices and UUIDs, which a pass
        never changes)."""
        mig_slice = choice.mig_slice.key if choice.mig_slice else None
        # what every placement on the same GPUs shares, worked out once a pass
        shared = self._placing.get((choice.gpus, mig_slice))
        if shared is None:
            gpus = [station_gpu(station, i) for i in choice.gpus]
            threads = str(station.threads_per_gpu * len(choice.gpus))
            shared = (gpus[0], gpu_env(station, gpus, mig_slice), threads)
            self._placing[(choice.gpus, mig_slice)] = shared
        first, env, threads = shared
        limit: int | None = None
        if choice.mode == "mps" and choice.mps_limits:
            # Alone on a GPU a job may grow into all of it (an underestimate costs nobody); next
            # to others it may grow into what they left free (its need and margin fit there: it
            # was admitted so), never into what they hold.
            limit = math.floor(
                first.memory_total_mib - RESERVE_MIB if choice.alone else choice.free_mib
            )
        # No active-thread cap (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE): a cap is fixed when the
        # client starts and outlives the co-tenants it was meant for, and below a kernel's width
        # it slows the job (interference.cap_factor) while the model predicts nothing gained
        # for the others.
        return Placement(
            job_id=job.id,
            slot=slot_of(choice),
            mode=choice.mode,
            reason=choice.reason,
            gpus=choice.gpus,
            env=dict(env),  # each placement's own
            env_defaults={"OMP_NUM_THREADS": threads},
            demand=demand.to_dict(),
            mig_slice=mig_slice,
            mps_thread_pct=None,
            mps_memory_limit_mib=limit,
            alternatives=choice.alternatives,
        )


def slot_of(choice: Choice) -> str:
    """ "gpu:1" alone, "gpu:0/mps" or "gpu:0/naive" shared, "gpu:2/3g.20gb" on a MIG slice."""
    gpus = choice.gpus
    listed = str(gpus[0]) if len(gpus) == 1 else ",".join(str(i) for i in gpus)
    if choice.mig_slice:
        return f"gpu:{listed}/{choice.mig_slice.profile}"
    if choice.mode in ("mps", "naive"):
        return f"gpu:{listed}/{choice.mode}"
    return f"gpu:{listed}"


def worst_params(station: StationView, gpu: GpuState) -> dict[str, ModelParams]:
    """The GPU model's parameters with each sharing mechanism's costs at the top of their
    range (`InterferenceModel.pessimistic`)."""
    model = station.interference
    return {mechanism: model.pessimistic(mechanism, gpu.model) for mechanism in ("mps", "naive")}


def station_gpu(station: StationView, index: int) -> GpuState:
    for gpu in station.gpu_states:
        if gpu.index == index:
            return gpu
    raise KeyError(index)


def tenant_workloads(gpu: GpuState, params: ModelParams) -> list[Workload]:
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


class Frontier:
    """The smallest (memory, SM) demands that found no room. Sorted by memory, SM falling: the
    point with the largest memory not above a demand's has the lowest SM of those, so one
    bisection says whether the demand is at least as large as a point."""

    __slots__ = ("memory", "sm")  # read for nearly every job of a long queue

    def __init__(self) -> None:
        self.memory: list[float] = []
        self.sm: list[float] = []

    def dominates(self, memory: float, sm: float) -> bool:
        index = bisect.bisect_right(self.memory, memory) - 1
        return index >= 0 and self.sm[index] <= sm

    def add(self, memory: float, sm: float) -> None:
        """The point, in its place, and the points it dominates gone. A point not dominated
        has a lower SM than every point with less memory, so those it dominates (at least as
        much memory and SM) are the ones from where it goes in, up to the first with a lower
        SM: one run, replaced in place."""
        if self.dominates(memory, sm):
            return
        points, sms = self.memory, self.sm
        start = end = bisect.bisect_left(points, memory)
        while end < len(sms) and sms[end] >= sm:
            end += 1
        points[start:end] = (memory,)
        sms[start:end] = (sm,)
