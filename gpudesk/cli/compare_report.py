"""`gpudesk select compare`'s report: the trials (gpudesk.cli.compare) summed up per preset, the
two tables (quality, cost), the break-even in words, the issue's checks, and the JSON.

Quality is a mean ± standard deviation over every run of a preset (K splits × N seeds). Each
preset at P % is compared with random-P run for run (the same split and seed): the mean and the
standard deviation of the differences, and a paired two-sided t-test at 95 % (gpudesk.cli.paired)
that says plainly whether it did better than random, worse, or no different.

Costs are means over the runs. USES is the training jobs recorded as using the cached entry (the
pre-pass job is not one of them); the amortized cost is the fresh pre-pass divided by them. The
break-even is how many training runs on the subset it takes for the wall time they save against
training on the full data to pay back the fresh pre-pass: ceil(pre-pass / (full − subset)),
"never" when a run on the subset saves nothing.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from gpudesk import render
from gpudesk.api.prepass import NO_PREPASS
from gpudesk.cli.compare import ComparePlan, Trial
from gpudesk.cli.paired import BETTER, WORSE, PairedTest, paired_test
from gpudesk.selection.preset_names import PROXY_METHODS, Preset, parse_preset
from gpudesk.units import J_PER_WH

if TYPE_CHECKING:
    from gpudesk.api.models import StationInfo

# issue 21's checks: ">= 3 splits x 3 seeds", and a targeted selection's kept set "enriched in
# those classes (>= 2x their share in the dataset)"
MIN_SPLITS = 3
MIN_SEEDS = 3
ENRICHMENT_TARGET = 2.0
# the share of a pre-pass's own compute time a cached reuse may cost (issue 7's target, kept)
REUSE_TARGET = 0.01


@dataclass
class PresetRow:
    preset: str
    percent: int | None  # None: full
    runs: int  # splits × seeds it was run on
    prepass_min: float | None  # fresh, mean over runs
    prepass_wh: float | None
    amortized_min: float | None  # fresh cost / the training jobs that used the entry
    amortized_wh: float | None
    uses: float | None  # training jobs that used the entry (mean over runs)
    train_min: float | None
    train_wh: float | None
    quality_mean: float | None  # over every run: splits × seeds
    quality_sd: float | None
    quality_values: list[float]
    of_full_pct: float | None
    vs_random: PairedTest | None  # None: full, or random-P itself
    proxy_accuracy: float | None  # the pre-pass's proxy on held-out samples (mean over runs)
    break_even: str  # training runs on the subset that pay the pre-pass back
    saved_min: float | None  # training wall time one run on it saves against full
    reuse_ms: float | None
    prepass_compute_s: float | None

    @property
    def has_prepass(self) -> bool:
        return parse_preset(self.preset).method not in NO_PREPASS

    @property
    def verdict(self) -> str:
        if self.preset == "full":
            return "-"
        if self.vs_random is None:
            return "(the baseline)"
        return self.vs_random.verdict


def random_at(preset: str) -> str | None:
    """The random preset at the same fraction (None for full, and for random-P itself)."""
    chosen = parse_preset(preset)
    if chosen.method in ("full", "random"):
        return None
    return Preset("random", chosen.percent).name


def summarize(trials: Sequence[Trial], higher_is_better: bool = True) -> list[PresetRow]:
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
        used = [t for t in group if t.prepass_uses > 0]
        train_s = _mean([t.train_wall_s for t in group])
        quality = _mean(qualities)
        baseline = random_at(preset)
        rows.append(
            PresetRow(
                preset=preset,
                percent=None if preset == "full" else parse_preset(preset).percent,
                runs=len(group),
                prepass_min=_div(prepass_s, 60),
                prepass_wh=_div(prepass_j, J_PER_WH),
                amortized_min=_div(
                    _mean([_div(t.prepass_wall_s, t.prepass_uses) for t in used]), 60
                ),
                amortized_wh=_div(
                    _mean([_div(t.prepass_energy_j, t.prepass_uses) for t in used]), J_PER_WH
                ),
                uses=_mean([float(t.prepass_uses) for t in used]),
                train_min=_div(train_s, 60),
                train_wh=_div(_mean([t.train_energy_j for t in group]), J_PER_WH),
                quality_mean=quality,
                quality_sd=statistics.stdev(qualities) if len(qualities) > 1 else None,
                quality_values=qualities,
                of_full_pct=None
                if quality is None or not full_quality
                else 100.0 * quality / full_quality,
                vs_random=None
                if baseline is None
                else _against(baseline, group, by_preset.get(baseline), higher_is_better),
                proxy_accuracy=_mean([t.proxy_accuracy for t in group]),
                break_even=break_even(prepass_s, train_s, full_wall)
                if parse_preset(preset).method not in NO_PREPASS
                else "-",
                saved_min=None
                if train_s is None or full_wall is None or preset == "full"
                else (full_wall - train_s) / 60,
                reuse_ms=_div(_mean([t.reuse_s for t in group]), 0.001),
                prepass_compute_s=_mean([t.prepass_compute_s for t in group]),
            )
        )
    return rows


def _against(
    baseline: str,
    group: Sequence[Trial],
    random_trials: Sequence[Trial] | None,
    higher_is_better: bool,
) -> PairedTest:
    if not random_trials:
        return PairedTest(baseline, 0, None, None, None, None, f"{baseline} not run")
    random_quality = {(t.split, t.seed): t.quality for t in random_trials if t.quality is not None}
    differences = [
        t.quality - random_quality[(t.split, t.seed)]
        for t in group
        if t.quality is not None and (t.split, t.seed) in random_quality
    ]
    return paired_test(baseline, differences, higher_is_better)


def break_even(prepass_s: float | None, train_s: float | None, full_s: float | None) -> str:
    """Training runs on the subset whose saved wall time (full − subset, each) pays back the
    fresh pre-pass: "?" without the times, "never" when a run on the subset saves nothing.
    (A preset without a pre-pass shows "-": the caller's to say.)"""
    if prepass_s is None or train_s is None or full_s is None:
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


# ------------------------------------------------------------------------- checks
@dataclass(frozen=True)
class TargetingCheck:
    """A targeted preset (less-P) against the target's classes and against random-P."""

    preset: str
    target_classes: list[int] | None
    kept_share: float | None  # of its kept set in the target's classes (mean over runs)
    dataset_share: float | None  # of the whole training split
    enrichment: float | None  # kept_share / dataset_share
    enriched: bool | None  # at least ENRICHMENT_TARGET
    baseline: str
    margin: float | None  # mean paired difference on the metric
    spread: float | None  # the larger standard deviation over runs of the two presets
    beats_by_more_than_spread: bool | None
    verdict: str


@dataclass(frozen=True)
class Checks:
    """What issue 21 asks a comparison to show, computed from the table."""

    splits: int
    seeds: int
    enough_runs: bool  # at least MIN_SPLITS × MIN_SEEDS
    verdicts: dict[str, str]  # preset -> its verdict against random at the same fraction
    targeting: list[TargetingCheck] = field(default_factory=list)
    # targeted presets whose target holds every class of the data (no enrichment to check)
    untargeted: list[str] = field(default_factory=list)
    break_even: dict[str, str] = field(default_factory=dict)  # presets with a pre-pass
    prepass_share_of_full: dict[str, float] = field(default_factory=dict)
    reuse_share_of_prepass: dict[str, float] = field(default_factory=dict)  # proxy pre-passes


def enough_runs(splits: int, seeds: int) -> bool:
    """Whether a comparison has the issue's >= MIN_SPLITS splits x MIN_SEEDS seeds."""
    return splits >= MIN_SPLITS and seeds >= MIN_SEEDS


def checks(plan: ComparePlan, trials: Sequence[Trial], rows: Sequence[PresetRow]) -> Checks:
    by_name = {row.preset: row for row in rows}
    full = by_name.get("full")
    found = Checks(
        splits=len(plan.splits),
        seeds=len(plan.seeds),
        enough_runs=enough_runs(len(plan.splits), len(plan.seeds)),
        verdicts={row.preset: row.verdict for row in rows if row.vs_random is not None},
    )
    for row in rows:
        if not row.has_prepass:
            continue
        found.break_even[row.preset] = row.break_even
        if full is not None and full.train_min and row.prepass_min is not None:
            found.prepass_share_of_full[row.preset] = row.prepass_min / full.train_min
        # a permutation (random, stratified) or dedup's pass over the raw inputs costs
        # milliseconds, about what the lookup's checksum costs: the target is about the
        # pre-passes that train a proxy
        costly = parse_preset(row.preset).method in PROXY_METHODS
        if costly and row.reuse_ms is not None and row.prepass_compute_s:
            found.reuse_share_of_prepass[row.preset] = row.reuse_ms / 1000 / row.prepass_compute_s
        if parse_preset(row.preset).method == "less":
            runs = [t for t in trials if t.preset == row.preset]
            if _targets_every_class(runs):
                found.untargeted.append(row.preset)
            else:
                found.targeting.append(_targeting(row, runs, by_name, plan.higher_is_better))
    return found


def _targets_every_class(trials: Sequence[Trial]) -> bool:
    """Whether the target holds every class of the training data: then there is no class for
    the kept set to be enriched in, and the targeting check does not apply."""
    for trial in trials:
        if trial.target_classes and trial.dataset_per_class:
            present = {c for c, n in trial.dataset_per_class.items() if n}
            return present <= set(trial.target_classes)
    return False


def _targeting(
    row: PresetRow,
    trials: Sequence[Trial],
    by_name: dict[str, PresetRow],
    higher_is_better: bool = True,
) -> TargetingCheck:
    classes = next((t.target_classes for t in trials if t.target_classes), None)
    kept = _mean([_share(t.kept_per_class, t.target_classes) for t in trials])
    whole = _mean([_share(t.dataset_per_class, t.target_classes) for t in trials])
    enrichment = _div(kept, whole)
    baseline = random_at(row.preset) or "random"
    other = by_name.get(baseline)
    spreads = [sd for sd in (row.quality_sd, other.quality_sd if other else None) if sd is not None]
    spread = max(spreads) if spreads else None
    margin = row.vs_random.mean_diff if row.vs_random is not None else None
    return TargetingCheck(
        preset=row.preset,
        target_classes=classes,
        kept_share=kept,
        dataset_share=whole,
        enrichment=enrichment,
        enriched=None if enrichment is None else enrichment >= ENRICHMENT_TARGET,
        baseline=baseline,
        margin=margin,
        spread=spread,
        beats_by_more_than_spread=None
        if margin is None or spread is None
        # the margin in the metric's better direction (a loss improves downwards)
        else (margin if higher_is_better else -margin) > spread and row.verdict == BETTER,
        verdict=row.verdict,
    )


def _share(per_class: dict[int, int] | None, classes: list[int] | None) -> float | None:
    if not per_class or not classes:
        return None
    total = sum(per_class.values())
    return sum(per_class.get(c, 0) for c in classes) / total if total else None


# ------------------------------------------------------------------------- text
def render_header(plan: ComparePlan, station: StationInfo) -> str:
    backend = station.effective_backend
    energy = (
        "energy (Wh) is SIMULATED: the GPUs are simulated"
        if station.simulated
        else "energy (Wh) from the engine's telemetry; n/a where it could not measure any "
        "(no GPU used and no readable RAPL counters)"
    )
    splits = (
        f"{len(plan.splits)} split(s) (split_seed {_span(plan.splits)})"
        if plan.sets_split
        else "1 split (the profile's own)"
    )
    return (
        f"{plan.job.name} on {plan.dataset.factory} {json.dumps(plan.dataset.args)}: "
        f"{splits} × {len(plan.seeds)} seed(s), quality = {plan.metric} "
        f"({'higher' if plan.higher_is_better else 'lower'} is better); backend {backend}"
        + (" (SIMULATED)" if station.simulated else "")
        + f"\n{energy}\n"
    )


def _span(values: Sequence[int]) -> str:
    return str(values[0]) if len(values) == 1 else f"{values[0]}..{values[-1]}"


def _number(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _quality(row: PresetRow) -> str:
    if row.quality_mean is None:
        return "n/a"
    sd = "" if row.quality_sd is None else f" ± {row.quality_sd:.4f}"
    return f"{row.quality_mean:.4f}{sd}"


def _difference(row: PresetRow) -> str:
    test = row.vs_random
    if test is None or test.mean_diff is None:
        return "-"
    sd = "" if test.sd_diff is None else f" ± {test.sd_diff:.4f}"
    return f"{test.mean_diff:+.4f}{sd}"


def render_quality(rows: Sequence[PresetRow], metric: str) -> str:
    return render.table(
        (
            "PRESET",
            "RUNS",
            f"{metric.upper()} (MEAN ± SD)",
            "% OF FULL",
            "VS RANDOM, PAIRED",
            "VERDICT (95 %)",
            "PROXY ACC",
        ),
        [
            (
                row.preset,
                row.runs,
                _quality(row),
                "n/a" if row.of_full_pct is None else f"{row.of_full_pct:.1f} %",
                _difference(row),
                row.verdict,
                "-" if row.proxy_accuracy is None else f"{row.proxy_accuracy:.3f}",
            )
            for row in rows
        ],
    )


def render_cost(rows: Sequence[PresetRow]) -> str:
    def prepass(row: PresetRow, value: float | None, digits: int) -> str:
        return _number(value, digits) if row.has_prepass else "-"

    return render.table(
        (
            "PRESET",
            "PRE-PASS MIN",
            "PRE-PASS WH",
            "USES",
            "AMORTIZED MIN",
            "AMORTIZED WH",
            "TRAIN MIN",
            "TRAIN WH",
            "BREAK-EVEN",
        ),
        [
            (
                row.preset,
                prepass(row, row.prepass_min, 3),
                prepass(row, row.prepass_wh, 4),
                "-" if row.uses is None else f"{row.uses:g}",
                prepass(row, row.amortized_min, 4),
                prepass(row, row.amortized_wh, 5),
                _number(row.train_min, 3),
                _number(row.train_wh, 4),
                row.break_even,
            )
            for row in rows
        ],
    )


def render_legend() -> str:
    return (
        "VS RANDOM: the preset minus random at the same percent, run by run (same split and "
        "seed): mean ± sd of the differences.\nVERDICT: a paired two-sided t-test at 95 %. "
        "PROXY ACC: the pre-pass's proxy model on held-out samples.\nUSES: training jobs that "
        "used the cached entry (the pre-pass job is not one); AMORTIZED: the fresh pre-pass "
        "divided by them."
    )


def render_break_even(rows: Sequence[PresetRow]) -> str:
    """The break-even column in words, for each preset with a pre-pass."""
    lines = []
    for row in rows:
        if not row.has_prepass:
            continue
        fresh = render.duration(None if row.prepass_min is None else row.prepass_min * 60)
        if row.break_even.isdigit():
            runs = int(row.break_even)
            saved = render.duration((row.saved_min or 0.0) * 60)
            lines.append(
                f"{row.preset} pays its pre-pass back after {runs} run{'s' if runs != 1 else ''}"
                f" on the subset (the pre-pass took {fresh} fresh; each run saves {saved} "
                "against full)"
            )
        elif row.break_even == "never":
            full_min = None if row.saved_min is None else (row.train_min or 0.0) + row.saved_min
            lines.append(
                f"{row.preset} never pays its pre-pass back: a run on it takes no less wall "
                f"time than one on the full data ({_number(row.train_min, 3)} min against "
                f"{_number(full_min, 3)} min)"
            )
        else:
            lines.append(
                f"{row.preset}: break-even unknown (it needs the fresh pre-pass's time, a full "
                "run, and both training times)"
            )
    return "\n".join(lines)


def render_checks(found: Checks, metric: str) -> str:
    lines = [
        f"runs: {found.splits} split(s) × {found.seeds} seed(s) per preset — "
        + (
            f"enough for a verdict (≥ {MIN_SPLITS} × {MIN_SEEDS})"
            if found.enough_runs
            else f"FEWER than the ≥ {MIN_SPLITS} × {MIN_SEEDS} a verdict wants: read the "
            "verdicts as preliminary"
        )
    ]
    grouped: dict[str, list[str]] = {}
    for preset, verdict in found.verdicts.items():
        grouped.setdefault(verdict, []).append(preset)
    for verdict in (BETTER, WORSE, *[v for v in grouped if v not in (BETTER, WORSE)]):
        if verdict in grouped:
            lines.append(f"{verdict}: {', '.join(grouped[verdict])}")
    for check in found.targeting:
        lines.extend(_render_targeting(check, metric))
    for preset in found.untargeted:
        line = (
            f"{preset}: the target holds every class of the data, so there is no class for its "
            "kept set to be enriched in; the targeting check needs a target of some classes "
            "(profiles/selection-target.toml)"
        )
        if not parse_preset(preset).per_class:
            line += (
                ". Its top-k keeps the classes whose gradients agree most with the target's: "
                f"{preset}-perclass keeps the data's class mix"
            )
        lines.append(line)
    if found.prepass_share_of_full:
        lines.append(
            "a fresh pre-pass against one full training run's wall time: "
            + ", ".join(f"{p} {100 * v:.1f} %" for p, v in found.prepass_share_of_full.items())
        )
    if found.reuse_share_of_prepass:
        lines.append(
            "a cached reuse against the pre-pass's own compute time (target ≤ "
            f"{100 * REUSE_TARGET:.0f} %): "
            + ", ".join(f"{p} {100 * v:.2f} %" for p, v in found.reuse_share_of_prepass.items())
        )
    return "\n".join(lines)


def _render_targeting(check: TargetingCheck, metric: str) -> list[str]:
    classes = ", ".join(str(c) for c in check.target_classes or []) or "?"
    if check.enrichment is None or check.kept_share is None or check.dataset_share is None:
        enriched = f"{check.preset}: the kept set's class mix is unknown (no labels stored)"
    else:
        enriched = (
            f"{check.preset}: the target's classes ({classes}) are "
            f"{100 * check.kept_share:.1f} % of its kept set against "
            f"{100 * check.dataset_share:.1f} % of the data: {check.enrichment:.2f}× — "
            + (
                f"enriched (target ≥ {ENRICHMENT_TARGET:g}×)"
                if check.enriched
                else f"NOT enriched (target ≥ {ENRICHMENT_TARGET:g}×)"
            )
        )
    if check.margin is None or check.spread is None:
        beats = f"{check.preset} against {check.baseline} on {metric}: {check.verdict}"
    else:
        beats = (
            f"{check.preset} against {check.baseline} on {metric}: {check.margin:+.4f} "
            f"(spread, the larger sd over runs: {check.spread:.4f}) — "
            + (
                "beats it by more than the spread"
                if check.beats_by_more_than_spread
                else f"does NOT beat it by more than the spread ({check.verdict})"
            )
        )
    return [enriched, beats]


# ------------------------------------------------------------------------- JSON
def to_json(
    plan: ComparePlan,
    trials: Sequence[Trial],
    rows: Sequence[PresetRow],
    found: Checks,
    station: StationInfo,
) -> dict[str, Any]:
    return {
        "profile": str(plan.profile.path),
        "job": plan.job.name,
        "dataset": plan.dataset.to_dict(),
        "metric": plan.metric,
        "higher_is_better": plan.higher_is_better,
        "splits": plan.splits,  # split_seed values (all 0 when the factory takes none)
        "split_arg_set": plan.sets_split,
        "seeds": plan.seeds,
        "backend": station.effective_backend,
        "simulated": station.simulated,
        "trials": [asdict(t) for t in trials],
        "presets": [{**asdict(r), "verdict": r.verdict} for r in rows],
        "checks": asdict(found),
    }
