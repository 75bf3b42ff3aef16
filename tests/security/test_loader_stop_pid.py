"""Root's engine signals a shared loader's producer by pid only while that pid is still the
producer (its info file's start, gpudesk.hw.process_start): a stopping producer is killed
STOP_WAIT_S after it was told to stop (issue 36: stopped off the loop), and by then its number
may name another process, a member's. Real processes: the producer a root `sh` that ignores
SIGTERM, the member's a `sleep` run as a real other user."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import local_users
import psutil
import pytest
from conftest import wait_for
from local_users import LocalUser

from gpudesk.core.datasets import DatasetSpec
from gpudesk.engine.services import loaders
from gpudesk.engine.services.loaders import LoaderSupervisor, Statuses
from gpudesk.hw import process_start
from gpudesk.loader.protocol import ProducerInfo, write_info
from gpudesk.paths import Home

other_user = local_users.other_user  # the fixture (tests/local_users.py)

SPEC = DatasetSpec(name="syn", factory="gpudesk.workloads.synthetic:make_dataset")


@pytest.fixture
def producer() -> Iterator[subprocess.Popen[bytes]]:
    """A stand-in producer of root's that ignores SIGTERM (as a hung one does)."""
    process = subprocess.Popen(
        ["sh", "-c", 'trap "" TERM; echo ignoring; while :; do sleep 0.1; done'],
        stdout=subprocess.PIPE,
    )
    # A SIGTERM sent before the shell has set its trap would end it: wait for the trap.
    assert process.stdout is not None and process.stdout.readline() == b"ignoring\n"
    yield process
    process.kill()
    process.wait()


def adopted(home: Home, process: subprocess.Popen[bytes]) -> LoaderSupervisor:
    """A supervisor that found `process` serving `syn` (its info file, as after a restart), and
    whose stops happen at once: no status to ask, no wait before the kill."""
    info = home.loader_paths(SPEC.name)[2]
    info.parent.mkdir(parents=True, exist_ok=True)
    write_info(info, ProducerInfo(pid=process.pid, started=process_start.started(process.pid)))
    supervisor = LoaderSupervisor(home)
    supervisor.register([SPEC])
    supervisor.ensure(SPEC.name)  # adopts it: alive by its info file
    assert supervisor.producers[SPEC.name].pid == process.pid

    def at_once(
        _: str, __: Callable[[], Statuses], done: Callable[[Statuses | None], None], ___: float
    ) -> None:
        done(None)  # the producer did not answer

    supervisor.offload = at_once
    return supervisor


def test_a_stopping_producer_still_there_is_killed(
    producer: subprocess.Popen[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loaders, "STOP_WAIT_S", 0.0)
    supervisor = adopted(Home(tmp_path / "home"), producer)
    supervisor.stop_soon(SPEC.name, "no job needs it")
    assert producer.poll() is None  # SIGTERM, ignored
    supervisor.tick(set())  # past its kill_at: SIGKILL
    assert wait_for(lambda: producer.poll() is not None, 10.0, what="the kill")
    assert producer.returncode == -signal.SIGKILL
    supervisor.tick(set())
    assert SPEC.name not in supervisor.stopping


def test_a_pid_that_now_names_a_members_process_is_never_signalled(
    producer: subprocess.Popen[bytes],
    other_user: LocalUser,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(loaders, "STOP_WAIT_S", 0.0)
    supervisor = adopted(Home(tmp_path / "home"), producer)
    supervisor.stop_soon(SPEC.name, "no job needs it")
    member = subprocess.Popen(["sleep", "60"], user=other_user.uid, group=other_user.gid)
    try:
        # The producer's number taken by her process, as a pid reused after the producer ended
        # (the kernel decides reuse; the test hands her pid to the record it would have matched)
        supervisor.stopping[SPEC.name].pid = member.pid
        supervisor.tick(set())
        assert member.poll() is None, "root signalled a member's process"
        assert psutil.Process(member.pid).uids().real == other_user.uid
        assert SPEC.name not in supervisor.stopping  # taken for gone: not that process
    finally:
        member.kill()
        member.wait()


def test_a_job_needing_a_stopping_producers_dataset_gets_a_new_one_once_it_is_gone(
    producer: subprocess.Popen[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old producer holds the dataset's socket and info file until it is gone: its
    successor starts then, never beside it (nor adopts it, by the info file)."""
    monkeypatch.setattr(loaders, "STOP_WAIT_S", 0.0)
    supervisor = adopted(Home(tmp_path / "home"), producer)
    supervisor.stop_soon(SPEC.name, "no job needs it")
    supervisor.ensure(SPEC.name)  # a job needs it again
    waiting = supervisor.producers[SPEC.name]
    assert waiting.process is None and waiting.pid is None  # none started, the old not adopted
    try:
        supervisor.tick({SPEC.name})  # the old one killed
        wait_for(lambda: producer.poll() is not None, 10.0, what="the kill")
        supervisor.tick({SPEC.name})  # gone: the successor starts
        assert SPEC.name not in supervisor.stopping
        assert waiting.process is not None and waiting.pid != producer.pid
        assert not any("died" in event for event in supervisor.events), supervisor.events
    finally:
        supervisor.stop(SPEC.name, "the test ended")
