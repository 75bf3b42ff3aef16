"""The home's single-instance lock (gpudesk.home_lock): the engine takes it and writes its pid, a
client reads who holds it, and an engine whose lock went with its state folder takes it again
there (`keep`), or says why not, trying again later and less often."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpudesk import home_lock
from gpudesk.home_lock import KEEP_RETRY_S, AlreadyRunning, EngineLock, holder
from gpudesk.paths import Home


def who(home: Home) -> int | None:
    return holder(os.open(home.lock, os.O_RDONLY))


def test_the_holder_is_named_while_it_holds_and_no_one_after(home: Home) -> None:
    home.ensure()
    lock = EngineLock.take(home.lock)
    assert who(home) == os.getpid()
    with pytest.raises(
        AlreadyRunning, match=f"already running for this home \\(pid {os.getpid()}\\)"
    ):
        EngineLock.take(home.lock, wait_s=0.0)
    lock.close()
    assert who(home) is None


@pytest.fixture
def looks_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(home_lock, "LOOK_EVERY_S", 0.0)  # not once a second: at every call


def test_keep_looks_once_a_second_not_at_every_turn(home: Home) -> None:
    home.ensure()
    lock = EngineLock.take(home.lock)
    try:
        assert not lock.keep(home)  # looked: in place
        shutil.rmtree(home.root)
        assert not lock.keep(home)  # not looked again within the second: a stat a second
        assert not home.root.exists()
    finally:
        lock.close()


def test_a_lock_gone_with_its_folder_is_taken_again_there(
    home: Home, looks_every_call: None
) -> None:
    home.ensure()
    lock = EngineLock.take(home.lock)
    try:
        assert lock.in_place() and not lock.keep(home)
        shutil.rmtree(home.root)
        assert not lock.in_place()
        assert lock.keep(home)  # the folder made again, the lock taken there
        assert lock.in_place() and home.jobs_dir.is_dir()
        assert who(home) == os.getpid()
        assert not lock.keep(home)  # nothing more to do
    finally:
        lock.close()


def test_a_lock_another_engine_took_meanwhile_is_not_taken_and_tried_less_often(
    home: Home, tmp_path: Path, looks_every_call: None
) -> None:
    home.ensure()
    lock = EngineLock.take(home.lock)
    shutil.rmtree(home.root)
    home.ensure()
    other = subprocess.Popen(  # another process takes the new lock and keeps it
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from gpudesk.home_lock import EngineLock; "
            "held = EngineLock.take(Path(sys.argv[1])); print('held', flush=True); "
            "sys.stdin.read()",
            str(home.lock),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None and other.stdout.readline() == "held\n"
        with pytest.raises(AlreadyRunning, match=f"pid {other.pid}"):
            lock.keep(home)
        assert not lock.keep(home)  # resting: not tried again (nor said) at once
        assert lock._rest == 2 * KEEP_RETRY_S[0]  # and the next rest is longer
    finally:
        other.communicate("")
        lock.close()
