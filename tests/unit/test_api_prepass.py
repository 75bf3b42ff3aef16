"""Pre-pass jobs: the command a loader's selection needs, the profile's pre-passes, and the
engine's measurement of a job written into the cache entry it computed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gpudesk.api.prepass import prepass_job, profile_prepasses, record_prepass
from gpudesk.engine.loaders import DatasetSpec
from gpudesk.profile import parse_profile
from gpudesk.selection.cache import SelectionCache
from gpudesk.selection.prepass import prepare
from gpudesk.selection.presets import Preset

PROFILE = b"""
[datasets.d]
factory = "m:f"
args = { size = 10 }
seed = 4
selection = "el2n-25"
selection_target = "m:t"
[[jobs]]
name = "a"
command = ["true"]
dataset = "d"
[[jobs]]
name = "b"
command = ["true"]
dataset = "d"
[[jobs]]
name = "c"
command = ["true"]
dataset = "d"
selection = "less-10"
[[jobs]]
name = "e"
command = ["true"]
dataset = "d"
selection = "rs2-25"
"""


def test_a_profile_needs_one_prepass_per_selection_with_one() -> None:
    wanted = profile_prepasses(parse_profile(PROFILE, "p.toml"))
    assert [(p.dataset.name, p.preset) for p in wanted] == [
        ("d", "el2n-25"),
        ("d.less-10", "less-10"),
    ]
    assert wanted[1].job("/w") == prepass_job(wanted[1].dataset, "less-10", "/w")
    command = list(wanted[1].job("/w").command)
    assert command[3:] == [
        "select",
        "run",
        "m:f",
        "--preset",
        "less-10",
        "--seed",
        "4",
        "--json",
        "--no-record-reuse",
        "--arg",
        "size=10",
        "--target",
        "m:t",
    ]


def test_a_fresh_prepass_job_records_the_engines_measurement(tmp_path: Path) -> None:
    cache = SelectionCache(tmp_path / "sel")
    fresh = prepare(Preset("random", 25), np.zeros(40, dtype=np.int64), "fp", cache)
    log = tmp_path / "output.log"
    output = {"key": fresh.key, "reused": False, "preset": "random-25"}
    log.write_text("starting\n" + json.dumps(output) + "\n")
    job = {
        "id": 7,
        "state": "succeeded",
        "log": str(log),
        "started_at": 100.0,
        "ended_at": 104.5,
        "usage": {"cpu_s": 3.2, "total_j": 120.0},
    }
    assert record_prepass(cache, job) == output
    cost = cache.load(fresh.key).cost  # type: ignore[union-attr]
    assert (cost.job, cost.job_wall_s, cost.job_cpu_s, cost.energy_j) == (7, 4.5, 3.2, 120.0)
    # a later cache hit does not overwrite what the computation cost
    log.write_text(json.dumps({**output, "reused": True}) + "\n")
    assert record_prepass(cache, {**job, "id": 9, "ended_at": 100.4}) is not None
    assert cache.load(fresh.key).cost.job == 7  # type: ignore[union-attr]
    assert record_prepass(cache, {**job, "state": "failed"}) is None


def test_the_variant_name_of_a_long_dataset_name_fits_a_loader_name() -> None:
    spec = DatasetSpec("a" * 40, "m:f")
    assert len(spec.variant("stratified-25").name) <= 40
