"""A system engine's database removed or replaced under it (engine/store/connection.py,
`keep_in_place`): root writes the open copy back, or saves it beside the file put back. That
copy holds every member's jobs and their environments. So, with real users and a real system
engine (tests/shared/station_fixture; root only): every file root writes for it is root's and
private (0600), a member can read none of them, and she cannot plant a file at any name root
writes or removes there (the state folder is root's), so nothing there is hers to believe.
The whole state folder removed: root makes it again as the station had it
(engine/home_keeper.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from station_fixture import SYSTEM_PYTHON, Station, make_station

SECRET = "T0p-s3cret-of-ada"
# What ada tries against root's files: read each one, plant a file (or a link) at each name
# root writes or removes. Each line that succeeds says so.
TRY = """
import os, sys
for path in sys.argv[1:]:
    try:
        open(path, "rb").read(1)
        print("read", path)
    except OSError:
        pass
"""


@pytest.fixture
def station() -> Iterator[Station]:
    yield from make_station()


def as_ada(station: Station, *argv: str) -> str:
    return station.run_as("ada", *argv).stdout


def assert_roots_and_private(station: Station, path: Path) -> None:
    info = os.lstat(path)
    assert stat.S_ISREG(info.st_mode) and info.st_uid == 0, path
    assert stat.S_IMODE(info.st_mode) & 0o077 == 0, (path, oct(info.st_mode))
    assert as_ada(station, SYSTEM_PYTHON, "-c", TRY, str(path)) == "", path


def wait_until(check: object, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_the_stores_copies_are_roots_and_a_member_can_neither_read_nor_plant_them(
    station: Station, tmp_path: Path
) -> None:
    db = station.state_dir / "gpudesk.db"
    job = {"name": "first", "command": ["true"], "workdir": "/", "gpus": 0}
    first = station.submit("ada", job, env={"PATH": "/usr/bin:/bin", "ADA_TOKEN": SECRET})
    station.wait_state(first, "succeeded")

    # Each name root writes or removes for it: a member can plant none of them.
    names = [f"{db}{suffix}" for suffix in (".partial", "-wal", "-shm")]
    planted = as_ada(
        station,
        SYSTEM_PYTHON,
        "-c",
        "import os, sys\n"
        "for p in sys.argv[1:]:\n"
        "    try: os.symlink('/etc/shadow', p); print('planted', p)\n"
        "    except OSError: pass\n",
        *names,
    )
    assert planted == "", planted

    # Removed: written back, root's and private, and the member's job is still in it.
    db.unlink()
    wait_until(db.exists, "the database written back")
    assert_roots_and_private(station, db)
    second = station.submit("ada", {**job, "name": "second"})
    station.wait_state(second, "succeeded")
    assert [p.name for p in station.state_dir.glob("gpudesk.db.*")] == []

    # Replaced: the engine stops (exit 1), its copy beside the file put back root's and private.
    backup = tmp_path / "backup.db"
    shutil.copy(db, backup)  # a copy of the file as it stands: what an admin restores
    os.replace(backup, db)
    assert station.process is not None
    assert station.process.wait(30) == 1, station.log.read_text()[-2000:]
    (copy,) = station.state_dir.glob("gpudesk.db.engine-*")
    assert_roots_and_private(station, copy)
    assert SECRET.encode() in copy.read_bytes()  # what the copy holds: why it is private


def owner_and_mode(path: Path) -> tuple[int, int]:
    info = os.lstat(path)
    return info.st_uid, stat.S_IMODE(info.st_mode)


def test_the_state_folder_put_back_is_as_root_had_it_and_a_members_job_runs_on(
    station: Station,
) -> None:
    """The station's whole state folder removed under its engine (engine/home_keeper.py): root
    makes it again as the station had it (root's, the same modes), writes the database back
    there, root's and private, and a member's running job ends recorded."""
    shared = Path(tempfile.mkdtemp(prefix="gd-gone-"))
    shared.chmod(0o1777)  # ada's job writes here; the test touches the gate
    started, gate = shared / "started", shared / "gate"
    script = f"touch {started}; while [ ! -e {gate} ]; do sleep 0.05; done"
    job = {"name": "long", "command": ["sh", "-c", script], "workdir": "/", "gpus": 0}
    try:
        running = station.submit("ada", job, env={"PATH": "/usr/bin:/bin", "ADA_TOKEN": SECRET})
        wait_until(started.exists, "ada's job to start")
        state = station.state_dir
        kept = [state, state / "gpudesk.db", state / "engine.lock", state / "jobs"]
        kept += [state / "jobs" / str(running), state / "jobs" / str(running) / "1"]
        before = {path: owner_and_mode(path) for path in kept}
        assert before[state] == (0, 0o711)
        assert station.process is not None
        os.kill(station.process.pid, signal.SIGSTOP)  # nothing put back before it is all gone
        try:
            shutil.rmtree(state)
        finally:
            os.kill(station.process.pid, signal.SIGCONT)
        wait_until((state / "gpudesk.db").exists, "the database written back")
        assert {path: owner_and_mode(path) for path in kept} == before
        for path in (state / "gpudesk.db", state / "engine.lock"):
            assert_roots_and_private(station, path)
        gate.touch()
        assert station.wait_state(running, "succeeded")["exit_code"] == 0
        later = station.submit("ada", {**job, "name": "later", "command": ["true"]})
        station.wait_state(later, "succeeded")
        said = " ".join(station.log.read_text().split())
        assert f"the state folder {state} went while the engine ran: put back" in said
    finally:
        shutil.rmtree(shared, ignore_errors=True)


# ada tries to take the lock the engine holds on its cgroup folder, and keeps it till told
HOLD = """
import fcntl, os, sys
try:
    fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("held", flush=True)
except OSError as exc:
    print("refused", exc.strerror, flush=True)
sys.stdin.read()
"""


def test_a_member_cannot_take_the_engines_hold_and_keep_the_next_engine_out(
    station: Station,
) -> None:
    """The engine holds its cgroup folder (a flock) so that no second engine of its home
    starts beside it (hw/containment.py). Whoever can open the folder could take that lock
    while the engine restarts and keep the station's next engine out: only root may open it,
    even where an earlier engine left it open to all (0755)."""
    from gpudesk.hw import containment

    shared = Path(tempfile.mkdtemp(prefix="gd-hold-"))
    shared.chmod(0o1777)
    gate = shared / "gate"
    job = {"name": "long", "command": ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done"]}
    try:
        running = station.submit("ada", {**job, "workdir": "/", "gpus": 0})
        station.wait_state(running, "running")
        mount = containment.v2_mount()
        folder = containment.home_folder(mount, station.state_dir) if mount else None
        if folder is None or not folder.is_dir():
            pytest.skip("the system engine's jobs get no cgroup here (no writable cgroup v2)")
        folder.chmod(0o755)  # as an engine under another umask left it
        station.stop()
        station.start()  # the running job keeps the folder; this engine narrows it
        assert stat.S_IMODE(os.stat(folder).st_mode) & 0o066 == 0, oct(os.stat(folder).st_mode)
        station.stop()  # the lock is free: could ada take it before the next engine?
        with station.popen_as("ada", SYSTEM_PYTHON, "-c", HOLD, str(folder)) as ada:
            assert ada.stdout is not None
            said = ada.stdout.readline()
            station.start()  # says "another engine (pid ...)" and exits 3 had she taken it
        assert said.startswith("refused Permission denied"), said
        gate.touch()
        station.wait_state(running, "succeeded")
    finally:
        shutil.rmtree(shared, ignore_errors=True)
