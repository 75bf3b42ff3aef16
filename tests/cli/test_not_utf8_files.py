"""A trace or a truth file that is not UTF-8 text (saved as Latin-1 by an old editor, or not
text at all) is one paragraph naming the file, where it stops being UTF-8 and what to do, with
exit 2; it was the codec's own words ("'utf-8' codec can't decode byte 0xe9 in position 15:
invalid continuation byte"). A file in UTF-16 or UTF-32 (with or without a byte-order mark) is
JSON that Python reads, and runs. Real files, the real command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TRACE = Path(__file__).resolve().parents[2] / "traces" / "carma-philly-t1.json"


def simulate(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUDESK_HOME": str(tmp_path / "home"), "GPUDESK_CONFIG": ""}
    command = [sys.executable, "-m", "gpudesk", "simulate", *args, "--policy", "fifo"]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)


def latin1_trace(tmp_path: Path) -> Path:
    text = TRACE.read_text().replace('"name": "carma-philly-t1"', '"name": "caf\u00e9"', 1)
    assert "caf\u00e9" in text
    path = tmp_path / "latin1.json"
    path.write_bytes(text.encode("latin-1"))  # é is the one byte 0xe9
    return path


def test_a_latin1_trace_is_one_paragraph_saying_where_it_is_not_utf8(tmp_path: Path) -> None:
    trace = latin1_trace(tmp_path)
    done = simulate(tmp_path, str(trace))
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr == (
        f"error: {trace} is not a JSON trace: byte 0xe9 at offset 15 (line 2, column 14) is "
        "not UTF-8, and a trace is UTF-8 text; save it as UTF-8\n"
    )


def test_a_binary_trace_and_a_latin1_truth_say_so_too(tmp_path: Path) -> None:
    picture = tmp_path / "trace.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    done = simulate(tmp_path, str(picture))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: {picture} is not a JSON trace: byte 0x89 at offset 0")
    assert "codec" not in done.stderr and done.stderr.count("\n") == 1, done.stderr

    truth = tmp_path / "truth.json"
    truth.write_bytes('{"contention": 0.5, "note\u00e9": 1}'.encode("latin-1"))
    done = simulate(tmp_path, str(TRACE), "--truth", str(truth))
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"error: --truth: {truth} is not JSON: byte 0xe9 at offset 25 (line 1, column 26) is "
        "not UTF-8, and a parameters file is UTF-8 text; save it as UTF-8\n"
    )


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32", "utf-8-sig"])
def test_a_trace_in_utf16_or_utf32_runs(tmp_path: Path, encoding: str) -> None:
    trace = tmp_path / f"{encoding}.json"
    trace.write_bytes(TRACE.read_text().encode(encoding))
    done = simulate(tmp_path, str(trace))
    assert done.returncode == 0, done.stderr
    assert "carma-philly-t1, 60 jobs" in " ".join(done.stdout.split())
