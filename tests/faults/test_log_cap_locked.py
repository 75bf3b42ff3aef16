"""A job that holds its own output.log locked cannot lift the log cap (issue 36, finding 1's
other half).

The engine rotates a log only when it gets the log's exclusive lock without waiting; a reader
holds the shared one for one read of at most a MiB. A job holding a lock of its own on its
output.log (flock, shared or exclusive) kept every rotation from happening, so its log grew
past `[station] log_max_mb` for as long as it ran. Real engine, real job, real flock.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from conftest import EngineHandle, wait_for
from test_log_cap import MIB, disk_use

from gpudesk import joblog
from gpudesk.engine.logcap import LOCK_OVERRIDE_S
from gpudesk.paths import Home

# Locks its own stdout (output.log), prints 20 MiB as fast as it can, says so, and runs on.
LOCKED_PRINTER = textwrap.dedent("""\
    import fcntl, sys, time
    fcntl.flock(1, fcntl.LOCK_SH if sys.argv[1] == "shared" else fcntl.LOCK_EX)
    out = sys.stdout.buffer
    for _ in range(20):
        out.write((b"x" * 127 + b"\\n") * (1024 * 1024 // 128))
        out.flush()
    out.write(b"printed\\n")
    out.flush()
    time.sleep(600)
""")


def printed(log: Path) -> int:
    """Bytes the job has written so far: the record's base plus output.log's size, read
    without the lock the job holds."""
    try:
        return joblog.read_rotation(log).base + log.stat().st_size
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize("lock", ["shared", "exclusive"])
def test_a_job_locking_its_own_log_is_capped_all_the_same(
    home: Home, tmp_path: Path, lock: str
) -> None:
    cap_mib, keep = 1, 1
    engine = EngineHandle(home)
    engine.start(log_max_mb=cap_mib, log_keep=keep)
    script = tmp_path / "locked_printer.py"
    script.write_text(LOCKED_PRINTER)
    (job_id,) = engine.submit({"name": "locked", "command": [sys.executable, str(script), lock]})
    try:
        folder = home.attempt_dir(job_id, 1)
        log = folder / "output.log"
        wait_for(
            lambda: folder.is_dir() and printed(log) > 20 * MIB,
            60.0,
            what="the job to print its 20 MiB",
        )
        bound = cap_mib * MIB * (keep + 1) + 64 * 1024
        # it holds the lock and runs on: capped once the lock has been held LOCK_OVERRIDE_S
        wait_for(
            lambda: engine.job(job_id).state == "running" and disk_use(folder) <= bound,
            LOCK_OVERRIDE_S + 20.0,
            what="the locked log capped",
        )
        assert engine.job(job_id).state == "running"
    finally:
        engine.client.request("cancel", jobs=[job_id], grace=0)
