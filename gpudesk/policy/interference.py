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

The model is three modules, all of whose names this one offers: `model_params` (the parameters,
their defaults and provenance), `rates` (the rules above) and `learner` (observations and the
`Learner` that refits the parameters from them). Here: `InterferenceModel`, what placement asks.
"""

from __future__ import annotations

from gpudesk.policy.learner import (
    KEPT_OBSERVATIONS,
    KERNEL_ACTIVE_CUTOFF,
    MAX_SWEEPS,
    PRIOR_WEIGHT,
    REFIT_TOLERANCE,
    FrozenTotal,
    KeptObservation,
    LearnedParam,
    Learner,
    Observation,
    estimate,
    kernel_active_gap,
    predicted_rate,
)
from gpudesk.policy.model_params import (
    COSTS,
    DEFAULT_PARAMS,
    HEAVY_SM,
    PAIR_SLOWDOWNS,
    PARAM_NAMES,
    PESSIMISTIC_FACTOR,
    PROVENANCE,
    PUBLISHED_MPS_TENANT_COST,
    ModelParams,
    Provenance,
    Workload,
    load_params_file,
    params_from_json,
    pessimistic,
)
from gpudesk.policy.rates import (
    MIN_RATE,
    Joining,
    Prediction,
    cap_factor,
    kernel_active,
    mig_rate,
    mps_rates,
    mps_shared_rate,
    naive_rates,
    predict_join,
    shared_mechanism,
    shared_rates,
    workload,
)

__all__ = [
    "COSTS",
    "DEFAULT_PARAMS",
    "HEAVY_SM",
    "KEPT_OBSERVATIONS",
    "KERNEL_ACTIVE_CUTOFF",
    "MAX_SWEEPS",
    "MIN_RATE",
    "PAIR_SLOWDOWNS",
    "PARAM_NAMES",
    "PESSIMISTIC_FACTOR",
    "PRIOR_MODEL",
    "PRIOR_WEIGHT",
    "PROVENANCE",
    "PUBLISHED_MPS_TENANT_COST",
    "REFIT_TOLERANCE",
    "FrozenTotal",
    "InterferenceModel",
    "Joining",
    "KeptObservation",
    "LearnedParam",
    "Learner",
    "ModelParams",
    "Observation",
    "Prediction",
    "Provenance",
    "Workload",
    "cap_factor",
    "estimate",
    "kernel_active",
    "kernel_active_gap",
    "load_params_file",
    "mig_rate",
    "mps_rates",
    "mps_shared_rate",
    "naive_rates",
    "params_from_json",
    "pessimistic",
    "predict_join",
    "predicted_rate",
    "shared_mechanism",
    "shared_rates",
    "workload",
]


class InterferenceModel:
    """The parameters placement uses for each GPU model: the learner's, else the defaults.
    Always the learner's current fit (kept by the learner when observations come, so asking
    costs a lookup): nothing to renew when it learns."""

    def __init__(self, learner: Learner | None = None) -> None:
        self.learner = learner

    def params(self, gpu_model: str = "") -> ModelParams:
        return self.learner.params(gpu_model) if self.learner else DEFAULT_PARAMS

    def pessimistic(self, mechanism: str, gpu_model: str = "") -> ModelParams:
        """The parameters with `mechanism`'s costs at the top of their plausible range, which
        narrows as the learner measures them (`Learner.widths`)."""
        widths = self.learner.widths(gpu_model) if self.learner else None
        return pessimistic(self.params(gpu_model), mechanism, widths)


PRIOR_MODEL = InterferenceModel()
