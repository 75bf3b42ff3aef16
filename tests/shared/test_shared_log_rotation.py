"""A system engine (root) capping a member's job log, end to end, with real local users: the
rotation acts on ada's output.log as a file she controls (gpudesk.joblog: opened O_NOFOLLOW |
O_NONBLOCK, cut in place where the file system can), leaves her parts hers and its record
root's, loses nothing it does not announce, and the engine's progress reader follows her log
across every cut (the remaining time `show` gives is read from her latest progress line)."""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import can_cut_head, can_punch_head, rotates_losslessly, wait_for
from station_fixture import Station, make_station

from gpudesk import joblog

LINE = re.compile(rb"^(\d{8}) x+$")
BLOCKS = 24  # of 256 KiB: 6 MiB through a cap of 1 MiB
# ada's job: 256-KiB writes of numbered 64-byte lines, each followed by a progress line, a few
# a second; then it waits (its last progress line read) until the test's flag appears
JOB = """
import os, sys, time
blocks, flag = int(sys.argv[1]), sys.argv[2]
n = 0
for block in range(1, blocks + 1):
    lines = b"".join(b"%08d %s\\n" % (n + i, b"x" * 54) for i in range(4096))
    n += 4096
    os.write(1, lines + b"progress %d/%d\\n" % (block, blocks))
    time.sleep(0.1)
deadline = time.monotonic() + 60
while not os.path.exists(flag) and time.monotonic() < deadline:
    time.sleep(0.05)
"""


@pytest.fixture(params=["/tmp", "/dev/shm"], ids=["disk", "tmpfs"])
def station(request: pytest.FixtureRequest) -> Iterator[Station]:
    """The station's state and her job's folder on this VM's disk (ext4: a cut in place), and
    on tmpfs (a hole punched over the head: root frees her file's blocks, by the descriptor it
    opened and checked, and never moves or truncates it)."""
    if not os.path.isdir(request.param):
        pytest.skip(f"no {request.param} here")
    yield from make_station("sim:a100-40gb", under=request.param)


@pytest.mark.slow(8)
def test_a_system_engine_caps_a_members_log_as_hers_and_reads_her_progress_across_it(
    station: Station,
) -> None:
    station.ok(None, "configure", station={"log_max_mb": 1, "log_keep": 2, "sample_interval": 0.2})
    flags = Path(tempfile.mkdtemp(prefix="gpudesk-flags-", dir="/tmp"))
    flags.chmod(0o755)
    flag = flags / "done"
    ada = station.users["ada"]
    job = {
        "name": "printer",
        "command": ["python3", "-c", JOB, str(BLOCKS), str(flag)],
        "gpus": 1,
        "memory_gb": 2,
        "workdir": "/",
    }
    try:
        job_id = station.submit("ada", job)
        station.wait_state(job_id, "running")
        log = Path(station.job(job_id)["log"])

        def progress_done() -> float | None:
            remaining = station.ok(None, "show", job=job_id)["job"].get("remaining") or {}
            return remaining.get("done")

        # every block's progress line follows a cut or two: the reader read on to the last
        wait_for(lambda: progress_done() == BLOCKS, 60.0, what="ada's last progress line read")
        flag.touch()
        assert station.wait_state(job_id, "succeeded", "failed", timeout=60)["state"] == "succeeded"
    finally:
        flag.unlink(missing_ok=True)
        flags.rmdir()

    record = joblog.read_rotation(log)
    assert record.rotations >= 3, record
    if can_punch_head(log.parent) and not can_cut_head(log.parent):
        assert record.data_from > 0, record  # her output.log begins past a hole
        assert os.lstat(log).st_size > record.data_from
    # her log and parts stay hers; the record is root's, readable, not hers to write
    for path in (log, *(joblog.part_path(log, part.number) for part in record.parts)):
        assert os.lstat(path).st_uid == ada.uid, path
    kept = os.lstat(joblog.record_path(log))
    assert (kept.st_uid, stat.S_IMODE(kept.st_mode)) == (0, joblog.RECORD_MODE)

    # what root serves of her log: between two announced gaps, every line, none torn
    stream, rest, runs = joblog.LogStream(log, 0, ada.uid), b"", [[]]
    while (piece := stream.read()) is not None:
        if piece.skipped:
            rest = b""
            runs.append([])
        *lines, rest = (rest + piece.data).split(b"\n")
        runs[-1] += [int(m.group(1)) for line in lines if (m := LINE.match(line))]
        assert all(LINE.match(line) or line.startswith(b"progress ") for line in lines)
    assert runs[-1][-1] == BLOCKS * 4096 - 1
    if rotates_losslessly(log.parent):  # else copy-truncate may lose a write, unannounced
        for run in filter(None, runs):
            assert run == list(range(run[0], run[0] + len(run))), "lines lost without a word"
