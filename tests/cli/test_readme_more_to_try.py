"""The README's "More to try" lines, run one after another in one home as a new user types them,
leave her engine's backend, policy and slots as they were: a profile's [station] is applied only
with `--apply-station`, and a profile that asks for a SIMULATED station runs on one of its own
(gpudesk.api.own_station). Each line that submits jobs is left with Ctrl-C once its jobs are
under way (their training is not what is checked here); the others run to their end."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EngineHandle, wait_for

from gpudesk.api.connection import engine_pid
from gpudesk.paths import Home

ROOT = Path(__file__).resolve().parents[2]
# A progress line of `gpudesk run` ("16:07:00  heavy-h1024#1  running on gpu:0/mps ...") or of
# `gpudesk select compare` ("16:07:00  split 0 seed 0 full: ..."): its jobs are under way.
UNDER_WAY = re.compile(r"^\d\d:\d\d:\d\d  \S", re.MULTILINE)


def more_to_try() -> list[str]:
    """The command lines of the README's "More to try" block, comments taken off."""
    text = (ROOT / "README.md").read_text()
    block = text.split("More to try after the quickstart", 1)[1].split("```sh", 1)[1]
    block = block.split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def station_settings(engine: EngineHandle) -> tuple[str, str, object]:
    station = engine.client.request("status")["station"]
    return station["backend"], station["policy"], station["slots"]


@pytest.mark.slow(11)
def test_the_more_to_try_lines_leave_the_engine_as_it_was(
    engine: EngineHandle, home: Home, tmp_path: Path
) -> None:
    lines = more_to_try()
    submitting = [line for line in lines if re.search(r"gpudesk (run|select compare) ", line)]
    assert len(submitting) >= 3, lines  # the sweep, the shared loader, the selections
    before = station_settings(engine)
    for number, line in enumerate(lines):
        words = shlex.split(line)
        env = {**os.environ, "GPUDESK_HOME": str(home.root), "GPUDESK_CONFIG": ""}
        while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        assert words[0] == "gpudesk", line
        if len(words) == 1:
            continue  # the desk: a terminal app, which changes no setting by opening
        out = tmp_path / f"line-{number}.txt"
        with out.open("w") as sink:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gpudesk", *words[1:]],
                cwd=ROOT,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
            try:
                if line in submitting:
                    wait_for(
                        lambda out=out, proc=proc: (
                            UNDER_WAY.search(out.read_text()) or proc.poll() is not None
                        ),
                        120,
                        what=f"{line!r} to get its jobs under way",
                    )
                    proc.send_signal(signal.SIGINT)
                proc.wait(180)
            finally:
                if proc.poll() is None:
                    proc.kill()
        said = out.read_text()
        assert "Traceback" not in said, said
        assert station_settings(engine) == before, f"after {line!r}:\n{said}"
        if "dgx-station-sweep" in line:
            assert "SIMULATED station of its own" in " ".join(said.split()), said
    # the simulated station's own engine stopped with the run that started it
    assert engine_pid(Home(home.root / "simulated" / "dgx-station-a100")) is None
