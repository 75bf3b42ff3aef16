"""bench/gpu_pairs.py, run on a lent GPU to measure real jobs sharing it, checked here against the
fakes: both mechanisms run (MPS through the fake control daemon), each job's rate beside another
is its speed over its speed alone, and a worker that cannot start costs its windows only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_pairs.py"


@pytest.mark.slow(37)
def test_a_fakes_run_measures_each_job_alone_and_beside_the_other_under_both_mechanisms(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--out",
            str(out),
            "--fakes",
            "--jobs",
            "mlp-narrow,membw",
            "--window",
            "1.2",
            "--budget-s",
            "150",
            "--warmup-s",
            "0.1",
        ],
        capture_output=True,
        text=True,
        timeout=200,
        # One torch thread per worker: a window is wall time, so each job's second thread only
        # spun on cores the suite's other workers were using (33 -> 21 CPU-s for this test
        # under load; docs/benchmarks.md, session 39). Rates are steps/s over steps/s alone,
        # the same quotient at any thread count.
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((out / "gpu_pairs.json").read_text())
    assert results["gpu"]["name"] == "NVIDIA H200" and results["fakes"] is True
    measured: list[dict[str, float]] = []
    for mechanism in ("naive", "mps"):
        phase = results["phases"][mechanism]
        assert "error" not in phase, phase.get("error")
        # each job's speed alone, unless the suite's load starved its window (below)
        assert set(phase["alone"]) <= {"mlp-narrow", "membw"}
        pipes = {w["mps_pipe"] for w in phase["workers"].values()}
        if mechanism == "mps":  # clients of this script's own daemon, not of no one's
            assert all("/mps/" in p for p in pipes)
        else:
            assert all(p.endswith("no-mps") for p in pipes)
        pair = next(w for w in phase["windows"] if w["group"] == ["mlp-narrow", "membw"])
        for name, job in pair["jobs"].items():
            # a worker the suite's load starved of CPU for the whole window (1.2 s here) says
            # so, and has no rate: a rate is only ever a measured speed over the one alone
            if "error" in job or name not in phase["alone"]:
                assert job.get("error", "no steps in the window") == "no steps in the window"
                assert "rate" not in job, job
                continue
            assert job["rate"] == round(job["steps_per_s"] / phase["alone"][name], 4)
            measured.append(job)
        assert pair["gpm"]["sm_util"] is not None  # the fake's GPM answers SM activity
        last = phase["windows"][-1]  # the first job alone again: how far its speed drifted
        if "error" not in last["jobs"][last["group"][0]] and last["group"][0] in phase["alone"]:
            assert "drift" in last
    assert measured, "no job of either pair window was measured"
    naive_alone = results["phases"]["naive"]["alone"]
    mps_pair = next(w for w in results["phases"]["mps"]["windows"] if len(w["group"]) == 2)
    job = mps_pair["jobs"]["membw"]
    if "error" not in job and "membw" in naive_alone:
        assert job["rate_vs_exclusive"] == round(job["steps_per_s"] / naive_alone["membw"], 4)


def test_an_unknown_job_is_refused_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path), "--jobs", "mlp-wide,bert"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unknown job(s) bert" in done.stderr and "Traceback" not in done.stderr


def test_the_model_comparison_feeds_each_job_alone_to_the_model_and_scores_its_rates(
    tmp_path: Path,
) -> None:
    """bench/pairs_model.py on a hand-made result: two jobs alone at 60 % and 30 % SM activity
    (occupancy 20 % and 10 %), measured at 0.9 and 0.7 together under MPS; its predictions are
    the placement model's own and its RMS is over both jobs."""
    from gpudesk.policy.interference import DEFAULT_PARAMS, Workload, shared_rates

    def alone(name: str, sm: float, occ: float) -> dict[str, object]:
        gpm = {"sm_util": sm, "sm_occupancy": occ, "dram_bw_util": 10.0}
        return {"group": [name], "gpm": gpm, "jobs": {name: {"steps_per_s": 100.0}}}

    measured = {"a": {"rate_vs_exclusive": 0.9}, "b": {"rate_vs_exclusive": 0.7}}
    results = {
        "phases": {
            "naive": {"windows": [alone("a", 60.0, 20.0), alone("b", 30.0, 10.0)]},
            "mps": {"windows": [{"group": ["a", "b"], "jobs": measured}]},
        }
    }
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps(results))
    done = subprocess.run(
        [sys.executable, str(SCRIPT.with_name("pairs_model.py")), str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    by_sm = shared_rates(DEFAULT_PARAMS, "mps", [Workload(0.6, 0.1), Workload(0.3, 0.1)])
    by_occupancy = shared_rates(DEFAULT_PARAMS, "mps", [Workload(0.2, 0.1), Workload(0.1, 0.1)])
    row = report["rows"][0]
    assert row["defaults/sm"] == [round(r, 3) for r in by_sm]
    assert row["defaults/occupancy"] == [round(r, 3) for r in by_occupancy]
    errors = [by_sm[0] - 0.9, by_sm[1] - 0.7]
    expected = round((sum(e * e for e in errors) / 2) ** 0.5, 4)
    assert report["rms"]["mps defaults/sm"] == expected
    assert report["pair_inequality"]["max"] == 0.2


def test_groups_name_copies_of_a_job_and_a_bad_group_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    """`--groups` (the n-tenant scaling runs): JOB*N is N instances, each its own worker; a
    group's job must be timed alone too, and a typo is one line, not a traceback."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu_pairs
    finally:
        sys.path.remove(str(SCRIPT.parent))
    assert gpu_pairs.parse_groups("mlp-narrow*3; resnet18+mlp-narrow*2") == [
        ["mlp-narrow", "mlp-narrow#2", "mlp-narrow#3"],
        ["resnet18", "mlp-narrow", "mlp-narrow#2"],
    ]
    assert gpu_pairs.groups_for(["a", "b"], [["a", "a#2"]]) == [["a", "a#2"]]
    for spec, says in (
        ("bert*2", "'bert*2': a known job"),
        ("resnet18*0", "JOB*N with N 1-32"),
        ("resnet18", "two members or more"),
        ("resnet18*2", "resnet18 not in --jobs"),
    ):
        command = [sys.executable, str(SCRIPT), "--out", str(tmp_path), "--jobs", "mlp-narrow"]
        done = subprocess.run(
            [*command, "--groups", spec],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, spec
        assert says in done.stderr and "Traceback" not in done.stderr, done.stderr
