"""bench/hardware_truth.py, the one script a lent GPU runs, checked here against the fakes: it
keeps going past a failing check, writes what it saw after every check, and turns the engine
check's runs into rates and the model's predictions the same way on any machine."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from gpudesk.policy.interference import DEFAULT_PARAMS, Workload, shared_rates

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "hardware_truth.py"
FAST_CHECKS = ("--only", "environment,calibrate", "--budget-s", "120")


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hardware_truth", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_fakes_run_records_every_chosen_check_and_survives_one_that_fails(
    tmp_path: Path,
) -> None:
    """environment and calibrate against the fakes (calibrate on a SIMULATED H200); the
    prediction has no engine run to work from and says so instead of stopping the run."""
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--fakes", *FAST_CHECKS],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "environment": "ran",
        "calibrate": "ran",
    }
    results = json.loads((out / "hardware_truth.json").read_text())
    assert results["fakes"] is True
    environment = results["checks"]["environment"]
    assert environment["mps_control"].endswith("tests/fakes/nvidia-cuda-mps-control")
    calibrate = results["checks"]["calibrate"]
    assert calibrate["command"]["rc"] == 0 and calibrate["summary"]["gpu_model"] == "NVIDIA H200"
    assert set(calibrate["summary"]["fitted"]) >= {"mps_tenant_cost", "contention"}
    assert "did not measure both jobs" in calibrate["prediction"]["error"]
    assert (out / "calibrate.json").is_file() and (out / "log.txt").stat().st_size > 0


def test_an_unknown_check_is_refused_before_anything_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "o"), "--only", "nvml,gpu"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "unknown check(s): gpu" in done.stdout
    assert not (tmp_path / "o").exists()


def engine_runs(cap_pct: str | None) -> dict[str, object]:
    def job(name: str, samples: float, started: float, **extra: object) -> dict[str, object]:
        return {
            "name": name,
            "samples_per_s": samples,
            "started_at": started,
            "ended_at": started + 10,
            **extra,
        }

    mps_env = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": cap_pct} if cap_pct else {}
    return {
        "exclusive": {
            "jobs": [
                # pair-a's figures at work differ from its whole life's (start-up idles the
                # GPU): the model gets the ones at work; pair-b has only whole-life figures
                job(
                    "pair-a",
                    1000.0,
                    0,
                    nvml={"sm": 0.3, "membw": 0.05, "active_sm": 0.6, "active_membw": 0.2},
                ),
                job("pair-b", 800.0, 10, nvml={"sm": 0.3, "membw": 0.1}),
            ]
        },
        "mps": {"jobs": [job("pair-a", 700.0, 30, env=mps_env), job("pair-b", 600.0, 30)]},
        "naive": {"jobs": [job("pair-a", 450.0, 50), job("pair-b", 500.0, 50)]},
    }


@pytest.mark.parametrize("cap_pct", [None, "50"])
def test_rates_are_shared_over_alone_and_the_model_sees_the_measured_workloads(
    cap_pct: str | None,
) -> None:
    script = load_script()
    policies = engine_runs(cap_pct)
    rates = script.measured_rates(policies)
    assert rates == {
        "mps": {"pair-a": 0.7, "pair-b": 0.75},
        "naive": {"pair-a": 0.45, "pair-b": 0.625},
    }

    run = SimpleNamespace(
        results={"checks": {"mps_engine": {"policies": policies, "rates": rates}}}
    )
    prediction = script.predict_pair(run, {"fitted": {"contention": 0.5}})
    a, b = Workload(0.6, 0.2), Workload(0.3, 0.1)
    cap = float(cap_pct) / 100 if cap_pct else None
    want_mps = shared_rates(DEFAULT_PARAMS, "mps", [Workload(0.6, 0.2, cap), b])
    assert prediction["mps"]["defaults"] == {
        "pair-a": round(want_mps[0], 4),
        "pair-b": round(want_mps[1], 4),
    }
    fit = DEFAULT_PARAMS.with_values({"contention": 0.5})
    want_naive = shared_rates(fit, "naive", [a, b])
    assert prediction["naive"]["fit"]["pair-b"] == round(want_naive[1], 4)
    assert prediction["measured"] == rates


@pytest.mark.slow(24)
def test_the_metrics_check_scrapes_an_engine_of_its_own_beside_nvidia_smi(tmp_path: Path) -> None:
    """Against the fakes: an engine started for the check serves its endpoint, each sample holds
    the DCGM series with their labels, `top` is taken during the load and the engine is stopped;
    the fake nvidia-smi, given no state file, is an error recorded in the sample, not a crash."""
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--fakes", "--only", "metrics"],
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr
    metrics = json.loads((out / "hardware_truth.json").read_text())["checks"]["metrics"]
    assert "error" not in metrics, metrics.get("error")
    assert metrics["set"]["rc"] == 0 and metrics["stop"]["rc"] == 0
    assert metrics["mps_retired"] is True  # the check leaves no MPS daemon behind
    module = load_script()
    assert set(module.SMI_FOR_DCGM) <= set(metrics["families"])
    assert len(metrics["samples"]) == module.METRICS_SAMPLES
    sample = metrics["samples"][-1]
    assert sample["dcgm"]["DCGM_FI_DEV_FB_FREE"]["labels"]["modelName"] == "NVIDIA H200"
    assert "error" in sample["smi"]
    assert metrics["top"]["backend"] == "nvml" and metrics["top"]["simulated"] is False
