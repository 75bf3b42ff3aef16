"""A user's path in a line that says what was done (`plot: wrote FILE`, `FILE: N row(s)
appended`, an export's summary, `saved to`, the engine's home in `engine start / status / stop`
and a run's first line, a job's log in `show`) is spelled out as the error paragraphs spell it
(`\\x1b`, `\\xff`, `\\u202e`): an ESC in a folder's name reached the terminal raw, and a byte
that is not UTF-8 was shown as Python's `\\udcff`. Real processes, a real engine, real files."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import home_at

from gpudesk.paths import Home

ROOT = Path(__file__).resolve().parents[2]
TRACE = str(ROOT / "traces" / "carma-philly-t1.json")
QUICKSTART = str(ROOT / "profiles" / "quickstart.toml")
ESC = "h\x1b[2J"  # an escape sequence that clears the screen
SPELLED_ESC = "h\\x1b[2J"
BAD = os.fsdecode(b"a\xffb\x1b[2J")  # a byte that is not UTF-8, then an escape sequence
SPELLED_BAD = "a\\xffb\\x1b[2J"


def gpudesk(*args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUDESK_CONFIG": "", "COLUMNS": "200"}
    if home is not None:
        env["GPUDESK_HOME"] = str(home)
    command = [sys.executable, "-m", "gpudesk", *args]
    return subprocess.run(
        command, capture_output=True, text=True, errors="surrogateescape", env=env, timeout=120
    )


def said(done: subprocess.CompletedProcess[str]) -> str:
    """Everything the command wrote, checked to hold no raw ESC and no Python repr of a byte."""
    text = done.stdout + done.stderr
    assert "\x1b" not in text and "\\udc" not in text and "\udcff" not in text, text
    return text


def test_the_plot_an_export_and_a_saved_calibration_name_their_files_spelled_out(
    tmp_path: Path,
) -> None:
    folder = tmp_path / BAD
    folder.mkdir()
    plot = gpudesk("simulate", TRACE, "--policy", "fifo", "--plot", str(folder / "x.svg"))
    assert plot.returncode == 0, plot.stderr
    assert f"plot: wrote {tmp_path}/{SPELLED_BAD}/x.svg\n" in said(plot)

    # an export refuses a control character in its folder (sbatch's patterns); a bidi
    # override, which reorders what the reader sees, is spelled out
    export = gpudesk("export", "slurm", QUICKSTART, str(tmp_path / "r\u202ex"), "--no-ask")
    assert export.returncode == 0, export.stderr
    assert f" to {tmp_path}/r\\u202ex " in said(export) and "\u202e" not in export.stdout
    assert f"submit: {tmp_path}/r\\u202ex/submit.sh" in export.stdout

    home = tmp_path / ESC
    saved = gpudesk("calibrate", "--station", "sim:h100", "--save", home=home)
    assert saved.returncode == 0, saved.stderr
    assert f"saved to {home.parent}/{SPELLED_ESC}/calibration-" in said(saved)


def test_a_home_without_an_engine_is_named_spelled_out(tmp_path: Path) -> None:
    home = tmp_path / ESC
    shown = f"the personal engine of {tmp_path}/{SPELLED_ESC}"
    status = gpudesk("engine", "status", home=home)
    assert f"engine: not running\ntalks to: {shown} (from GPUDESK_HOME)\n" in said(status)
    stop = gpudesk("engine", "stop", home=home)
    assert stop.returncode == 0 and f"{shown} is not running" in said(stop)
    queue = gpudesk("queue", home=home)
    assert f"no engine is running for {tmp_path}/{SPELLED_ESC}" in said(queue)


@pytest.fixture
def escape_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    """A GPUDESK_HOME with an escape sequence in its name; its engine stopped after the test,
    passed or failed."""
    with home_at(tmp_path / ESC, monkeypatch) as home:
        yield home


@pytest.mark.slow(4)
def test_a_run_its_report_and_its_rows_name_the_home_and_files_spelled_out(
    tmp_path: Path, escape_home: Home
) -> None:
    home = escape_home
    profile = tmp_path / f"p{ESC}.toml"
    profile.write_text(
        'name = "rep"\n[station]\nbackend = "none"\nslots = 2\n'
        '[[jobs]]\nname = "hello"\ncommand = ["echo", "hi"]\n'
    )
    shown_home = f"{tmp_path}/{SPELLED_ESC}"
    started = gpudesk("engine", "start", home=home.root)
    assert started.returncode == 0, started.stderr
    assert f"the personal engine of {shown_home}\n" in said(started)
    run = gpudesk("run", str(profile), home=home.root)
    assert run.returncode == 0, run.stdout + run.stderr
    text = " ".join(said(run).split())  # the first line is wrapped to the terminal
    assert f"from {tmp_path}/p{SPELLED_ESC}.toml on the personal engine of {shown_home}" in text
    assert f"from {tmp_path}/p{SPELLED_ESC}.toml [station]" in text  # what it did not apply
    assert f"output.log under {shown_home}/jobs/" in text
    show = gpudesk("show", "1", home=home.root)
    assert f"log {shown_home}/jobs/1/1/output.log" in said(show)
    rows = tmp_path / f"e{ESC}.csv"
    emissions = gpudesk("history", "--format", "codecarbon", "--output", str(rows), home=home.root)
    assert emissions.returncode == 0, emissions.stderr
    assert f"{tmp_path}/e{SPELLED_ESC}.csv: " in said(emissions)
    status = gpudesk("engine", "status", home=home.root)
    assert f"talks to: the personal engine of {shown_home}\n" in said(status)
