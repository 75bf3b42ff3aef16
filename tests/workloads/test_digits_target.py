"""The digits pieces of the targeting check: `make_digits(..., classes=[3, 8])` (a target of
only 3s and 8s), the workload's `--target-classes` and its `target_acc`, and `--split-seed`
taken from $GPUDESK_SPLIT (set by `gpudesk select compare --splits`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpudesk.workloads import digits
from gpudesk.workloads.common import ENV_SPLIT
from gpudesk.workloads.data import make_digits


def test_classes_keep_only_those_labels_of_the_split() -> None:
    for split_seed in (0, 1, 2):
        whole = make_digits("target", split_seed)
        part = make_digits("target", split_seed, classes=[8, 3])
        assert set(part.labels.tolist()) == {3, 8}
        assert len(part) == int(np.isin(whole.labels, [3, 8]).sum()) > 0
        # the same samples, in the split's order
        wanted = np.isin(whole.labels, [3, 8])
        assert np.array_equal(part.images, whole.images[wanted])
    train = make_digits("train", 0, classes=[0])
    assert set(train.labels.tolist()) == {0} and len(train) > 100


@pytest.mark.parametrize(
    ("classes", "message"),
    [
        ([], "name at least one class"),
        ([3, 10], r"10 is not a label \(0..9\)"),
        (["3"], "expected integer labels"),
        ([True], "expected integer labels"),
        ("38", "expected a list of class labels"),
    ],
)
def test_bad_classes_are_refused(classes: list[object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_digits("target", 0, classes=classes)  # type: ignore[arg-type]


def run_digits(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    code = digits.main(["--epochs", "2", "--hidden", "16", "--threads", "1", *argv])
    out = capsys.readouterr().out
    assert code == 0, out
    (line,) = [line for line in out.splitlines() if line.startswith("result ")]
    return json.loads(line.removeprefix("result "))  # type: ignore[no-any-return]


def test_target_acc_is_the_accuracy_on_the_val_samples_of_those_classes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    everything = run_digits(capsys, "--target-classes", ",".join(map(str, range(10))))
    # every class: the target accuracy is the val accuracy of the same final model
    assert everything["target_acc"] == everything["val_acc"]
    targeted = run_digits(capsys, "--target-classes", "3,8")
    assert isinstance(targeted["target_acc"], float) and 0.0 <= targeted["target_acc"] <= 1.0
    assert targeted["val_acc"] == everything["val_acc"]  # the same seeded run
    assert "target_acc" not in run_digits(capsys)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("3,x", "'3,x': expected class numbers separated by commas, e.g. 3,8"),
        ("3,11", "11 is not a label (0..9)"),
        ("", "name"),
    ],
)
def test_bad_target_classes_are_a_usage_error(
    value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        digits.main(["--target-classes", value])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_split_seed_defaults_to_the_compare_split(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = digits.build_parser()
    assert digits.parse_args(parser, []).split_seed == 0
    monkeypatch.setenv(ENV_SPLIT, "2")
    parser = digits.build_parser()
    assert digits.parse_args(parser, []).split_seed == 2
    assert digits.parse_args(parser, ["--split-seed", "4"]).split_seed == 4
    with pytest.raises(SystemExit):
        digits.parse_args(parser, ["--split-seed", "-1"])
    assert "--split-seed must be >= 0" in capsys.readouterr().err
