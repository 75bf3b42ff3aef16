"""bench/gpu_pairs.py, run on a lent GPU to measure real jobs sharing it, checked here against the
fakes: both mechanisms run (MPS through the fake control daemon), each job's rate beside another
is its speed over its speed alone, and a worker that cannot start costs its windows only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_pairs.py"


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
            "1.5",
            "--budget-s",
            "150",
            "--warmup-s",
            "0.3",
        ],
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((out / "gpu_pairs.json").read_text())
    assert results["gpu"]["name"] == "NVIDIA H200" and results["fakes"] is True
    for mechanism in ("naive", "mps"):
        phase = results["phases"][mechanism]
        assert "error" not in phase, phase.get("error")
        assert set(phase["alone"]) == {"mlp-narrow", "membw"}
        pipes = {w["mps_pipe"] for w in phase["workers"].values()}
        if mechanism == "mps":  # clients of this script's own daemon, not of no one's
            assert all("/mps/" in p for p in pipes)
        else:
            assert all(p.endswith("no-mps") for p in pipes)
        pair = next(w for w in phase["windows"] if w["group"] == ["mlp-narrow", "membw"])
        for name, job in pair["jobs"].items():
            assert job["rate"] == round(job["steps_per_s"] / phase["alone"][name], 4)
        assert pair["gpm"]["sm_util"] is not None  # the fake's GPM answers SM activity
        assert "drift" in phase["windows"][-1]
    naive_alone = results["phases"]["naive"]["alone"]
    mps_pair = next(w for w in results["phases"]["mps"]["windows"] if len(w["group"]) == 2)
    job = mps_pair["jobs"]["membw"]
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
