"""The interference model on the wire: `model_show`, `model_observe` and `model_reset`."""

from __future__ import annotations

from typing import Literal

from gpudesk.core.wire.base import WireModel

ParamKind = Literal["published", "derived", "assumption", "learned", "calibrated"]


class ModelParamView(WireModel, frozen=True):
    """One parameter of the interference model for one GPU model: the value placement uses,
    the prior it started from, where it comes from (`kind`: the prior's provenance, or
    "learned" / "calibrated" once observed on this station), how many observations moved it
    (`calibrated` of them from calibration probes) and when the last came (epoch seconds)."""

    name: str
    value: float
    prior: float
    kind: ParamKind
    source: str
    observations: int
    calibrated: int
    updated_at: float | None
    # The top of its plausible range, where `auto` judges sharing (a mechanism's cost: its
    # value times a width that narrows from 1.5 as observations inform it); absent for one
    # that is no mechanism's cost.
    high: float | None = None
    # What its observations alone say, before its prior is weighed in (`value` is this with
    # the prior counted as a few observations more); absent where no observation informs it.
    observed: float | None = None


class GpuModelView(WireModel, frozen=True):
    """The parameters for one GPU model (its name as NVML gives it; "" for the defaults a GPU
    of no known model gets) and the station's GPUs of that model."""

    gpu_model: str
    gpus: list[int]
    params: list[ModelParamView]


class ModelShowResult(WireModel, frozen=True):
    """`model_show`: the interference model as this station's placement uses it."""

    backend: str
    simulated: bool
    observe_min_s: float  # the shortest interval of steady co-tenants that teaches anything
    commands_with_rate_alone: int  # commands whose progress rate alone is remembered
    models: list[GpuModelView]


class ModelObserveResult(WireModel, frozen=True):
    """`model_observe`: how many observations moved a parameter (`moved`: by name) and the
    GPU model's parameters after them."""

    gpu_model: str
    accepted: int
    ignored: int
    moved: dict[str, int]
    params: list[ModelParamView]


class ModelResetResult(WireModel, frozen=True):
    gpu_model: str | None  # None: every GPU model
    dropped: int  # (GPU model, parameter) pairs that had moved from their prior
