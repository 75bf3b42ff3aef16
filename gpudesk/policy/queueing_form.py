"""A second form of the interference model, in which the members of a group slow each other
unequally: the *queueing* form (docs/calibration.md, "Forms tried against all three data sets").

The product's form (`rates.py`) gives every tenant of a GPU one rate. Measured, they differ: on
an H100 a light probe ran at 0.82 of its speed beside a heavy one that kept 0.95; on an H200 a
job beside a tenant that is never idle kept 0.05-0.36 under MPS while that tenant kept 0.78-1.00.
Here each tenant's kernels stretch by what the *others* keep busy:

- **MPS**: a tenant gets the SMs the others leave, weighted by how rarely they are idle:
  stretch = 1 / (1 - `lam` x L x (1 - `phi` x a)), L = sum over the others of
  max(sm, `beta` x membw) x ka ** `gam`, where a is the tenant's own kernel-active share
  (a tenant that is itself always busy holds its share) and ka each other's;
- **time-sliced**: its kernels wait behind the others' kernel time: stretch = 1 + `sig` x (sum
  of the others' ka);
- then rate = (1 - cost x (n - 1)) / ((1 - a) + a x stretch), with a per-co-tenant cost for MPS
  (`mps_cost`) and time-slicing (`naive_cost`): the time between kernels does not stretch.

Kernel-active shares come from the product model's `kernel_active` (SM activity plus
`kernel_active_extra`), so one `ModelParams` still says how wide each job's kernels are.

**What it is for**: a simulated ground truth (`gpudesk simulate --truth-form`) that is *not*
the form placement predicts with, so a run shows how `auto` (the product's form, learning, the
robust rule) holds up in a world whose pairs slow each other unequally, as measured ones do.
Placement does not use it: fitted to the measured data it predicts the H200 jobs under MPS with
RMS error 0.19-0.25 against the product form's 0.31-0.32, but the H100 probes under MPS worse
(0.08-0.14 against 0.07-0.10), and its per-observation inversion, which the learner needs, is
not built. `bench/model_forms.py` fits it and prints both.

`FITS` are that script's least-squares fits (Nelder-Mead over the seven parameters; its
docstring has the data and the assumptions it labels): `h100` on the H100 calibration's probe
pairs and the seed's published DLRM + ResNet152 pair, as issue 39 asks; `all` on those and the
H200 real jobs' 78 rates. No parameter is tuned here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpudesk.policy.model_params import ModelParams, Workload
from gpudesk.policy.once_paid_form import ONCE_PAID, OncePaid
from gpudesk.policy.rates import MIN_RATE, cap_factor, kernel_active


@dataclass(frozen=True)
class QueueingParams:
    """The queueing form's seven parameters (the module docstring has where each acts)."""

    lam: float  # MPS: how much of the SMs the others' load takes from a tenant's kernels
    phi: float  # MPS: how much a tenant that is itself always busy holds its share
    mps_cost: float  # MPS: per co-tenant
    sig: float  # time-sliced: how long a tenant's kernels wait per unit of others' kernel time
    naive_cost: float  # time-sliced: per co-tenant
    beta: float  # the weight of a co-tenant's DRAM bandwidth against its SM share
    gam: float  # how a co-tenant's load weighs by its kernel-active share (never idle: most)


FITS: dict[str, QueueingParams] = {
    # bench/model_forms.py, fitted on the H100 probes and the seed pair (2026-11-30)
    "h100": QueueingParams(0.5271, 0.0, 0.0865, 0.9849, 0.0906, 2.0, 0.2912),
    # ... on those and the H200 real jobs
    "all": QueueingParams(1.0114, 0.5678, 0.038, 1.1808, 0.0, 1.4271, 1.8766),
}
FORMS = ("current", *(f"queueing-{name}" for name in FITS), ONCE_PAID.name)

# A simulated truth's form on shared GPUs: the product's own (None), unequal pairs, or the cost
# of sharing paid once (once_paid_form).
TruthForm = QueueingParams | OncePaid


def queueing_rates(
    form: QueueingParams, params: ModelParams, mechanism: str, tenants: Sequence[Workload]
) -> list[float]:
    """Each tenant's rate when these share a GPU under `mechanism` ("mps" or "naive"): the
    members of a group get different rates. An MPS thread cap slows a tenant as in the product
    form (`cap_factor`)."""
    n = len(tenants)
    if n <= 1:
        return [cap_factor(params, t) if mechanism == "mps" else 1.0 for t in tenants]
    active = [kernel_active(params, t) for t in tenants]
    out = []
    for i, me in enumerate(tenants):
        a = min(1.0, max(active[i], me.sm))
        others = [k for k in range(n) if k != i]
        if mechanism == "mps":
            load = sum(
                max(tenants[k].sm, form.beta * tenants[k].membw) * active[k] ** form.gam
                for k in others
            )
            stretch = 1.0 / max(0.03, 1.0 - form.lam * load * (1.0 - form.phi * a))
            base = 1.0 - form.mps_cost * (n - 1)
        else:
            stretch = 1.0 + form.sig * sum(active[k] for k in others)
            base = 1.0 - form.naive_cost * (n - 1)
        rate = min(1.0, base / ((1.0 - a) + a * stretch))
        if mechanism == "mps":
            rate = min(rate, cap_factor(params, me))
        out.append(max(MIN_RATE, rate))
    return out


def truth_form(name: str) -> TruthForm | None:
    """The form `--truth-form NAME` names: None for the product's own ("current"). Raises
    ValueError naming the choices."""
    if name == "current":
        return None
    if name == ONCE_PAID.name:
        return ONCE_PAID
    fit = FITS.get(name.removeprefix("queueing-")) if name.startswith("queueing-") else None
    if fit is None:
        raise ValueError(f"unknown truth form {name!r}; known: {', '.join(FORMS)}")
    return fit
