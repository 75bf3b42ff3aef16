"""Pre-pass jobs: the command a loader's selection needs, the profile's pre-passes, and the
engine's measurement of a job written into the cache entry it computed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from gpudesk.api.models import JobView, UsageSummary
from gpudesk.api.prepass import prepass_job, profile_prepasses, record_prepass
from gpudesk.core.datasets import DatasetSpec
from gpudesk.profile import parse_profile
from gpudesk.selection.cache import SelectionCache
from gpudesk.selection.prepass import prepare
from gpudesk.selection.preset_names import Preset

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


USAGE_FIELDS = UsageSummary.__struct_fields__


def job_wire(**given: Any) -> dict[str, Any]:
    """A job as the engine sends it (`jobs`), with `given` on top; `usage` may name only some
    figures (the rest are null)."""
    usage = given.pop("usage", None)
    if usage is not None:
        usage = {
            **dict.fromkeys(USAGE_FIELDS),
            "estimate": False,
            "grid_g_per_kwh": 400.0,
            "per_attempt": [],
            **usage,
        }
    spec = {
        "name": given.get("name", "job"),
        "command": ["true"],
        "shell": False,
        "workdir": "/",
        "gpus": 0,
        "memory_gb": None,
        "sm_pct": None,
        "dataset": None,
        "selection": None,
        "priority": 0,
        "max_attempts": 1,
        "group": None,
    }
    wire = {
        "id": 1,
        "name": "job",
        "state": "queued",
        "group": None,
        "submitted_at": 0.0,
        "started_at": None,
        "ended_at": None,
        "attempts": 0,
        "max_attempts": 1,
        "exit_code": None,
        "reason": None,
        "cancel_requested": False,
        "held": False,
        "attempts_before_requeue": 0,
        "user": "ada",
        "uid": 1000,
        "spec": spec,
        "slot": None,
        "gpus": [],
        "mode": None,
        "mig_slice": None,
        "pgid": None,
        "log": None,
        "loader": None,
        **given,
    }
    if usage is not None:
        wire["usage"] = usage
    return wire


def job_view(**given: Any) -> JobView:
    return msgspec.convert(job_wire(**given), JobView)


def test_a_fresh_prepass_job_records_the_engines_measurement(tmp_path: Path) -> None:
    cache = SelectionCache(tmp_path / "sel")
    fresh = prepare(Preset("random", 25), np.zeros(40, dtype=np.int64), "fp", cache)
    log = tmp_path / "output.log"
    output = {"key": fresh.key, "reused": False, "preset": "random-25"}
    log.write_text("starting\n" + json.dumps(output) + "\n")
    job = job_wire(
        id=7,
        state="succeeded",
        log=str(log),
        started_at=100.0,
        ended_at=104.5,
        usage={"cpu_s": 3.2, "total_j": 120.0},
    )
    assert record_prepass(cache, msgspec.convert(job, JobView)) == output
    cost = cache.load(fresh.key).cost  # type: ignore[union-attr]
    assert (cost.job, cost.job_wall_s, cost.job_cpu_s, cost.energy_j) == (7, 4.5, 3.2, 120.0)
    # a later cache hit does not overwrite what the computation cost
    log.write_text(json.dumps({**output, "reused": True}) + "\n")
    later = msgspec.convert({**job, "id": 9, "ended_at": 100.4}, JobView)
    assert record_prepass(cache, later) is not None
    assert cache.load(fresh.key).cost.job == 7  # type: ignore[union-attr]
    assert record_prepass(cache, msgspec.convert({**job, "state": "failed"}, JobView)) is None


def test_the_variant_name_of_a_long_dataset_name_fits_a_loader_name() -> None:
    spec = DatasetSpec("a" * 40, "m:f")
    assert len(spec.variant("stratified-25").name) <= 40
