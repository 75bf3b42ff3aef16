"""`gpudesk calibrate`, the pure part: the probe plan, measurements turned into observations,
the fit of the interference model's parameters and the report. No I/O, no processes: the runner
(`gpudesk.hw.probe_runner`) measures a real GPU, `simulate_measurements` a SIMULATED one whose
truth is the interference model itself with chosen parameters. The plan and the measurements,
which the runner reads and fills, are records both share: `gpudesk.core.calibration_records`.

The plan (docs/calibration.md): each probe intensity alone on the whole GPU (the reference steps
per second, and its measured SM activity, DRAM bandwidth and kernel-active time, which make the
intensity's `Workload`); pairs run at the same time under naive time-slicing and under MPS; the
`heavy` probe alone on each free MIG slice (one per profile) where the GPU is already in MIG mode.
A probe's *rate* in a pair is its steps per second there over its steps per second alone, which
is what the model predicts (`mps_rates`, `naive_rates`, `mig_rate`).

The fit: `kernel_active_extra` is measured directly where both SM activity and kernel-active time
are (the mean gap over the alone probes); the other parameters that the observations inform are
fitted by least squares (coordinate descent: a coarse grid, then golden-section refinement) on
the residuals of predicted against measured rates. A parameter no observation informs keeps its
default and says so. `membw_per_sm` describes jobs that give no bandwidth figure, which the
probes (whose bandwidth is measured) do not represent: never fitted here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpudesk.core.calibration_records import (
    AloneMeasurement,
    Measurements,
    MigSlice,
    Plan,
    ProbeRun,
    RunMeasurement,
)
from gpudesk.core.mig_profiles import COMPUTE_SLICES, table_for_gpu
from gpudesk.policy.interference import (
    DEFAULT_PARAMS,
    PARAM_NAMES,
    ModelParams,
    Observation,
    Workload,
    estimate,
    kernel_active,
    kernel_active_gap,
    load_params_file,
    predicted_rate,
    shared_rates,
)

INTENSITIES = ("light", "medium", "heavy", "membw")
# Pairs that inform each parameter: light pairs sit below a full GPU (the per-co-tenant cost),
# heavy pairs past it (contention under MPS, the share-out under time-slicing), membw + heavy
# stress different resources (the seed's DLRM + ResNet152 case).
PAIRS: tuple[tuple[str, str], ...] = (
    ("light", "light"),
    ("light", "heavy"),
    ("medium", "medium"),
    ("heavy", "heavy"),
    ("membw", "heavy"),
)
SHARING = ("naive", "mps")
MECHANISMS = ("naive", "mps", "mig")
MIG_INTENSITY = "heavy"  # wide kernels: a slice's SM share shows
# The SIMULATED station's probes (fractions of the GPU, alone): what the probes show on an H100.
SIM_WORKLOADS: dict[str, Workload] = {
    "light": Workload(0.10, 0.04),
    "medium": Workload(0.33, 0.12),
    "heavy": Workload(0.78, 0.30),
    "membw": Workload(0.12, 0.72),
}
SIM_STEPS_PER_S = {"light": 10.0, "medium": 28.0, "heavy": 80.0, "membw": 40.0}
# Search bounds per parameter.
BOUNDS: dict[str, tuple[float, float]] = {
    "mps_tenant_cost": (0.0, 0.9),
    "contention": (0.0, 3.0),
    "naive_switch_cost": (0.0, 0.9),
    "kernel_active_extra": (0.0, 1.0),
    "membw_per_sm": (0.0, 2.0),
}
FITTED = ("mps_tenant_cost", "contention", "naive_switch_cost", "kernel_active_extra")


class CalibrationError(ValueError):
    """Bad input to calibration (a truth file, a mechanism name)."""


# --- the plan ---------------------------------------------------------------------------------
def parse_mechanisms(text: str) -> tuple[str, ...]:
    names = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in names if m not in MECHANISMS]
    if unknown or not names:
        raise CalibrationError(
            f"--mechanisms: unknown {', '.join(unknown) or '(none)'}; "
            f"known: {', '.join(MECHANISMS)}"
        )
    return names


def distinct_slices(slices: Iterable[MigSlice]) -> list[MigSlice]:
    """One free slice per profile (the same profile measures the same)."""
    seen: dict[str, MigSlice] = {}
    for s in slices:
        seen.setdefault(s.profile, s)
    return sorted(seen.values(), key=lambda s: (s.compute_slices, s.memory_slices))


def build_plan(
    mechanisms: Sequence[str],
    seconds: float,
    *,
    mig_mode: bool = False,
    free_slices: Sequence[MigSlice] = (),
) -> Plan:
    """The runs, in order. A GPU in MIG mode offers no whole GPU: only its free slices are
    probed (their reference is a whole-GPU calibration of the same model, kept from before)."""
    if seconds <= 0:
        raise CalibrationError("--seconds must be positive")
    runs: list[ProbeRun] = []
    notes: list[str] = []
    if mig_mode:
        if any(m in mechanisms for m in SHARING):
            notes.append(
                "the GPU is in MIG mode: no whole GPU to share, so no naive or MPS probes "
                "(MIG mode is never changed by calibrate)"
            )
        if "mig" in mechanisms:
            slices = distinct_slices(free_slices)
            if not slices:
                notes.append("the GPU is in MIG mode but no MIG slice is free: nothing to probe")
            runs.extend(ProbeRun("mig", (MIG_INTENSITY,), seconds, s) for s in slices)
        return Plan(tuple(runs), seconds, tuple(notes))
    runs.extend(ProbeRun("alone", (i,), seconds) for i in INTENSITIES)
    for mechanism in SHARING:
        if mechanism in mechanisms:
            runs.extend(ProbeRun(mechanism, pair, seconds) for pair in PAIRS)
    if "mig" in mechanisms:
        if free_slices:
            runs.extend(
                ProbeRun("mig", (MIG_INTENSITY,), seconds, s) for s in distinct_slices(free_slices)
            )
        else:
            notes.append(
                "mig: the GPU is not in MIG mode, so no MIG probes (calibrate never changes "
                "MIG mode; run it again after `gpudesk mig apply` to fit the MIG rule)"
            )
    return Plan(tuple(runs), seconds, tuple(notes))


def sim_slices(gpu_name: str) -> list[MigSlice]:
    """A SIMULATED GPU's MIG slices to probe: each simulated profile smaller than the GPU."""
    return [
        MigSlice(p.name, p.compute_slices, p.memory_slices)
        for p in table_for_gpu(gpu_name)
        if p.simulated and p.compute_slices < COMPUTE_SLICES
    ]


# --- measurements -----------------------------------------------------------------------------
def sim_alone(truth: ModelParams) -> dict[str, AloneMeasurement]:
    return {
        name: AloneMeasurement(
            name,
            SIM_STEPS_PER_S[name],
            sm=w.sm,
            membw=w.membw,
            kernel_active=kernel_active(truth, w),
        )
        for name, w in SIM_WORKLOADS.items()
    }


def true_rates(params: ModelParams, run: ProbeRun, jobs: Sequence[Workload]) -> list[float]:
    """The model's rates of a run's probes (the SIMULATED truth, and the predictions)."""
    if run.mechanism == "mig" and run.mig is None:
        return [1.0] * len(jobs)
    if run.mig is not None:
        return shared_rates(
            params, run.mechanism, jobs, run.mig.compute_slices, run.mig.memory_slices
        )
    return shared_rates(params, run.mechanism, jobs)


def simulate_measurements(plan: Plan, truth: ModelParams) -> Measurements:
    """What the plan measures on a SIMULATED GPU whose truth is the model with `truth`."""
    alone = sim_alone(truth)
    runs = []
    for run in plan.runs:
        if run.mechanism == "alone":
            continue
        jobs = [SIM_WORKLOADS[i] for i in run.intensities]
        rates = true_rates(truth, run, jobs)
        runs.append(
            RunMeasurement(
                run,
                tuple(
                    alone[i].steps_per_s * r for i, r in zip(run.intensities, rates, strict=True)
                ),
            )
        )
    return Measurements(alone, tuple(runs), simulated=True)


# --- observations -----------------------------------------------------------------------------
def workloads(
    alone: Mapping[str, AloneMeasurement], prior: ModelParams = DEFAULT_PARAMS
) -> dict[str, Workload]:
    """Each intensity's Workload from its measurement alone. Without SM activity (no GPM: before
    Hopper) it is kernel-active time less the prior's gap, and says so (`sm_source`)."""
    out = {}
    for name, m in alone.items():
        if m.sm is not None:
            sm = m.sm
        elif m.kernel_active is not None:
            sm = max(0.01, m.kernel_active - prior.kernel_active_extra)
        else:
            sm = SIM_WORKLOADS[name].sm if name in SIM_WORKLOADS else 0.5
        membw = m.membw if m.membw is not None else sm * prior.membw_per_sm
        out[name] = Workload(min(1.0, max(0.0, sm)), min(1.0, max(0.0, membw)))
    return out


def sm_source(m: AloneMeasurement) -> str:
    if m.sm is not None:
        return m.sm_source
    if m.kernel_active is not None:
        return "kernel-active less the default gap (no SM activity reading)"
    return "assumed (no NVML reading)"


@dataclass(frozen=True)
class ProbeObservation:
    """One probe's measured rate in one run, as the model's `Observation`."""

    run: ProbeRun
    intensity: str
    observation: Observation

    @property
    def rate(self) -> float:
        return self.observation.rate


def observations(measured: Measurements, loads: Mapping[str, Workload]) -> list[ProbeObservation]:
    out = []
    for rm in measured.runs:
        run = rm.run
        for index, (name, sps) in enumerate(zip(run.intensities, rm.steps_per_s, strict=True)):
            reference = measured.alone.get(name)
            if reference is None or reference.steps_per_s <= 0:
                continue
            others = tuple(loads[o] for i, o in enumerate(run.intensities) if i != index)
            obs = Observation(
                mechanism=run.mechanism,
                job=loads[name],
                others=others,
                rate=sps / reference.steps_per_s,
                compute_slices=run.mig.compute_slices if run.mig else 0,
                memory_slices=run.mig.memory_slices if run.mig else 0,
            )
            out.append(ProbeObservation(run, name, obs))
    return out


# --- the fit ----------------------------------------------------------------------------------
def _sse(params: ModelParams, obs: Sequence[Observation]) -> float:
    return sum((predicted_rate(params, o) - o.rate) ** 2 for o in obs)


def informs(name: str, obs: Observation, at: ModelParams) -> bool:
    """Whether moving parameter `name` moves the prediction for `obs`."""
    value = getattr(at, name)
    low, high = BOUNDS[name]
    base = predicted_rate(at, obs)
    for probe in (max(low, value - 0.05), min(high, value + 0.05)):
        if abs(predicted_rate(at.with_values({name: probe}), obs) - base) > 1e-6:
            return True
    return False


def _line_search(
    params: ModelParams, name: str, obs: Sequence[Observation], low: float, high: float
) -> float:
    grid = 60
    points = [low + (high - low) * k / grid for k in range(grid + 1)]
    costs = [_sse(params.with_values({name: p}), obs) for p in points]
    best = min(range(len(points)), key=lambda k: (costs[k], abs(points[k] - getattr(params, name))))
    a = points[max(0, best - 1)]
    b = points[min(grid, best + 1)]
    ratio = (math.sqrt(5) - 1) / 2
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc = _sse(params.with_values({name: c}), obs)
    fd = _sse(params.with_values({name: d}), obs)
    for _ in range(50):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = _sse(params.with_values({name: c}), obs)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = _sse(params.with_values({name: d}), obs)
    value = (a + b) / 2
    if _sse(params.with_values({name: value}), obs) > costs[best]:
        value = points[best]
    return value


@dataclass(frozen=True)
class ParamFit:
    name: str
    default: float
    fitted: float
    observations: int  # probe observations (or alone probes, for a measured gap) behind it
    how: str  # "least squares", "measured", "default (not observed)", "not fitted by calibrate"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Fit:
    params: ModelParams
    per_param: tuple[ParamFit, ...]

    def fitted_values(self) -> dict[str, float]:
        return {p.name: p.fitted for p in self.per_param if p.observations}


def alone_observations(alone: Mapping[str, AloneMeasurement]) -> list[Observation]:
    """Each alone probe whose SM activity and kernel-active time were both read (and measured,
    not estimated), as the observation that tells the engine's learner its gap: the same
    measurement `measured_gap` averages for the fit."""
    return [
        Observation(
            "exclusive",
            Workload(m.sm, m.membw or 0.0),
            (),
            1.0,
            kernel_active=m.kernel_active,
        )
        for m in alone.values()
        if m.sm is not None
        and m.sm_source == "measured"
        and kernel_active_gap(m.sm, m.kernel_active) is not None
    ]


def measured_gap(alone: Mapping[str, AloneMeasurement]) -> list[float]:
    """kernel-active less SM activity of each alone probe where both were read and the probe
    kept the GPU less than fully kernel-active (at 100 % the gap is cut off)."""
    gaps = (kernel_active_gap(m.sm, m.kernel_active) for m in alone.values())
    return [gap for gap in gaps if gap is not None]


def fit(
    probe_obs: Sequence[ProbeObservation],
    alone: Mapping[str, AloneMeasurement],
    prior: ModelParams = DEFAULT_PARAMS,
    sweeps: int = 12,
) -> Fit:
    obs = [p.observation for p in probe_obs]
    params = prior
    gaps = measured_gap(alone)
    fixed: dict[str, int] = {}
    if gaps:
        params = params.with_values({"kernel_active_extra": max(0.0, sum(gaps) / len(gaps))})
        fixed["kernel_active_extra"] = len(gaps)
    free = [n for n in FITTED if n not in fixed and any(informs(n, o, params) for o in obs)]
    for _ in range(sweeps if free else 0):
        before = params
        for name in free:
            low, high = BOUNDS[name]
            params = params.with_values({name: _line_search(params, name, obs, low, high)})
        if all(abs(getattr(params, n) - getattr(before, n)) < 1e-7 for n in free):
            break
    per_param = []
    for name in PARAM_NAMES:
        default = getattr(prior, name)
        if name in fixed:
            per_param.append(
                ParamFit(name, default, getattr(params, name), fixed[name], "measured (NVML)")
            )
        elif name in free:
            count = sum(1 for o in obs if informs(name, o, params))
            per_param.append(ParamFit(name, default, getattr(params, name), count, "least squares"))
        elif name in FITTED:
            per_param.append(ParamFit(name, default, default, 0, "default (not observed)"))
        else:
            per_param.append(ParamFit(name, default, default, 0, "not fitted by calibrate"))
    return Fit(params, tuple(per_param))


# --- the report -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProbeRow:
    run: str
    mechanism: str
    intensity: str
    others: tuple[str, ...]
    measured: float
    by_default: float
    by_fit: float
    informs: str  # the parameter `estimate` says this observation pins down ("" none)


@dataclass
class Report:
    station: str
    gpu_model: str
    simulated: bool
    plan: Plan
    workloads: dict[str, Workload]
    alone: dict[str, AloneMeasurement]
    rows: list[ProbeRow]
    fit: Fit
    observations: list[ProbeObservation]
    truth: ModelParams | None = None
    wall_s: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def rms_default(self) -> float | None:
        return _rms([r.by_default - r.measured for r in self.rows])

    @property
    def rms_fit(self) -> float | None:
        return _rms([r.by_fit - r.measured for r in self.rows])

    def to_dict(self) -> dict[str, Any]:
        return {
            "station": self.station,
            "gpu_model": self.gpu_model,
            "simulated": self.simulated,
            "truth": self.truth.to_dict() if self.truth else None,
            "plan": self.plan.to_dict(),
            "wall_s": round(self.wall_s, 1) if self.wall_s is not None else None,
            "workloads": {
                name: {
                    "sm": round(w.sm, 4),
                    "membw": round(w.membw, 4),
                    "kernel_active": _round(self.alone[name].kernel_active),
                    "steps_per_s": round(self.alone[name].steps_per_s, 3),
                    "sm_source": sm_source(self.alone[name]),
                }
                for name, w in self.workloads.items()
            },
            "probes": [
                {
                    "run": r.run,
                    "mechanism": r.mechanism,
                    "intensity": r.intensity,
                    "others": list(r.others),
                    "measured": round(r.measured, 4),
                    "predicted_default": round(r.by_default, 4),
                    "predicted_fit": round(r.by_fit, 4),
                    "informs": r.informs,
                }
                for r in self.rows
            ],
            "params": [p.to_dict() for p in self.fit.per_param],
            "fitted": self.fit.params.to_dict(),
            "rms_residual_default": _round(self.rms_default),
            "rms_residual_fit": _round(self.rms_fit),
            "observations": [observation_dict(p.observation) for p in self.observations],
            "notes": list(self.plan.notes) + self.notes,
        }


def _round(value: float | None, digits: int = 4) -> float | None:
    return round(value, digits) if value is not None else None


def _rms(errors: Sequence[float]) -> float | None:
    return math.sqrt(sum(e * e for e in errors) / len(errors)) if errors else None


def observation_dict(obs: Observation) -> dict[str, Any]:
    """An Observation as plain JSON (the shape saved and sent to the engine's model)."""
    return {
        "mechanism": obs.mechanism,
        "job": {"sm": obs.job.sm, "membw": obs.job.membw},
        "others": [{"sm": o.sm, "membw": o.membw} for o in obs.others],
        "rate": obs.rate,
        "compute_slices": obs.compute_slices,
        "memory_slices": obs.memory_slices,
    }


def report(
    station: str,
    gpu_model: str,
    plan: Plan,
    measured: Measurements,
    prior: ModelParams = DEFAULT_PARAMS,
    truth: ModelParams | None = None,
) -> Report:
    loads = workloads(measured.alone, prior)
    probe_obs = observations(measured, loads)
    fitted = fit(probe_obs, measured.alone, prior)
    rows = []
    for p in probe_obs:
        said = estimate(prior, p.observation)
        rows.append(
            ProbeRow(
                p.run.key,
                p.run.mechanism,
                p.intensity,
                tuple(i for k, i in enumerate(p.run.intensities) if k != _index(p)),
                p.rate,
                predicted_rate(prior, p.observation),
                predicted_rate(fitted.params, p.observation),
                said[0] if said else "",
            )
        )
    return Report(
        station,
        gpu_model,
        measured.simulated,
        plan,
        loads,
        dict(measured.alone),
        rows,
        fitted,
        probe_obs,
        truth=truth,
    )


def _index(p: ProbeObservation) -> int:
    """Which of its run's probes `p` is (pairs of one intensity: the first, then the second)."""
    return p.run.intensities.index(p.intensity)


# --- truth files ------------------------------------------------------------------------------
def load_params(path: Path, base: ModelParams = DEFAULT_PARAMS) -> ModelParams:
    """A params file (`interference.params_from_json`), the rest from `base`. Raises
    CalibrationError."""
    try:
        return load_params_file(path, "--truth", base)
    except ValueError as exc:
        raise CalibrationError(str(exc)) from None
