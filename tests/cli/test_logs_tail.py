"""`gpudesk logs -n N`: where the last N lines of a log begin, read from the end."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudesk import joblog
from gpudesk.cli import logs
from gpudesk.cli.logs import tail_start
from gpudesk.joblog import LogStream, Piece


class CountingStream(LogStream):
    """A LogStream that counts the bytes it read."""

    read_bytes = 0

    def read(self, limit: int = joblog.CHUNK_BYTES) -> Piece | None:
        piece = super().read(limit)
        if piece is not None:
            self.read_bytes += len(piece.data)
        return piece


def tail_of(log: Path, lines: int) -> bytes:
    stream = LogStream(log)
    stream.position = tail_start(stream, lines)
    out = bytearray()
    while (piece := stream.read()) is not None:
        out += piece.data
    return bytes(out)


@pytest.mark.parametrize("block", [3, 7, 64 << 10])  # lines across block edges, and not
def test_the_last_lines_as_tail_n_prints_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    monkeypatch.setattr(logs, "TAIL_BLOCK", block)
    log = tmp_path / "output.log"
    log.write_bytes(b"one\ntwo\n\nfour\nfive\n")
    assert tail_of(log, 2) == b"four\nfive\n"
    assert tail_of(log, 3) == b"\nfour\nfive\n"  # an empty line is a line
    assert tail_of(log, 1) == b"five\n"
    assert tail_of(log, 0) == b""
    assert tail_of(log, 5) == tail_of(log, 99) == b"one\ntwo\n\nfour\nfive\n"
    log.write_bytes(b"one\ntwo\nthree")  # the last line has no newline yet: it counts
    assert tail_of(log, 1) == b"three"
    assert tail_of(log, 2) == b"two\nthree"
    log.write_bytes(b"")
    assert tail_of(log, 3) == b""
    assert tail_of(tmp_path / "not-yet.log", 3) == b""


def test_a_big_log_is_read_from_its_end(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    with open(log, "wb") as fh:
        for n in range(2_000_000):  # ~15 MB
            fh.write(b"%d\n" % n)
    stream = CountingStream(log)
    start = tail_start(stream, 5)
    assert stream.read_bytes <= logs.TAIL_BLOCK
    stream.position = start
    assert stream.read() == Piece(b"1999995\n1999996\n1999997\n1999998\n1999999\n")


def test_the_tail_reaches_into_rotated_parts_and_stops_at_a_gap(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(b"".join(b"line %d\n" % n for n in range(100)))
    assert joblog.rotate(log, 200, 1)  # the last 200 bytes move to output.log.1, head dropped
    with open(log, "ab") as fh:
        fh.write(b"after 1\nafter 2\n")
    assert tail_of(log, 3) == b"line 99\nafter 1\nafter 2\n"  # across the part and the file
    kept = tail_of(log, 10_000)  # more lines than are kept: what is kept, from a line start
    assert kept.endswith(b"line 99\nafter 1\nafter 2\n")
    assert len(kept) <= 200 + 16 and b"line 0\n" not in kept
