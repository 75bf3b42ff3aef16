"""The interference model's parameters (`ModelParams`) and the job they describe (`Workload`): the
defaults, each traced to a published fact or labelled an assumption (`PROVENANCE`), and a
params file (`gpudesk calibrate`'s, a simulation's truth) read.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import inf
from pathlib import Path

import msgspec

from gpudesk.core.record_dict import record_dict
from gpudesk.named_file import read_named_json


class Workload(msgspec.Struct, frozen=True):
    """What a job asks of a GPU while it runs alone on a whole one (fractions, 0..1)."""

    sm: float  # SM activity
    membw: float  # DRAM bandwidth used, as a share of the GPU's
    thread_cap: float | None = None  # an MPS client's active-thread share (None: all SMs)


class ModelParams(msgspec.Struct, frozen=True):
    """The model's constants for one GPU model (see the module docstring for where each acts)."""

    mps_tenant_cost: float
    contention: float
    naive_switch_cost: float
    kernel_active_extra: float
    membw_per_sm: float  # a job's bandwidth share per unit of SM share, when it gives none

    def with_values(self, values: Mapping[str, float]) -> ModelParams:
        # PARAM_NAMES, not msgspec.structs.fields(self), which reads the class's annotations
        # again on every call (43 us against 0.7 here); placement asks for pessimistic
        # parameters on every pass
        return msgspec.structs.replace(
            self, **{k: float(v) for k, v in values.items() if k in PARAM_NAMES}
        )

    def to_dict(self) -> dict[str, float]:
        return record_dict(self)


# The most a parameters file may hold (a truth or calibration file: the stored H100 calibration
# is 17 KB; assumption: 1,000 times that)
MAX_PARAMS_BYTES = 16 * 1024 * 1024

PARAM_NAMES = tuple(f.name for f in msgspec.structs.fields(ModelParams))

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
        # (not NaN or Infinity, which Python's JSON reads: a truth of NaN replayed as nonsense)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < inf:
            raise ValueError(f"{where}: {key} must be a non-negative number, found {value!r}")
        values[key] = float(value)
    return (base or DEFAULT_PARAMS).with_values(values)


def load_params_file(path: str | Path, where: str, base: ModelParams | None = None) -> ModelParams:
    """`params_from_json` of a file. Raises ValueError: unreadable, not JSON, bad keys."""
    try:
        data = read_named_json(path, MAX_PARAMS_BYTES, "a parameters file")
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return params_from_json(data, f"{where} {path}", base)


class Provenance(msgspec.Struct, frozen=True):
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


# The range a parameter is judged over before the station has measured it: its value up to
# 1.5 x, the top of the sensitivity sweep's range (bench/simulator_sensitivity.py FACTORS 0.5 and
# 1.5 x each value), which issue 39 set. Each parameter's range narrows as observations inform
# it (`Learner.widths`).
PESSIMISTIC_FACTOR = 1.5

# What makes each sharing mechanism slower: the parameters a placement under it is judged with
# at the top of their range. (membw_per_sm only fills in a job's missing bandwidth figure.)
COSTS = {
    "mps": ("mps_tenant_cost", "contention"),
    "naive": ("naive_switch_cost", "kernel_active_extra"),
}


def pessimistic(
    params: ModelParams, mechanism: str, widths: Mapping[str, float] | None = None
) -> ModelParams:
    """`params` with `mechanism`'s costs at the top of their range: each times its width (the
    learner's, else `PESSIMISTIC_FACTOR`). A placement the robust rule takes must still gain
    there."""
    return params.with_values(
        {
            name: getattr(params, name) * (widths or {}).get(name, PESSIMISTIC_FACTOR)
            for name in COSTS[mechanism]
        }
    )
