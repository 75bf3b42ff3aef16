"""The result-line convention (gpudesk.results, docs/results.md) and energy in Wh for people."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudesk.results import Best, best, last_result, metrics_of, read_metrics
from gpudesk.units import watt_hours


def test_the_last_well_formed_result_line_wins() -> None:
    log = (
        'result {"val_acc": 0.5}\n'
        "epoch 2/2 loss 0.1\n"
        'result {"val_acc": 0.9, "device": "cpu"}\n'
        "result {not json}\n"  # a broken line does not hide the good one before it
        "result [1, 2]\n"  # nor does JSON that is not an object
        'the result {"val_acc": 0.1}\n'  # the line must start with the word
    )
    assert last_result(log) == {"val_acc": 0.9, "device": "cpu"}
    assert last_result("no result here\n") is None


def test_only_finite_numbers_are_metrics() -> None:
    result = last_result(
        'result {"val_acc": 0.9, "epochs": 40, "ok": true, "device": "cpu", "loss": NaN, '
        '"hist": [1], "big": Infinity, "neg": -2.5}'
    )
    assert metrics_of(result) == {"val_acc": 0.9, "epochs": 40.0, "neg": -2.5}
    assert list(metrics_of(result)) == ["val_acc", "epochs", "neg"]  # in the job's order


def test_read_metrics_from_a_job_log(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text("config ...\n" + "x" * 5000 + '\nresult {"val_acc": 0.75}\n')
    assert read_metrics(log) == {"val_acc": 0.75}
    assert read_metrics(tmp_path / "missing.log") is None
    assert read_metrics(None) is None
    (tmp_path / "quiet.log").write_text("done\n")
    assert read_metrics(tmp_path / "quiet.log") is None


def test_best_by_goal_first_wins_a_tie() -> None:
    jobs = [(1, {"acc": 0.8, "loss": 0.3}), (2, {"acc": 0.9, "loss": 0.2}), (3, {"loss": 0.1})]
    assert best(jobs, "acc", "max") == Best(job=2, value=0.9, ranked=2, ties=0)
    assert best(jobs, "loss", "min") == Best(job=3, value=0.1, ranked=3, ties=0)
    assert best(jobs, "f1", "max") is None
    tied = [(4, {"acc": 0.9}), (5, {"acc": 0.9}), (6, {"acc": 0.1})]
    assert best(tied, "acc", "max") == Best(job=4, value=0.9, ranked=3, ties=1)


@pytest.mark.parametrize(
    ("joules", "shown"),
    [
        (None, "n/a"),
        (0.0, "0.00 Wh"),
        (6.0, "<0.01 Wh"),
        (36.0, "0.01 Wh"),
        (5400.0, "1.50 Wh"),
        (45_000.0, "12.5 Wh"),
        (1_500_000.0, "417 Wh"),
        (3_960_000.0, "1.10 kWh"),
    ],
)
def test_watt_hours(joules: float | None, shown: str) -> None:
    assert watt_hours(joules) == shown


def test_a_result_line_nested_past_the_stack_is_no_result() -> None:
    """json recurses once per level: `[[[[…` 100,000 deep raised RecursionError through
    `gpudesk run`'s report (and the MLflow tracker's)."""
    deep = 'result {"acc": 0.5, "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
    assert last_result('result {"acc": 0.25}\n' + deep) == {"acc": 0.25}
    assert last_result(deep) is None
