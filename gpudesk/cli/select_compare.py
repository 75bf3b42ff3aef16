"""`gpudesk select compare`'s steps: the comparison planned from the profile, its runs on the
engine one at a time, and the report written (--out), printed (tables or JSON) and drawn
(--plot).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gpudesk.cli.common import engine_client, fail
from gpudesk.cli.exit_codes import EXIT_INTERRUPTED, EXIT_USAGE
from gpudesk.cli.plot_output import write_plot
from gpudesk.text import json_text

if TYPE_CHECKING:
    from gpudesk.api.models import StationInfo
    from gpudesk.cli.compare import ComparePlan, Trial
    from gpudesk.cli.compare_report import PresetRow
    from gpudesk.plots.common import PlotTarget


def plan(
    profile: Path,
    presets: str,
    seeds: int,
    job: str | None,
    metric: str,
    *,
    splits: int,
    higher_is_better: bool,
) -> ComparePlan:
    """The comparison the profile's job makes; a profile or a plan that does not work is a
    usage error."""
    from gpudesk.cli import compare
    from gpudesk.profile import ProfileError, load_profile

    try:
        loaded = load_profile(profile)
        return compare.plan(
            loaded,
            presets,
            seeds,
            job,
            metric,
            splits=splits,
            higher_is_better=higher_is_better,
        )
    except ProfileError as exc:
        fail(f"the profile is not valid:\n{exc}", EXIT_USAGE)
    except compare.CompareError as exc:
        fail(str(exc), EXIT_USAGE)


def note_few_runs(splits: int, seeds: int) -> None:
    """Say, before the runs, when they are too few for a verdict."""
    from gpudesk.cli import compare_report

    if not compare_report.enough_runs(splits, seeds):
        print(
            f"note: {splits} split(s) × {seeds} seed(s): a verdict on a preset wants at least "
            f"{compare_report.MIN_SPLITS} splits × {compare_report.MIN_SEEDS} seeds; with fewer, "
            "read the verdicts as preliminary",
            file=sys.stderr,
        )


def run(chosen: ComparePlan, cache: Any, *, apply_station: bool) -> tuple[list[Trial], StationInfo]:
    """Every run of the comparison on the engine, saying each step; Ctrl-C cancels the running
    job and exits. Returns the trials and the station they ran on."""
    from gpudesk.cli import compare

    with engine_client() as client:

        def say(line: str) -> None:
            print(f"{time.strftime('%H:%M:%S')}  {line}", file=sys.stderr, flush=True)

        runner = compare.Comparison(chosen, client, cache, say, apply_station=apply_station)
        try:
            trials = runner.run()
        except KeyboardInterrupt:
            print("stopped: the running job was cancelled", file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        station = client.status().station
    return trials, station


def report(
    chosen: ComparePlan,
    trials: list[Trial],
    station: StationInfo,
    metric: str,
    *,
    out: Path | None,
    as_json: bool,
    target: PlotTarget | None,
) -> list[str]:
    """The report written to --out, printed, and drawn; returns the runs' problems."""
    from gpudesk.cli import compare_report

    rows = compare_report.summarize(trials, chosen.higher_is_better)
    found = compare_report.checks(chosen, trials, rows)
    report = compare_report.to_json(chosen, trials, rows, found, station)
    problems = [p for t in trials for p in t.problems]
    if out is not None:  # checked before the runs; replaced whole, never left half-written
        from gpudesk.cli.report_file import write_atomically

        try:
            write_atomically(out, json_text(report, indent=2) + "\n")
        except OSError as exc:
            from gpudesk.text import printable_line

            shown = printable_line(str(out))  # spelled out, as every error paragraph is
            print(f"error: could not write {shown}: {exc.strerror or exc}", file=sys.stderr)
            problems.append(f"--out {shown} was not written ({exc.strerror or exc})")
    if as_json:
        print(json_text(report, indent=2))
    else:
        print(compare_report.render_header(chosen, station))
        print(compare_report.render_quality(rows, metric))
        print()
        print(compare_report.render_cost(rows))
        print()
        print(compare_report.render_legend())
        print()
        paid = compare_report.render_break_even(rows)
        if paid:
            print(paid)
            print()
        print(compare_report.render_checks(found, metric))
        for problem in problems:
            print(f"problem: {problem}")
    if target is not None:
        plot_compare(target, rows, chosen, station)
    return problems


def plot_compare(
    target: PlotTarget, rows: list[PresetRow], plan: ComparePlan, station: StationInfo
) -> None:
    """`--plot`, after the table (a plot that fails does not lose an expensive comparison)."""
    from gpudesk import render
    from gpudesk.plots.compare import compare_figure, compare_text

    caption = (
        f"select compare: {plan.job.name} on {plan.dataset.factory}, {len(plan.splits)} split(s) "
        f"× {len(plan.seeds)} seed(s), "
        f"backend {station.effective_backend}" + (" (SIMULATED)" if station.simulated else "")
    )
    write_plot(
        target,
        lambda: compare_figure(rows, metric=plan.metric, caption=caption),
        lambda: compare_text(
            rows, metric=plan.metric, caption=caption, width=render.terminal_width()
        ),
    )
