"""A station whose gpudesk lives under a folder only root may enter (a virtual environment of
pyenv's Python in /root, mode 0700) starts its engine fine and leaves every member with
`Permission denied`: `engine print-unit` and `engine start --system` say so, naming the folder.
Found installing a station by docs/shared-station.md as its sysadmin would (session 58)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudesk.cli.install_reach import first_closed

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def top() -> Iterator[Path]:
    """A folder every user reaches (pytest's own temporary folders lie under a 0700 one)."""
    folder = Path(tempfile.mkdtemp(prefix="gd-reach-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def test_the_first_folder_a_member_cannot_pass_is_named(top: Path) -> None:
    closed = top / "home"
    (closed / "env" / "bin").mkdir(parents=True)
    python = closed / "env" / "bin" / "python"
    python.write_text("")
    for folder in (closed / "env", closed / "env" / "bin"):
        folder.chmod(0o755)
    python.chmod(0o755)
    closed.chmod(0o700)
    found = first_closed(python, station_gid=None)
    assert found is not None and found[0] == closed
    closed.chmod(0o711)  # passable, as root's state folder is
    assert first_closed(python, station_gid=None) is None
    # passable by the station's group alone: its members reach it, others do not
    closed.chmod(0o710)
    gid = closed.stat().st_gid
    assert first_closed(python, station_gid=gid) is None
    assert first_closed(python, station_gid=gid + 1) is not None


def test_a_link_is_judged_by_where_it_leads(top: Path) -> None:
    closed = top / "closed"
    closed.mkdir(mode=0o700)
    (closed / "python").write_text("")
    (closed / "python").chmod(0o755)
    link = top / "python"
    link.symlink_to(closed / "python")
    found = first_closed(link, station_gid=None)
    assert found is not None and found[0] == closed


def _print_unit_from_a_copied_env(where: Path) -> subprocess.CompletedProcess[str]:
    """`engine print-unit` run by a Python copied into a virtual environment at `where`, so
    that its executable and prefix both lie there, as an installed station's do."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--copies", "--without-pip", str(where)],
        check=True,
        timeout=120,
    )
    path = os.pathsep.join([str(REPO), sysconfig.get_paths()["purelib"]])
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("GPUDESK_HOME", None)
    return subprocess.run(
        [str(where / "bin" / "python"), "-m", "gpudesk", "engine", "print-unit"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_print_unit_warns_where_members_cannot_run_its_python(top: Path) -> None:
    closed = top / "root-only"
    closed.mkdir(mode=0o700)
    done = _print_unit_from_a_copied_env(closed / "venv")
    assert done.returncode == 0, done.stderr
    assert (
        "ExecStart=" in done.stdout and "cannot run this gpudesk" not in done.stdout
    )  # the unit stays clean
    assert f"{closed} (mode 0700" in done.stderr, done.stderr
    assert "Permission denied" in done.stderr and "Traceback" not in done.stderr
    open_env = top / "open"
    open_env.mkdir(mode=0o755)
    done = _print_unit_from_a_copied_env(open_env / "venv")
    assert done.returncode == 0, done.stderr
    assert "cannot run this gpudesk" not in done.stderr, done.stderr
