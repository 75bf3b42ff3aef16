"""A job's escape sequences never drive someone else's terminal (issue 35, finding 9).

A job's output may hold control characters and escape sequences: a window title
(`ESC ] 0 ; … BEL`), a cleared screen (`ESC [ 2 J`), a rewritten line. Shown to anyone but the
job's owner (an admin reading it through the engine), or on a terminal by `gpudesk logs` (unless
`--raw`), the desk or `gpudesk run`, they are spelled out (`\\x1b`: gpudesk.text.printable),
never obeyed. The engine test runs a real system engine with real users (root only; it says
why it skips); the rest need nothing special.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import EngineHandle
from station_fixture import Station, make_station
from terminal import on_a_terminal

from gpudesk import render
from gpudesk.joblog.oom import gpu_oom_line
from gpudesk.screens.feed import read_log_tail
from gpudesk.text import printable, printable_bytes

GPUDESK = [sys.executable, "-m", "gpudesk"]
PRINTF = r"before\033]0;pwned\007\033[2Jafter\n"  # printf(1)'s spelling of RAW
RAW = b"before\x1b]0;pwned\x07\x1b[2Jafter\n"
SPELLED = b"before\\x1b]0;pwned\\x07\\x1b[2Jafter\n"


@pytest.fixture
def station() -> Iterator[Station]:
    yield from make_station()


def test_a_job_s_escape_sequences_reach_no_one_else_s_terminal(station: Station) -> None:
    """Finding 9: ada's job sets the window title and clears the screen; an admin reading it
    gets those bytes spelled out (no ESC, no BEL), while ada, reading her own, gets her bytes."""
    job = {"name": "titler", "command": ["printf", PRINTF], "workdir": "/", "gpus": 0}
    job_id = station.submit("ada", job)
    assert station.wait_state(job_id, "succeeded", "failed")["state"] == "succeeded"
    served = base64.b64decode(station.ok("admin", "log", job=job_id)["data"])
    assert b"\x1b" not in served and b"\x07" not in served, served
    assert served == SPELLED
    assert base64.b64decode(station.ok("ada", "log", job=job_id)["data"]) == RAW


def test_gpudesk_logs_spells_escapes_out_on_a_terminal_unless_raw(engine: EngineHandle) -> None:
    """On a terminal `gpudesk logs` shows a job's escape sequences instead of obeying them
    (as `less`); `--raw`, or a pipe, gets the bytes as they are (as `cat`)."""
    [job_id] = engine.submit({"name": "printer", "command": ["printf", PRINTF]})
    engine.wait_state(job_id, "succeeded")
    shown = on_a_terminal([*GPUDESK, "logs", str(job_id)])
    assert b"\x1b" not in shown and b"\x07" not in shown, shown
    assert SPELLED.rstrip() in shown  # (a terminal writes the newline as \r\n)
    assert RAW.rstrip() in on_a_terminal([*GPUDESK, "logs", "--raw", str(job_id)])
    piped = subprocess.run([*GPUDESK, "logs", str(job_id)], capture_output=True, timeout=60)
    assert piped.stdout == RAW, piped


# ----------------------------------------------------------------- the desk and the run report
ESCAPES = b"before\x1b]0;pwned\x07\x1b[2J\xc2\x9b31mafter\n"


@pytest.mark.parametrize(
    "show",
    [
        lambda path: "\n".join(read_log_tail(str(path))),
        lambda path: render.last_line(str(path)),
    ],
    ids=["desk log tail", "run report's last output"],
)
def test_the_desk_and_the_run_report_never_pass_escapes_through(
    tmp_path: Path, show: Callable[[Path], str]
) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(ESCAPES)
    shown = show(log)
    assert not any(ch in shown for ch in "\x1b\x07\x9b"), repr(shown)
    assert shown == r"before\x1b]0;pwned\x07\x1b[2J\x9b31mafter"


def test_printable_spells_every_control_but_newline_and_tab() -> None:
    controls = "".join(map(chr, [*range(0x20), 0x7F, *range(0x80, 0xA0)]))
    shown = printable(controls)
    assert shown.count("\\x") == len(controls) - 2
    assert "\n" in shown and "\t" in shown
    assert printable("é ° — ok") == "é ° — ok"
    assert printable_bytes(controls.encode()).decode() == shown


def test_the_owners_own_progress_bars_keep_their_carriage_returns_and_nothing_else() -> None:
    """`gpudesk logs` of her own job on a terminal: a tqdm bar's \\r still redraws in place,
    while its escape sequences are spelled out as for anyone (someone else's `\\r`, which
    could hide a line under the next, is spelled out too)."""
    bar = "epoch 1:  50%\r\x1b[2Kepoch 1: 100%\n"
    assert printable(bar, keep_carriage_return=True) == "epoch 1:  50%\r\\x1b[2Kepoch 1: 100%\n"
    assert printable(bar) == "epoch 1:  50%\\x0d\\x1b[2Kepoch 1: 100%\n"


def test_an_oom_line_that_becomes_the_jobs_reason_is_spelled_out(tmp_path: Path) -> None:
    """The line that shows a GPU OOM becomes the job's reason, which every member sees in
    `gpudesk show` and the queue: no escape sequence of the job's rides in with it."""
    log = tmp_path / "output.log"
    log.write_bytes(b"RuntimeError: CUDA out of memory.\x1b]0;pwned\x07\x1b[2J\n")
    line = gpu_oom_line(log, 1)
    assert line == r"RuntimeError: CUDA out of memory.\x1b]0;pwned\x07\x1b[2J"
