"""`SharingPolicy.place` decides, to the bit, what the tree decided before its hot path was cut
(issue 39: faster, not different).

`test_place_equivalence` checks `place()` against a pass without shortcuts, but that pass shares
`choose()` and everything below it, so a cache inside them would not show there. This one
compares every decision of the five sharing modes, on `bench/policy.py`'s seeded inputs and on
those inputs varied as `test_place_equivalence.varied` varies them (CPU jobs, unknown hints,
measured demands, another user's MPS server, MIG, a lost GPU, overtaken jobs), with digests
recorded from the tree before: each decision's full `repr` (every placement's slot, mode,
reason, env, limits and alternatives with unrounded rates and gains, every rejection, every
overtaken count). Every job is owned by one fixed identity, so the digests do not depend on who
runs the test.

A change meant to alter decisions regenerates them, and says so in its commit:

    python tests/policy/test_place_golden.py --write
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from collections.abc import Iterator
from pathlib import Path

import msgspec
from conftest import load_module

from gpudesk.core.identity import Identity
from gpudesk.core.records import JobRecord
from gpudesk.policy.collocation import SharingPolicy
from gpudesk.policy.policy import StationView

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "fixtures" / "placement" / "golden_decisions.json"
MODES = ("auto", "mps", "naive", "exclusive", "mig")
# (queued jobs, rounds): many small passes, a few as long as the bench's
CASES = ((200, 30), (1000, 4), (10000, 1))
OWNER = Identity.of(1000, 1000, [1000])


BENCH = load_module("bench_policy_golden", ROOT / "bench" / "policy.py")
VARIED = load_module(
    "place_equivalence_golden", Path(__file__).with_name("test_place_equivalence.py")
)


def inputs() -> Iterator[tuple[str, list[JobRecord], StationView]]:
    """Every (name, queue, station) the digests are of, seeded."""
    for jobs, rounds in CASES:
        rng = random.Random(39_000 + jobs)
        for index in range(rounds):
            queue = [msgspec.structs.replace(job, owner=OWNER) for job in BENCH.queue(rng, jobs)]
            view = BENCH.station(rng, 8, queue)
            if index % 2:
                queue, view = VARIED.varied(rng, queue, view)
            yield f"{jobs}/{index}", queue, view


def digests() -> dict[str, str]:
    """Each input's and mode's decision, as a digest of its `repr`."""
    policies = [SharingPolicy(mode) for mode in MODES]
    found = {}
    for name, queue, view in inputs():
        for policy in policies:
            text = repr(policy.place(queue, view))
            found[f"{name}/{policy.name}"] = hashlib.sha256(text.encode()).hexdigest()[:20]
    return found


def test_place_decides_what_the_tree_before_decided() -> None:
    recorded = json.loads(GOLDEN.read_text())
    found = digests()
    assert found.keys() == recorded.keys()
    changed = [key for key in recorded if found[key] != recorded[key]]
    assert not changed, f"decisions changed (jobs/round/mode): {', '.join(changed)}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"record the digests in {GOLDEN}")
    if parser.parse_args().write:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(digests(), indent=1) + "\n")
        print(f"wrote {GOLDEN}")
