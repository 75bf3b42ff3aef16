"""A home on a read-only file system is one paragraph saying so, naming the state folder, and a
non-zero exit.

Making the home raised `OSError: [Errno 30] Read-only file system` as a traceback (from
`paths.private_dir`), and an existing home remounted read-only got the paragraph about links
planted by someone else ("never through a link: whoever controls this path …"), which sends its
user hunting for an attacker where there is a read-only mount. Real: a tmpfs mounted read-only
(root only).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import home_at, mounted_tmpfs, refuses, wait_for

GPUDESK = [sys.executable, "-m", "gpudesk"]
READ_ONLY = "is on a read-only file system"


def gpudesk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUDESK, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A fresh 4 MiB tmpfs, writable (a test remounts it read-only); unmounted after."""
    with mounted_tmpfs(tmp_path / "disk", "size=4m") as mnt:
        yield mnt


def remount_read_only(mnt: Path) -> None:
    """Remounted once nothing holds a file there open for writing: a stopped engine's process
    may still be closing its log and database ("mount point is busy" until then)."""

    def remounted() -> bool:
        done = subprocess.run(["mount", "-o", "remount,ro", str(mnt)], capture_output=True)
        return done.returncode == 0

    wait_for(remounted, what=f"{mnt} remounted read-only")


@pytest.mark.parametrize(
    "command",
    [("submit", "--", "true"), ("engine", "start"), ("drain",)],
    ids=["submit", "engine start", "drain"],
)
def test_a_home_that_cannot_be_made_on_a_read_only_disk_is_one_paragraph(
    disk: Path, monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...]
) -> None:
    remount_read_only(disk)
    with home_at(disk / "gd", monkeypatch) as home:
        said = refuses(gpudesk(*command), f"the state folder '{home.root}' {READ_ONLY}")
    assert "link" not in said


def test_an_existing_home_remounted_read_only_is_not_said_to_be_a_link(
    disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with home_at(disk / "gd", monkeypatch) as home:
        done = gpudesk("submit", "--", "true")
        assert done.returncode == 0, done.stderr
        assert gpudesk("wait", "-q", "1").returncode == 0  # the job is over before the stop
        assert gpudesk("engine", "stop").returncode == 0
        remount_read_only(disk)
        for command in (("submit", "--", "true"), ("engine", "start")):
            said = refuses(gpudesk(*command), f"the state folder '{home.root}' {READ_ONLY}")
            assert "link" not in said
