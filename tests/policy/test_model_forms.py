"""bench/model_forms.py: the interference model's forms against the measured data sets, the H200
n-tenant groups among them (bench/results/h200-2026-12-04c/scaling: 2-8 copies of one job and two
mixes of eight), and the product's cost of sharing paid per co-tenant (`linear`) or once (`flat`),
its second table. Run as a reader runs it; the expected figures come from the results file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "model_forms.py"
SCALING = REPO / "bench" / "results" / "h200-2026-12-04c" / "scaling" / "gpu_pairs.json"
NEW_SET = "H200 n-tenant groups"
# one worker runs them all, so the script's run in `report` is made once
pytestmark = pytest.mark.xdist_group("model_forms")


def run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    found: dict[str, Any] = json.loads(run("--json", "--rows"))
    return found


@pytest.mark.slow(9)  # the script twice, ~3 s each here
def test_both_tables_have_the_n_tenant_groups_with_every_rate_of_the_run(
    report: dict[str, Any],
) -> None:
    data = json.loads(SCALING.read_text())
    # each member of each group of two or more, once per mechanism
    expected = {
        mechanism: sum(len(w["group"]) for w in phase["windows"] if len(w["group"]) >= 2)
        for mechanism, phase in data["phases"].items()
    }
    assert set(expected) == {"mps", "naive"} and min(expected.values()) > 0
    assert report["rates"][NEW_SET] == expected
    for row in [*report["forms"].values(), *report["cost_shapes"].values()]:
        assert all(isinstance(v, float) for v in row["rms"][NEW_SET].values())
    text = run()
    first, second = text.split("The cost of sharing", 1)
    for table in (first, second):
        assert f"{NEW_SET} mps" in table and f"{NEW_SET} naive" in table
        counts = next(line for line in table.splitlines() if line.startswith("(n)")).split()
        assert counts[-2:] == [str(expected["mps"]), str(expected["naive"])]


def test_every_rate_is_against_the_job_alone_without_mps_though_mps_ran_first(
    report: dict[str, Any],
) -> None:
    data = json.loads(SCALING.read_text())
    assert list(data["phases"]) == ["mps", "naive"]
    exclusive = data["phases"]["naive"]["alone"]
    # the job alone under MPS ran up to 16 % slower or 5 % faster than alone without it
    assert any(abs(data["phases"]["mps"]["alone"][k] / v - 1) > 0.1 for k, v in exclusive.items())
    measured = {g["name"]: g["measured"] for g in report["groups"] if g["data_set"] == NEW_SET}
    for mechanism, phase in data["phases"].items():
        for window in phase["windows"]:
            members = window["group"]
            if len(members) < 2:
                continue
            got = measured[f"h200n {mechanism}:{'+'.join(members)}"]
            jobs = window["jobs"]
            rates = [jobs[n]["steps_per_s"] / exclusive[n.split("#")[0]] for n in members]
            assert got == pytest.approx([min(1.0, r) for r in rates], abs=5e-5)
            if mechanism == "naive":  # as gpu_pairs.py recorded them where it could
                assert got == [min(1.0, jobs[n]["rate_vs_exclusive"]) for n in members]


def test_flat_and_linear_cost_predict_every_pair_alike_and_differ_beyond(
    report: dict[str, Any],
) -> None:
    shapes, groups = report["cost_shapes"], report["groups"]
    pairs = [g for g in groups if g["tenants"] == 2]
    larger = [g for g in groups if g["tenants"] > 2]
    assert len(pairs) > 30 and any(g["data_set"] == NEW_SET for g in larger)
    for fitted_on in ("published", "H100 + seed pair"):  # the latter: pairs only, so one fit
        linear, flat = f"linear, {fitted_on}", f"flat, {fitted_on}"
        assert shapes[linear]["params"] == pytest.approx(shapes[flat]["params"], abs=1e-12)
        for g in pairs:
            assert g["predicted"][flat] == pytest.approx(g["predicted"][linear], abs=1e-12)
        # beyond a pair the cost paid once is less than the cost per co-tenant
        diffs = [
            f - lin
            for g in larger
            for f, lin in zip(g["predicted"][flat], g["predicted"][linear], strict=True)
        ]
        assert min(diffs) > -1e-12 and max(diffs) > 0.1
    # on the n-tenant groups the flat shape, fitted on pairs, is the better one (0.12 vs 0.39)
    errors = {name: shape["rms"][NEW_SET] for name, shape in shapes.items()}
    for mechanism in ("mps", "naive"):
        assert (
            errors["flat, H100 + seed pair"][mechanism]
            < errors["linear, H100 + seed pair"][mechanism]
        )
