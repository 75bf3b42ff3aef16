"""What `gpudesk top` writes fits the terminal it writes to: the characters the output's
encoding carries (a latin-1 or ASCII terminal gets `...` and `?`, never an error). Real
processes: `gpudesk top` as a user runs it."""

from __future__ import annotations

import fcntl
import json
import os
import select
import struct
import subprocess
import sys
import termios

import pytest
from conftest import EngineHandle, wait_for

from gpudesk import render
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


def frames_on_a_terminal(rows: int, columns: int, until: bytes) -> list[list[str]]:
    """The frames a live top draws on a terminal of `rows` x `columns` (set as a window's size
    is, on the pty), read until one holds `until`; each frame's lines."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    process = subprocess.Popen(
        [*TOP, "--interval", "0.2"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**env, "TERM": "xterm"},
        start_new_session=True,
    )
    output = bytearray()
    try:

        def drawn() -> bool:
            if select.select([master], [], [], 0.1)[0]:
                output.extend(os.read(master, 65536))
            frames = output.split(b"\x1b[H\x1b[2J")[1:-1]  # the last may be half written
            return any(until in frame for frame in frames)

        wait_for(drawn, 30.0, what=f"a frame with {until!r}")
    finally:
        process.kill()
        process.wait()
        os.close(slave)
        os.close(master)
    frames = bytes(output).split(b"\x1b[H\x1b[2J")[1:-1]
    return [frame.decode().split("\r\n") for frame in frames if until in frame]


def test_a_frame_fits_the_window_and_keeps_its_header(home: Home) -> None:
    handle = EngineHandle(home)
    handle.start(slots=12, backend="sim:h100x8", sample_interval=0.2)
    ids = handle.submit(*({"name": f"job{n}", "command": ["sleep", "60"]} for n in range(12)))
    for job_id in ids:
        handle.wait_state(job_id, "running")
    (frame, *_) = frames_on_a_terminal(24, 80, b"more jobs")
    assert len(frame) <= 24, "\n".join(frame)
    assert frame[0].startswith("gpudesk top  ") and "SIMULATED" in frame[0]
    assert frame[1].startswith(f"engine pid {handle.pid}, ")
    assert frame[2].startswith("CPU ")
    assert [line.split()[:2] for line in frame if line.startswith("GPU ")] == [
        ["GPU", str(n)] for n in range(8)
    ]
    assert frame[-1].startswith("… ") and frame[-1].endswith(
        "more jobs (a taller window shows them)"
    )
    shown = [line for line in frame if line.split()[:1] in ([str(i)] for i in ids)]
    hidden = int(frame[-1].split()[1])
    assert shown and len(shown) + hidden == len(ids)
    assert all(len(line) <= 80 for line in frame)
    handle.client.request("cancel", jobs=ids)


@pytest.mark.parametrize("columns", [30, 12])
def test_a_narrow_window_gets_lines_no_wider_than_it(
    home: Home, columns: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUDESK_BACKEND", "sim:dgx-station-a100")
    (frame, *_) = frames_on_a_terminal(24, columns, b"engine")
    assert frame[0].startswith("gpudesk top"[: columns - 1])
    assert all(render.cell_width(line) <= columns for line in frame), frame
    if columns >= 30:  # the label comes before what such a width cuts (clock, names)
        assert frame[0].startswith("gpudesk top  SIMULATED"), frame
        gpu_lines = [line for line in frame if line.startswith("GPU ")]
        assert gpu_lines and all("(SIMULATED)" in line for line in gpu_lines), frame


def test_a_window_too_short_for_a_line_per_gpu_counts_the_rest() -> None:
    from gpudesk.cli.top_frame import fit_rows

    header = ["gpudesk top", "engine not running", "CPU"]
    gpus = [[f"GPU {n}", "  SM", "  MEM"] for n in range(8)]
    lines = [[f"GPU {n} one line"] for n in range(8)]
    jobs = ["", "ID  NAME", "1  a", "2  b"]
    frame = fit_rows(header, gpus, lines, jobs, 9)
    assert frame == [
        *header,
        "GPU 0 one line",
        "GPU 1 one line",
        "… 6 more GPUs (a taller window shows them)",
        "",
        "ID  NAME",
        "… 2 more jobs (a taller window shows them)",
    ]
    assert fit_rows(header, gpus, lines, jobs, 2) == header[:2]  # the header, cut last
    every = [*header, *(line for gpu in gpus for line in gpu), *jobs]
    assert fit_rows(header, gpus, lines, jobs, None) == every  # no rows: a pipe gets it all
