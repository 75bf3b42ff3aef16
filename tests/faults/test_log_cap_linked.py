"""A second name she gives her job's log cannot lift the log cap (the walk-through's "member
hard link to own output.log blocks rotation").

On a system engine a job's output.log is its owner's file in root's attempt folder (0711: she
may pass through it, not write it). She may hard-link it from a folder of hers on the same file
system (fs.protected_hardlinks lets a user link a file she owns; her job may do the same through
/proc/self/fd/1). The rotation opened the log as a file a user may have planted, and refused
one with a second name: "could not rotate ...: a file with a second name (a hard link)", once,
and the log grew past `[station] log_max_mb` for as long as the job printed, on the station's
disk, for everyone. Real system engine, real users, a real hard link.
"""

from __future__ import annotations

import base64
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import wait_for
from station_fixture import Station, make_station
from test_log_cap import MIB, disk_use
from test_log_cap_locked import printed

from gpudesk import joblog

CAP_MIB, KEEP, PRINT_MIB = 1, 1, 12

# Waits for the test's flag (its log's second name made), prints PRINT_MIB MiB as fast as it
# can, says so, and runs on.
PRINTER = textwrap.dedent("""\
    import os, sys, time
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.05)
    out = sys.stdout.buffer
    for _ in range(int(sys.argv[2])):
        out.write((b"x" * 127 + b"\\n") * (1024 * 1024 // 128))
        out.flush()
    out.write(b"printed\\n")
    out.flush()
    time.sleep(600)
""")


@pytest.fixture
def station() -> Iterator[Station]:
    yield from make_station()


def test_her_hard_link_to_her_log_does_not_lift_its_cap(station: Station) -> None:
    """Before the fix: the rotation refused her log, which grew to all 12 MiB, and the engine
    refused to serve it to her ("a file with a second name")."""
    ada = station.users["ada"]
    station.ok(None, "configure", station={"log_max_mb": CAP_MIB, "log_keep": KEEP})
    # a folder of hers on the station's file system, the flag in it hers to make too
    hers = station.state_dir.parent / "ada-files"
    hers.mkdir(mode=0o700)
    os.chown(hers, ada.uid, ada.gid)
    flag = hers / "go"
    command = ["python3", "-c", PRINTER, str(flag), str(PRINT_MIB)]
    job_id = station.submit(
        "ada", {"name": "linked", "command": command, "workdir": "/", "gpus": 0}
    )
    try:
        station.wait_state(job_id, "running")
        log = Path(station.job(job_id)["log"])
        second = hers / "keep.log"
        made = station.run_as("ada", "ln", str(log), str(second))
        assert made.returncode == 0, made.stderr  # she can: the log is hers
        assert os.lstat(log).st_nlink == 2
        station.run_as("ada", "touch", str(flag))
        wait_for(lambda: printed(log) > PRINT_MIB * MIB, 60.0, what="the job to print")
        bound = CAP_MIB * MIB * (KEEP + 1) + 64 * 1024
        wait_for(lambda: disk_use(log.parent) <= bound, 10.0, what="her log capped")
        assert station.job(job_id)["state"] == "running"
        # capped in place: her name still names the log, which holds the cap's worth
        assert os.path.samestat(os.lstat(second), os.lstat(log))
        assert os.lstat(second).st_uid == ada.uid
        assert joblog.read_rotation(log).rotations >= 1
        # and she still reads it through the engine, her name or not
        reply = station.ok("ada", "log", job=job_id)
        assert b"x" * 127 in base64.b64decode(reply["data"]), reply
        said = station.log.read_text()
        assert "has 2 names" in said and "capped in place" in said, said
    finally:
        station.ok(None, "cancel", jobs=[job_id], grace=0)
