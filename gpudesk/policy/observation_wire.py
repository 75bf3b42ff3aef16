"""An interference observation as the wire and the store write it: the fields of
`interference.Observation`, its workloads as objects. `gpudesk model observe` sends this (and
`Client.model_observe`); the engine keeps each observation its learner keeps in the same JSON, so
one reader checks both. Pure: text and dicts in, an `Observation` (or a ValueError naming what is
wrong) out."""

from __future__ import annotations

import json

from gpudesk.core.record_dict import record_dict
from gpudesk.policy.interference import Observation, Workload

MAX_OBSERVATIONS = 10_000  # per model_observe request


def _fraction(raw: object, what: str, high: float = 1.0) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0.0 <= raw <= high:
        raise ValueError(f"{what} must be a number from 0 to {high:g}")
    return float(raw)


def workload_from_dict(raw: object, what: str) -> Workload:
    if not isinstance(raw, dict):
        raise ValueError(f"{what} must be an object with sm, membw (and thread_cap)")
    unknown = set(raw) - {"sm", "membw", "thread_cap"}
    if unknown:
        raise ValueError(f"{what}: unknown field(s) {', '.join(sorted(unknown))}")
    cap = raw.get("thread_cap")
    return Workload(
        _fraction(raw.get("sm"), f"{what}.sm"),
        _fraction(raw.get("membw"), f"{what}.membw"),
        None if cap is None else _fraction(cap, f"{what}.thread_cap"),
    )


def observation_to_json(obs: Observation) -> str:
    """An observation as the store keeps it: the wire format (what `Client.model_observe`
    sends), so `observation_from_json` is `observation_from_dict` and one reader serves both."""
    return json.dumps(record_dict(obs), separators=(",", ":"))


def observation_from_json(text: str) -> Observation:
    """`observation_to_json`'s inverse; ValueError naming what is wrong."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"observation is not JSON: {exc}") from None
    except RecursionError:
        raise ValueError("observation is not JSON: it is nested too deeply to read") from None
    return observation_from_dict(raw)


def observation_from_dict(raw: object, what: str = "observation") -> Observation:
    """An observation as a client sends it (the fields of `interference.Observation`, its
    workloads as objects); ValueError naming what is wrong."""
    if not isinstance(raw, dict):
        raise ValueError(f"{what} must be an object")
    unknown = set(raw) - set(Observation.__struct_fields__)
    if unknown:
        raise ValueError(f"{what}: unknown field(s) {', '.join(sorted(unknown))}")
    mechanism = raw.get("mechanism")
    if mechanism not in ("exclusive", "mps", "naive", "mig"):
        raise ValueError(f"{what}.mechanism must be exclusive, mps, naive or mig")
    others = raw.get("others", [])
    if not isinstance(others, list):
        raise ValueError(f"{what}.others must be a list of workloads")
    slices = []
    for name, high in (("compute_slices", 7), ("memory_slices", 8)):
        value = raw.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
            raise ValueError(f"{what}.{name} must be a whole number from 0 to {high}")
        slices.append(value)
    rate = _fraction(raw.get("rate"), f"{what}.rate", high=10.0)
    if rate <= 0:
        raise ValueError(f"{what}.rate must be above 0")
    active = raw.get("kernel_active")
    if active is not None and (mechanism != "exclusive" or others):
        raise ValueError(f"{what}.kernel_active is read alone: mechanism exclusive, no others")
    return Observation(
        str(mechanism),
        workload_from_dict(raw.get("job"), f"{what}.job"),
        tuple(workload_from_dict(o, f"{what}.others[{i}]") for i, o in enumerate(others)),
        rate,
        slices[0],
        slices[1],
        None if active is None else _fraction(active, f"{what}.kernel_active"),
    )
