"""`gpudesk select compare PROFILE --presets full,random-25,...`: the profile's training job under
each data-selection preset, repeated over seeds, reported as the seed result's table: pre-pass
cost (fresh, and amortized over every job that reused it), training cost, quality and its % of
the full-data result, and how many runs it takes to pay the pre-pass back.

Each (preset, seed) runs as engine jobs, one at a time so their timings do not disturb each
other: first the pre-pass (`gpudesk select run`, skipped for `full` and `rs2`), whose wall time,
CPU time and energy the engine measures and this module writes into the cache entry; then the
training job, reading the dataset through the shared loader under that selection (a loader of
its own, `NAME.sK.PRESET`). The job's quality is read from the last `result {json}` line it
prints (gpudesk.results; docs/results.md). The seed reaches the job as $GPUDESK_SEED (the
built-in workloads default --seed to it), and `{seed}` in the job's command or env is replaced by
it.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudesk import render
from gpudesk.api.prepass import NO_PREPASS, Prepass, job_wall, record_prepass
from gpudesk.api.submit import configure_station, register_datasets, submit_specs, wait_for_jobs
from gpudesk.engine.jobs import JobSpec
from gpudesk.engine.loaders import DatasetSpec
from gpudesk.profile import Profile
from gpudesk.results import last_result, metrics_of
from gpudesk.selection.cache import SelectionCache
from gpudesk.selection.presets import Preset, PresetError, parse_preset
from gpudesk.units import J_PER_WH
from gpudesk.workloads.common import ENV_SEED

if TYPE_CHECKING:
    from gpudesk.api.client import Client
    from gpudesk.api.models import JobView, StationInfo

DEFAULT_PRESETS = "full,random-25,stratified-25,el2n-25,dedup-25,less-25"
POLL_S = 0.25


class CompareError(Exception):
    """The comparison cannot run as asked; the message says what to change."""


@dataclass(frozen=True)
class ComparePlan:
    profile: Profile
    job: JobSpec  # the training job, `{seed}` not yet replaced
    dataset: DatasetSpec  # the loader settings of the dataset it reads
    presets: list[Preset]
    seeds: list[int]
    metric: str

    def dataset_for(self, seed: int) -> DatasetSpec:
        """The dataset as seed `seed` reads it: its own loader, seeded differently."""
        suffix = f".s{seed}"
        return replace(
            self.dataset,
            name=self.dataset.name[:24] + suffix,
            seed=self.dataset.seed + seed,
            selection=None,
        )


def plan(
    profile: Profile, presets: str, seeds: int, job: str | None = None, metric: str = "val_acc"
) -> ComparePlan:
    chosen = []
    for text in [p for p in presets.split(",") if p.strip()]:
        try:
            chosen.append(parse_preset(text))
        except PresetError as exc:
            raise CompareError(f"--presets: {exc}") from None
    if not chosen:
        raise CompareError("--presets: name at least one preset, e.g. full,random-25,el2n-25")
    if len({p.name for p in chosen}) != len(chosen):
        raise CompareError("--presets: a preset is named twice")
    if not 1 <= seeds <= 20:
        raise CompareError("--seeds: give 1 to 20 (3 or more to see the seed-to-seed spread)")
    readers = [spec for spec in profile.jobs if spec.dataset]
    if job is not None:
        readers = [spec for spec in readers if spec.name == job]
        if not readers:
            raise CompareError(f"--job: the profile has no job {job!r} that reads a dataset")
    if not readers:
        raise CompareError(
            f"{profile.path}: no job reads a dataset; give the training job "
            'dataset = "NAME" and a [datasets.NAME] table with a factory'
        )
    if len(readers) > 1 and job is None:
        names = ", ".join(spec.name for spec in readers[:5])
        raise CompareError(
            f"{profile.path}: {len(readers)} jobs read a dataset ({names}); say "
            "which one to compare with --job NAME"
        )
    spec = readers[0]
    config = profile.datasets.get(spec.dataset or "")
    if config is None or config.loader is None:
        raise CompareError(
            f"dataset {spec.dataset!r} has no factory: the comparison serves it "
            "through a shared loader, so its [datasets] table needs one"
        )
    loader = config.loader
    if any(p.method == "less" for p in chosen) and loader.selection_target is None:
        raise CompareError(
            f"less-P ranks samples by similarity to a target set: give "
            f'[datasets.{loader.name}] a selection_target = "MODULE:FACTORY"'
        )
    return ComparePlan(profile, spec, loader, chosen, list(range(seeds)), metric)


@dataclass
class Trial:
    """One preset at one seed: its pre-pass and its training job."""

    preset: str
    seed: int
    prepass_job: int | None = None
    prepass_key: str | None = None
    prepass_fresh: bool | None = None  # computed by this comparison (else reused)
    prepass_wall_s: float | None = None  # the fresh pre-pass job, wherever it ran
    prepass_compute_s: float | None = None  # of that, the selection itself (no start-up)
    prepass_cpu_s: float | None = None
    prepass_energy_j: float | None = None
    prepass_uses: int = 0  # jobs that trained on the cached entry so far, all runs
    reuse_s: float | None = None  # what taking the cached selection cost the training's loader
    train_job: int | None = None
    train_state: str | None = None
    train_wall_s: float | None = None
    train_cpu_s: float | None = None
    train_energy_j: float | None = None
    quality: float | None = None
    train_samples: int | None = None
    problems: list[str] = field(default_factory=list)


class Comparison:
    def __init__(
        self,
        plan: ComparePlan,
        client: Client,
        cache: SelectionCache,
        say: Callable[[str], None],
    ) -> None:
        self.plan, self.client, self.cache, self.say = plan, client, cache, say
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.group = f"compare-{plan.profile.name}@{stamp}"[:100]
        self.trials: list[Trial] = []
        self.current: int | None = None  # the job running now (cancelled on Ctrl-C)

    def run(self) -> list[Trial]:
        station = configure_station(self.client, self.plan.profile)
        for line in station.lines() if station is not None else []:
            self.say(line)
        register_datasets(self.client, [self.plan.dataset_for(s) for s in self.plan.seeds])
        try:
            for seed in self.plan.seeds:
                for preset in self.plan.presets:
                    self.trials.append(self.trial(preset, seed))
        except KeyboardInterrupt:
            if self.current is not None:
                self.client.cancel([self.current])
            raise
        return self.trials

    def trial(self, preset: Preset, seed: int) -> Trial:
        trial = Trial(preset.name, seed)
        dataset = self.plan.dataset_for(seed)
        if preset.method not in NO_PREPASS:
            self.prepass(trial, preset, dataset)
            if trial.prepass_key is None:
                return trial  # it failed: the problem is recorded
        self.train(trial, preset, dataset)
        return trial

    # ----------------------------------------------------------------- pre-pass
    def prepass(self, trial: Trial, preset: Preset, dataset: DatasetSpec) -> None:
        job_id = self.submit(
            Prepass(dataset, preset.name).job(
                self.plan.job.workdir, f"prepass-{preset.name}-s{trial.seed}"
            )
        )
        trial.prepass_job = job_id
        self.say(f"seed {trial.seed} {preset.name}: pre-pass job {job_id}")
        output = record_prepass(self.cache, self.wait(job_id))
        if output is None:
            trial.problems.append(f"pre-pass job {job_id} failed; see gpudesk logs {job_id}")
            return
        trial.prepass_key = output["key"]
        trial.prepass_fresh = not output["reused"]

    # ----------------------------------------------------------------- training
    def train(self, trial: Trial, preset: Preset, dataset: DatasetSpec) -> None:
        spec = self.plan.job.to_dict()
        seed = str(trial.seed)
        spec["command"] = [arg.replace("{seed}", seed) for arg in spec["command"]]
        spec["env"] = {
            **{k: v.replace("{seed}", seed) for k, v in spec["env"].items()},
            ENV_SEED: seed,
        }
        spec.update(
            name=f"{self.plan.job.name}-{preset.name}-s{trial.seed}"[:100],
            dataset=dataset.name,
            selection=preset.name,
        )
        job_id = self.submit(JobSpec.from_dict(spec))
        trial.train_job = job_id
        self.say(f"seed {trial.seed} {preset.name}: training job {job_id}")
        done = self.wait(job_id)
        trial.train_state = done.state
        trial.train_wall_s = job_wall(done)
        if done.usage is not None:
            trial.train_cpu_s = done.usage.cpu_s
            trial.train_energy_j = done.usage.total_j
        log = Path(done.log).read_text(errors="replace") if done.log else ""
        metrics = metrics_of(last_result(log))
        if done.state != "succeeded":
            trial.problems.append(f"training job {job_id} {done.state}; see gpudesk logs {job_id}")
        elif self.plan.metric not in metrics:
            trial.problems.append(
                f"training job {job_id} printed no `result {{json}}` line with {self.plan.metric!r}"
            )
        else:
            trial.quality = metrics[self.plan.metric]
            samples = metrics.get("train_samples")
            trial.train_samples = int(samples) if samples is not None else None
        self._read_selection(trial, done.loader)

    def _read_selection(self, trial: Trial, loader: str | None) -> None:
        for entry in self.client.status(fresh_loaders=True).loaders:
            chosen = entry.status.selection if entry.status is not None else None
            if entry.name == loader and chosen is not None:
                trial.reuse_s = chosen.select_s if chosen.reused else None
        if trial.prepass_key:
            cached = self.cache.load(trial.prepass_key)
            if cached is not None:
                trial.prepass_uses = 1 + len(cached.reused_by)
                trial.prepass_wall_s = cached.cost.job_wall_s
                trial.prepass_compute_s = cached.cost.wall_s
                trial.prepass_cpu_s = cached.cost.job_cpu_s
                trial.prepass_energy_j = cached.cost.energy_j

    # ------------------------------------------------------------------ engine
    def submit(self, spec: JobSpec) -> int:
        (job_id,) = submit_specs(self.client, [spec], group=self.group)
        self.current = job_id
        return job_id

    def wait(self, job_id: int) -> JobView:
        (job,) = wait_for_jobs(self.client, [job_id], poll_s=POLL_S)
        self.current = None
        return job


# ------------------------------------------------------------------------ report
@dataclass
class PresetRow:
    preset: str
    seeds: int
    prepass_min: float | None  # fresh, mean over seeds
    prepass_wh: float | None
    amortized_min: float | None  # fresh cost / the jobs that trained on the entry
    amortized_wh: float | None
    uses: float | None
    train_min: float | None
    train_wh: float | None
    quality_mean: float | None
    quality_sd: float | None
    quality_values: list[float]
    of_full_pct: float | None
    break_even: str  # training runs on the subset that pay the pre-pass back
    reuse_ms: float | None
    prepass_compute_s: float | None


def summarize(trials: list[Trial]) -> list[PresetRow]:
    by_preset: dict[str, list[Trial]] = {}
    for trial in trials:
        by_preset.setdefault(trial.preset, []).append(trial)
    full = by_preset.get("full", [])
    full_quality = _mean([t.quality for t in full])
    full_wall = _mean([t.train_wall_s for t in full])
    rows = []
    for preset, group in by_preset.items():
        qualities = [t.quality for t in group if t.quality is not None]
        prepass_s = _mean([t.prepass_wall_s for t in group])
        prepass_j = _mean([t.prepass_energy_j for t in group])
        uses = _mean([float(t.prepass_uses) for t in group if t.prepass_uses])
        train_s = _mean([t.train_wall_s for t in group])
        quality = _mean(qualities)
        rows.append(
            PresetRow(
                preset=preset,
                seeds=len(group),
                prepass_min=_div(prepass_s, 60),
                prepass_wh=_div(prepass_j, J_PER_WH),
                amortized_min=_div(_div(prepass_s, uses), 60),
                amortized_wh=_div(_div(prepass_j, uses), J_PER_WH),
                uses=uses,
                train_min=_div(train_s, 60),
                train_wh=_div(_mean([t.train_energy_j for t in group]), J_PER_WH),
                quality_mean=quality,
                quality_sd=statistics.stdev(qualities) if len(qualities) > 1 else None,
                quality_values=qualities,
                of_full_pct=None
                if quality is None or not full_quality
                else 100.0 * quality / full_quality,
                break_even=_break_even(prepass_s, train_s, full_wall),
                reuse_ms=_div(_mean([t.reuse_s for t in group]), 0.001),
                prepass_compute_s=_mean([t.prepass_compute_s for t in group]),
            )
        )
    return rows


def _break_even(prepass_s: float | None, train_s: float | None, full_s: float | None) -> str:
    if not prepass_s:
        return "-"
    if train_s is None or full_s is None:
        return "?"
    saved = full_s - train_s
    if saved <= 0:
        return "never"
    return str(max(1, math.ceil(prepass_s / saved)))


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def _div(value: float | None, by: float | None) -> float | None:
    return None if value is None or not by else value / by


def targets(rows: list[PresetRow]) -> dict[str, Any]:
    """The checks the issue sets, computed from the table."""
    by_name = {row.preset: row for row in rows}
    random_row = by_name.get("random-25")
    full_row = by_name.get("full")
    candidates = [
        row
        for row in rows
        if row.preset.endswith("-25")
        and not row.preset.startswith(("random-", "rs2-"))
        and row.quality_mean is not None
    ]
    if not candidates or random_row is None or random_row.quality_mean is None:
        return {}
    best = max(candidates, key=lambda row: row.quality_mean or 0.0)
    spreads = [sd for sd in (best.quality_sd, random_row.quality_sd) if sd is not None]
    spread = max(spreads) if spreads else None
    margin = (best.quality_mean or 0.0) - random_row.quality_mean
    out: dict[str, Any] = {
        "best": best.preset,
        "margin": margin,
        "spread": spread,
        "beats_random": spread is not None and margin > spread,
    }
    if full_row is not None and full_row.train_min and best.prepass_min is not None:
        out["prepass_share_of_full"] = best.prepass_min / full_row.train_min
    if best.reuse_ms is not None and best.prepass_compute_s:
        out["reuse_share_of_prepass"] = best.reuse_ms / 1000 / best.prepass_compute_s
    return out


def render_header(plan: ComparePlan, station: StationInfo) -> str:
    backend = station.effective_backend
    simulated = station.simulated
    energy = (
        "energy (Wh) is SIMULATED: the GPUs are simulated"
        if simulated
        else "energy (Wh) from the engine's telemetry; n/a where it could not measure any "
        "(no GPU used and no readable RAPL counters)"
    )
    return (
        f"{plan.job.name} on {plan.dataset.factory} {json.dumps(plan.dataset.args)}, "
        f"{len(plan.seeds)} seed(s), quality = {plan.metric}; backend {backend}"
        + (" (SIMULATED)" if simulated else "")
        + f"\n{energy}\n"
    )


def render_table(rows: list[PresetRow], metric: str) -> str:
    def number(value: float | None, digits: int = 2) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    header = (
        "PRESET",
        "SEEDS",
        "PRE-PASS MIN",
        "PRE-PASS WH",
        "AMORTIZED MIN",
        "AMORTIZED WH",
        "USES",
        "TRAIN MIN",
        "TRAIN WH",
        metric.upper(),
        "% OF FULL",
        "BREAK-EVEN",
    )
    lines = [
        render.table(
            header,
            [
                (
                    row.preset,
                    row.seeds,
                    "-" if row.preset.split("-")[0] in NO_PREPASS else number(row.prepass_min, 3),
                    "-" if row.preset.split("-")[0] in NO_PREPASS else number(row.prepass_wh, 4),
                    "-" if row.preset.split("-")[0] in NO_PREPASS else number(row.amortized_min, 4),
                    "-" if row.preset.split("-")[0] in NO_PREPASS else number(row.amortized_wh, 5),
                    "-" if row.uses is None else f"{row.uses:.0f}",
                    number(row.train_min, 3),
                    number(row.train_wh, 4),
                    "n/a"
                    if row.quality_mean is None
                    else f"{row.quality_mean:.4f}"
                    + ("" if row.quality_sd is None else f" ± {row.quality_sd:.4f}"),
                    "n/a" if row.of_full_pct is None else f"{row.of_full_pct:.1f} %",
                    row.break_even,
                )
                for row in rows
            ],
        )
    ]
    return "\n".join(lines)


def render_targets(found: dict[str, Any]) -> str:
    if not found:
        return "targets: need full, random-25 and another preset at 25 % with results"
    lines = []
    spread = found["spread"]
    lines.append(
        f"best non-random preset at 25 %: {found['best']}, "
        f"{found['margin']:+.4f} over random-25 (seed-to-seed spread, the larger "
        f"standard deviation of the two: "
        + ("n/a" if spread is None else f"{spread:.4f}")
        + ") — "
        + (
            "beats random-25"
            if found["beats_random"]
            else "does NOT beat random-25 by more than the spread"
        )
    )
    share = found.get("prepass_share_of_full")
    if share is not None:
        lines.append(
            f"its fresh pre-pass: {100 * share:.1f} % of the full training run's wall "
            "time (target ≤ 15 %)"
        )
    reuse = found.get("reuse_share_of_prepass")
    if reuse is not None:
        lines.append(
            f"a cached reuse: {100 * reuse:.2f} % of the pre-pass's own compute time (target ≤ 1 %)"
        )
    return "\n".join(lines)


def to_json(
    plan: ComparePlan, trials: list[Trial], rows: list[PresetRow], station: StationInfo
) -> dict[str, Any]:
    return {
        "profile": str(plan.profile.path),
        "job": plan.job.name,
        "dataset": plan.dataset.to_dict(),
        "metric": plan.metric,
        "seeds": plan.seeds,
        "backend": station.effective_backend,
        "simulated": station.simulated,
        "trials": [asdict(t) for t in trials],
        "presets": [asdict(r) for r in rows],
        "targets": targets(rows),
    }
