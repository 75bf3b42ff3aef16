"""The shipped profiles stay valid."""

from __future__ import annotations

from pathlib import Path

import pytest

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
