"""A third form of the interference model, for the simulated truth only: the product's form
with the cost of sharing paid **once** per shared GPU rather than per co-tenant (`gpudesk
simulate --truth-form once-paid`).

The product's form (`rates.py`) charges each MPS tenant `mps_tenant_cost` x (n - 1), and each
time-sliced one `naive_switch_cost` x (n - 1): fitted on pairs, where the two shapes agree. On an
H200 (2026-12-04, `bench/results/h200-2026-12-04c/scaling`, docs/hardware-validation.md), groups
of 2-8 copies of one job said otherwise: eight copies of a light job under MPS each kept 0.92-0.98
of their speed alone under MPS, where 0.04 x 7 per co-tenant says 0.72, and copies of a job past
the GPU's capacity shared it out with a loss that did not grow with their number. Fitted on the
H100 calibration's and the seed's pairs, the once-paid shape predicts those groups with RMS 0.121
under MPS and 0.132 time-sliced, against 0.392 and 0.379 for the product's (bench/model_forms.py,
second table).

**What it is for**: a simulated ground truth in which sharing among many tenants costs what the
H200 measured, so that a run shows how `auto`, which predicts with the product's form (and so
expects many tenants to cost more than they do), fares there. Placement does not use it yet:
tried, it spread t1's light jobs so that its first two-GPU job waited 41 min rather than 15 for
two GPUs to drain, and t1 took 5h13m rather than 4h38m (docs/hardware-validation.md, the third
H200 session of 2026-12-04).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from gpudesk.policy.model_params import ModelParams, Workload
from gpudesk.policy.rates import shared_rates


@dataclass(frozen=True)
class OncePaid:
    """The once-paid form: it has no parameters of its own (the truth's `ModelParams` are
    read as they are, each cost paid once)."""

    name: str = "once-paid"


ONCE_PAID = OncePaid()


def once_paid_rates(
    params: ModelParams, mechanism: str, tenants: Sequence[Workload]
) -> list[float]:
    """Each tenant's rate when these share a GPU under `mechanism`, as `shared_rates` gives
    them but for the cost of sharing, paid once: the product's cost per co-tenant spread over
    the n - 1 co-tenants is exactly that."""
    n = len(tenants)
    if n <= 2:
        return list(shared_rates(params, mechanism, tenants))
    return list(shared_rates(_spread(params, n), mechanism, tenants))


@functools.lru_cache(maxsize=256)
def _spread(params: ModelParams, tenants: int) -> ModelParams:
    return msgspec.structs.replace(
        params,
        mps_tenant_cost=params.mps_tenant_cost / (tenants - 1),
        naive_switch_cost=params.naive_switch_cost / (tenants - 1),
    )
