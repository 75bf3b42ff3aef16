"""`gpudesk run` checks its jobs' working directories before it submits anything, on a shared
station too: in the member's own process, as she sees them, never as root. Root's engine still
does not look at a member's folder (tests/shared/test_shared_edit.py): her job starts as her,
and learns there what she may enter.

Needs root (real users), a real system engine and a Python the users may run; skipped, saying
why, where it cannot run."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from user_python import user_python

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))
from station_fixture import Station, make_station


@pytest.fixture
def setup() -> Iterator[tuple[Station, str, Path]]:
    folder = Path(tempfile.mkdtemp(prefix="gd-wd-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        python = user_python(folder)
        for station in make_station(python=python):
            yield station, python, folder
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)


def run_as(
    station: Station, python: str, role: str, profile: Path
) -> subprocess.CompletedProcess[str]:
    env = ["env", f"GPUDESK_SOCKET={station.socket}", "COLUMNS=300"]
    return subprocess.run(
        [
            "runuser",
            "-u",
            station.users[role].name,
            "--",
            *env,
            python,
            "-P",
            "-m",
            "gpudesk",
            "run",
            str(profile),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )


def test_a_members_workdirs_are_checked_as_she_sees_them_before_anything_is_submitted(
    setup: tuple[Station, str, Path],
) -> None:
    station, python, folder = setup
    ada = station.users["ada"]
    own = folder / "ada"
    own.mkdir()
    (own / "notes").write_text("a file, not a folder\n")
    # root's own folder, closed to her: root would see a file in it, she sees nothing
    closed = folder / "root-only"
    closed.mkdir(mode=0o700)
    (closed / "secret").write_text("root's\n")
    for path in (own, own / "notes"):
        subprocess.run(["chown", f"{ada.uid}:{ada.gid}", str(path)], check=True)

    profile = own / "p.toml"
    profile.write_text(
        f'[[jobs]]\nname = "filed"\ncommand = ["true"]\nworkdir = "{own / "notes"}"\n'
    )
    subprocess.run(["chown", f"{ada.uid}:{ada.gid}", str(profile)], check=True)
    refused = run_as(station, python, "ada", profile)
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    assert (
        f"p.toml:4: jobs[0].workdir: the working directory {own / 'notes'} is not a "
        in " ".join(refused.stderr.split())
    ), refused.stderr
    assert "a regular file" in refused.stderr and "Traceback" not in refused.stderr
    assert station.ok(None, "jobs")["jobs"] == []  # nothing submitted

    # what she cannot see into is not judged by her check (root's view is not hers either):
    # submitted, and the job, started as her, fails entering it
    profile.write_text(
        f'[[jobs]]\nname = "nosy"\ncommand = ["true"]\nworkdir = "{closed / "secret"}"\n'
    )
    tried = run_as(station, python, "ada", profile)
    assert tried.returncode == 1, (tried.stdout, tried.stderr)
    (job,) = station.ok(None, "jobs")["jobs"]
    assert job["state"] == "failed" and str(closed / "secret") in job["reason"], job
    assert "regular file" not in job["reason"]  # root never said what lies behind her reach
