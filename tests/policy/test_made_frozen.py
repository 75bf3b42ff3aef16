"""The placement pass makes its `Tenant`s without `__init__` (`policy.made_frozen`, to save a
frozen dataclass's per-field `object.__setattr__` on the hot path; its `Placement`s and
`Alternative`s are msgspec Structs, made by their own `__init__`): what it makes is the object
`__init__` makes, every field set, equal and with the same `repr`, on the bench's inputs (a
placement on every kind of GPU the pass meets there)."""

from __future__ import annotations

import random
from dataclasses import fields
from pathlib import Path
from typing import Any

from conftest import load_module

from gpudesk.policy.collocation import SharingPolicy
from gpudesk.policy.filled_station import FilledStation
from gpudesk.policy.policy import Tenant, made_frozen

ROOT = Path(__file__).resolve().parents[2]
BENCH = load_module("bench_policy_made_frozen", ROOT / "bench" / "policy.py")


def made_by_init(made: Any) -> Any:
    """`made`'s class's `__init__` given `made`'s fields (AttributeError where one is unset)."""
    return type(made)(**{f.name: getattr(made, f.name) for f in fields(made)})


def test_made_frozen_is_what_init_makes() -> None:
    values: dict[str, Any] = {f.name: None for f in fields(Tenant)}
    values.update(job_id=7, mode="mps", memory_mib=1024.0, sm_pct=30.0, login="ada")
    made = made_frozen(Tenant, values)
    assert made == Tenant(**values) and repr(made) == repr(Tenant(**values))
    assert hash(made) == hash(Tenant(**values))


def test_the_pass_makes_what_init_makes() -> None:
    rng = random.Random(55)
    seen: dict[type, int] = {}
    for _ in range(5):
        queue = BENCH.queue(rng, 300)
        view = BENCH.station(rng, 8, queue)
        policy = SharingPolicy("auto")
        decision = policy.place(queue, view)
        assert decision.placements  # (the pass placed something: its tenants are checked below)
        made: list[Any] = []
        # the tenants a pass places (the state after a `take`)
        plan = FilledStation({g.index: g for g in view.gpu_states})
        for placement in decision.placements[:3]:
            job = next(j for j in queue if j.id == placement.job_id)
            choice = policy.choose(job, BENCH.Demand(1024.0, 10.0, "hint"), plan, view)
            if choice is not None:
                plan.take(job, BENCH.Demand(1024.0, 10.0, "hint"), choice, view)
        made += [t for g in plan.gpus.values() for t in g.tenants if t.job_id < 10_000]
        for each in made:
            again = made_by_init(each)
            assert each == again and repr(each) == repr(again)
            assert set(vars(each)) == {f.name for f in fields(each)}
            seen[type(each)] = seen.get(type(each), 0) + 1
    assert Tenant in seen, seen
