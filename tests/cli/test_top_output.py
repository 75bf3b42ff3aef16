"""What `gpudesk top` writes fits the terminal it writes to: the characters the output's
encoding carries (a latin-1 or ASCII terminal gets `...` and `?`, never an error). Real
processes: `gpudesk top` as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import EngineHandle, wait_for

from gpudesk.paths import Home

TOP = [sys.executable, "-m", "gpudesk", "top"]


def top(*args: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*TOP, *args], capture_output=True, env={**os.environ, **env}, timeout=60)


@pytest.mark.parametrize("encoding", ["latin-1", "ascii"])
def test_top_degrades_to_what_the_output_encoding_carries(home: Home, encoding: str) -> None:
    # 60 columns cut the GPU lines (`…` where the encoding has it)
    done = top("--once", PYTHONIOENCODING=encoding, COLUMNS="60", GPUDESK_BACKEND="sim:h100x8")
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    text = done.stdout.decode(encoding)  # what the terminal shows, as it decodes it
    lines = text.splitlines()
    assert all(len(line) <= 60 for line in lines), text
    assert any(line.endswith("...") for line in lines), text
    assert "GPU 7" in text


def test_a_job_named_in_characters_the_output_lacks(engine: EngineHandle) -> None:
    name = "训练—大"  # wide characters and an em dash: none in latin-1
    (job_id,) = engine.submit({"name": name, "command": ["sleep", "60"]})
    engine.wait_state(job_id, "running")
    wait_for(lambda: json.loads(top("--json").stdout)["jobs"], 10.0, interval=0.2, what="the job")
    done = top("--once", PYTHONIOENCODING="latin-1", COLUMNS="80")
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    row = next(
        line
        for line in done.stdout.decode("latin-1").splitlines()
        if line.split()[:1] == [str(job_id)]
    )
    assert "????-??" in row  # each column a character took, and the dash's stand-in
    utf8 = top("--once", PYTHONIOENCODING="utf-8", COLUMNS="80")
    assert name in utf8.stdout.decode()  # where the output carries it, the name as it is
    engine.client.request("cancel", jobs=[job_id])
