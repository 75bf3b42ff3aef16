"""A rotation while the job is writing (gpudesk.joblog.rotate): on a file system that can cut a
file's head (gpudesk.joblog.collapse: ext4, XFS) or punch a hole over it (tmpfs, NFS 4.2) nothing
the job writes is lost, however the writes and the rotations interleave. Copy-truncate lost what
a job wrote between the end of the copy and the truncation: once in CI, a whole MiB of
tests/faults/test_log_cap.py's printer; on tmpfs, where it was all there was, ~8 % of a fast
writer's bytes.

Every writer here is bounded, by its bytes and by a file size limit (RLIMIT_FSIZE), and every
rotating loop by its count: a punched log's size keeps growing (its blocks do not), and an
unbounded rehearsal of this once filled the disk."""

from __future__ import annotations

import functools
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import can_cut_head, can_punch_head

from gpudesk import joblog
from gpudesk.joblog import collapse
from gpudesk.joblog.progress import ProgressReader

# A job that prints as fast as it can, in writes of 256 KiB of 64-byte lines, through an
# O_APPEND descriptor as a job's stdout is, until its stdin closes or it has written
# argv[2] bytes; then how much it wrote.
WRITER = textwrap.dedent("""\
    import os, select, sys
    fd, most = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND), int(sys.argv[2])
    block, written = (b"x" * 63 + b"\\n") * 4096, 0
    while written < most and not select.select([0], [], [], 0)[0]:
        written += os.write(fd, block)
    print(written)
""")
# Well past what 100 rotations take (about 1.5 GiB here): a punched log's size reaches it.
WRITER_MOST_BYTES = 4 << 30


def _file_size_limit() -> None:  # in the writer, before it runs: its file never passes this
    limit = WRITER_MOST_BYTES + (1 << 20)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def rotate_while_writing(log: Path, rotations: int) -> int:
    """`rotations` rotations (a cap of 64 KiB, two parts kept) while a job writes: on the
    test's own CPU, so that it is often preempted inside a write() (as a job is on a busy
    station), the case that lost the rest of the write; fewer when the writer reached its
    bound first (at least a fifth). Returns the bytes it wrote."""
    log.touch()
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(log), str(WRITER_MOST_BYTES)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            preexec_fn=_file_size_limit,
        )
        done = 0
        try:
            while done < rotations and writer.poll() is None:  # bounded: it stops by itself
                done += joblog.rotate(log, 64 * 1024, 2)
        finally:
            written, _ = writer.communicate(b"", timeout=30)  # stdin closed: it stops
    finally:
        os.sched_setaffinity(0, cpus)
    assert done >= rotations // 5, f"the writer stopped after {done} rotations"
    return int(written)


@pytest.fixture
def shm_folder() -> Iterator[Path]:
    """A fresh folder on tmpfs (/dev/shm), removed after: a file system that cannot cut a
    file's head but can punch a hole over it."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    folder = Path(tempfile.mkdtemp(prefix="gpudesk-punch-", dir="/dev/shm"))
    try:
        if can_cut_head(folder) or not can_punch_head(folder):
            pytest.skip("/dev/shm here is not a file system that only punches holes")
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(params=["cut", "punch"])
def log_folder(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A folder where a rotation cuts the log's head off in place (the test's own, where its
    file system can) or punches a hole over it (tmpfs)."""
    if request.param == "punch":
        return request.getfixturevalue("shm_folder")
    if not can_cut_head(tmp_path):
        pytest.skip(f"{tmp_path}'s file system cannot cut a file's head (rotation truncates)")
    return tmp_path


def test_rotating_a_log_as_its_job_writes_loses_nothing(log_folder: Path) -> None:
    log = log_folder / "output.log"
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
    monkeypatch.setattr(collapse, "punchable_end", lambda fd, size: None)
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

    write = functools.partial(append, log)
    head = functools.partial(head_line, block)

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


def test_readers_start_past_a_punched_hole_and_read_on_across_it(shm_folder: Path) -> None:
    """On tmpfs the rotation punches a hole over the log's head: the file keeps its size and
    reads as NULs up to the hole's end, which the record says. The stream (`gpudesk logs`, the
    desk, the engine's tails) and the progress reader start there, never at the NULs; a
    progress reader that had read up to the hole joins the line the hole's end falls in, one
    that had not skips it, as across a cut."""
    block = os.statvfs(shm_folder).f_bsize
    log = shm_folder / "output.log"

    write = functools.partial(append, log)
    head = functools.partial(head_line, block)

    write(head(8) + b"progress 12/100\n")
    caught_up = ProgressReader(str(log))
    assert caught_up.read() == [12.0]
    write(b"padding\n")
    assert joblog.rotate(log, 30, 1)  # punched up to the block boundary in "progress 12/100"
    assert log.read_bytes() == b"\0" * block + b" 12/100\npadding\n"  # its size is kept
    assert joblog.read_rotation(log).data_from == block
    assert os.stat(log).st_blocks * 512 <= block  # the hole's blocks are freed
    write(b"progress 13/100\n")
    assert caught_up.read() == [13.0]
    # the stream: the part, then the log past its hole; as the desk and `tail` read it
    whole = b"progress 12/100\npadding\nprogress 13/100\n"
    assert read_stream(log) == [(block - 8, whole)]
    assert joblog.stream_end(log) == block + len(whole) - 8
    assert joblog.tail(log, 20) == whole[-20:]
    assert ProgressReader(str(log)).read() == [13.0]  # a new reader: past the hole's line

    for path in shm_folder.iterdir():
        path.unlink()
    write(head(7) + b"step 3 progress 5/9\n")  # the block boundary falls before "progress"
    behind = ProgressReader(str(log))
    write(b"progress 6/9\n")
    assert joblog.rotate(log, 100, 1)  # the reader has not read the punched line yet
    assert behind.read() == [6.0]

    # rotated again past the hole: measured by what the log holds past it, not its size
    write(b"".join(b"progress %d/99\n" % n for n in range(7, 700)))
    size = os.stat(log).st_size
    assert joblog.rotate(log, 5000, 2)
    assert not joblog.rotate(log, 5000, 2)  # its size is still past the cap; its data is not
    assert not joblog.over_cap(log, 5000)  # so the engine does not take it for a locked log
    record = joblog.read_rotation(log)
    assert record.data_from > block and os.stat(log).st_size == size
    # what it had not read before the hole's end is skipped, to the first whole line past it
    values = behind.read()
    first = log.read_bytes()[record.data_from :].split(b"\n")[1]
    assert values == [float(n) for n in range(int(first.split()[1].split(b"/")[0]), 700)]
    assert joblog.tail(log, 13) == b"progress 699/99\n"[-13:]
    pieces = read_stream(log)
    assert all(b"\0" not in data for _, data in pieces)
    assert pieces[-1][1].endswith(b"progress 699/99\n")


def read_stream(log: Path) -> list[tuple[int, bytes]]:
    """The log's whole stream, as runs between gaps: (where each run starts, its bytes)."""
    stream, runs = joblog.LogStream(log, 0), []
    while (piece := stream.read()) is not None:
        if piece.skipped or not runs:
            runs.append((stream.position - len(piece.data), b""))
        runs[-1] = (runs[-1][0], runs[-1][1] + piece.data)
    return runs


def test_a_record_from_before_holes_reads_as_a_log_without_one(tmp_path: Path) -> None:
    """A record written before `data_from` existed (a log rotated by an older engine) reads as
    one whose data begins at 0; this version's record, read again after a restart, keeps it."""
    log = tmp_path / "output.log"
    log.write_bytes(b"kept\n")
    joblog.record_path(log).write_text('{"base": 100, "rotations": 1, "parts": [[1, 40, 100]]}')
    record = joblog.read_rotation(log)
    assert (record.base, record.data_from, record.origin) == (100, 0, 100)
    assert joblog.tail(log, 5) == b"kept\n" and joblog.stream_end(log) == 105

    punched = joblog.Rotation(
        base=9000, rotations=3, parts=(joblog.Part(3, 10, 20),), data_from=8192
    )
    assert joblog.parse_rotation(punched.to_json().encode()) == punched
    # a hole past the stream's own position cannot be: no record believed
    bad = joblog.Rotation(base=100, rotations=0, data_from=4096).to_json().encode()
    assert joblog.parse_rotation(bad) == joblog.Rotation()


def append(log: Path, data: bytes) -> None:
    with open(log, "ab") as out:
        out.write(data)


def head_line(block: int, kept: int) -> bytes:
    """A line that leaves `kept` bytes of the block to the next."""
    return b"#" * (block - kept - 1) + b"\n"
