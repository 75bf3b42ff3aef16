"""A lock someone else holds on a job's output.log (issue 36): the engine's reads never wait on
it, and its rotation can go ahead despite it. Real files, real flock on a second open file
description, as a job holding its own log locked has."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudesk import joblog

# Reading a small file takes microseconds; a reader that waited out the lock would take
# joblog.LOCK_TRIES x LOCK_RETRY_S (3 s). Assumption: 0.5 s tells them apart on a loaded machine.
QUICK_S = 0.5


@pytest.fixture(params=[fcntl.LOCK_SH, fcntl.LOCK_EX], ids=["shared", "exclusive"])
def locked_log(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    log = tmp_path / "output.log"
    log.write_bytes(b"".join(b"line %04d\n" % n for n in range(500)))  # 5000 bytes
    holder = os.open(log, os.O_RDONLY)
    fcntl.flock(holder, request.param)
    try:
        yield log
    finally:
        os.close(holder)


def test_the_engines_reads_never_wait_on_a_held_lock(locked_log: Path) -> None:
    started = time.monotonic()
    piece = joblog.LogStream(locked_log, 0, wait=False).read(100)
    end = joblog.stream_end(locked_log, wait=False)
    tail = joblog.tail(locked_log, 10, wait=False)
    took = time.monotonic() - started
    assert piece is not None and piece.data.startswith(b"line 0000\n")
    assert end == 5000 and tail == b"line 0499\n"
    assert took < QUICK_S, f"the reads took {took:.2f} s"


def test_a_held_lock_stops_a_rotation_unless_it_goes_ahead_despite_it(locked_log: Path) -> None:
    assert not joblog.rotate(locked_log, 1000, 1)
    assert locked_log.stat().st_size == 5000
    assert joblog.rotate(locked_log, 1000, 1, despite_lock=True)
    # what stays in output.log: nothing after copy-truncate, the bytes after the last block
    # boundary where the head was cut off (gpudesk.joblog.collapse, a 4-KiB block: 904)
    kept = locked_log.stat().st_size
    assert kept < 1000
    record = joblog.read_rotation(locked_log)
    assert record.base == 5000 - kept and record.dropped == 4000
    assert joblog.tail(locked_log, 10, wait=False) == b"line 0499\n"
    assert joblog.LogStream(locked_log, 0, wait=False).read(1) == joblog.Piece(b"l", 4000)
