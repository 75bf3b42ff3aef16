"""Links planted in the home are never followed (finding 7).

A symbolic link at engine.lock, engine.log, gpudesk.db, jobs/, run/ (or the home itself) points
at a victim outside the home. Starting the engine must fail with one paragraph that names the
link, and leave the victim as it was: not truncated, not written, not chmod-ed, no job folders
in it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

GPUDESK = [sys.executable, "-m", "gpudesk"]
VICTIM_TEXT = "precious data that is not gpudesk's\n"


def gpudesk(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPUDESK_HOME": str(home)}
    env.pop("GPUDESK_BACKEND", None)
    return subprocess.run(
        [*GPUDESK, *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def snapshot(path: Path) -> object:
    """What must not change about the victim: its metadata and, for a file, its bytes; for a
    folder, what is in it."""
    st = os.lstat(path)
    content = path.read_bytes() if path.is_file() else sorted(p.name for p in path.iterdir())
    return (st.st_mode, st.st_uid, st.st_size, st.st_mtime_ns, content)


def kill_engines_of(home: Path) -> None:
    """Whatever engine the old code managed to start there (found by its command line, not
    through the lock file, which may be the planted link)."""
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "gpudesk.engine.daemon" in cmdline and str(home) in cmdline:
            with contextlib.suppress(psutil.Error):
                os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("planted", "victim_is_dir"),
    [
        ("engine.lock", False),
        ("engine.log", False),
        ("gpudesk.db", False),
        ("jobs", True),
        ("run", True),
        ("", True),  # the home itself
    ],
    ids=["engine.lock", "engine.log", "gpudesk.db", "jobs", "run", "home"],
)
def test_a_link_planted_in_the_home_is_refused_and_its_target_untouched(
    tmp_path: Path, planted: str, victim_is_dir: bool
) -> None:
    home = tmp_path / "home"
    victim = tmp_path / "victim"
    if victim_is_dir:
        victim.mkdir(mode=0o755)
        (victim / "keep.txt").write_text(VICTIM_TEXT)
    else:
        # empty, as a file SQLite would take for a new database and fill
        victim.write_text("" if planted == "gpudesk.db" else VICTIM_TEXT)
    if planted:
        home.mkdir(mode=0o700)
    link = home / planted if planted else home
    assert len(str(home / "run" / "control.sock")) <= 100  # run/ is inside the home
    link.symlink_to(victim)
    before = snapshot(victim)
    try:
        result = gpudesk(home, "engine", "start", "--backend", "none")
        assert result.returncode != 0, f"the engine started: {result.stdout}"
        assert "Traceback" not in result.stderr, result.stderr
        assert result.stderr.startswith("error: "), result.stderr
        assert f"{link} is a symbolic link" in result.stderr, result.stderr
        # and a command that would start the engine and run a job does not either
        submitted = gpudesk(home, "submit", "--", "true")
        assert submitted.returncode != 0 and "symbolic link" in submitted.stderr
    finally:
        kill_engines_of(home)
    assert snapshot(victim) == before, "the link's target was changed"
    assert link.is_symlink()  # refused, not "repaired" behind the user's back


def test_a_hard_link_at_the_lock_is_not_truncated(tmp_path: Path) -> None:
    """engine.lock is truncated for the pid: a second name for another file must stop that."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text(VICTIM_TEXT)
    os.link(victim, home / "engine.lock")
    try:
        result = gpudesk(home, "engine", "start", "--backend", "none")
        assert result.returncode != 0 and "hard links" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    finally:
        kill_engines_of(home)
    assert victim.read_text() == VICTIM_TEXT
