"""The engine's own engine.log is rotated past ENGINE_LOG_MAX_MIB, keeping ENGINE_LOG_KEEP
earlier parts, as the jobs' logs are (it grew for good before)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudesk import joblog
from gpudesk.core.station import StationConfig
from gpudesk.engine import logcap
from gpudesk.engine.logcap import ENGINE_LOG_KEEP, ENGINE_LOG_MAX_MIB, LogCap
from gpudesk.units import BYTES_PER_MIB


def test_the_engine_log_is_rotated_past_its_cap_keeping_two_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "engine.log"
    cap = LogCap(lambda: StationConfig(), lambda: [], lambda: [], str(log))
    line = b"2026-11-30 23:40:00 INFO gpudesk.engine: placed job 7 on gpu:0 (mps)\n"
    clock = [1000.0]
    monkeypatch.setattr(logcap.time, "monotonic", lambda: clock[0])
    for _ in range(4):
        with log.open("ab") as out:
            out.write(line * (ENGINE_LOG_MAX_MIB * BYTES_PER_MIB // len(line) + 10))
        cap.check()
        clock[0] += logcap.ENGINE_LOG_CHECK_S
        assert log.stat().st_size < BYTES_PER_MIB  # rotated: the log starts again
    parts = [joblog.part_path(log, n) for n in range(1, 5)]
    kept = [p for p in parts if p.exists()]
    assert len(kept) == ENGINE_LOG_KEEP and kept == parts[-ENGINE_LOG_KEEP:]
    assert all(p.stat().st_size <= ENGINE_LOG_MAX_MIB * BYTES_PER_MIB for p in kept)
    # under the cap nothing happens, and a missing log (a system engine's) is no error
    log.write_bytes(line)
    clock[0] += logcap.ENGINE_LOG_CHECK_S
    cap.check()
    assert log.read_bytes() == line
    LogCap(lambda: StationConfig(), lambda: [], lambda: [], str(tmp_path / "none")).check()


def test_the_log_is_the_engines_to_rotate_only_when_it_is_the_engines_own_stdout(
    tmp_path: Path,
) -> None:
    """An engine started by `gpudesk engine start` writes engine.log as its stdout, a personal
    one or a system one under sysvinit (which was never rotated): it rotates it. Under systemd
    its stdout is the journal's, and engine.log, if any, is not its own; nor is a link."""
    import subprocess
    import sys

    log = tmp_path / "engine.log"
    ask = [sys.executable, "-c", f"from gpudesk import joblog; import sys; "
           f"sys.stderr.write(repr(joblog.written_by_stdout({str(log)!r})))"]  # fmt: skip
    with log.open("ab") as out:
        own = subprocess.run(ask, stdout=out, stderr=subprocess.PIPE, text=True, check=True)
    assert own.stderr == repr(str(log))
    piped = subprocess.run(ask, capture_output=True, text=True, check=True)  # the journal's pipe
    assert piped.stderr == "None"
    link = tmp_path / "link.log"
    link.symlink_to(log)
    ask[-1] = ask[-1].replace(repr(str(log)), repr(str(link)))
    with log.open("ab") as out:
        linked = subprocess.run(ask, stdout=out, stderr=subprocess.PIPE, text=True, check=True)
    assert linked.stderr == "None"
