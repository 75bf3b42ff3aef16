"""bench/loader.py's device side: what a consumer moves to its device and the GPU memory it
reports, run here on the CPU (and torch's meta device, which a tensor really moves to), and the
command line's refusals."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fakes.fake_pynvml import FakeGpu, FakeNvml, FakeProcess

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "loader.py"
MIB = 2**20


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_loader", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = load_bench()


def a_batch() -> list:
    images = torch.arange(4 * 3 * 8 * 8, dtype=torch.uint8).reshape(4, 3, 8, 8)
    return [images, torch.arange(4), {"ids": torch.arange(4, dtype=torch.int32)}, "tag"]


def test_to_device_moves_every_tensor_and_counts_the_bytes_that_cross():
    batch = a_batch()
    moved, nbytes = bench.to_device(batch, "meta")
    assert nbytes == 4 * 3 * 8 * 8 + 4 * 8 + 4 * 4
    assert isinstance(moved, list) and moved[3] == "tag"
    assert [moved[0].device.type, moved[1].device.type, moved[2]["ids"].device.type] == ["meta"] * 3
    assert moved[0].shape == batch[0].shape and moved[0].dtype == torch.uint8
    # a tensor already on the device is not copied, so not counted
    again, nbytes = bench.to_device([moved[0], batch[1]], "meta")
    assert again[0] is moved[0] and nbytes == 4 * 8


def test_on_cpu_nothing_moves_and_the_work_is_unchanged():
    batch = a_batch()
    same, nbytes = bench.to_device(batch, "cpu")
    assert nbytes == 0 and same[0] is batch[0] and same[1] is batch[1]
    value, moved = bench.consume(batch, "cpu", "mean")
    assert moved == 0 and value == pytest.approx(float(batch[0].float().mean()))
    value, moved = bench.consume(batch, "cpu", "touch")
    assert moved == 0 and value == float(batch[0].reshape(-1)[0])


def test_gpu_memory_is_null_off_cuda():
    assert bench.gpu_memory("cpu") == dict.fromkeys(bench.GPU_FIELDS)


def test_driver_gpu_bytes_is_what_nvml_lists_for_the_pid():
    fake = FakeNvml(
        [
            FakeGpu(processes=[FakeProcess(4000, 100.0)]),
            FakeGpu(processes=[FakeProcess(4321, 612.0), FakeProcess(4000, 50.0)]),
        ]
    )
    assert bench.driver_gpu_bytes(4321, fake) == 612 * MIB
    assert bench.driver_gpu_bytes(4000, fake) == 150 * MIB  # over every GPU
    assert bench.driver_gpu_bytes(99, fake) is None  # not listed (another PID namespace)
    unknown = FakeNvml([FakeGpu(processes=[FakeProcess(4321, None)])])
    assert bench.driver_gpu_bytes(4321, unknown) is None
    assert bench.driver_gpu_bytes(4321, FakeNvml([FakeGpu()], init_error="DriverNotLoaded")) is None


def test_device_figures_are_means_over_the_consumers():
    def consumer(h2d: int, driver: int | None) -> dict:
        return {
            "batches": 10,
            "h2d_bytes": h2d,
            "gpu_driver_bytes": driver,
            "gpu_torch_max_allocated_bytes": 2 * MIB,
            "gpu_torch_reserved_bytes": 20 * MIB,
        }

    figures = bench.device_figures([consumer(1000, 500 * MIB), consumer(3000, 700 * MIB)])
    assert figures == {
        "h2d_bytes_per_batch": 200,
        "gpu_mib_driver": 600.0,
        "gpu_mib_torch_max_allocated": 2.0,
        "gpu_mib_torch_reserved": 20.0,
    }
    # one consumer's driver figure unknown: no mean of the others passed off as everyone's
    assert (
        bench.device_figures([consumer(0, None), consumer(0, 700 * MIB)])["gpu_mib_driver"] is None
    )


def test_the_table_shows_h2d_mib_and_gpu_mib_or_n_a():
    row = {
        "h2d_bytes_per_batch": 884_992,
        "gpu_mib_driver": 612.4,
        "gpu_mib_torch_max_allocated": 3.2,
        "gpu_mib_torch_reserved": 20.0,
    }
    assert bench.gpu_cells(row) == " 0.84 | 612 / 3 / 20 |"
    assert bench.gpu_cells({**row, "gpu_mib_driver": None}) == " 0.84 | n/a / 3 / 20 |"


def run_bench(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=tmp_path,
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="this torch has a GPU to use")
def test_device_cuda_without_a_gpu_stops_before_anything_starts(tmp_path):
    done = run_bench(tmp_path, "--device", "cuda", "--consumers", "1")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--device cuda" in lines[0] and "is_available" in lines[0]
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no run folder, no dataset cache


def test_configs_are_checked(tmp_path):
    done = run_bench(tmp_path, "--configs", "independent,dataloader")
    assert done.returncode == 2 and "--configs takes" in done.stderr
    done = run_bench(tmp_path, "--configs", "tensorsocket", "--device", "cuda")
    assert done.returncode == 2 and "no configuration left to run" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow(8)
def test_a_cpu_run_reports_device_and_cpu_per_batch(tmp_path):
    out = tmp_path / "out.json"
    done = run_bench(
        tmp_path,
        *("--consumers", "1", "--batches", "6", "--size", "64", "--workers", "1"),
        *("--configs", "independent", "--no-join", "--json-out", str(out)),
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert (result["device"], result["torch"], result["gpu"]) == ("cpu", torch.__version__, None)
    assert result["params"]["configs"] == ["independent"]
    [row] = result["results"]
    assert row["config"] == "independent" and row["ok"]
    [run] = result["runs"]
    assert run["cpu_s_per_batch"] == round(run["cpu_s"] / run["deliveries"], 5)
    assert run["h2d_bytes_per_batch"] == 0
    assert [row[key] for key in bench.GPU_MIB_KEYS] == [None, None, None]
    assert "CPU-ms / batch" in done.stdout and "H2D" not in done.stdout


def test_the_cuda_report_has_the_device_columns_and_fields(tmp_path, monkeypatch, capsys):
    """The launcher's cuda report, from the figures a GPU run produces (runs made up here, with
    torch told it has a GPU): nothing in it needs the GPU beyond its name."""

    def measured(kind, n, args, *_rest, **_kw):
        assert args.device == "cuda:0"
        gpudesk = kind == "gpudesk"
        return {
            "n": n,
            "config": kind,
            "repeat": 0,
            "scenario": "steady",
            "ok": True,
            "pin_memory": bench.pins_memory(kind, args),
            "cpu_s": 2.0 if gpudesk else 4.0 * n,
            "cpu_s_all": 9.0,
            "cpu_s_psutil": 2.0,
            "batches_per_s_mean": 30.0,
            "batches_per_s_min": 29.0,
            "wall_s": 8.0,
            "moved_x": 1.0,
            "cpu_s_per_batch": 0.01 if gpudesk else 0.0166,
            "h2d_bytes_per_batch": 884_992,
            "gpu_mib_driver": 612.0,
            "gpu_mib_torch_max_allocated": 3.0,
            "gpu_mib_torch_reserved": 20.0,
            "handoff_ms": {"p50": 0.5, "p99": 2.0} if gpudesk else None,
            "queued_ms": None,
            "next_ready_ms": None,
        }

    monkeypatch.setattr(bench, "run_config", measured)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    out = tmp_path / "out.json"
    argv = ["loader.py", "--device", "cuda", "--consumers", "1,4", "--size", "8", "--no-join"]
    monkeypatch.setattr(sys, "argv", [*argv, "--json-out", str(out)])
    bench.main()
    text = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert (result["device"], result["gpu"]) == ("cuda:0", "NVIDIA H200")
    assert result["params"]["pin_memory"] is True
    assert result["params"]["configs"] == ["independent", "gpudesk"]
    assert "not supported with --device cuda" in result["tensorsocket"]
    assert "device cuda:0: NVIDIA H200; pinned DataLoader batches: True" in text
    assert "| H2D MiB / batch | GPU MiB per consumer: driver / torch peak / reserved |" in text
    assert "| 4 | gpudesk | 2.00 | 0.125 | 9.00 | 10.00 | 30.0 |" in text
    assert text.count(" 0.84 | 612 / 3 / 20 |") == 4
