"""A producer's DataLoader workers and signals: `gpudesk loader serve` stopped by a SIGTERM to its
whole process group (`timeout`, `kill -- -PGID`, systemd's stop) ends as cleanly as one stopped
by a SIGTERM to its own pid, though the SIGTERM kills its workers too; a worker killed by other
means (the out-of-memory killer's SIGKILL) is a failure, said in one paragraph (workers.py).
Real producer processes with real DataLoader workers, each in a session of its own.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import wait_for
from test_loader import Loaders, Producer, _alive

from gpudesk.cli.exit_codes import EXIT_FAILED
from gpudesk.paths import Home

WORKERS = 2


@pytest.fixture
def loaders(home: Home, tmp_path: Path) -> Iterator[Loaders]:
    launcher = Loaders(home, tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()


def serving(loaders: Loaders, *, cost_ms: float = 0.0) -> Producer:
    """A producer in a process group of its own, once its workers have made its first batch
    (its info file says it serves)."""
    producer = loaders.serve(workers=WORKERS, cost_ms=cost_ms, session=True)
    assert len(producer.children) == WORKERS, producer.children
    assert os.getpgid(producer.pid) == producer.pid
    return producer


def ended(producer: Producer) -> tuple[int, str]:
    """Its exit status and what it said on stderr, once it and its workers are gone; nothing
    it leaves."""
    code = producer.proc.wait(20)
    wait_for(
        lambda: not [c for c in producer.children if _alive(c)],
        15,
        what="the producer's workers to exit",
    )
    said = producer.log.read_text()
    assert "Traceback" not in said and 'File "' not in said, said
    return code, said


def stopped(producer: Producer) -> str:
    """The last of the two lines it said on stdout (run by hand): why it stopped."""
    serving, last = producer.out.read_text().splitlines()
    assert serving.startswith("loader syn: serving "), serving
    return last


def assert_cleaned_up(producer: Producer) -> None:
    """As on any stop it was told: its info file and sockets are gone."""
    for path in producer.home.loader_paths(producer.name):
        assert not path.exists(), path


@pytest.mark.slow(6)
@pytest.mark.parametrize("reading", [False, True], ids=["idle", "read"])
def test_a_sigterm_to_the_process_group_stops_the_producer_cleanly(
    loaders: Loaders, reading: bool
) -> None:
    # Read: a consumer keeps it making batches (its workers busy, the producer waiting on them
    # at times), so the SIGTERM finds it in the middle of its work.
    producer = serving(loaders, cost_ms=2.0 if reading else 0.0)
    if reading:
        consumer = loaders.thread(epochs=1000, delay=0.001)
        wait_for(lambda: consumer.batches() >= 5, 20, what="the consumer to be reading")
    os.killpg(producer.pid, signal.SIGTERM)
    code, said = ended(producer)
    assert code == 0, said
    # At most one line: a worker's SIGCHLD taken before the producer's own SIGTERM says so.
    assert len(said.splitlines()) <= 1, said
    assert_cleaned_up(producer)


@pytest.mark.slow(6)
def test_a_sigterm_to_the_producer_alone_stops_it_cleanly(loaders: Loaders) -> None:
    producer = serving(loaders)
    os.kill(producer.pid, signal.SIGTERM)
    code, said = ended(producer)
    assert code == 0 and said == "", said
    assert stopped(producer).startswith("loader syn: stopped: SIGTERM; it served ")
    assert_cleaned_up(producer)


@pytest.mark.slow(6)
def test_a_worker_stopped_alone_stops_the_producer_as_if_told(loaders: Loaders) -> None:
    # As systemd's stop may take a worker before the producer: the producer's own SIGTERM comes
    # after it, or (by hand) never.
    producer = serving(loaders)
    worker = producer.children[0]
    worker.send_signal(signal.SIGTERM)
    code, said = ended(producer)
    assert code == 0, said
    assert said.splitlines() == [
        f"loader syn: its DataLoader worker (pid {worker.pid}) was killed by SIGTERM: stopping"
    ], said
    assert stopped(producer).startswith(
        f"loader syn: stopped: its DataLoader worker (pid {worker.pid}) was killed by SIGTERM; "
    )
    assert_cleaned_up(producer)


@pytest.mark.slow(6)
@pytest.mark.parametrize("reading", [False, True], ids=["idle", "read"])
def test_a_killed_worker_fails_the_producer_in_one_paragraph(
    loaders: Loaders, reading: bool
) -> None:
    # The out-of-memory killer's SIGKILL, to one worker: not a stop, a failure to report.
    producer = serving(loaders, cost_ms=2.0 if reading else 0.0)
    if reading:
        consumer = loaders.thread(epochs=1000, delay=0.001)
        wait_for(lambda: consumer.batches() >= 5, 20, what="the consumer to be reading")
    worker = producer.children[0]
    worker.send_signal(signal.SIGKILL)
    code, said = ended(producer)
    assert code == EXIT_FAILED, said
    message = said.strip()
    assert message.startswith("error: loader syn: ") and "\n" not in message, said
    assert f"DataLoader worker (pid {worker.pid}) was killed by SIGKILL" in message
    assert "out-of-memory killer" in message
