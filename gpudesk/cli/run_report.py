"""`gpudesk run PROFILE`: submit a profile's jobs, follow them to the end, report (the command
itself: gpudesk.cli.run).

Progress is gpudesk.cli.run_progress's: a live table on a terminal, plain lines otherwise (CI logs,
`| tee`). Ctrl-C cancels the run's jobs (not the engine, not other runs) and still reports.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import msgspec

from gpudesk import render
from gpudesk.api.client import Client
from gpudesk.api.errors import EngineError
from gpudesk.api.models import JobView, LoaderView, UsageFigures, to_builtins
from gpudesk.api.state_home import state_home
from gpudesk.api.submit import (
    PrepassResult,
    StationReport,
    Step,
    Submitted,
    run_group,
    submit_profile,
)
from gpudesk.api.wakeups import Wakeups
from gpudesk.cli import run_attach
from gpudesk.cli.interrupts import INTERRUPTS
from gpudesk.cli.run_detach import submitted_all_the_same
from gpudesk.cli.run_progress import Progress
from gpudesk.core.cluster import ClusterSpec
from gpudesk.hw.telemetry.energy import summarize
from gpudesk.paths import Home
from gpudesk.profile import Profile, ReportConfig
from gpudesk.results import Best, best, read_metrics
from gpudesk.selection.cache import SelectionCache
from gpudesk.text import json_text, printable_line, quoted
from gpudesk.units import watt_hours

REFRESH_S = 0.5  # refresh at least this often even without events
MIN_REFRESH_S = 0.1
# Listing a run's jobs costs the engine time in proportion to the run's size (about 0.4 s for
# 10,000 jobs on a 2-core machine), so a follower spaces its refreshes to stay under this share.
ENGINE_SHARE = 0.1
CANCEL_GRACE_S = 5.0


class LeftRun(Exception):
    """A second Ctrl-C: the run left before its jobs ended. `cancel_asked`: the engine was asked
    to cancel them (it finishes that on its own); else they go on."""

    def __init__(self, group: str, cancel_asked: bool) -> None:
        super().__init__(group)
        self.group = group
        self.cancel_asked = cancel_asked


class EngineLost(Exception):
    """The engine went away (an EngineError of code "unavailable") once the run had begun to
    submit: its jobs may still be queued or running. `ids`: the run's jobs the run last saw;
    `whole`: all of them were submitted (or attached to), so `--attach` can follow the run."""

    def __init__(self, cause: EngineError, group: str, ids: list[int], whole: bool) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.group = group
        self.ids = ids
        self.whole = whole


@dataclass
class RunReport:
    profile: str
    group: str
    started_at: float
    ended_at: float = 0.0
    interrupted: bool = False
    jobs: list[JobView] = field(default_factory=list)  # with their usage, once the run ended
    backend: str = "none"
    simulated: bool = False
    grid_g_per_kwh: float | None = None
    grid_region: str | None = None  # the station's grid code ("FR") where it names one
    grid_source: str | None = None  # and where that code's figure comes from
    loaders: list[LoaderView] = field(default_factory=list)  # the run's shared loaders
    notes: list[str] = field(default_factory=list)  # what the run did besides its jobs
    # the selections' pre-pass jobs: they print their cache entry, never a `result` line
    prepass_jobs: set[int] = field(default_factory=set)
    # the selections this run's own pre-pass jobs computed (key -> their wall seconds): the
    # loader then reads them from the cache, which is not a cache hit of an earlier run
    prepasses_run: dict[str, float] = field(default_factory=dict)
    ranking: ReportConfig | None = None  # the profile's [report]: the metric that names a best
    # Each job's result metrics (gpudesk.results), for the jobs that printed a result line.
    metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    # the profile's jobs an attached run's `gpudesk run` never submitted (`--attach`)
    unsubmitted: int = 0
    # what `gpudesk logs` needs before it to reach the run's engine from this shell: a profile's
    # own SIMULATED station is another home than the one the shell reaches (`reached_by`)
    prefix: str = ""

    @property
    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for job in self.jobs:
            counts[job.state] = counts.get(job.state, 0) + 1
        return counts

    @property
    def succeeded(self) -> bool:
        return (
            bool(self.jobs)
            and not self.unsubmitted
            and all(j.state == "succeeded" for j in self.jobs)
        )

    @property
    def energy(self) -> UsageFigures | None:
        """The run's usage summed over its jobs (None when nothing was measured)."""
        usages = [j.usage for j in self.jobs if j.usage is not None]
        if not usages or self.grid_g_per_kwh is None:
            return None
        return summarize(usages, self.grid_g_per_kwh)

    @property
    def best(self) -> Best | None:
        """The succeeded job that did best by the profile's metric (None without [report])."""
        if self.ranking is None:
            return None
        done = [(j.id, self.metrics.get(j.id, {})) for j in self.jobs if j.state == "succeeded"]
        return best(done, self.ranking.metric, self.ranking.goal)

    def to_dict(self) -> dict[str, Any]:
        top = self.best
        names = {j.id: j.name for j in self.jobs}
        return {
            "profile": self.profile,
            "backend": self.backend,
            "simulated": self.simulated,
            "group": self.group,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "wall_s": round(self.ended_at - self.started_at, 3),
            "interrupted": self.interrupted,
            "succeeded": self.succeeded,
            "unsubmitted": self.unsubmitted,
            "counts": self.counts,
            "energy": to_builtins(self.energy),
            "grid": {
                "g_per_kwh": self.grid_g_per_kwh,
                "region": self.grid_region,
                "source": self.grid_source,
            },
            "loaders": to_builtins(self.loaders),
            "notes": self.notes,
            "report": None
            if self.ranking is None
            else {"metric": self.ranking.metric, "goal": self.ranking.goal},
            "best": None
            if top is None or self.ranking is None
            else {
                "job": top.job,
                "name": names.get(top.job),
                "metric": self.ranking.metric,
                "goal": self.ranking.goal,
                "value": top.value,
                "ranked": top.ranked,
                "ties": top.ties,
            },
            "jobs": [
                {
                    "id": j.id,
                    "name": j.name,
                    "state": j.state,
                    "attempts": j.attempts,
                    "wall_s": _rounded(render.runtime(j.started_at, j.ended_at)),
                    "exit_code": j.exit_code,
                    "reason": j.reason,
                    "log": j.log,
                    "usage": to_builtins(j.usage),
                    "metrics": self.metrics.get(j.id),
                }
                for j in self.jobs
            ],
        }

    def text(self, width: int | None = None) -> str:
        """The report for people, every line at most `width` columns (default: the terminal's)."""
        width = width or render.terminal_width()
        logs = [j.log for j in self.jobs if j.log]
        # Logs lie at ID/ATTEMPT/output.log under the jobs folder: said once, below, not as a
        # column repeating "N/1/output.log" where the names need the width.
        folder = os.path.commonpath([str(Path(log).parents[2]) for log in logs]) if logs else ""
        rows = [
            (
                j.id,
                j.name,
                j.state,
                j.attempts,
                render.duration(j.run_s()),
                j.exit_code,
                render.energy_cell(j.usage.total_j, j.usage.estimate) if j.usage else None,
            )
            for j in self.jobs
        ]
        table, left_out = render.fitted_table(
            ("ID", "NAME", "STATE", "ATTEMPTS", "WALL", "EXIT", "ENERGY"),
            rows,
            width=width,
            optional=(5, 6, 3),  # a narrow terminal keeps ID, NAME, STATE and WALL
            max_widths={1: 40},
            right=(0, 3, 4, 5, 6),
            shrink=(1,),
            middle=(1,),
            min_widths={1: 12},
        )
        if left_out:
            table += "\n" + render.fill(f"({', '.join(left_out)} in --json)", width)
        counts = ", ".join(f"{n} {state}" for state, n in sorted(self.counts.items()))
        head = f"{self.profile}: {counts} in {render.duration(self.ended_at - self.started_at)}"
        if self.interrupted:
            head += " (interrupted)"
        lines = [head]
        if folder:
            # the command first: wrapped before a long folder, it is never cut in two
            lines.append(
                f"logs: {self.prefix}gpudesk logs ID, or ID{os.sep}ATTEMPT{os.sep}output.log under "
                f"{printable_line(render.shorten_path(folder))}{os.sep}"
            )
        lines += [self.energy_line(), *self.loader_lines(), *self.notes]
        wrapped = [render.fill(line, width) for line in lines]
        results = self.results_text(width)
        return f"{table}\n\n" + (f"{results}\n\n" if results else "") + "\n".join(wrapped)

    def results_text(self, width: int) -> str:
        """The jobs' result metrics (best first when the profile names a metric), and the best
        configuration or how to name one."""
        if not self.metrics:
            if self.ranking is None:
                return ""
            return render.fill(
                f"best: none; no job printed a `result {{json}}` line with "
                f"{quoted(self.ranking.metric)} (docs/results.md)",
                width,
            )
        ranked = [j for j in self.jobs if j.id in self.metrics]
        keys: list[str] = []
        for j in ranked:
            keys += [k for k in self.metrics[j.id] if k not in keys]
        ranking = self.ranking
        if ranking is not None:
            metric, sign = ranking.metric, (-1.0 if ranking.goal == "max" else 1.0)
            keys.sort(key=lambda k: k != metric)  # the ranked metric first
            ranked.sort(
                key=lambda j: (
                    j.state != "succeeded",  # a failed job's figures are never the best
                    metric not in self.metrics[j.id],
                    sign * self.metrics[j.id].get(metric, 0.0),
                )
            )
        # As many metric columns as fit beside whole names; names are clipped only to fit one.
        shown = 1
        while shown < len(keys):
            # names at most 32 wide, as the table below shows them, and nothing fitted yet
            wider = _results_table(ranked, self.metrics, keys[: shown + 1], sys.maxsize)
            if max(len(line) for line in wider.splitlines()) > width:
                break
            shown += 1
        table = _results_table(ranked, self.metrics, keys[:shown], width)
        title = f"results, best {ranking.metric} first:" if ranking else "results:"
        lines = [render.fill(title, width), table]
        if shown < len(keys):
            lines.append(render.fill(f"more metrics in --json: {', '.join(keys[shown:])}", width))
        silent = sum(
            1 for j in self.jobs if j.id not in self.metrics and j.id not in self.prepass_jobs
        )
        if silent:
            lines.append(f"{silent} job(s) printed no result line")
        top = self.best
        trained = [job for job in self.metrics if job not in self.prepass_jobs]
        if ranking is None:
            if len(trained) > 1:  # one job's numbers leave nothing to rank
                lines.append(
                    render.fill(
                        "no job is called best: the profile names no metric to rank by; add "
                        f'[report] with metric = "{keys[0] if keys else "val_acc"}" and '
                        'goal = "max" (or "min" when smaller is better)',
                        width,
                    )
                )
        elif top is None:
            lines.append(
                render.fill(
                    f"best: none; no succeeded job printed {quoted(ranking.metric)} in its "
                    "result line",
                    width,
                )
            )
        else:
            name = next(j.name for j in self.jobs if j.id == top.job)
            tied = f", {top.ties} tied" if top.ties else ""
            lines.append(
                render.fill(
                    f"best configuration: {name} (job {top.job}): {ranking.metric} "
                    f"{_number(top.value)} ({ranking.goal} of {top.ranked}{tied})",
                    width,
                )
            )
        return "\n".join(lines)

    def loader_lines(self) -> list[str]:
        """One line per shared loader: its CPU, and what unshared loading would have cost."""
        lines = []
        for loader in self.loaders:
            status = loader.status
            consumers = status.consumers_total if status else None
            who = f" for {consumers} consumer{'' if consumers == 1 else 's'}" if consumers else ""
            if loader.saved_cpu_s is None:
                lines.append(f"shared loader {loader.name}: no batches measured")
                continue
            chosen = status.selection if status else None
            if chosen:
                run_here = self.prepasses_run.get(chosen.key) if chosen.key else None
                how = (
                    f"pre-pass {run_here:.1f} s in this run, now cached"
                    if run_here is not None
                    else "pre-pass from the cache of an earlier run"
                    if chosen.reused
                    else "no pre-pass"
                    if chosen.key is None
                    else f"pre-pass {chosen.prepass_wall_s:.1f} s, now cached"
                )
                lines.append(
                    f"shared loader {loader.name}: selection {chosen.preset}, "
                    f"trained on {chosen.kept} of {chosen.of} samples ({how})"
                )
            cpu_s = loader.cpu_s or 0.0
            if consumers == 1 or abs(loader.saved_cpu_s) < 0.05:
                lines.append(
                    f"shared loader {loader.name}: producer CPU "
                    f"{cpu_s:.1f} s{who}; each batch went to one consumer, "
                    "so sharing saved nothing"
                )
                continue
            lines.append(
                f"shared loader {loader.name}: producer CPU {cpu_s:.1f} s{who}, "
                f"{status.produced if status else 0} batches made, "
                f"{status.delivered_total if status else 0} delivered; unshared loading "
                f"estimated at {loader.unshared_cpu_s or 0.0:.1f} s: "
                f"{loader.saved_cpu_s:.1f} CPU-s saved"
            )
        return lines

    def energy_line(self) -> str:
        station = f"backend {self.backend}" + (", SIMULATED" if self.simulated else "")
        energy = self.energy
        if energy is None or energy.total_j is None:
            gpus = "no GPUs" if self.backend == "none" else "no GPU energy readings"
            return (
                f"energy: not measured ({station}: {gpus}, and the CPU's RAPL counters are "
                "not readable)"
            )
        parts = []
        if energy.gpu_j is not None:
            idle = energy.gpu_idle_j
            parts.append(
                f"GPU {watt_hours(energy.gpu_j)}"
                + (f" (idle baseline {watt_hours(idle)})" if idle is not None else "")
            )
        parts.append(
            "CPU "
            + (watt_hours(energy.cpu_j) if energy.cpu_j is not None else "n/a (RAPL not readable)")
        )
        estimate = ", estimated for shared GPUs/CPU" if energy.estimate else ""
        grid = f"{self.grid_region}, {self.grid_source}; " if self.grid_region else ""
        # The jobs' counters, read from each attempt's start: the run's energy since it began.
        return (
            f"energy since {render.clock(self.started_at)} (this run's jobs): "
            f"{', '.join(parts)}; {energy.carbon_g or 0.0:.1f} g CO2e at "
            f"{self.grid_g_per_kwh:g} g/kWh ({grid}{station}{estimate})"
        )


def _number(value: float) -> str:
    """A metric for a table cell: whole numbers whole, others to 4 significant digits."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.0f}" if abs(value) >= 1e4 else f"{value:.4g}"


def _results_table(
    jobs: list[JobView],
    metrics: dict[int, dict[str, float]],
    keys: list[str],
    width: int | None = None,
) -> str:
    rows = [
        (j.id, j.name, *(_number(metrics[j.id][k]) if k in metrics[j.id] else None for k in keys))
        for j in jobs
    ]
    return render.table(
        ("ID", "NAME", *keys),
        rows,
        max_widths={1: 32},
        right=(0, *range(2, 2 + len(keys))),
        width=width,
        shrink=(1,),
        middle=(1,),
    )


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


# Said at once on a first Ctrl-C: which jobs to cancel is the engine's to say, and a busy
# engine may take a while to answer.
INTERRUPTED = (
    "\ninterrupted: cancelling this run's jobs (Ctrl-C again leaves without waiting for the "
    "cancels to end)…"
)
# Said with each [station] setting a run leaves as the station has it.
APPLY_STATION_HINT = "gpudesk run --apply-station applies it; gpudesk engine set keeps it"


def run_profile(
    profile: Profile,
    client: Client,
    *,
    progress_stream: TextIO = sys.stderr,
    live: bool | None = None,
    cluster: ClusterSpec | None = None,
    apply_station: bool = False,
    how_to_apply: str = APPLY_STATION_HINT,
    attach: bool = False,
) -> RunReport:
    """Submit the profile (gpudesk.api.submit: [station], applied only with `apply_station`,
    else each differing setting said with `how_to_apply`; [datasets], the selections' pre-pass
    jobs, then the training jobs if every pre-pass succeeded), follow its jobs to the end; on
    `cluster` (a Slurm cluster) when given. `attach`: submit nothing, follow the profile's newest
    run instead (cli/run_attach.py)."""
    started = time.time()
    group = run_group(profile, started)  # names this run's jobs
    if attach:
        group, started = run_attach.attached_run(client, profile)

    report = RunReport(profile.name, group, started, ranking=profile.report)
    report.prefix = reached_by(client.home)  # `gpudesk logs` from this shell
    progress = Progress(progress_stream, progress_stream.isatty() if live is None else live)
    note = _noter(report, progress)
    submitting = cancel_asked = whole = False
    submitted: list[int] = []  # the training jobs, before the run has listed them

    def seen(jobs: list[JobView]) -> None:
        report.jobs = jobs

    try:
        with Wakeups(client, "job") as events:

            def follow(ids: object = None) -> None:
                report.jobs = _follow(client, events, group, progress, seen)

            def cancel_all() -> None:
                nonlocal cancel_asked
                active = [j.id for j in client.jobs(group=group) if not j.terminal]
                progress.say(f"cancelling {len(active)} job(s) of this run…")
                if active:
                    cancel_asked = True  # sent from here on: a Ctrl-C now leaves it sent
                    client.cancel(active, grace=CANCEL_GRACE_S)

            try:
                submitting = True
                if attach:
                    run_attach.announce(progress, group, started)
                else:
                    submitted = _submit_run(
                        client, profile, group, follow, note, cluster, apply_station, how_to_apply
                    )
                whole = True
                follow()
            except KeyboardInterrupt:
                INTERRUPTS.seen()
                report.interrupted = True
                try:
                    progress.say(INTERRUPTED)  # inside: a second Ctrl-C may come at once
                    # Wherever the Ctrl-C landed, even mid-submit: the engine handles requests
                    # in order, so a submit that was sent is queued before this query.
                    cancel_all()
                    follow()
                except KeyboardInterrupt:
                    INTERRUPTS.seen()
                    # once asked, the engine finishes the cancels; before, the jobs go on
                    raise LeftRun(group, cancel_asked) from None
    except EngineError as exc:
        if exc.code != "unavailable" or not submitting:
            raise
        # the engine may go before the run's first listing of its jobs came back
        unended = [j.id for j in report.jobs if not j.terminal] if report.jobs else submitted
        raise EngineLost(exc, group, unended, whole) from None
    finally:
        progress.close()
    _finish(client, report, cluster)
    if attach:
        run_attach.finish(client, profile, report, note)
    return report


def _submit_run(
    client: Client,
    profile: Profile,
    group: str,
    follow: Callable[..., None],
    note: Callable[[Step], None],
    cluster: ClusterSpec | None,
    apply_station: bool,
    how_to_apply: str,
) -> list[int]:
    """The run's submission (gpudesk.api.submit): the selections' pre-passes first, as jobs
    the engine measures (`follow`ed), then the training jobs, which find them cached. Returns
    the training jobs' ids."""
    return submit_profile(
        client,
        profile,
        group=group,
        wait=follow,
        on_step=note,
        cache=SelectionCache.used_with(state_home(client.home, client)),
        cluster=cluster,
        apply_station=apply_station,
        how_to_apply=how_to_apply,
    ).job_ids


def _noter(report: RunReport, progress: Progress) -> Callable[[Step], None]:
    """What the run does with each step of the submission: notes for the report, and lines
    said at once."""

    def note(step: Step) -> None:
        if isinstance(step, Submitted):  # they go on, whatever becomes of this command
            submitted_all_the_same(step, report.group, report.prefix)
        if isinstance(step, PrepassResult):
            report.notes.append(step.describe())
            report.prepass_jobs.add(step.job_id)
            out = step.output
            if out is not None and not out["reused"]:
                report.prepasses_run[str(out["key"])] = float(out["prepass_wall_s"])
        elif isinstance(step, (Submitted, StationReport)):
            # Said at once, before the jobs, and again in the report: a job held until an
            # admin acts holds the run; the station is everyone's.
            for line in step.lines():
                progress.say(line)
                report.notes.append(line)

    return note


def _finish(client: Client, report: RunReport, cluster: ClusterSpec | None) -> None:
    """The report's figures once the jobs have ended: usage, where they ran, their metrics."""
    report.ended_at = time.time()
    _add_usage(client, report)
    if cluster is not None:  # the jobs ran on the cluster, not on the station's backend
        slurm = next((j.slurm for j in report.jobs if j.slurm is not None), None)
        report.backend = f"slurm:{slurm.cluster}" if slurm else "slurm"
        report.simulated = False
    report.metrics = {j.id: m for j in report.jobs if (m := read_metrics(j.log)) is not None}


def _add_usage(client: Client, report: RunReport) -> None:
    """Energy and resource use of the run's jobs, measured by the engine's sampler."""
    status = client.status(fresh_loaders=True)
    station = status.station
    used = {job.loader for job in report.jobs} - {None}
    report.loaders = [entry for entry in status.loaders if entry.name in used]
    report.backend, report.simulated = station.effective_backend, station.simulated
    report.grid_g_per_kwh = station.grid_intensity
    report.grid_region, report.grid_source = station.grid_region, station.grid_source
    usage = {j.id: j.usage for j in client.jobs(group=report.group, usage=True, archived=True)}
    report.jobs = [msgspec.structs.replace(j, usage=usage.get(j.id)) for j in report.jobs]


def _follow(
    client: Client,
    events: Wakeups,
    group: str,
    progress: Progress,
    seen: Callable[[list[JobView]], None],
) -> list[JobView]:
    """The run's jobs once all have ended, each listing of them given to `seen` meanwhile."""
    while True:
        INTERRUPTS.check()  # a Ctrl-C Python swallowed (gpudesk.cli.interrupts) ends it too
        started = time.monotonic()
        jobs = client.jobs(group=group, archived=True)
        seen(jobs)
        gap = max(MIN_REFRESH_S, (time.monotonic() - started) / ENGINE_SHARE)
        progress.update(jobs)
        if all(job.terminal for job in jobs):
            return jobs
        # Wake on the next event, or refresh anyway (a SUB socket can miss the first ones),
        # but never sooner than `gap` after the last refresh began.
        if events.wait(max(REFRESH_S, gap)):
            time.sleep(max(0.0, gap - (time.monotonic() - started)))
            events.drain()


def write_report(report: RunReport, path: Path) -> None:
    """The report in `path`, as JSON when its name ends in .json, else as text, written
    atomically (gpudesk.cli.report_file): raises OSError, and leaves `path` as it was, when it
    cannot be written."""
    from gpudesk.cli.report_file import write_atomically

    if path.suffix == ".json":
        text = json_text(report.to_dict(), indent=2) + "\n"
    else:
        text = report.text() + "\n"
    write_atomically(path, text)


def reached_by(home: Home) -> str:
    """What a command needs before it to reach `home`'s engine from this shell: "" where the
    shell reaches it anyway, else its GPUDESK_HOME (a profile's own SIMULATED station: a bare
    `gpudesk logs ID` there showed another job's log, of the engine the shell reaches)."""
    if home.is_system or Home.from_env() == home:
        return ""
    return f"GPUDESK_HOME={shlex.quote(str(home.root))} "
