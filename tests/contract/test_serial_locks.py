"""The suite's own rule for `serial` tests (conftest.pytest_runtest_protocol): its locks belong to
one xdist run, and a pytest that a test starts is not part of it."""

from __future__ import annotations

import fcntl
import os
import subprocess
import tempfile
import uuid
from pathlib import Path

from conftest import inner_pytest

ROOT = Path(__file__).resolve().parents[2]


def test_a_pytest_a_test_starts_does_not_wait_on_the_runs_serial_gate() -> None:
    """tests/cli/test_sdist.py runs the sdist's tests in a pytest of their own, which inherits
    PYTEST_XDIST_TESTRUNUID. Read from the environment, that put its tests at the outer run's
    gate: closed by a serial test that waited for the room the sdist test held, both waited until
    the inner run's 300 s timeout (one CI run: 1,008 s). Here the gate of a run is held closed
    and a pytest told that run's id must still run its tests at once."""
    run = uuid.uuid4().hex
    shared = Path(tempfile.gettempdir()) / f"gpudesk-tests-{run}"
    shared.mkdir()
    try:
        with open(shared / "serial-gate.lock", "a") as gate:
            fcntl.flock(gate, fcntl.LOCK_EX)  # a serial test of that run, waiting for its room
            env = {**os.environ, "PYTEST_XDIST_TESTRUNUID": run}
            done = subprocess.run(
                inner_pytest("-n", "0", "tests/core/test_reply_encoding.py"),
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        for path in shared.iterdir():
            path.unlink()
        shared.rmdir()
