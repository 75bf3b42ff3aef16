"""Which MIG slice a job takes (`best_slice`) among the options (`SliceOption`): the one home of
the rule, for placement and for the MIG payoff's prediction of what a layout would start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from gpudesk.core.mig_profiles import COMPUTE_SLICES

SliceT = TypeVar("SliceT")


@dataclass(frozen=True)
class SliceOption(Generic[SliceT]):
    """A MIG slice a job could run on (an existing instance, or one that may be carved)."""

    slice: SliceT
    rate: float  # the job's predicted rate on it
    compute_slices: int
    memory_mib: float
    new: bool = False  # to be carved for it: existing instances come first


def best_slice(options: Sequence[SliceOption[SliceT]], sm: float) -> SliceOption[SliceT] | None:
    """The slice placement gives a job whose SM activity is `sm` (0..1): the smallest whose
    share of the SMs covers it (the MIG planner's rule, so placement takes the slices the
    planner carved for each job), existing slices before new ones; where none covers it, the
    fastest by the model. The one home of the rule: policy.mig_payoff predicts with it what
    a layout would start."""
    if not options:
        return None
    covering = [o for o in options if o.compute_slices / COMPUTE_SLICES >= sm]
    if covering:
        return min(covering, key=lambda o: (o.new, o.compute_slices, o.memory_mib))
    return max(options, key=lambda o: (o.rate, not o.new, -o.memory_mib))
