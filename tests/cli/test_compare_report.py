"""`gpudesk select compare`'s maths on hand-made trials: the paired t-test and its verdicts, the
pairing with random at the same fraction, USES, the amortized cost, the break-even, the
targeting check, and the plan's splits (gpudesk.cli.compare, compare_report, paired)."""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path

import numpy as np
import pytest

from gpudesk.cli.compare import CompareError, ComparePlan, Trial, plan
from gpudesk.cli.compare_report import (
    break_even,
    checks,
    render_break_even,
    render_checks,
    render_cost,
    render_quality,
    summarize,
)
from gpudesk.cli.paired import BETTER, SAME, T_975, WORSE, paired_test, t_critical
from gpudesk.profile import load_profile
from gpudesk.selection.cache import Cost, Entry

PROFILE = """
name = "cmp"
[datasets.digits]
factory = "gpudesk.workloads.data:make_digits"
args = {{ split = "train"{split} }}
selection_target = "gpudesk.workloads.data:make_digits"
selection_target_args = {{ split = "target"{target_split}, classes = [3, 8] }}

[[jobs]]
name = "mlp"
dataset = "{dataset}"
command = ["python", "-m", "gpudesk.workloads.digits", "--loader", "shared"]
"""


def a_plan(
    tmp_path: Path,
    presets: str = "full,random-25,el2n-25,less-25",
    splits: int = 2,
    seeds: int = 2,
    split: str = ", split_seed = 0",
    target_split: str = ", split_seed = 0",
) -> ComparePlan:
    path = tmp_path / "cmp.toml"
    path.write_text(PROFILE.format(split=split, target_split=target_split, dataset="digits"))
    return plan(load_profile(path), presets, seeds, splits=splits)


# ------------------------------------------------------------------------- paired t
def test_the_critical_values_are_students_t() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df, value in T_975.items():
        assert value == round(float(stats.t.ppf(0.975, df)), 3), df
    # between the table's rows: the row below, never a smaller (laxer) value than the exact one
    for df in range(1, 400):
        assert t_critical(df) >= float(stats.t.ppf(0.975, df)) - 5e-4, df
    assert t_critical(35) == T_975[30] and t_critical(399) == T_975[100]
    with pytest.raises(ValueError):
        t_critical(0)


def test_a_paired_t_test_matches_the_textbook_formula() -> None:
    differences = [0.012, 0.020, 0.004, 0.015, 0.009, 0.011, -0.002, 0.017, 0.010]
    found = paired_test("random-25", differences)
    mean, sd, n = statistics.fmean(differences), statistics.stdev(differences), 9
    assert found.pairs == n and found.mean_diff == pytest.approx(mean)
    assert found.sd_diff == pytest.approx(sd)
    assert found.t == pytest.approx(mean / (sd / math.sqrt(n)))
    assert found.t_critical == 2.306  # 8 degrees of freedom
    assert found.verdict == BETTER
    stats = pytest.importorskip("scipy.stats")
    assert found.t == pytest.approx(float(stats.ttest_1samp(differences, 0.0).statistic))


@pytest.mark.parametrize(
    ("differences", "higher_is_better", "verdict"),
    [
        ([-0.03, -0.02, -0.025, -0.04], True, WORSE),
        ([0.03, -0.02, 0.01, -0.015], True, SAME),  # the sign flips from run to run
        ([0.01, 0.01, 0.01], True, BETTER),  # no spread at all: every run better
        ([0.0, 0.0, 0.0], True, SAME),
        ([-0.03, -0.02, -0.025, -0.04], False, BETTER),  # a loss: lower is better
        ([0.03, 0.02, 0.025, 0.04], False, WORSE),
    ],
)
def test_verdicts(differences: list[float], higher_is_better: bool, verdict: str) -> None:
    assert paired_test("random-25", differences, higher_is_better).verdict == verdict


def test_two_runs_far_apart_in_sign_are_not_called_different() -> None:
    # t = 1.0 / (1.414 / sqrt 2) = 1.0 < 12.706 (1 degree of freedom): honest, not significant
    assert paired_test("random-25", [2.0, 0.0]).verdict == SAME


def test_too_few_pairs_are_said_so() -> None:
    assert "too few" in paired_test("random-25", [0.5]).verdict
    assert paired_test("random-25", []).verdict == "no runs paired with random-25"


# ------------------------------------------------------------------------- the rows
def trial(preset: str, split: int, seed: int, quality: float | None, **more: object) -> Trial:
    found = Trial(preset, split, seed, quality=quality)
    for key, value in more.items():
        setattr(found, key, value)
    return found


def hand_made() -> list[Trial]:
    """2 splits × 2 seeds; el2n-25 beats random-25 in every run, stratified-25 loses in every
    run, less-10 is paired with random-10 (not random-25)."""
    trials = []
    for split in (0, 1):
        for seed in (0, 1):
            base = 0.80 + 0.02 * split + 0.01 * seed  # the run's own level, shared by the pair
            trials += [
                trial("full", split, seed, 0.95, train_wall_s=600.0),
                trial("random-25", split, seed, base, train_wall_s=150.0, prepass_wall_s=1.0),
                trial(
                    "el2n-25",
                    split,
                    seed,
                    base + 0.03 + 0.001 * seed,
                    train_wall_s=160.0,
                    prepass_wall_s=1000.0,
                    prepass_energy_j=3600.0,
                    prepass_uses=1,
                    proxy_accuracy=0.9 + 0.01 * split,
                ),
                trial(
                    "stratified-25",
                    split,
                    seed,
                    base - 0.05 - 0.002 * split,
                    train_wall_s=620.0,
                    prepass_wall_s=2.0,
                    prepass_uses=2,
                ),
                trial("less-10", split, seed, 0.70 + 0.01 * seed, train_wall_s=60.0),
                trial("random-10", split, seed, 0.69 + 0.01 * seed, train_wall_s=60.0),
            ]
    random.Random(1).shuffle(trials)  # pairs are found by split and seed, not by position
    return trials


def test_rows_pair_each_preset_with_random_at_its_own_fraction() -> None:
    rows = {row.preset: row for row in summarize(hand_made())}
    el2n = rows["el2n-25"]
    assert el2n.runs == 4 and el2n.percent == 25
    qualities = [0.83, 0.841, 0.85, 0.861]
    assert el2n.quality_mean == pytest.approx(statistics.fmean(qualities))
    assert el2n.quality_sd == pytest.approx(statistics.stdev(qualities))
    assert el2n.of_full_pct == pytest.approx(100 * statistics.fmean(qualities) / 0.95)
    assert el2n.vs_random is not None and el2n.vs_random.baseline == "random-25"
    assert el2n.vs_random.pairs == 4
    assert el2n.vs_random.mean_diff == pytest.approx(0.0305)
    assert el2n.vs_random.sd_diff == pytest.approx(statistics.stdev([0.03, 0.031] * 2))
    assert el2n.verdict == BETTER
    assert rows["stratified-25"].verdict == WORSE
    assert rows["less-10"].vs_random is not None
    assert rows["less-10"].vs_random.baseline == "random-10"
    assert rows["less-10"].vs_random.mean_diff == pytest.approx(0.01)
    assert rows["random-25"].verdict == "(the baseline)" and rows["full"].verdict == "-"
    assert el2n.proxy_accuracy == pytest.approx(0.905)
    assert rows["full"].proxy_accuracy is None


def test_a_preset_whose_random_was_not_run_says_so() -> None:
    rows = {r.preset: r for r in summarize([t for t in hand_made() if t.preset != "random-25"])}
    assert rows["el2n-25"].verdict == "random-25 not run"
    assert rows["less-10"].verdict == BETTER  # random-10 was run


def test_a_failed_run_leaves_its_pair_out() -> None:
    trials = hand_made()
    for t in trials:
        if (t.preset, t.split, t.seed) == ("random-25", 1, 1):
            t.quality = None
    rows = {r.preset: r for r in summarize(trials)}
    assert rows["el2n-25"].vs_random is not None and rows["el2n-25"].vs_random.pairs == 3
    assert rows["el2n-25"].quality_mean is not None and len(rows["el2n-25"].quality_values) == 4


def test_uses_amortized_cost_and_break_even() -> None:
    rows = {r.preset: r for r in summarize(hand_made())}
    el2n = rows["el2n-25"]
    # one training job used each entry: the amortized cost is the fresh cost
    assert el2n.uses == 1
    assert el2n.amortized_min == pytest.approx(el2n.prepass_min) == pytest.approx(1000 / 60)
    assert el2n.amortized_wh == pytest.approx(el2n.prepass_wh) == pytest.approx(1.0)
    # each run saves 600 - 160 = 440 s; 1000 s of pre-pass needs ceil(1000 / 440) = 3 runs
    assert el2n.break_even == "3"
    assert el2n.saved_min == pytest.approx(440 / 60)
    strat = rows["stratified-25"]
    assert strat.uses == 2 and strat.amortized_min == pytest.approx(strat.prepass_min / 2)
    assert strat.break_even == "never"  # it trains slower than full
    assert rows["full"].break_even == "-"  # no pre-pass, nothing to pay back
    assert rows["less-10"].break_even == "?"  # a pre-pass whose time is not known
    text = render_break_even(list(rows.values()))
    assert "el2n-25 pays its pre-pass back after 3 runs on the subset" in text
    assert "stratified-25 never pays its pre-pass back" in text
    assert "less-10: break-even unknown" in text
    assert not [line for line in text.splitlines() if line.startswith("full")]
    cost = render_cost(list(rows.values()))
    assert "USES" in cost and "BREAK-EVEN" in cost


@pytest.mark.parametrize(
    ("prepass", "train", "full", "expected"),
    [
        (None, 10.0, 20.0, "?"),
        (5.0, None, 20.0, "?"),
        (5.0, 10.0, None, "?"),
        (5.0, 20.0, 20.0, "never"),
        (5.0, 25.0, 20.0, "never"),
        (10.0, 10.0, 20.0, "1"),  # saves exactly the pre-pass in one run
        (10.001, 10.0, 20.0, "2"),
        (0.5, 10.0, 20.0, "1"),
        (0.0, 10.0, 20.0, "1"),
        (95.0, 10.0, 20.0, "10"),
    ],
)
def test_break_even_is_the_runs_whose_savings_pay_the_prepass(
    prepass: float | None, train: float | None, full: float | None, expected: str
) -> None:
    assert break_even(prepass, train, full) == expected


def test_uses_counts_the_training_jobs_a_loader_recorded() -> None:
    entry = Entry(
        key="el2n-x",
        fingerprint="fp1-x",
        method="el2n",
        params={},
        proxy=None,
        order=np.arange(4),
        labels=None,
        cost=Cost(),
        created_at=0.0,
        reused_by=[
            "job 7 via loader digits.p0s0.el2n-25",  # a training job (gpudesk.loader.producer)
            "job 9",  # `gpudesk select run` as a job, recording its look-up
            "gpudesk select run at 2025-01-01 00:00:00",
            "pid 123 via loader digits",  # a consumer started by hand trains too
        ],
    )
    assert entry.training_uses == 2


def test_the_quality_table_says_worse_plainly() -> None:
    text = render_quality(summarize(hand_made()), "val_acc")
    assert "VAL_ACC (MEAN ± SD)" in text and "VERDICT (95 %)" in text
    line = next(row for row in text.splitlines() if row.startswith("stratified-25"))
    assert WORSE in line and "-0.0510 ± 0.0012" in line
    line = next(row for row in text.splitlines() if row.startswith("el2n-25"))
    assert BETTER in line and line.split()[-1] == "0.905"  # the proxy's accuracy


# ------------------------------------------------------------------------- checks
def test_the_targeting_check(tmp_path: Path) -> None:
    chosen = a_plan(tmp_path, "full,random-25,less-25", splits=3, seeds=3)
    trials = []
    data = {c: 100 for c in range(10)}  # 10 % each: 3 and 8 are 20 % of the data
    for split in chosen.splits:
        for seed in chosen.seeds:
            kept = {c: 10 for c in range(10)} | {3: 60, 8: 60}  # 120 of 200: 60 %, 3x
            trials += [
                trial("full", split, seed, 0.95, train_wall_s=100.0),
                trial(
                    "random-25",
                    split,
                    seed,
                    0.80 + 0.01 * seed,
                    train_wall_s=30.0,
                    reuse_s=0.004,
                    prepass_compute_s=0.0001,
                ),
                trial(
                    "less-25",
                    split,
                    seed,
                    0.86 + 0.01 * seed + 0.002 * split,
                    train_wall_s=30.0,
                    reuse_s=0.01,
                    prepass_compute_s=2.0,
                    prepass_wall_s=140.0,
                    prepass_uses=1,
                    kept_per_class=kept,
                    dataset_per_class=data,
                    target_classes=[3, 8],
                ),
            ]
    rows = summarize(trials)
    found = checks(chosen, trials, rows)
    assert found.enough_runs and found.verdicts == {"less-25": BETTER}
    (target,) = found.targeting
    assert target.target_classes == [3, 8]
    assert target.kept_share == pytest.approx(0.6) and target.dataset_share == pytest.approx(0.2)
    assert target.enrichment == pytest.approx(3.0) and target.enriched
    assert target.margin == pytest.approx(0.062)
    assert target.spread == pytest.approx(max(r.quality_sd or 0 for r in rows[1:]))
    assert target.beats_by_more_than_spread
    # 140 s of pre-pass, 100 - 30 = 70 s saved a run: 2 runs; random-25's pre-pass: not timed
    assert found.break_even == {"random-25": "?", "less-25": "2"}
    # a reuse against the pre-pass's compute: for the pre-passes that train a proxy (a random
    # permutation is cheaper to redraw than to look up)
    assert found.reuse_share_of_prepass == {"less-25": pytest.approx(0.005)}
    assert found.prepass_share_of_full == {"less-25": pytest.approx(1.4)}
    text = render_checks(found, "target_acc")
    assert (
        "a cached reuse against the pre-pass's own compute time (target ≤ 1 %): less-25 0.50 %"
        in text
    )
    assert "a fresh pre-pass against one full training run's wall time: less-25 140.0 %" in text
    assert "3 split(s) × 3 seed(s) per preset — enough" in text
    assert "the target's classes (3, 8) are 60.0 % of its kept set against 20.0 %" in text
    assert "3.00× — enriched (target ≥ 2×)" in text
    assert "less-25 against random-25 on target_acc: +0.0620" in text
    assert "beats it by more than the spread" in text
    assert "better than random: less-25" in text


def test_the_targeting_margin_follows_the_metrics_direction(tmp_path: Path) -> None:
    """With --lower-is-better (a loss), a targeted preset that lowers the loss by more than the
    spread beats random: the margin is taken in the metric's better direction."""
    path = tmp_path / "cmp.toml"
    path.write_text(
        PROFILE.format(split=", split_seed = 0", target_split=", split_seed = 0", dataset="digits")
    )
    chosen = plan(load_profile(path), "random-25,less-25", 3, splits=3, higher_is_better=False)
    data = {c: 100 for c in range(10)}
    kept = {c: 10 for c in range(10)} | {3: 60, 8: 60}
    trials = []
    for split in chosen.splits:
        for seed in chosen.seeds:
            trials += [
                trial("random-25", split, seed, 0.50 + 0.01 * seed),
                trial(
                    "less-25",
                    split,
                    seed,
                    0.40 + 0.01 * seed + 0.002 * split,
                    kept_per_class=kept,
                    dataset_per_class=data,
                    target_classes=[3, 8],
                ),
            ]
    rows = summarize(trials, higher_is_better=False)
    found = checks(chosen, trials, rows)
    (target,) = found.targeting
    assert target.verdict == BETTER and target.margin == pytest.approx(-0.098)
    assert target.beats_by_more_than_spread


def test_a_class_mix_as_the_data_is_not_enriched(tmp_path: Path) -> None:
    chosen = a_plan(tmp_path, "random-25,less-25", splits=1, seeds=2)
    mix = {c: 10 for c in range(10)}
    trials = [
        trial(p, 0, s, q, kept_per_class=mix, dataset_per_class=mix, target_classes=[3, 8])
        for s in (0, 1)
        for p, q in (("random-25", 0.8 + 0.01 * s), ("less-25", 0.79 + 0.012 * s))
    ]
    found = checks(chosen, trials, summarize(trials))
    (target,) = found.targeting
    assert target.enrichment == pytest.approx(1.0) and target.enriched is False
    assert not target.beats_by_more_than_spread
    text = render_checks(found, "val_acc")
    assert "NOT enriched" in text and "FEWER than the ≥ 3 × 3 a verdict wants" in text
    assert "does NOT beat it by more than the spread" in text


def test_a_target_of_every_class_has_no_enrichment_to_check(tmp_path: Path) -> None:
    """A target drawn from every class (profiles/selection.toml's) gives less-P nothing to be
    enriched in: the report says so instead of calling a 1.00x mix "NOT enriched"; dedup's
    millisecond pass over the raw inputs is not held to the reuse target (it trains no proxy)."""
    chosen = a_plan(tmp_path, "random-25,dedup-25,less-25", splits=1, seeds=2)
    data = {c: 10 for c in range(10)}
    kept = {c: 0 for c in range(10)} | {0: 30, 4: 30, 6: 40}  # top-k collapsed on 3 classes
    trials = []
    for seed in (0, 1):
        trials += [
            trial("random-25", 0, seed, 0.95, reuse_s=0.003, prepass_compute_s=0.001),
            trial("dedup-25", 0, seed, 0.95, reuse_s=0.003, prepass_compute_s=0.01),
            trial(
                "less-25",
                0,
                seed,
                0.45,
                reuse_s=0.003,
                prepass_compute_s=10.0,
                kept_per_class=kept,
                dataset_per_class=data,
                target_classes=list(range(10)),
            ),
        ]
    found = checks(chosen, trials, summarize(trials))
    assert found.targeting == [] and found.untargeted == ["less-25"]
    assert set(found.reuse_share_of_prepass) == {"less-25"}
    text = render_checks(found, "val_acc")
    assert "less-25: the target holds every class of the data" in text
    assert "less-25-perclass keeps the data's class mix" in text
    assert "NOT enriched" not in text


# ------------------------------------------------------------------------- the plan
def test_each_split_redraws_the_dataset_and_its_target(tmp_path: Path) -> None:
    chosen = a_plan(tmp_path, splits=3, seeds=2)
    assert chosen.splits == [0, 1, 2] and chosen.seeds == [0, 1]
    spec = chosen.dataset_for(2, 1)
    assert spec.args == {"split": "train", "split_seed": 2}
    assert spec.selection_target_args == {"split": "target", "split_seed": 2, "classes": [3, 8]}
    assert spec.seed == chosen.dataset.seed + 1 and spec.selection is None
    names = {chosen.dataset_for(k, s).name for k in chosen.splits for s in chosen.seeds}
    assert len(names) == 6


def test_loader_names_stay_whole_under_the_longest_preset(tmp_path: Path) -> None:
    path = tmp_path / "cmp.toml"
    long_name = "a_dataset_with_a_rather_long_name_indeed"  # 40 characters, the most allowed
    path.write_text(
        PROFILE.format(
            split=", split_seed = 0", target_split=", split_seed = 0", dataset=long_name
        ).replace("[datasets.digits]", f"[datasets.{long_name}]")
    )
    chosen = plan(load_profile(path), "full,stratified-100,random-25", 20, splits=20)
    names = set()
    for split in chosen.splits:
        for seed in chosen.seeds:
            spec = chosen.dataset_for(split, seed)
            for preset in ("full", "stratified-100", "random-25"):
                variant = spec.variant(preset)
                assert len(variant.name) <= 40
                assert variant.name.startswith(spec.name)  # the split and seed are not cut
                names.add(variant.name)
    assert len(names) == 20 * 20 * 3


def test_the_plan_refuses_splits_it_cannot_draw(tmp_path: Path) -> None:
    with pytest.raises(
        CompareError, match=r"--splits 2: add split_seed = 0 to \[datasets.digits\]"
    ):
        a_plan(tmp_path, "full,random-25", splits=2, split="")
    # one split needs no split_seed: the profile's own split is used
    assert a_plan(tmp_path, "full,random-25", splits=1, split="").splits == [0]
    # less-P's target must come from the same split as the data it ranks
    with pytest.raises(CompareError, match="selection_target_args too"):
        a_plan(tmp_path, "full,less-25", splits=2, target_split="")
    assert a_plan(tmp_path, "full,random-25", splits=2, target_split="").splits == [0, 1]
    with pytest.raises(CompareError, match="--splits: give 1 to 20"):
        a_plan(tmp_path, splits=0)
    with pytest.raises(CompareError, match="split_seed must be a whole number"):
        a_plan(tmp_path, splits=2, split=', split_seed = "x"')


def test_splits_start_at_the_profiles_split_seed(tmp_path: Path) -> None:
    chosen = a_plan(tmp_path, splits=3, split=", split_seed = 5")
    assert chosen.splits == [5, 6, 7]
    assert chosen.dataset_for(6, 0).args["split_seed"] == 6
