"""A rotation while the job is writing (gpudesk.joblog.rotate): on a file system that can cut a
file's head (gpudesk.joblog.collapse: ext4, XFS) nothing the job writes is lost, however the
writes and the rotations interleave. Copy-truncate lost what a job wrote between the end of the
copy and the truncation: once in CI, a whole MiB of tests/faults/test_log_cap.py's printer."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import can_cut_head

from gpudesk import joblog
from gpudesk.joblog import collapse
from gpudesk.joblog.progress import ProgressReader

# A job that prints as fast as it can, in writes of 256 KiB of 64-byte lines, through an
# O_APPEND descriptor as a job's stdout is, until its stdin closes; then how much it wrote.
WRITER = textwrap.dedent("""\
    import os, select, sys
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
    block, written = (b"x" * 63 + b"\\n") * 4096, 0
    while not select.select([0], [], [], 0)[0]:
        written += os.write(fd, block)
    print(written)
""")


def rotate_while_writing(log: Path, rotations: int) -> int:
    """`rotations` rotations (a cap of 64 KiB, two parts kept) while a job writes: on the
    test's own CPU, so that it is often preempted inside a write() (as a job is on a busy
    station), the case that lost the rest of the write. Returns the bytes it wrote."""
    log.touch()
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(log)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        done = 0
        try:
            while done < rotations:
                done += joblog.rotate(log, 64 * 1024, 2)
        finally:
            written, _ = writer.communicate(b"", timeout=30)  # stdin closed: it stops
    finally:
        os.sched_setaffinity(0, cpus)
    return int(written)


def test_rotating_a_log_as_its_job_writes_loses_nothing(tmp_path: Path) -> None:
    if not can_cut_head(tmp_path):
        pytest.skip(f"{tmp_path}'s file system cannot cut a file's head (rotation truncates)")
    log = tmp_path / "output.log"
    written = rotate_while_writing(log, 100)
    # every byte written is in the stream: read, or a gap the record accounts for (what a
    # rotation finds beyond its cap, and the parts no longer kept)
    assert joblog.stream_end(log) == written
    stream, rest = joblog.LogStream(log, 0), b""
    while (piece := stream.read()) is not None:
        if piece.skipped:  # the line a gap cut short is dropped; a part begins whole
            rest = b""
        *lines, rest = (rest + piece.data).split(b"\n")
        assert {len(line) for line in lines} <= {63}, "a line torn where a write was lost"
    assert rest == b""


def test_copy_truncate_where_a_file_system_cannot_cut_loses_writes_and_stays_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback (tmpfs, NFS) loses what the job writes between the copy and the
    truncation: the reason for cutting where the file system can. And it stops chasing a job
    that writes as fast as it copies (it once copied until the disk was full)."""
    monkeypatch.setattr(collapse, "collapsible_end", lambda fd, size: None)
    log = tmp_path / "output.log"
    written = rotate_while_writing(log, 100)
    assert joblog.stream_end(log) <= written
    assert all(p.stat().st_size <= 4 * 1024 * 1024 for p in tmp_path.glob("output.log.*"))


def test_the_progress_reader_reads_on_across_a_cut_inside_a_line(tmp_path: Path) -> None:
    """The cut falls on a block boundary, not a line's end: a reader that had read up to it
    joins the two halves of the line; one that had not skips to the next whole line, so the
    tail of "step 3 progress 5" is not read as a progress line of its own."""
    if not can_cut_head(tmp_path):
        pytest.skip(f"{tmp_path}'s file system cannot cut a file's head")
    block = os.statvfs(tmp_path).f_bsize
    log = tmp_path / "output.log"

    def write(data: bytes) -> None:
        with open(log, "ab") as out:
            out.write(data)

    def head(kept: int) -> bytes:  # a line that leaves `kept` bytes of the block to the next
        return b"#" * (block - kept - 1) + b"\n"

    write(head(8) + b"progress 12/100\n")
    caught_up = ProgressReader(str(log))
    assert caught_up.read() == [12.0]
    write(b"padding\n")
    assert joblog.rotate(log, 30, 1)  # cuts at the block boundary, inside "progress 12/100"
    assert log.read_bytes().startswith(b" 12/100\n")
    write(b"progress 13/100\n")
    assert caught_up.read() == [13.0]

    log.unlink()
    joblog.record_path(log).unlink()
    write(head(7) + b"step 3 progress 5/9\n")  # the block boundary falls before "progress"
    behind = ProgressReader(str(log))
    write(b"progress 6/9\n")
    assert joblog.rotate(log, 100, 1)  # the reader has not read the cut's line yet
    assert log.read_bytes() == b"progress 5/9\nprogress 6/9\n"
    assert behind.read() == [6.0]
