"""The shipped profiles stay valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudesk.core.station import StationConfig
from gpudesk.profile import load_profile

PROFILES = sorted((Path(__file__).parents[2] / "profiles").glob("*.toml"))


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_shipped_profiles_load(path: Path) -> None:
    profile = load_profile(path)
    assert profile.jobs


def test_quickstart_is_a_sweep_of_the_real_workload() -> None:
    profile = load_profile(Path(__file__).parents[2] / "profiles" / "quickstart.toml")
    assert len(profile.jobs) >= 4
    assert len({job.name for job in profile.jobs}) == len(profile.jobs)
    for job in profile.jobs:
        assert job.command[:3] == ("python", "-m", "gpudesk.workloads.digits")
        assert job.gpus == 0  # runs on a machine with no GPU


def test_the_quickstart_asks_nothing_a_fresh_engine_does_not_run() -> None:
    """The README's first command runs the quickstart on a fresh machine: every setting its
    [station] names is the engine's default, so the run has no `station: not applied` line to
    print (a new user's first output should not read as a refusal)."""
    profile = load_profile(Path(__file__).parents[2] / "profiles" / "quickstart.toml")
    fresh = StationConfig()
    assert profile.station_keys  # it still shows what a [station] table is
    for key in profile.station_keys:
        assert getattr(profile.station, key) == getattr(fresh, key), key
