"""The bundled example profiles and traces (gpudesk.examples): outside the checkout the README's
paths find them; a file the user has always wins; anything else stays "no such file"."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudesk.examples import bundled, folder, names
from gpudesk.policy.simulator import load_trace
from gpudesk.profile import ProfileError, load_profile

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_carries_every_profile_and_trace_of_the_repository() -> None:
    assert names("profiles") == sorted(p.name for p in (ROOT / "profiles").glob("*.toml"))
    assert names("traces") == sorted(p.name for p in (ROOT / "traces").glob("*.json"))


@pytest.mark.parametrize(
    "given", ["profiles/quickstart.toml", "quickstart.toml", "quickstart", "./profiles/quickstart"]
)
def test_readme_paths_find_the_bundled_profile_elsewhere(
    given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert bundled(given, "profiles") == folder("profiles") / "quickstart.toml"
    profile = load_profile(given)
    assert profile.bundled and profile.name == "quickstart"
    # its jobs run here, not inside the installed package
    assert {job.workdir for job in profile.jobs} == {str(tmp_path)}


def test_a_file_of_the_users_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "quickstart.toml").write_text(
        'name = "mine"\n[[jobs]]\nname = "a"\ncommand = ["true"]\n'
    )
    assert bundled("profiles/quickstart.toml", "profiles") is None
    profile = load_profile("profiles/quickstart.toml")
    assert profile.name == "mine" and not profile.bundled


@pytest.mark.parametrize("given", ["elsewhere/quickstart.toml", "/nowhere/quickstart.toml", "nope"])
def test_other_missing_paths_stay_missing(
    given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert bundled(given, "profiles") is None
    with pytest.raises(ProfileError, match="no such file"):
        load_profile(given)


def test_the_bundled_trace_by_its_readme_path_and_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for given in ("traces/carma-philly-t1.json", "carma-philly-t1"):
        assert len(load_trace(given).jobs) == 60


def test_examples_copies_the_bundled_files_out_and_keeps_the_users(tmp_path: Path) -> None:
    import subprocess
    import sys

    into = tmp_path / "mine"
    (into / "profiles").mkdir(parents=True)
    (into / "profiles" / "quickstart.toml").write_text("# my own\n")
    result = subprocess.run(
        [sys.executable, "-m", "gpudesk", "examples", str(into)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert (into / "profiles" / "quickstart.toml").read_text() == "# my own\n"  # kept
    assert (into / "traces" / "carma-philly-t1.json").is_file()
    assert "kept 1 already there" in result.stdout
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    refused = subprocess.run(
        [sys.executable, "-m", "gpudesk", "examples", str(not_a_folder)],
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "not a folder" in refused.stderr
