"""`--plot` through the real `gpudesk` command: files in the format their suffix names, the
terminal rendering, a bad suffix refused before any work, matplotlib missing said after the
command's own output, and `show`/`history` plots of a job on a SIMULATED GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import EngineHandle, cli_in_fresh_python

from gpudesk.api.client import Client
from gpudesk.render import SPARKS

GPUDESK = [sys.executable, "-m", "gpudesk"]
# `gpudesk` as if the plot extra were not installed: `import matplotlib` fails.
WITHOUT_MATPLOTLIB = [
    sys.executable,
    "-c",
    "import sys; sys.modules['matplotlib'] = None; sys.argv[0] = 'gpudesk'\n"
    "from gpudesk.cli.entry import main; main()",
]
TRACE = str(Path(__file__).resolve().parents[2] / "traces" / "carma-philly-t1.json")
PNG = b"\x89PNG\r\n\x1a\n"
SVG = "{http://www.w3.org/2000/svg}svg"


def gpudesk(
    *args: str, command: list[str] = GPUDESK, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    env = {**(os.environ if env is None else env), "COLUMNS": "100"}
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60, env=env)


def svg_text(path: Path) -> str:
    assert ET.parse(path).getroot().tag == SVG
    return path.read_text()


def test_simulate_writes_the_plot_after_its_table(tmp_path: Path) -> None:
    png = tmp_path / "sim.png"
    run = gpudesk("simulate", TRACE, "--policy", "exclusive,auto", "--plot", str(png))
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("SIMULATED sim:dgx-station-a100") and "MAKESPAN" in run.stdout
    assert png.read_bytes().startswith(PNG) and f"plot: wrote {png}" in run.stderr

    svg = tmp_path / "sim.svg"
    run = gpudesk("simulate", TRACE, "--policy", "auto", "--json", "--plot", str(svg))
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["simulated"] is True  # stdout stays JSON
    assert "SIMULATED — sim:dgx-station-a100" in svg_text(svg)


def test_a_bad_suffix_is_refused_before_the_simulation_runs(tmp_path: Path) -> None:
    run = gpudesk("simulate", TRACE, "--plot", str(tmp_path / "sim.txt"))
    assert run.returncode == 2 and run.stdout == ""
    (line,) = run.stderr.strip().splitlines()  # one paragraph, no traceback
    assert "names no plot format" in line and ".svg, .png, .pdf" in line
    run = gpudesk("simulate", TRACE, "--plot", str(tmp_path / "sim"))
    assert run.returncode == 2 and "it has no suffix to name a plot format; give" in run.stderr
    (tmp_path / "plots").mkdir()
    run = gpudesk("simulate", TRACE, "--plot", str(tmp_path / "plots"))
    assert run.returncode == 2 and "is a folder; give a file name" in run.stderr, run.stderr
    run = gpudesk("simulate", TRACE, "--json", "--plot", "-")
    assert run.returncode == 2 and "would break the output of --json" in run.stderr


def test_without_matplotlib_the_results_are_printed_and_the_missing_extra_named(
    tmp_path: Path,
) -> None:
    svg = tmp_path / "sim.svg"
    run = gpudesk(
        "simulate", TRACE, "--policy", "auto", "--plot", str(svg), command=WITHOUT_MATPLOTLIB
    )
    assert run.returncode == 1 and not svg.exists()
    assert "MAKESPAN" in run.stdout  # the results came first
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("error: plots need the plot extra: pip install 'gpudesk[plot]'")
    # the terminal rendering needs no matplotlib
    run = gpudesk("simulate", TRACE, "--policy", "auto", "--plot", "-", command=WITHOUT_MATPLOTLIB)
    assert run.returncode == 0, run.stderr
    assert "GPU timelines, one cell ≈" in run.stdout and "▓ MPS" in run.stdout


@pytest.fixture(scope="module")
def matplotlib_config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment with a matplotlib config folder of its own, its font cache built whole:
    a run under a file-size limit would else write the cache itself, cut short (its own
    warnings in stderr), in the folder every other test's matplotlib reads."""
    folder = tmp_path_factory.mktemp("mplconfig")
    env = {**os.environ, "MPLCONFIGDIR": str(folder)}
    subprocess.run([sys.executable, "-c", "import matplotlib.font_manager"], env=env, check=True)
    return env


@pytest.mark.parametrize("suffix", ["svg", "pdf", "png"])
def test_a_plot_cut_short_leaves_the_earlier_file_whole_and_no_half_file(
    tmp_path: Path, suffix: str, matplotlib_config: dict[str, str]
) -> None:
    """A full disk, as the file-size limit simulates it (EFBIG past 4 KiB, as ENOSPC would
    be): the results are printed, the plot fails in one paragraph (exit 1), and the earlier
    plot of that name is left as it was, nothing beside it (the SVG and PDF writers had cut it
    to a half file)."""
    import resource

    plot = tmp_path / f"sim.{suffix}"
    plot.write_bytes(b"an earlier plot\n")

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    run = subprocess.run(
        [*GPUDESK, "simulate", TRACE, "--policy", "auto", "--plot", str(plot)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=small_files,
        # no bytecode written: Python's writer of a module's .pyc does not check for a short
        # write, and a first import under the limit leaves it cut at 4 KiB (EOFError after)
        env={**matplotlib_config, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert run.returncode == 1 and "MAKESPAN" in run.stdout, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line == f"error: could not write {plot}: File too large", line
    assert plot.read_bytes() == b"an earlier plot\n"
    assert [p.name for p in tmp_path.iterdir()] == [plot.name]
    # with room, a link is written through (the file it names replaced), not replaced itself
    link = tmp_path / f"link.{suffix}"
    link.symlink_to(plot)
    run = gpudesk("simulate", TRACE, "--policy", "auto", "--plot", str(link), env=matplotlib_config)
    assert run.returncode == 0, run.stderr
    assert link.is_symlink() and plot.read_bytes() != b"an earlier plot\n"


@pytest.mark.slow(8)
def test_show_and_history_plot_a_job_on_a_simulated_gpu(
    sim_engine: EngineHandle, tmp_path: Path
) -> None:
    gpu_job, failing = sim_engine.submit(
        {"name": "on-gpu", "command": ["sleep", "1.5"], "gpus": 1},
        {"name": "failing", "command": ["sh", "-c", "exit 3"]},
    )
    (never,) = sim_engine.submit({"name": "after", "command": ["true"], "after": [failing]})
    sim_engine.wait_all_done([gpu_job, failing, never])

    svg = tmp_path / "job.svg"
    run = gpudesk("show", str(gpu_job), "--plot", str(svg))
    assert run.returncode == 0, run.stderr
    banner = "SIMULATED station (sim:dgx-station-a100): its GPUs are not real\n"
    assert run.stdout.startswith(f"{banner}job {gpu_job}: on-gpu")
    assert "GPUs SIMULATED" in svg_text(svg)

    from gpudesk.plots.job import job_figure

    with Client.connect(sim_engine.home, autostart=False) as client:
        detail = client.show(gpu_job, series=True)
    assert detail.series is not None and detail.series.simulated
    figure = job_figure(detail)
    assert [ax.get_ylabel() for ax in figure.axes] == ["%", "GiB", "W", "%"]
    assert [len(ax.lines) for ax in figure.axes] == [1, 2, 1, 1]  # memory: GPU and host
    assert all(len(ax.lines[0].get_xdata()) >= 2 for ax in figure.axes)
    assert figure.axes[-1].get_xlabel() == "time since the job started (s)"

    run = gpudesk("show", str(gpu_job), "--plot", "-")
    assert run.returncode == 0, run.stderr
    drawn = run.stdout.split("events:")[1]
    assert f"job {gpu_job} (on-gpu)" in drawn and "GPUs SIMULATED" in drawn
    for series in ("SM activity", "GPU memory", "host memory (RSS)", "GPU power", "CPU"):
        (line,) = [line for line in drawn.splitlines() if line.startswith(series)]
        assert set(line) & set(SPARKS), line  # a sparkline, not "no samples"

    run = gpudesk("show", str(never), "--plot", str(tmp_path / "never.svg"))
    assert run.returncode == 1 and not (tmp_path / "never.svg").exists()
    assert run.stdout.startswith(f"job {never}: after")  # show's own output first
    assert f"nothing to plot: job {never} (after) never started" in run.stderr

    png = tmp_path / "history.png"
    run = gpudesk("history", "--plot", str(png))
    assert run.returncode == 0, run.stderr
    assert "RAN ON" in run.stdout and png.read_bytes().startswith(PNG)
    run = gpudesk("history", "--plot", "-")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(banner)
    assert time.strftime("%m-%d") in run.stdout.split("per day (local time)")[1]
    assert "(SIMULATED GPUs, sim:dgx-station-a100)" in run.stdout
    run = gpudesk("history", "--format", "csv", "--plot", "-")
    assert run.returncode == 2 and "would break the output of --format csv" in run.stderr


def test_help_and_the_commands_with_plot_options_do_not_load_matplotlib() -> None:
    printed, modules = cli_in_fresh_python(
        ["--help"],
        ["simulate", "--help"],
        ["history", "--help"],
        ["show", "--help"],
        ["select", "compare", "--help"],
    )
    assert "--plot FILE" in printed
    assert not {m for m in modules if m.startswith(("matplotlib", "gpudesk.plots"))}
