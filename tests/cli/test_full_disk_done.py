"""Commands that write files as well as a report, into a full disk (/dev/full as stdout): the
error line says what was done all the same (gpudesk/cli/std_streams.py), so a script that
retries knows the files are there; where nothing was done, it says the error alone. Beside
tests/engine/test_unwritable_output.py, which does the same for the engine's commands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GPUDESK = [sys.executable, "-m", "gpudesk"]
FULL = "error: cannot write the output (No space left on device); "

pytestmark = pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")


def into_full_disk(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GPUDESK_BACKEND"}
    env["GPUDESK_HOME"] = str(home)
    with open("/dev/full", "w") as full:
        return subprocess.run(
            [*GPUDESK, *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120, env=env
        )


def test_an_export_says_its_scripts_were_written(tmp_path: Path) -> None:
    out = tmp_path / "scripts"
    said = into_full_disk(tmp_path / "home", "export", "slurm", "quickstart", str(out), "--no-ask")
    assert (said.returncode, said.stderr) == (
        1,
        f"{FULL}the scripts were written into {out} all the same: {out}/submit.sh submits them\n",
    )
    assert (out / "submit.sh").is_file()


def test_a_selection_says_it_was_cached_and_a_clear_that_it_emptied_the_cache(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    run = ("select", "run", "gpudesk.workloads.data:make_digits", "--preset", "stratified-25")
    said = into_full_disk(home, *run)
    assert (said.returncode, said.stderr) == (
        1,
        f"{FULL}the selection was computed and cached all the same: gpudesk select list shows it\n",
    )
    # reused from the cache: nothing was done that the error line should name
    said = into_full_disk(home, *run)
    assert (said.returncode, said.stderr) == (
        1,
        "error: cannot write the output: No space left on device\n",
    )
    said = into_full_disk(home, "select", "clear")
    assert (said.returncode, said.stderr) == (
        1,
        f"{FULL}the selection cache was emptied all the same\n",
    )
    listed = subprocess.run(
        [*GPUDESK, "select", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "GPUDESK_HOME": str(home)},
    )
    assert "the selection cache is empty" in listed.stdout, listed


def test_a_saved_calibration_says_where_its_fit_is(tmp_path: Path) -> None:
    home = tmp_path / "home"
    said = into_full_disk(home, "calibrate", "--station", "sim:h100", "--seconds", "0.5", "--save")
    (fit,) = home.glob("calibration-*.json")
    assert (said.returncode, said.stderr) == (1, f"{FULL}the fit was saved all the same to {fit}\n")
