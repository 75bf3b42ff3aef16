"""The four plots' content (gpudesk.plots): axes, titles, units, and as many bars, points and lines
as their input has; the terminal renderings; where a plot goes (the suffix picks the format)."""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection

from gpudesk.cli.compare_report import PresetRow
from gpudesk.cli.history_output import HistoryRow
from gpudesk.plots.common import NothingToPlot, PlotError, PlotTarget, rendered, resample
from gpudesk.plots.compare import compare_figure, compare_text
from gpudesk.plots.history import daily_usage, history_figure, history_text
from gpudesk.plots.simulate import lanes, simulate_figure, simulate_text
from gpudesk.policy.simulator import Occupancy, SimResult, Simulation, load_trace

TRACE = Path(__file__).resolve().parents[2] / "traces" / "carma-philly-t1.json"


def bars_in(ax: Axes) -> int:
    """The rectangles broken_barh drew on a timeline."""
    return sum(len(c.get_paths()) for c in ax.collections if isinstance(c, PolyCollection))


# ------------------------------------------------------------------------------ simulate
def sim_result(policy: str, occupancies: list[Occupancy], **figures: float) -> SimResult:
    base = dict(
        estimator="gpumemnet",
        station="sim:a100-40gbx2",
        jobs=3,
        makespan_s=7200.0,
        mean_jct_s=3600.0,
        p95_jct_s=7000.0,
        mean_wait_s=60.0,
        gpu_busy_hours=3.0,
        energy_kwh=1.5,
        oom_crashes=0,
        oom_recovered=0,
        lost=0,
        decisions=3,
        decision_p99_ms=0.1,
    )
    return SimResult(policy=policy, occupancies=occupancies, **{**base, **figures})  # type: ignore[arg-type]


def test_the_timeline_stacks_collocated_attempts_in_lanes() -> None:
    a = Occupancy(1, (0,), "mps", 0.0, 100.0, "finished")
    b = Occupancy(2, (0,), "mps", 50.0, 150.0, "finished")
    c = Occupancy(3, (0,), "mps", 120.0, 200.0, "finished")  # a's lane is free again
    placed, count = lanes([a, b, c], 0)
    assert count == 2 and dict((o.job_id, lane) for o, lane in placed) == {1: 0, 2: 1, 3: 0}
    assert lanes([a, b, c], 1) == ([], 1)


def test_the_simulate_figure_draws_every_attempt_and_says_simulated() -> None:
    alone = [
        Occupancy(1, (0,), "exclusive", 0.0, 3600.0, "finished"),
        Occupancy(2, (1,), "exclusive", 0.0, 1800.0, "oom"),
        Occupancy(2, (1,), "exclusive", 1800.0, 7200.0, "finished"),
        Occupancy(3, (0, 1), "exclusive", 7200.0, 9000.0, "finished"),  # two GPUs: two bars
    ]
    shared = [
        Occupancy(1, (0,), "mps", 0.0, 3000.0, "finished"),
        Occupancy(2, (0,), "mps", 0.0, 3300.0, "finished"),
        Occupancy(3, (1,), "mig", 0.0, 2000.0, "finished", "3g.20gb"),
    ]
    results = [
        sim_result("exclusive", alone, makespan_s=9000.0),
        sim_result("auto", shared, makespan_s=3300.0, energy_kwh=0.9),
    ]
    figure = simulate_figure(results, gpus=2, caption="sim:a100-40gbx2 (2 × A100)")
    (title,) = [t.get_text() for t in figure.texts]  # the suptitle (get_suptitle: 3.8+)
    assert title.startswith("SIMULATED — sim:a100-40gbx2")
    axes = figure.axes
    assert len(axes) == len(results) + 3  # a timeline per policy, then three bar charts
    timelines, charts = axes[: len(results)], axes[len(results) :]
    for ax, result in zip(timelines, results, strict=True):
        assert bars_in(ax) == sum(len(o.gpus) for o in result.occupancies)
        assert ax.get_title(loc="left").startswith(result.policy)
        assert [t.get_text() for t in ax.get_yticklabels()] == ["GPU 0", "GPU 1"]
    assert timelines[-1].get_xlabel() == "time since the trace began (h), SIMULATED"
    legend = timelines[0].get_legend()
    assert legend is not None
    assert {t.get_text() for t in legend.get_texts()} == {"alone", "MPS", "MIG", "ended by OOM"}
    for ax, unit in zip(charts, ("h", "h", "kWh"), strict=True):
        assert ax.get_ylabel() == unit and len(ax.patches) == len(results)
        assert [t.get_text() for t in ax.get_xticklabels()] == ["exclusive", "auto"]
    assert [p.get_height() for p in charts[0].patches] == [2.5, pytest.approx(3300 / 3600)]

    text = simulate_text(results, gpus=2, caption="sim:a100-40gbx2", width=80)
    assert text.startswith("SIMULATED — sim:a100-40gbx2")
    assert "█ alone  ▓ MPS  ▒ MIG" in text
    assert sum(line.lstrip().startswith(("exclusive", "auto")) for line in text.splitlines()) >= 2


def test_a_real_replay_keeps_each_attempt_for_the_timeline() -> None:
    """The simulator records where and how every attempt ran, without changing its numbers
    (the --json report leaves the attempts out)."""
    trace = load_trace(TRACE)
    results = [Simulation(trace, policy=p).run() for p in ("exclusive", "mps")]
    for result in results:
        finished = [o for o in result.occupancies if o.ended == "finished"]
        assert len(finished) == result.jobs - result.lost - result.impossible
        assert sum(o.ended == "oom" for o in result.occupancies) == result.oom_crashes
        assert max(o.end_s for o in result.occupancies) == pytest.approx(result.makespan_s)
        assert "occupancies" not in result.to_dict()
    assert {o.mode for o in results[1].occupancies} >= {"mps"}
    figure = simulate_figure(results, gpus=4, caption="carma")
    for ax, result in zip(figure.axes, results, strict=False):
        assert bars_in(ax) == sum(len(o.gpus) for o in result.occupancies)


# ------------------------------------------------------------------------------ compare
def preset_row(preset: str, prepass: float | None, train: float, quality: float) -> PresetRow:
    return PresetRow(
        preset=preset,
        percent=None if preset == "full" else int(preset.rsplit("-", 1)[1]),
        runs=9,
        prepass_min=prepass,
        prepass_wh=None,
        amortized_min=None,
        amortized_wh=None,
        uses=None,
        train_min=train,
        train_wh=None,
        quality_mean=quality,
        quality_sd=0.005,
        quality_values=[quality] * 3,
        of_full_pct=None,
        vs_random=None,
        proxy_accuracy=None,
        break_even="-",
        saved_min=None,
        reuse_ms=None,
        prepass_compute_s=None,
    )


COMPARE_ROWS = [
    preset_row("full", None, 3.0, 0.97),
    preset_row("random-25", None, 0.9, 0.93),
    replace(preset_row("dedup-25", 0.3, 0.92, 0.95), break_even="1"),
    replace(preset_row("less-25", 2.5, 0.9, 0.94), break_even="2"),
    replace(preset_row("el2n-25", 0.8, 3.2, 0.90), break_even="never"),
    replace(preset_row("stratified-25", 0.1, None, None), break_even="?"),  # type: ignore[arg-type]
]


def test_the_compare_figure_has_a_point_per_preset_and_the_break_even() -> None:
    figure = compare_figure(COMPARE_ROWS, metric="val_acc", caption="select compare: mlp")
    quality, cost = figure.axes
    drawn = COMPARE_ROWS[:5]  # the failed preset has no quality or cost to draw
    assert len(quality.containers) == len(drawn)  # one errorbar point per preset
    assert [c.get_label() for c in quality.containers] == [r.preset for r in drawn]
    # x: the fresh pre-pass plus the training, in minutes
    xs = [float(c.lines[0].get_xdata()[0]) for c in quality.containers]
    assert xs == pytest.approx([3.0, 0.9, 1.22, 3.4, 4.0])
    assert quality.get_xlabel() == "minutes per run: fresh pre-pass + training (wall time)"
    assert quality.get_ylabel().startswith("val_acc")
    (legend,) = figure.legends  # one for both panels, naming each break-even
    assert [t.get_text() for t in legend.get_texts()] == [
        "full: the baseline (dashed)",
        "random-25: no pre-pass to pay back",
        "dedup-25: breaks even after 1 run",
        "less-25: breaks even after 2 runs",
        "el2n-25: never breaks even (trains no faster than full)",
    ]
    assert any(line.get_linestyle() == "--" for line in quality.lines)  # the full-data level
    # right: the full-data line and one line per other preset, a dot at each break-even
    labels = [line.get_label() for line in cost.lines if not line.get_label().startswith("_")]
    assert labels == ["full data", "random-25", "dedup-25", "less-25", "el2n-25"]
    dots = [line for line in cost.lines if line.get_marker() == "o"]
    assert [(float(d.get_xdata()[0]), float(d.get_ydata()[0])) for d in dots] == [
        (1.0, pytest.approx(1.22)),
        (2.0, pytest.approx(4.3)),
    ]
    assert cost.get_xlabel() == "training runs on the same data (n)"
    assert cost.get_ylabel() == "minutes in all (wall time)"

    text = compare_text(COMPARE_ROWS, metric="val_acc", caption="cap", width=100)
    assert [line.split()[0] for line in text.splitlines()[2:]] == [r.preset for r in drawn]


def test_without_a_full_run_the_break_even_panel_says_why() -> None:
    figure = compare_figure(COMPARE_ROWS[1:3], metric="val_acc", caption="c")
    assert "no full-data run" in figure.axes[1].texts[0].get_text()


# ------------------------------------------------------------------------------ history
def history_row(
    user: str, start: dt.datetime, hours: float, gpus: int, wh: float | None
) -> HistoryRow:
    begin = start.timestamp()
    wall = hours * 3600
    return HistoryRow(
        id=1,
        name="j",
        user=user,
        state="succeeded",
        exit_code=0,
        attempts=1,
        submitted_at=begin,
        started_at=begin,
        ended_at=begin + wall,
        wall_s=wall,
        gpus=gpus,
        gpu_s=wall * gpus,
        placement="gpu:0",
        cpu_s=None,
        rss_peak_mib=None,
        gpu_memory_peak_mib=None,
        gpu_j=None,
        cpu_j=None,
        energy_j=None if wh is None else wh * 3600,
        co2e_g=None,
    )


def test_history_splits_a_job_across_midnight_by_its_time_in_each_day() -> None:
    day = dt.datetime(2026, 11, 20)
    rows = [
        history_row("ana", day.replace(hour=23), 2.0, 2, 400.0),  # 1 h each side of midnight
        history_row("bo", day + dt.timedelta(days=2, hours=9), 1.0, 1, None),  # no energy
        replace(history_row("ana", day, 1.0, 1, 1.0), started_at=None),  # never ran
    ]
    usage = daily_usage(rows)
    assert usage.days == [day.date() + dt.timedelta(days=i) for i in range(3)]  # the gap too
    assert usage.users == ["ana", "bo"]
    assert usage.gpu_h["ana"] == pytest.approx([2.0, 2.0, 0.0])
    assert usage.energy_wh["ana"] == pytest.approx([200.0, 200.0, 0.0])
    assert usage.gpu_h["bo"] == pytest.approx([0.0, 0.0, 1.0])
    assert usage.without_energy == 1

    figure = history_figure(rows, caption="gpudesk history")
    gpu_ax, energy_ax = figure.axes
    for ax in (gpu_ax, energy_ax):
        assert len(ax.containers) == len(usage.users)  # a stacked segment per user
        assert all(len(bars) == len(usage.days) for bars in ax.containers)
    assert [c.get_label() for c in gpu_ax.containers] == ["ana", "bo"]
    assert gpu_ax.get_ylabel() == "GPU-hours (as allocated)"
    assert energy_ax.get_ylabel() == "energy (Wh)"
    assert "1 job(s) without an energy figure" in energy_ax.get_title()
    assert [t.get_text() for t in energy_ax.get_xticklabels()] == ["11-20", "11-21", "11-22"]
    # bo's bar sits on top of ana's
    assert gpu_ax.containers[1].patches[2].get_y() == pytest.approx(0.0)
    text = history_text(rows, caption="cap", width=90)
    assert "█ ana  ▓ bo" in text and "11-21" in text


def test_history_with_no_job_that_ran_has_nothing_to_plot() -> None:
    never = replace(history_row("ana", dt.datetime(2026, 1, 1), 1.0, 1, 1.0), started_at=None)
    with pytest.raises(NothingToPlot):
        history_figure([never], caption="c")
    with pytest.raises(NothingToPlot):
        history_text([], caption="c", width=80)


# ------------------------------------------------------------------------------ common
@pytest.mark.parametrize(
    "text, fmt", [("a.svg", "svg"), ("b.PNG", "png"), ("c.pdf", "pdf"), ("-", "terminal")]
)
def test_the_suffix_picks_the_format(text: str, fmt: str) -> None:
    assert PlotTarget.parse(text).format == fmt


@pytest.mark.parametrize("text", ["plot.txt", "plot", "", "plot.jpg"])
def test_an_unknown_suffix_is_refused_in_one_paragraph(text: str) -> None:
    with pytest.raises(PlotError) as raised:
        PlotTarget.parse(text)
    message = str(raised.value)
    assert "\n" not in message and ".svg, .png, .pdf" in message and "- to draw it" in message


def test_saved_files_are_what_their_suffix_says(tmp_path: Path) -> None:
    figure = history_figure(
        [history_row("ana", dt.datetime(2026, 11, 20, 9), 1.0, 1, 10.0)], caption="c"
    )
    png = rendered(figure, PlotTarget.parse(str(tmp_path / "h.png")))
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    svg = rendered(figure, PlotTarget.parse(str(tmp_path / "h.svg")))
    assert ET.fromstring(svg).tag == "{http://www.w3.org/2000/svg}svg"
    assert "GPU-hours (as allocated)" in svg.decode()  # text stays text


def test_resampling_holds_a_window_mean_over_its_window() -> None:
    points = [(10.0, 50.0), (20.0, 100.0)]
    assert resample(points, 0.0, 20.0, 4) == [None, 50.0, None, 100.0]
    assert resample(points, 0.0, 20.0, 4, hold_s=10.0) == [50.0, 50.0, 100.0, 100.0]


def test_a_policy_that_lost_jobs_shows_lost_n_not_a_makespan_in_the_report() -> None:
    done = [Occupancy(1, (0,), "mps", 0.0, 3600.0, "finished")]
    results = [sim_result("auto", done), sim_result("carma", done, makespan_s=3600.0, lost=2)]
    text = simulate_text(results, gpus=2, caption="sim:a100-40gbx2", width=80)
    makespan = text.split("\nmakespan\n", 1)[1].split("\nmean JCT", 1)[0]
    assert makespan.splitlines()[1].rstrip().endswith("lost 2")
    assert makespan.splitlines()[0].rstrip().endswith("2h00m")
    figure = simulate_figure(results, gpus=2, caption="sim:a100-40gbx2")
    titles = [ax.get_title(loc="left") for ax in figure.axes]
    assert any(t.startswith("carma: lost 2,") for t in titles)
    assert not any(t.startswith("carma: makespan") for t in titles)
