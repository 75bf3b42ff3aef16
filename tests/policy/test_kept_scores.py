"""Hosts' scores kept from one placement pass to the next (`filled_station._SCORES`) are only
ever those the pass would work out itself.

A shared GPU's score for a workload is kept by all that `FilledStation.score` reads (the model's
parameters, how a job would share the GPU, whether its MPS server is another user's, its tenants'
figures in their order), so it holds in any pass. Passes in a row here meet the same tenants
under other model parameters, in another order and under another user's MPS server, and each
must decide exactly what it decides with nothing kept.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import msgspec
from conftest import load_module

from gpudesk.core.records import JobRecord
from gpudesk.policy import filled_station
from gpudesk.policy.collocation import SharingPolicy
from gpudesk.policy.interference import DEFAULT_PARAMS, InterferenceModel, pessimistic
from gpudesk.policy.model_params import ModelParams
from gpudesk.policy.policy import StationView

ROOT = Path(__file__).resolve().parents[2]


BENCH = load_module("bench_policy_kept_scores", ROOT / "bench" / "policy.py")
VARIED = load_module(
    "place_equivalence_kept", Path(__file__).with_name("test_place_equivalence.py")
)


class _Fixed(InterferenceModel):
    """A model with these parameters for every GPU model (a learner's fit, in effect)."""

    def __init__(self, params: ModelParams, width: float) -> None:
        super().__init__()
        self.fixed, self.width = params, width

    def params(self, gpu_model: str = "") -> ModelParams:
        return self.fixed

    def pessimistic(self, mechanism: str, gpu_model: str = "") -> ModelParams:
        return pessimistic(self.fixed, mechanism, dict.fromkeys(self.fixed.to_dict(), self.width))


# Parameters under which sharing gains more, and less, than under the defaults; and the
# defaults with a narrower range (what measurements do to the robust rule's costs)
MODELS = (
    None,
    _Fixed(msgspec.structs.replace(DEFAULT_PARAMS, mps_tenant_cost=0.01, contention=0.05), 1.5),
    _Fixed(
        msgspec.structs.replace(DEFAULT_PARAMS, mps_tenant_cost=0.2, naive_switch_cost=0.3), 1.5
    ),
    _Fixed(DEFAULT_PARAMS, 1.05),
)


def _inputs() -> list[tuple[list[JobRecord], StationView]]:
    rng = random.Random(39)
    found = []
    for index in range(4):
        queue = BENCH.queue(rng, 150)
        view = BENCH.station(rng, 8, queue)
        if index % 2:
            queue, view = VARIED.varied(rng, queue, view)
        gpus = view.gpu_states
        reordered = tuple(replace(g, tenants=g.tenants[::-1]) for g in gpus)
        foreign = tuple(
            replace(g, tenants=tuple(replace(t, uid=4343) for t in g.tenants)) for g in gpus
        )
        for states in (gpus, reordered, foreign):
            for model in MODELS:
                varied = msgspec.structs.replace(view, gpu_states=states)
                if model is not None:
                    varied = msgspec.structs.replace(varied, interference=model)
                found.append((queue, varied))
    return found


def test_a_pass_decides_with_scores_kept_what_it_decides_with_none() -> None:
    policies = [SharingPolicy(mode) for mode in ("auto", "mps", "naive")]
    cases = _inputs()
    kept = [policy.place(queue, view) for queue, view in cases for policy in policies]
    fresh = []
    for queue, view in cases:
        for policy in policies:
            filled_station._SCORES.clear()
            fresh.append(policy.place(queue, view))
    assert len(fresh) == len(kept)
    for index, (with_kept, with_none) in enumerate(zip(kept, fresh, strict=True)):
        assert with_kept == with_none, f"case {index // 3}, {policies[index % 3].name}"
