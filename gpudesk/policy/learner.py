"""Learning the interference model on a station: an `Observation` (a job's measured rate beside
others), the parameter it pins down (`estimate`), and the `Learner` that refits every parameter
jointly from the observations kept per GPU model.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable, Mapping
from functools import reduce
from itertools import groupby
from math import copysign
from operator import add, itemgetter
from typing import cast

import msgspec

from gpudesk.core.mig_profiles import COMPUTE_SLICES, MEMORY_SLICES
from gpudesk.core.wire.model import ModelParamView, ParamKind
from gpudesk.policy.model_params import (
    COSTS,
    DEFAULT_PARAMS,
    PARAM_NAMES,
    PESSIMISTIC_FACTOR,
    PROVENANCE,
    ModelParams,
    Workload,
)
from gpudesk.policy.rates import MIN_RATE, cap_factor, kernel_active, shared_rates


class Observation(msgspec.Struct, frozen=True):
    """A job's measured rate (against its rate alone) while it ran beside `others`."""

    mechanism: str
    job: Workload
    others: tuple[Workload, ...]
    rate: float
    compute_slices: int = 0  # on a MIG slice
    memory_slices: int = 0
    # Alone (mechanism "exclusive", no others): the share of the time a kernel of the job ran
    # (NVML utilization), read beside its SM activity (`job.sm`); it measures
    # `kernel_active_extra` directly.
    kernel_active: float | None = None


# Above this kernel-active share the gap to SM activity is cut off (a GPU cannot be more than
# 100 % kernel-active), so it says less than the job's real gap: such readings are not used.
KERNEL_ACTIVE_CUTOFF = 0.97


def kernel_active_gap(sm: float | None, kernel_active: float | None) -> float | None:
    """kernel-active time less SM activity, both read while a job ran alone (below 0 where
    noise put it there); None where either is missing, the job was idle, or it kept the GPU
    (nearly) always kernel-active."""
    if sm is None or kernel_active is None or sm <= 0.0:
        return None
    if kernel_active >= KERNEL_ACTIVE_CUTOFF:
        return None
    return kernel_active - sm


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


# SM shares that add up to a full GPU can sum to a rounding error above 1 (six jobs at 0.1, 0.1,
# 0.1, 0.3, 0.3, 0.1: 1.0000000000000002). Read as past a full GPU, such a group's rate divided
# by that excess gave contention any value at all (a simulated run learned 3.5, another 2e13);
# within this of 1 a group is at a full GPU and tells the per-co-tenant cost.
FULL_GPU_TOLERANCE = 1e-9


def estimate(params: ModelParams, obs: Observation) -> tuple[str, float] | None:
    """The parameter one observation pins down, and the value it says, holding the rest at
    `params`; None where it says nothing (alone, or saturated so that no cost shows)."""
    if obs.kernel_active is not None:
        if obs.mechanism != "exclusive" or obs.others:
            return None  # only a job alone shows its own gap
        gap = kernel_active_gap(obs.job.sm, obs.kernel_active)
        return None if gap is None else ("kernel_active_extra", max(0.0, gap))
    if obs.rate <= MIN_RATE * 1.001:
        return None  # at the floor the model puts under every rate: it says nothing
    rate = min(1.0, obs.rate)
    if obs.mechanism == "mps" and obs.others:
        if rate >= cap_factor(params, obs.job) - 1e-6:
            return None  # its own thread cap held it back: the sharing cost does not show
        tenants = (obs.job, *obs.others)
        n = len(tenants)
        pressure = max(sum(t.sm for t in tenants), sum(t.membw for t in tenants))
        if pressure <= 1.0 + FULL_GPU_TOLERANCE:
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

# The parameters one `estimate` read, with their values, in the order it read them
Reads = tuple[tuple[str, float], ...]


class _Noting:
    """Stands in for a ModelParams in `estimate` and notes each parameter it reads."""

    __slots__ = ("_params", "read")

    def __init__(self, params: ModelParams) -> None:
        self._params = params
        self.read: list[tuple[str, float]] = []

    def __getattr__(self, name: str) -> float:
        value: float = getattr(self._params, name)
        self.read.append((name, value))
        return value


def noted_estimate(params: ModelParams, obs: Observation) -> tuple[tuple[str, float] | None, Reads]:
    """`estimate`, and the parameters it read with their values. Why: a refit re-reads every
    kept observation (up to `KEPT_OBSERVATIONS`) in each sweep, two or three sweeps for each
    new observation, and most of them read one parameter or none (a MIG slice, a job alone)
    or ones the sweep did not move: `estimate` is a function of the observation and the
    parameters it reads, so where those are the same it says the same, and is not run again
    (`_estimate_all`). Noted as it runs rather than listed by hand, so that a change of
    `estimate` cannot leave a stale list behind."""
    noting = _Noting(params)
    said = estimate(cast(ModelParams, noting), obs)
    return said, tuple(noting.read)


def _still(reads: Reads, params: ModelParams) -> bool:
    """Whether `params` give each parameter read its value (-0.0 is not 0.0: a sign can show)."""
    for name, value in reads:
        now = getattr(params, name)
        if now != value or (now == 0.0 and copysign(1.0, now) != copysign(1.0, value)):
            return False
    return True


def _estimate_all(fit: _Fit, params: ModelParams) -> None:
    """Every kept observation's estimate under `params` into `fit.implied`: those whose reads
    `params` leave as they were kept, the others estimated again."""
    if len(fit.implied) != len(fit.kept):  # restored from a store: none estimated yet
        fit.implied, fit.reads = [None] * len(fit.kept), [None] * len(fit.kept)
    implied, reads = fit.implied, fit.reads
    for i, kept in enumerate(fit.kept):
        noted = reads[i]
        if noted is None or (noted and not _still(noted, params)):  # () read none
            implied[i], reads[i] = noted_estimate(params, kept.obs)


class KeptObservation(msgspec.Struct, frozen=True):
    """An observation the learner keeps to refit from, with when it came and whether a
    calibration probe (`gpudesk calibrate`) measured it rather than a job's progress."""

    obs: Observation
    at: float | None = None
    calibrated: bool = False
    # Whose job showed it: its owner's uid (None: an admin's calibration, or the simulator's
    # one user). The fit hears each owner as one voice (`Learner._blend`).
    owner: int | None = None


class FrozenTotal(msgspec.Struct, frozen=True):
    """One parameter's totals as a gpudesk before the joint refit stored them (store schema 5):
    the sum and count of the values its observations implied, each computed with the other
    parameters as they were at that moment, and how many came from calibration probes. The
    observations themselves were not kept, so these cannot be refitted: they enter every refit
    as they are, as observations whose values never move."""

    total: float
    count: int
    calibrated: int
    updated_at: float | None


class LearnedParam(msgspec.Struct, frozen=True):
    name: str
    value: float
    prior: float
    kind: str  # the prior's provenance kind, or "learned" / "calibrated" once observed
    source: str
    observations: int  # kept observations that inform it now, plus frozen totals' count
    calibrated: int  # ... of them from calibration probes
    updated_at: float | None
    # The top of its plausible range (value x `Learner.widths`), where `auto` judges a sharing
    # placement (model_params.pessimistic); None for a parameter that is no mechanism's cost.
    high: float | None = None
    # What its observations alone say (`Learner.observed`); None where none informs it.
    observed: float | None = None

    def view(self) -> ModelParamView:
        """The parameter as `model_show` replies it."""
        return ModelParamView(
            name=self.name,
            value=self.value,
            prior=self.prior,
            kind=cast(ParamKind, self.kind),  # the learner's kinds are the wire's
            source=self.source,
            observations=self.observations,
            calibrated=self.calibrated,
            updated_at=self.updated_at,
            high=self.high,
            observed=self.observed,
        )


class _Fit(msgspec.Struct):
    """One GPU model's kept observations and where their refit stands."""

    kept: deque[KeptObservation]
    frozen: dict[str, FrozenTotal]
    params: ModelParams
    # what the observations alone say (each observed parameter the mean of the values its
    # observations imply, without the prior's pull; the others the prior's): the point each
    # observation is read at (`Learner._refit`)
    read_at: ModelParams
    # each kept observation's `estimate` as the last sweep read it, and the parameters that
    # estimate read with their values (`noted_estimate`; None: not estimated yet): under
    # parameters with those values it is the same, and is not estimated again
    implied: list[tuple[str, float] | None] = msgspec.field(default_factory=list)
    reads: list[Reads | None] = msgspec.field(default_factory=list)
    sweeps: int = 0  # the last refit's
    # observations behind each parameter
    counts: dict[str, int] = msgspec.field(default_factory=dict)


class Learner:
    """Per-GPU-model parameters that move from their prior toward what the station shows,
    refitted jointly from the observations kept (the newest `keep` per GPU model).

    Which parameter one observation informs, and the value it implies, is `estimate`'s rule,
    and that value depends on the other parameters (an MPS group past a full GPU says what
    contention is *given* mps_tenant_cost). So a parameter is not a running sum of what
    observations said when they came: each observation, every refit re-reads the kept ones
    (backfitting). A sweep takes every kept observation's `estimate` under what the
    observations alone said so far (`_Fit.read_at`) and sets each observed parameter to the
    mean of its frozen totals (a store written before the refit) and the values its
    observations imply; sweeps repeat until no parameter moves more than `REFIT_TOLERANCE` (or
    `MAX_SWEEPS`). A sweep updates every parameter from the same starting point (a Jacobi
    sweep): each observation is estimated once per sweep, which is what the refit costs. The
    parameters (`params`) are then each that mean with the prior's value weighted in as
    `PRIOR_WEIGHT` observations.

    Why the prior is left out of the point the observations are read at: the prior's pull on
    one parameter would otherwise come back, magnified, in another. An MPS group past a full
    GPU at pressure P says what contention is given the per-co-tenant cost, and a small error
    in that cost moves the contention it implies by about 1 / (P - 1) times as much (ten times
    at P = 1.1): with the H100 calibration as the truth, a replay of t1 read its crowded groups
    at a co-tenant cost pulled from the truth's 0.127 to 0.125 by the prior's 0.04, and learned
    a contention of 0.136 for the truth's 0.085. The prior weighs on each parameter's own value
    only; it is never a reason to read another parameter's observations differently. It runs
    when observations come, from the point the observations before them were read at.

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
        """The parameter the observation informs, read as the learner reads it now (at what
        the observations alone say: `_Fit.read_at`); None: it says nothing and would not be
        kept."""
        said = estimate(self.observed(gpu_model), obs)
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
        start = fit.read_at if fit else self.prior
        names: list[str | None] = []
        for kept in observations:
            said, reads = noted_estimate(start, kept.obs)
            names.append(None if said is None else said[0])
            if said is None:
                continue
            if fit is None:
                fit = self._fits[gpu_model] = _Fit(deque(), {}, self.prior, self.prior)
            fit.kept.append(kept)
            fit.implied.append(said)
            fit.reads.append(reads)
            if len(fit.kept) > self.keep:
                fit.kept.popleft()
                del fit.implied[0], fit.reads[0]
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

    def observed(self, gpu_model: str) -> ModelParams:
        """What the observations alone say (each observed parameter without the prior's pull,
        the others at the prior): the point the learner reads every observation at."""
        fit = self._fits.get(gpu_model)
        return fit.read_at if fit else self.prior

    def widths(self, gpu_model: str) -> dict[str, float]:
        """How far above its value each parameter may plausibly be (model_params.pessimistic):
        `PESSIMISTIC_FACTOR` unmeasured, narrowing as the prior's share of the fit does (its
        weight against the observations that inform the parameter): 1.5 x with none, 1.25 x
        with 3, 1.05 x with 27."""
        fit = self._fits.get(gpu_model)
        counts = fit.counts if fit else {}
        return {
            name: 1.0
            + (PESSIMISTIC_FACTOR - 1.0) * PRIOR_WEIGHT / (PRIOR_WEIGHT + counts.get(name, 0))
            for name in PARAM_NAMES
        }

    def _refit(self, fit: _Fit, start: ModelParams) -> None:
        """Backfit the point the observations are read at from `start` (the class doc), then
        the parameters: each observed one's mean with the prior weighed in."""
        read_at = start
        for sweep in range(1, MAX_SWEEPS + 1):
            _estimate_all(fit, read_at)
            new = self._blend(fit, fit.implied, prior_weight=0.0)
            moved = max(abs(getattr(new, n) - getattr(read_at, n)) for n in PARAM_NAMES)
            read_at = new
            fit.sweeps = sweep
            if moved < REFIT_TOLERANCE:
                break
        fit.read_at = read_at
        fit.params = self._blend(fit, fit.implied, prior_weight=PRIOR_WEIGHT)

    def _blend(
        self, fit: _Fit, implied: Iterable[tuple[str, float] | None], prior_weight: float
    ) -> ModelParams:
        """Each observed parameter: the mean of its prior (weighted as `prior_weight`
        observations), its frozen totals and the values implied (`implied`: one per kept
        observation, in order); the others stay at the prior. Where the kept observations of a
        parameter come from more than one owner, each owner is one voice: the median of their
        means (with the prior's value among them where the owners are even in number) stands
        for all of them.
        The model places every member's jobs, and a job's progress is the
        member's to print: one member's jobs, however many, and whatever slowed them (an
        input-bound loop, a stalled or false progress line), then move it no further than the
        other members' allow, where a plain mean would follow whoever observed the most."""
        implied = list(implied)
        if len(implied) != len(fit.kept):
            raise ValueError(f"{len(implied)} estimates for {len(fit.kept)} observations")
        sums = {name: t.total for name, t in fit.frozen.items()}
        counts = {name: t.count for name, t in fit.frozen.items()}
        # Each parameter's values in the order of the observations (a stable sort by name),
        # added one by one in that order as a loop over them did, at C speed: a refit blends
        # the kept observations two or three times per new one, the most of a long replay's
        # time. Not sum(): from Python 3.12 it compensates its rounding, and a fit must not
        # change with the Python it runs on.
        for name, group in groupby(sorted(filter(None, implied), key=itemgetter(0)), itemgetter(0)):
            values = [value for _, value in group]
            sums[name] = reduce(add, values, sums.get(name, 0.0))
            counts[name] = counts.get(name, 0) + len(values)
        voices: dict[str, dict[int | None, list[float]]] = {}
        if len({kept.owner for kept in fit.kept}) > 1:  # one owner: one voice, nothing to weigh
            for kept, said in zip(fit.kept, implied, strict=True):
                if said is not None:
                    voices.setdefault(said[0], {}).setdefault(kept.owner, []).append(said[1])
        for name, by_owner in voices.items():
            if len(by_owner) > 1:
                frozen = fit.frozen.get(name)
                heard = sum(len(values) for values in by_owner.values())
                means = [statistics.fmean(v) for v in by_owner.values()]
                if len(means) % 2 == 0:
                    # an even number of voices has no middle one, and the median would be the
                    # mean of two: the prior breaks the tie, so of two members who disagree
                    # the model goes only as far as the one nearer its prior says
                    means.append(getattr(self.prior, name))
                typical = statistics.median(means)
                sums[name] = (frozen.total if frozen else 0.0) + heard * typical
        fit.counts = counts
        return self.prior.with_values(
            {
                name: (getattr(self.prior, name) * prior_weight + sums[name])
                / (prior_weight + count)
                for name, count in counts.items()
                if count
            }
        )

    def describe(self, gpu_model: str) -> list[LearnedParam]:
        """Each parameter with its value, prior, provenance, and the observations that inform
        it as the learner reads them now (and when the last of them came)."""
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
                said = estimate(fit.read_at, kept.obs)
                if said is not None:
                    count(said[0], 1, int(kept.calibrated), kept.at)
        widths = self.widths(gpu_model)
        costs = {name for names in COSTS.values() for name in names}
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
                    getattr(current, name) * widths[name] if name in costs else None,
                    getattr(fit.read_at, name) if fit is not None and counts.get(name) else None,
                )
            )
        return out
