"""The interference model: how fast a job runs under each sharing mechanism, beside whom.

One model serves the live engine's placement, the trace simulator (as its ground truth, or as
the prior it learns from) and `gpudesk calibrate` (which fits it on a real GPU). A job is
described by a `Workload`: the share of the GPU's SMs it keeps busy alone (SM activity, what
DCGM and NVML GPM report) and the share of the GPU's DRAM bandwidth it uses alone. Its *rate* is
its speed relative to running alone on a whole GPU (1.0). Each rule below says where it comes
from; `DEFAULT_PARAMS` and `PROVENANCE` trace every constant to a published fact, derive it from
one, or label it an assumption (docs/simulator.md has the table).

- **Exclusive**: 1.0.
- **MPS** (spatial sharing: kernels of all clients run at once), tenants *T* including the job,
  *n* of them, pressure *P* = max(Σ SM, Σ bandwidth):
  rate = min(1, 1/P) x (1 - `mps_tenant_cost` (n - 1)) x (1 - `contention` max(0, P - 1)).
  Below a full GPU every tenant runs at full speed but for a small per-co-tenant cost (caches,
  bandwidth); past it the GPU is shared out, with extra contention.
- **Naive time-slicing**: one context runs at a time, so what adds up is *kernel-active* time
  (NVML's "utilization"), which runs ahead of SM activity by `kernel_active_extra`:
  rate = min(1, 1/Σ kernel-active) x (1 - `naive_switch_cost` (n - 1)).
- **MIG**: a slice of *c* of 7 compute slices and *m* of 8 memory slices gets that share of the
  SMs **and** of the DRAM bandwidth and L2 (NVIDIA's MIG user guide: memory slices carry their
  share of both). While a job's kernels run they are *w* = SM / kernel-active wide; on a slice
  they stretch by max(1, w / (c/7), bandwidth-while-active / (m/8)), and the time between
  kernels (data loading, launches, the optimizer on the CPU) does not stretch. Slices are
  isolated: nothing on other slices slows the job.
- **An MPS thread cap** (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`) below a kernel's width stretches
  it the same way a MIG slice's SM share does.

With the defaults, small jobs rank MPS > MIG > naive (as the collocation study measured), the
seed's DLRM + ResNet152 pair shares at +4 % each (measured +5 % / +4 %), and two ResNet152-like
jobs together do exactly the work of one (measured: no gain).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from gpudesk.core.mig_profiles import COMPUTE_SLICES, MEMORY_SLICES

MIN_RATE = 0.05  # a job under any amount of sharing still makes some progress


@dataclass(frozen=True)
class Workload:
    """What a job asks of a GPU while it runs alone on a whole one (fractions, 0..1)."""

    sm: float  # SM activity
    membw: float  # DRAM bandwidth used, as a share of the GPU's
    thread_cap: float | None = None  # an MPS client's active-thread share (None: all SMs)


@dataclass(frozen=True)
class ModelParams:
    """The model's constants for one GPU model (see the module docstring for where each acts)."""

    mps_tenant_cost: float
    contention: float
    naive_switch_cost: float
    kernel_active_extra: float
    membw_per_sm: float  # a job's bandwidth share per unit of SM share, when it gives none

    def with_values(self, values: Mapping[str, float]) -> ModelParams:
        known = {f.name for f in fields(self)}
        return replace(self, **{k: float(v) for k, v in values.items() if k in known})

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


PARAM_NAMES = tuple(f.name for f in fields(ModelParams))

# --- where the defaults come from ---------------------------------------------------------
# The seed's collocation table (A100-40GB): DLRM (5 % SM) beside ResNet152 (82 % SM) under MPS
# took +5 % and +4 % time. One co-tenant, pressure 0.87 < 1: the whole slowdown is the
# per-co-tenant cost, 1 - 1/1.045 = 0.043 (the mean of the two), rounded to 0.04.
PAIR_SLOWDOWNS = (0.05, 0.04)
PUBLISHED_MPS_TENANT_COST = round(1.0 - 1.0 / (1.0 + sum(PAIR_SLOWDOWNS) / 2), 2)
# "ResNet152 (~82 % SM alone): no gain" from collocation: two of them under MPS do exactly the
# work of one, 2 x rate = 1, which fixes the contention past a full GPU.
HEAVY_SM = 0.82


def _contention_for_no_gain(sm: float, tenant_cost: float) -> float:
    pressure = 2 * sm
    shared = min(1.0, 1.0 / pressure) * (1.0 - tenant_cost)
    return (1.0 - 0.5 / shared) / (pressure - 1.0)


DEFAULT_PARAMS = ModelParams(
    mps_tenant_cost=PUBLISHED_MPS_TENANT_COST,
    contention=round(_contention_for_no_gain(HEAVY_SM, PUBLISHED_MPS_TENANT_COST), 3),
    # Assumptions (no published figure; fitted on a real GPU by `gpudesk calibrate`):
    naive_switch_cost=0.10,
    kernel_active_extra=0.20,
    membw_per_sm=0.5,
)


def params_from_json(data: object, where: str, base: ModelParams | None = None) -> ModelParams:
    """Parameters from a JSON object of parameter -> value, an object holding one under
    `"params"`, or what `gpudesk calibrate --json` printed (the fit is under `"fitted"`); the
    rest from `base` (the defaults). Raises ValueError naming the unknown or bad keys. The one
    reader of a params file (`simulate --truth`, `calibrate --truth`)."""
    if isinstance(data, dict) and isinstance(data.get("fitted"), dict):
        data = data["fitted"]  # a calibration: "params" there lists each fit's details
    elif isinstance(data, dict) and isinstance(data.get("params"), dict):
        data = data["params"]
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a JSON object of model parameters")
    unknown = sorted(k for k in data if k not in PARAM_NAMES)
    if unknown:
        raise ValueError(
            f"{where}: unknown model parameter(s) {', '.join(unknown)}; known: "
            f"{', '.join(PARAM_NAMES)}"
        )
    values = {}
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"{where}: {key} must be a non-negative number, found {value!r}")
        values[key] = float(value)
    return (base or DEFAULT_PARAMS).with_values(values)


def load_params_file(path: str | Path, where: str, base: ModelParams | None = None) -> ModelParams:
    """`params_from_json` of a file. Raises ValueError: unreadable, not JSON, bad keys."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{where}: {path} is not JSON: {exc}") from None
    return params_from_json(data, f"{where} {path}", base)


@dataclass(frozen=True)
class Provenance:
    kind: str  # "published", "derived", "assumption", "learned", "calibrated"
    source: str


PROVENANCE: dict[str, Provenance] = {
    "mps_tenant_cost": Provenance(
        "published",
        "seed collocation table, A100-40GB: DLRM + ResNet152 under MPS took +5 % / +4 % time "
        "(one co-tenant, below a full GPU)",
    ),
    "contention": Provenance(
        "derived",
        "collocation study: ResNet152 (~82 % SM) gains nothing from collocation; two such jobs "
        "under MPS do the work of one",
    ),
    "naive_switch_cost": Provenance(
        "assumption",
        "time-slicing switches whole contexts; taken as 2.5x the MPS co-tenant cost so that "
        "naive gains less than MPS, as published (no figure is published)",
    ),
    "kernel_active_extra": Provenance(
        "assumption",
        "NVML utilization (kernel-active time) runs ahead of SM activity (radT, nvitop); the "
        "size of the gap is assumed",
    ),
    "membw_per_sm": Provenance(
        "assumption",
        "a job that gives no bandwidth figure uses half as much of the DRAM bandwidth as of "
        "the SMs (compute-bound training)",
    ),
}


def workload(sm_pct: float, membw_pct: float | None, params: ModelParams) -> Workload:
    """A job's workload from percentages; bandwidth defaults from its SM share."""
    sm = min(1.0, max(0.0, sm_pct / 100.0))
    membw = membw_pct / 100.0 if membw_pct is not None else sm * params.membw_per_sm
    return Workload(sm, min(1.0, max(0.0, membw)))


# --- rates ----------------------------------------------------------------------------------
def kernel_active(params: ModelParams, job: Workload) -> float:
    """The share of time a kernel of the job runs (NVML utilization), alone."""
    if job.sm <= 0.0:
        return 0.0
    return min(1.0, job.sm + params.kernel_active_extra)


def _stretch(params: ModelParams, job: Workload, sm_share: float, bw_share: float) -> float:
    """The job's rate when its kernels get `sm_share` of the SMs and `bw_share` of the DRAM
    bandwidth: kernels stretch by how much wider they are than that; the rest does not."""
    active = kernel_active(params, job)
    if active <= 0.0:
        return 1.0
    width = job.sm / active
    bandwidth = job.membw / active
    factor = max(1.0, width / max(sm_share, 1e-6), bandwidth / max(bw_share, 1e-6))
    return 1.0 / ((1.0 - active) + active * factor)


def cap_factor(params: ModelParams, job: Workload) -> float:
    """How much an MPS thread cap slows the job (1.0 without one)."""
    if job.thread_cap is None or job.thread_cap >= 1.0:
        return 1.0
    return _stretch(params, job, job.thread_cap, 1.0)


def mps_rates(params: ModelParams, tenants: Sequence[Workload]) -> list[float]:
    """Each MPS tenant's rate when these run together."""
    n = len(tenants)
    if n == 0:
        return []
    if n == 1:
        return [cap_factor(params, tenants[0])]
    pressure = max(sum(t.sm for t in tenants), sum(t.membw for t in tenants))
    shared = mps_shared_rate(params, pressure, n)
    return [max(MIN_RATE, min(shared, cap_factor(params, t))) for t in tenants]


def mps_shared_rate(params: ModelParams, pressure: float, n: int) -> float:
    """The rate of each of `n` uncapped MPS tenants at this pressure (n >= 2)."""
    return max(
        MIN_RATE,
        min(1.0, 1.0 / max(pressure, 1e-6))
        * max(MIN_RATE, 1.0 - params.mps_tenant_cost * (n - 1))
        * max(MIN_RATE, 1.0 - params.contention * max(0.0, pressure - 1.0)),
    )


def naive_rates(params: ModelParams, tenants: Sequence[Workload]) -> list[float]:
    """Each time-sliced tenant's rate when these run together."""
    n = len(tenants)
    if n <= 1:
        return [1.0] * n
    load = sum(kernel_active(params, t) for t in tenants)
    shared = min(1.0, 1.0 / max(load, 1e-6)) * max(
        MIN_RATE, 1.0 - params.naive_switch_cost * (n - 1)
    )
    return [max(MIN_RATE, shared)] * n


def mig_rate(params: ModelParams, job: Workload, compute_slices: int, memory_slices: int) -> float:
    """The job's rate alone on a MIG slice (slices do not slow each other)."""
    return max(
        MIN_RATE,
        _stretch(params, job, compute_slices / COMPUTE_SLICES, memory_slices / MEMORY_SLICES),
    )


def shared_rates(
    params: ModelParams,
    mechanism: str,
    tenants: Sequence[Workload],
    compute_slices: int = COMPUTE_SLICES,
    memory_slices: int = MEMORY_SLICES,
) -> list[float]:
    """Rates of jobs running together under `mechanism`: the tenants of one GPU (mps, naive,
    exclusive), or for "mig" each on a slice of this size."""
    if mechanism == "mps":
        return mps_rates(params, tenants)
    if mechanism == "naive":
        return naive_rates(params, tenants)
    if mechanism == "mig":
        return [mig_rate(params, t, compute_slices, memory_slices) for t in tenants]
    return [1.0] * len(tenants)


def predicted_rate(params: ModelParams, obs: Observation) -> float:
    """What the model says the observed job's rate was (the job is the first tenant)."""
    rates = shared_rates(
        params,
        obs.mechanism,
        (obs.job, *obs.others) if obs.mechanism != "mig" else (obs.job,),
        obs.compute_slices or COMPUTE_SLICES,
        obs.memory_slices or MEMORY_SLICES,
    )
    return rates[0]


@dataclass(frozen=True)
class Prediction:
    """What joining a GPU does: the job's rate, and the work per second the GPU gains."""

    rate: float  # the new job's
    gain: float  # the job's rate minus what its tenants lose, in whole-GPU work per second
    tenants_before: tuple[float, ...] = ()
    tenants_after: tuple[float, ...] = ()


def predict_join(
    params: ModelParams,
    mechanism: str,
    job: Workload,
    tenants: Sequence[Workload],
    before: Sequence[float] | None = None,
) -> Prediction:
    """The job joins the GPU's `tenants` under `mechanism` (mps or naive); `before` are the
    tenants' rates now, where the caller has them already."""
    if before is None:
        before = shared_rates(params, mechanism, tenants) if tenants else []
    uncapped = job.thread_cap is None and all(t.thread_cap is None for t in tenants)
    if mechanism == "mps" and tenants and uncapped:
        # the placement hot path: every uncapped tenant runs at one shared rate
        pressure = max(
            sum(t.sm for t in tenants) + job.sm, sum(t.membw for t in tenants) + job.membw
        )
        rate = mps_shared_rate(params, pressure, len(tenants) + 1)
        after_all = tuple(rate for _ in tenants)
        return Prediction(rate, rate * (len(tenants) + 1) - sum(before), tuple(before), after_all)
    after = shared_rates(params, mechanism, [*tenants, job])
    rate = after[-1]
    lost = sum(b - a for b, a in zip(before, after, strict=False))
    return Prediction(rate, rate - lost, tuple(before), tuple(after[:-1]))


class Joining:
    """`predict_join` for many jobs that might join the same tenants (a placement pass weighs
    each GPU for many jobs): what depends on the tenants alone is taken once. Gives exactly
    what `predict_join` gives."""

    def __init__(
        self,
        params: ModelParams,
        mechanism: str,
        tenants: Sequence[Workload],
        before: Sequence[float] | None = None,
    ) -> None:
        self.params, self.mechanism, self.tenants = params, mechanism, tenants
        self.before = tuple(shared_rates(params, mechanism, tenants) if before is None else before)
        # the MPS hot path of predict_join: every uncapped tenant runs at one shared rate
        self.uniform = (
            mechanism == "mps" and bool(tenants) and all(t.thread_cap is None for t in tenants)
        )
        self.sm = sum(t.sm for t in tenants)
        self.membw = sum(t.membw for t in tenants)
        self.lost = sum(self.before)

    def __call__(self, job: Workload) -> Prediction:
        if self.uniform and job.thread_cap is None:
            pressure = max(self.sm + job.sm, self.membw + job.membw)
            n = len(self.tenants)
            rate = mps_shared_rate(self.params, pressure, n + 1)
            return Prediction(rate, rate * (n + 1) - self.lost, self.before, (rate,) * n)
        return predict_join(self.params, self.mechanism, job, self.tenants, self.before)


# --- learning -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Observation:
    """A job's measured rate (against its rate alone) while it ran beside `others`."""

    mechanism: str
    job: Workload
    others: tuple[Workload, ...]
    rate: float
    compute_slices: int = 0  # on a MIG slice
    memory_slices: int = 0


def estimate(params: ModelParams, obs: Observation) -> tuple[str, float] | None:
    """The parameter one observation pins down, and the value it says, holding the rest at
    `params`; None where it says nothing (alone, or saturated so that no cost shows)."""
    if obs.rate <= MIN_RATE * 1.001:
        return None  # at the floor the model puts under every rate: it says nothing
    rate = min(1.0, obs.rate)
    if obs.mechanism == "mps" and obs.others:
        if rate >= cap_factor(params, obs.job) - 1e-6:
            return None  # its own thread cap held it back: the sharing cost does not show
        tenants = (obs.job, *obs.others)
        n = len(tenants)
        pressure = max(sum(t.sm for t in tenants), sum(t.membw for t in tenants))
        if pressure <= 1.0:
            return "mps_tenant_cost", max(0.0, (1.0 - rate) / (n - 1))
        base = min(1.0, 1.0 / pressure) * (1.0 - params.mps_tenant_cost * (n - 1))
        if base <= MIN_RATE:
            return None
        return "contention", max(0.0, (1.0 - rate / base) / (pressure - 1.0))
    if obs.mechanism == "naive" and obs.others:
        tenants = (obs.job, *obs.others)
        load = sum(kernel_active(params, t) for t in tenants)
        base = min(1.0, 1.0 / max(load, 1e-6))
        return "naive_switch_cost", max(0.0, (1.0 - rate / base) / (len(tenants) - 1))
    if obs.mechanism == "mig" and obs.compute_slices and obs.job.sm > 0:
        share = obs.compute_slices / COMPUTE_SLICES
        # 1/rate = 1 - u + s/share when the SM share is what stretches the kernels
        active = 1.0 + obs.job.sm / share - 1.0 / rate
        if obs.job.sm / share > 1.0 and obs.job.sm < active <= 1.0:
            return "kernel_active_extra", active - obs.job.sm
    return None


PRIOR_WEIGHT = 3.0  # assumption: a published default counts as three observations

# The observations the learner keeps per GPU model (the newest; the oldest is forgotten when a
# new one comes). Why 1000: each parameter is refitted from all of them at every observation, at
# about 2 us per observation per sweep, so keeping 1000 costs the engine under 10 ms per
# observation (measured on a 2-core VM: ~4 ms for the usual three sweeps, ~2 ms for two, 0.15 ms
# when the first, from the estimates the last refit left, already settles it; ~7 ms for the
# refit from scratch at start; observations come at most once per 60 s interval of a job) and
# the store ~1000 small rows per GPU model; a parameter that one observation in ten informs
# (contention) still has ~100 values behind it, enough to average out the few per cent a 60 s
# rate is measured to; and the model follows a station that changes (a driver, a new mix of
# jobs) within that many observations: a day or two of a busy station observing a few dozen
# times an hour (an assumption, no station has been measured). A simulated run observes ~200
# times, so its results do not depend on this number.
KEPT_OBSERVATIONS = 1000
# The refit stops when no parameter moved more than this in a sweep: far below the 4 decimals
# `gpudesk model show` prints and anything placement can tell apart. With today's model a
# sweep soon changes nothing (or only a float's last bits): contention depends on
# mps_tenant_cost, naive_switch_cost and the thread-cap test on kernel_active_extra, and nothing
# depends back, so each sweep settles one more level and the third or fourth repeats the one
# before (measured: two or three sweeps per observation in the simulator).
REFIT_TOLERANCE = 1e-6
# A guard, not a setting: were `estimate` ever to make parameters depend on each other in a
# circle, or an observation's parameter to flip between sweeps, the refit ends here with the
# last sweep's values.
MAX_SWEEPS = 50


@dataclass(frozen=True)
class KeptObservation:
    """An observation the learner keeps to refit from, with when it came and whether a
    calibration probe (`gpudesk calibrate`) measured it rather than a job's progress."""

    obs: Observation
    at: float | None = None
    calibrated: bool = False


@dataclass(frozen=True)
class FrozenTotal:
    """One parameter's totals as a gpudesk before the joint refit stored them (store schema 5):
    the sum and count of the values its observations implied, each computed with the other
    parameters as they were at that moment, and how many came from calibration probes. The
    observations themselves were not kept, so these cannot be refitted: they enter every refit
    as they are, as observations whose values never move."""

    total: float
    count: int
    calibrated: int
    updated_at: float | None


@dataclass(frozen=True)
class LearnedParam:
    name: str
    value: float
    prior: float
    kind: str  # the prior's provenance kind, or "learned" / "calibrated" once observed
    source: str
    observations: int  # kept observations that inform it now, plus frozen totals' count
    calibrated: int  # ... of them from calibration probes
    updated_at: float | None


@dataclass
class _Fit:
    """One GPU model's kept observations and where their refit stands."""

    kept: deque[KeptObservation]
    frozen: dict[str, FrozenTotal]
    params: ModelParams
    # each kept observation's `estimate` under `implied_at` (the last sweep's starting point):
    # when that is `params` itself, the next observation's refit starts from these instead of
    # estimating every observation again
    implied: list[tuple[str, float] | None] = field(default_factory=list)
    implied_at: ModelParams | None = None
    sweeps: int = 0  # the last refit's


class Learner:
    """Per-GPU-model parameters that move from their prior toward what the station shows,
    refitted jointly from the observations kept (the newest `keep` per GPU model).

    Which parameter one observation informs, and the value it implies, is `estimate`'s rule,
    and that value depends on the other parameters (an MPS group past a full GPU says what
    contention is *given* mps_tenant_cost). So a parameter is not a running sum of what
    observations said when they came: each observation, every refit re-reads the kept ones
    under the current parameters (backfitting). A sweep takes every kept observation's
    `estimate` under the parameters so far and sets each parameter to the mean of its prior
    (weighted as `PRIOR_WEIGHT` observations), its frozen totals (a store written before the
    refit) and the values its observations imply; sweeps repeat until no parameter moves more
    than `REFIT_TOLERANCE` (or `MAX_SWEEPS`). A sweep updates every parameter from the same
    starting point (a Jacobi sweep): each observation is estimated once per sweep, which is
    what the refit costs. It runs when observations come, from the parameters before them, and
    `params` returns the result.

    An observation that informs no parameter when it comes (alone, at the rate floor, held
    back by its own thread cap) is not kept. Pure bookkeeping: the engine stores the kept
    observations (`gpudesk.engine.learning`), the simulator keeps them in memory."""

    def __init__(
        self,
        prior: ModelParams = DEFAULT_PARAMS,
        kind: str = "published",
        keep: int = KEPT_OBSERVATIONS,
    ) -> None:
        self.prior = prior
        self.prior_kind = kind
        self.keep = keep
        self._fits: dict[str, _Fit] = {}

    def gpu_models(self) -> list[str]:
        """The GPU models something was learned about."""
        return sorted(self._fits)

    def kept(self, gpu_model: str) -> tuple[KeptObservation, ...]:
        fit = self._fits.get(gpu_model)
        return tuple(fit.kept) if fit else ()

    def sweeps(self, gpu_model: str) -> int:
        """How many sweeps the GPU model's last refit took (0: never refitted)."""
        fit = self._fits.get(gpu_model)
        return fit.sweeps if fit else 0

    def informs(self, gpu_model: str, obs: Observation) -> str | None:
        """The parameter the observation informs under the current parameters; None: it says
        nothing and would not be kept."""
        said = estimate(self.params(gpu_model), obs)
        return None if said is None else said[0]

    def observe(
        self, gpu_model: str, obs: Observation, at: float | None = None, calibrated: bool = False
    ) -> str | None:
        """Keep one observation and refit; returns the parameter it informs (None: not kept)."""
        return self.observe_all(gpu_model, [KeptObservation(obs, at, calibrated)])[0]

    def observe_all(
        self, gpu_model: str, observations: Iterable[KeptObservation]
    ) -> list[str | None]:
        """`observe` each (judged by the parameters before them all), with one refit after."""
        fit = self._fits.get(gpu_model)
        start = fit.params if fit else self.prior
        names: list[str | None] = []
        for kept in observations:
            said = estimate(start, kept.obs)
            names.append(None if said is None else said[0])
            if said is None:
                continue
            if fit is None:
                fit = self._fits[gpu_model] = _Fit(deque(), {}, self.prior)
            fit.kept.append(kept)
            fit.implied.append(said)  # under `start`: valid only where `implied_at` is `start`
            if len(fit.kept) > self.keep:
                fit.kept.popleft()
                del fit.implied[0]
        if fit is not None and any(name is not None for name in names):
            self._refit(fit, start)
        return names

    def restore(
        self,
        gpu_model: str,
        kept: Iterable[KeptObservation],
        frozen: Mapping[str, FrozenTotal] | None = None,
    ) -> None:
        """Replace what is known of one GPU model with what a store kept (observations oldest
        first, and the totals a store from before the refit holds) and refit from the prior."""
        fit = _Fit(
            deque(kept),
            {name: t for name, t in (frozen or {}).items() if name in PARAM_NAMES and t.count},
            self.prior,
        )
        while len(fit.kept) > self.keep:
            fit.kept.popleft()
        self._fits.pop(gpu_model, None)
        if fit.kept or fit.frozen:
            self._fits[gpu_model] = fit
            self._refit(fit, self.prior)

    def forget(self, gpu_model: str | None = None) -> None:
        """Back to the prior, for one GPU model or all."""
        if gpu_model is None:
            self._fits.clear()
        else:
            self._fits.pop(gpu_model, None)

    def params(self, gpu_model: str) -> ModelParams:
        fit = self._fits.get(gpu_model)
        return fit.params if fit else self.prior

    def _refit(self, fit: _Fit, start: ModelParams) -> None:
        params = start
        # the kept observations' estimates under `start`, where the last refit left them so
        # (and the new ones were estimated under `start` when they came)
        implied = fit.implied if fit.implied_at == start else None
        for sweep in range(1, MAX_SWEEPS + 1):
            if implied is None:
                implied = [estimate(params, kept.obs) for kept in fit.kept]
            new = self._blend(fit, implied)
            moved = max(abs(getattr(new, n) - getattr(params, n)) for n in PARAM_NAMES)
            fit.implied, fit.implied_at = implied, params
            params = new
            fit.sweeps = sweep
            if moved < REFIT_TOLERANCE:
                break
            implied = None
        fit.params = params

    def _blend(self, fit: _Fit, implied: Iterable[tuple[str, float] | None]) -> ModelParams:
        """Each observed parameter: the mean of its prior (weighted as `PRIOR_WEIGHT`), its
        frozen totals and the values implied; the others stay at the prior."""
        sums = {name: t.total for name, t in fit.frozen.items()}
        counts = {name: t.count for name, t in fit.frozen.items()}
        for said in implied:
            if said is not None:
                name, value = said
                sums[name] = sums.get(name, 0.0) + value
                counts[name] = counts.get(name, 0) + 1
        return self.prior.with_values(
            {
                name: (getattr(self.prior, name) * PRIOR_WEIGHT + sums[name])
                / (PRIOR_WEIGHT + count)
                for name, count in counts.items()
                if count
            }
        )

    def describe(self, gpu_model: str) -> list[LearnedParam]:
        """Each parameter with its value, prior, provenance, and the observations that inform
        it under the current parameters (and when the last of them came)."""
        current = self.params(gpu_model)
        fit = self._fits.get(gpu_model)
        counts: dict[str, int] = {}
        calibrated: dict[str, int] = {}
        last: dict[str, float | None] = {}

        def count(name: str, n: int, cal: int, at: float | None) -> None:
            counts[name] = counts.get(name, 0) + n
            calibrated[name] = calibrated.get(name, 0) + cal
            before = last.get(name)
            last[name] = at if before is None else before if at is None else max(before, at)

        if fit is not None:
            for name, total in fit.frozen.items():
                count(name, total.count, total.calibrated, total.updated_at)
            for kept in fit.kept:
                said = estimate(current, kept.obs)
                if said is not None:
                    count(said[0], 1, int(kept.calibrated), kept.at)
        out = []
        for name in PARAM_NAMES:
            provenance = PROVENANCE[name]
            if calibrated.get(name):
                kind = "calibrated"
            elif counts.get(name):
                kind = "learned"
            else:
                kind = self.prior_kind if self.prior_kind != "published" else provenance.kind
            out.append(
                LearnedParam(
                    name,
                    getattr(current, name),
                    getattr(self.prior, name),
                    kind,
                    provenance.source,
                    counts.get(name, 0),
                    calibrated.get(name, 0),
                    last.get(name),
                )
            )
        return out


class InterferenceModel:
    """The parameters placement uses for each GPU model: the learner's, else the defaults.
    Always the learner's current fit (kept by the learner when observations come, so asking
    costs a lookup): nothing to renew when it learns."""

    def __init__(self, learner: Learner | None = None) -> None:
        self.learner = learner

    def params(self, gpu_model: str = "") -> ModelParams:
        return self.learner.params(gpu_model) if self.learner else DEFAULT_PARAMS


PRIOR_MODEL = InterferenceModel()
