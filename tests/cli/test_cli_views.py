"""The CLI's tables at 80 columns, rendered from typed rows: `history` (the columns that fit,
the energy estimate's "~"), `simulate`, and the one home for clipping names in the middle."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from conftest import SWEEP_NAMES as SWEEP
from conftest import lines_within as fits
from test_api_prepass import job_view  # same folder: on sys.path under pytest
from test_plots import history_row

from gpudesk import render
from gpudesk.cli.history_output import history_row as row_of
from gpudesk.cli.history_output import history_table as _table


def test_clip_apart_keeps_a_sweeps_names_apart_where_a_plain_clip_does_not() -> None:
    plain = [render.clip(name, 15) for name in SWEEP]  # what the views used to show
    assert plain[:2] == ["light-lr0.01-h…", "light-lr0.01-h…"]
    clipped = render.clip_apart(list(SWEEP), 15)
    assert clipped == ["ligh….01-h512-1", "ligh….01-h512-2", "ligh…001-h512-1", "heav…01-h1024-1"]
    assert render.clip_apart(["short", "names"], 15) == ["short", "names"]


def sweep_history() -> list:
    # ended an hour and a half ago: ENDED shows the time of day (a job that ended over 20 h
    # ago shows its date, a wider column; a fixed date made this test fail the next day)
    day = dt.datetime.now() - dt.timedelta(hours=2)
    return [
        replace(
            history_row("ada", day, 0.5, 1, 2.0),
            id=10 + number,
            name=name,
            cpu_s=1234.0,
            rss_peak_mib=2048.0,
            gpu_memory_peak_mib=8123.0,
            co2e_g=0.8,
            energy_estimate=number % 2 == 0,  # on a shared GPU: its share, estimated
            placement="gpu:0/mps",
        )
        for number, name in enumerate(SWEEP)
    ]


def test_wide_characters_take_two_columns_and_keep_the_columns_in_line() -> None:
    """A job named `训练-模型-大` is 12 columns wide on a terminal, not 7: measured by len() it
    shifted every column after it."""
    table = render.table(
        ("ID", "NAME", "STATE"), [(1, "训练-模型-大", "running"), (22, "plain", "queued")]
    )
    lines = table.splitlines()
    # STATE starts at the same column on every line, counted in terminal cells
    starts = [render.cell_width(line[: line.index(state)]) for line, state in
              zip(lines, ("STATE", "running", "queued"), strict=True)]  # fmt: skip
    assert starts == [starts[0]] * 3 and starts[0] == len("ID  ") + 12 + 2
    # clipped by cells: never wider than asked, and a wide character is never cut in half
    for width in range(1, 14):
        for clipped in (
            render.clip("训练-模型-大", width),
            render.clip_middle("训练-模型-大-最后", width),
        ):
            assert render.cell_width(clipped) <= width, (width, clipped)
    narrow = render.table(
        ("ID", "NAME", "STATE"),
        [(1, "训练-模型-大-很长的名字", "running"), (2, "plain", "queued")],
        max_widths={1: 10},
        width=40,
        middle=[1],
    )
    lines = narrow.splitlines()
    starts = [render.cell_width(line[: line.index(state)]) for line, state in
              zip(lines, ("STATE", "running", "queued"), strict=True)]  # fmt: skip
    assert starts == [starts[0]] * 3 and all(render.cell_width(line) <= 40 for line in lines)
    assert render.cell_width("plain") == 5 and render.pad("大", 4) == "大  "


def test_history_at_80_columns_names_each_job_and_marks_estimates() -> None:
    ended = render.clock(sweep_history()[0].ended_at)
    assert fits(_table(sweep_history(), 80)) == [
        "ID  NAME              STATE      EXIT  ENDED     WALL    RAN ON  GPU-S    ENERGY",
        f"10  light….01-h512-1  succeeded     0  {ended}  30m00s  gpu:0…   1800  ~2.00 Wh",
        f"11  light….01-h512-2  succeeded     0  {ended}  30m00s  gpu:0…   1800   2.00 Wh",
        f"12  light…001-h512-1  succeeded     0  {ended}  30m00s  gpu:0…   1800  ~2.00 Wh",
        f"13  heavy…01-h1024-1  succeeded     0  {ended}  30m00s  gpu:0…   1800   2.00 Wh",
        "(USER, CPU-S, CO2E, MAXRSS, GPU MEM with --wide, or in --format csv)",
    ]
    wide = _table(sweep_history(), None).splitlines()
    assert wide[0].split() == [
        "ID", "NAME", "USER", "STATE", "EXIT", "ENDED", "WALL", "RAN", "ON", "GPU-S", "CPU-S",
        "MAXRSS", "GPU", "MEM", "ENERGY", "CO2E",
    ]  # fmt: skip
    assert wide[1].split()[1] == "light-lr0.01-h512-1" and wide[1].split()[-6:] == [
        "1234", "2048M", "8123M", "~2.00", "Wh", "0.8g",
    ]  # fmt: skip


def test_history_at_40_columns_keeps_ids_and_states_and_a_wide_one_whole_names() -> None:
    lines = fits(_table(sweep_history(), 40), 40)
    assert lines[0].split() == ["ID", "NAME", "STATE", "WALL"]  # EXIT gave way to a name of 12
    assert [line.split()[0] for line in lines[1:5]] == ["10", "11", "12", "13"]
    assert {line.split()[2] for line in lines[1:5]} == {"succeeded"}
    assert lines[5].startswith("(EXIT, ENDED, RAN ON") and lines[-1].endswith("--format csv)")
    long = replace(sweep_history()[0], name="x" * 60)  # no room cap at 200 columns
    assert _table([long], 200).splitlines()[1].split()[1] == "x" * 60


def test_history_wide_keeps_every_cell_whole() -> None:
    """`--wide` (and a pipe) is for reading all of it, or for a script: no name, user or
    placement is clipped, however long."""
    name, user = "light-lr0.001-h512-wd0.01-seed42-warmup100", "a.very.long.username"
    long = replace(sweep_history()[0], name=name, user=user, placement="gpu:0/mig:1g.5gb/3")
    cells = _table([long], None).splitlines()[1].split()
    assert cells[1:3] == [name, user] and "gpu:0/mig:1g.5gb/3" in cells


def test_history_marks_a_shared_gpus_energy_as_an_estimate_as_show_does() -> None:
    shared = job_view(id=3, state="succeeded", usage={"total_j": 7200.0, "estimate": True})
    alone = job_view(id=4, state="succeeded", usage={"total_j": 7200.0, "estimate": False})
    rows = [row_of(shared), row_of(alone)]
    assert [r.energy_estimate for r in rows] == [True, False]
    lines = _table(rows, 80).splitlines()
    assert lines[1].endswith("~2.00 Wh") and lines[2].endswith(" 2.00 Wh")


TRACE = Path(__file__).resolve().parents[2] / "traces" / "carma-philly-t1.json"


def simulate(columns: int, *args: str) -> list[str]:
    env = {**os.environ, "COLUMNS": str(columns)}
    done = subprocess.run(
        [sys.executable, "-m", "gpudesk", "simulate", str(TRACE), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_simulate_fits_80_columns() -> None:
    assert simulate(80, "-p", "exclusive,mps,auto") == [
        "SIMULATED sim:dgx-station-a100 (4 x NVIDIA A100-SXM4-40GB): trace",
        "  carma-philly-t1, 60 jobs, memory hints from gpumemnet, learning on; ratios",
        "  against exclusive",
        "POLICY     MAKESPAN     x  MEAN JCT  P95 JCT  MEAN WAIT  GPU-H   kWh     x",
        "exclusive     7h50m  1.00     2h33m    3h50m      2h06m   30.0  5.57  1.00",
        "mps           4h38m  0.59    49m42s    1h54m     17m28s   16.9  4.65  0.83",
        "auto          4h34m  0.58    41m40s    1h58m     11m06s   16.9  4.64  0.83",
        "OOM crashes, recoveries, lost and impossible jobs: none under any policy",
        "auto ÷ best forced mode (mps): 0.99 makespan",
    ]
    # where jobs crashed, their counts as a table of their own
    lines = simulate(80, "-p", "mps,auto", "--estimator", "horus", "--station", "sim:a100-40gbx2")
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    assert lines[2].split()[:3] == ["POLICY", "MAKESPAN", "x"]
    assert lines[6:9] == [
        "POLICY  OOM  RECOVERED  LOST  IMPOSSIBLE",
        "mps       1          1     0           0",
        "auto      0          0     0           0",  # the robust rule kept it off that GPU
    ]
    # a wide terminal keeps the one table
    assert simulate(200, "-p", "mps")[1].split()[-4:] == ["OOM", "RECOVERED", "LOST", "IMPOSSIBLE"]
