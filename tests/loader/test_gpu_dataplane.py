"""bench/gpu_dataplane.py, the data-plane probe a lent GPU runs once, rehearsed on the CPU: the
same producer, consumers, ring and acks with CPU tensors, both sections, the JSON it leaves."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import processes_in_group, wait_for

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_dataplane.py"
REHEARSAL = ("--device", "cpu", "--small", "--seconds", "0.5", "--consumers", "2")


def run_probe(out: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), *REHEARSAL, *extra],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done, json.loads((out / "gpu_dataplane.json").read_text())


@pytest.mark.slow(27)
def test_a_cpu_rehearsal_delivers_every_batch_intact_to_every_consumer(tmp_path: Path) -> None:
    done, report = run_probe(tmp_path / "out")
    assert set(report["sections"]) == {"ipc", "decode"}
    ipc = report["sections"]["ipc"]
    assert ipc["status"] == "ok", ipc
    runs = ipc["result"]["runs"]
    assert [r["config"] for r in runs] == ["host-copy", "cuda-ipc"]
    for run in runs:
        assert run["errors"] == [] and "error" not in run, run
        assert run["mismatches"] == 0
        assert run["producer"]["in_window"] > 0
        assert len(run["consumers"]) == 2
        for consumer in run["consumers"]:
            assert consumer["delivered"] > 0 and consumer["in_window"] > 0
            assert consumer["open_s"] >= 0 and consumer["work_cpu_s"] >= 0
        assert run["handoff_latency_s"]["p50"] is not None
        assert run["pcie"]["gpm_rx_mib_per_s"] is None  # no NVML on the CPU, and it says so
        assert run["h2d_copies_per_batch_issued"] == 0
    decode = report["sections"]["decode"]
    assert decode["status"] == "ok", decode
    for rows in decode["result"]["sizes"].values():
        assert rows["cpu_pil"]["images_per_s"] > 0
        assert "skipped" in rows["gpu_batch_32"] and "skipped" in rows["gpu_batch_256"]
    assert "mismatches 0" in done.stdout and "[decode] ok" in done.stdout


@pytest.mark.slow(14)
def test_a_producer_that_reuses_slots_too_early_is_caught_by_the_checksums(
    tmp_path: Path,
) -> None:
    """The self-test: without waiting for acks the producer overwrites slots consumers still
    read, so the per-batch checksums must disagree (a probe that cannot see this proves
    nothing about the lifetime protocol on the GPU)."""
    _, report = run_probe(
        tmp_path / "out",
        "--only",
        "ipc",
        "--consumers",
        "1",
        "--seconds",
        "0.5",
        "--reuse-slots-early",
    )
    runs = report["sections"]["ipc"]["result"]["runs"]
    assert all(run["mismatches"] > 0 for run in runs), [r["mismatches"] for r in runs]
    assert all("BROKEN ON PURPOSE" in run["protocol"] for run in runs)


def test_bad_arguments_get_one_paragraph_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "o"), "--only", "ipc,nvjpeg"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unknown: nvjpeg" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.slow(15)
def test_a_section_past_its_limit_is_killed_with_its_processes_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    """6 s: the ipc section is past its imports and into its first phase, with its producer and
    consumers (each a child of its own), so the kill has grandchildren to find. That phase
    measures for 30 s, which the section's own budget (70 % of its limit) does not cut short:
    with the rehearsal's 0.5 s an idle machine finished the section within the 6 s, "ok"."""
    started = time.monotonic()
    _, report = run_probe(tmp_path / "out", "--limit-s", "6", "--seconds", "30")
    assert time.monotonic() - started < 40
    ipc, decode = report["sections"]["ipc"], report["sections"]["decode"]
    assert ipc["status"] == "timed out" and ipc["limit_s"] == 6
    assert decode["status"] in {"ok", "timed out"}  # it ran after the first timed out
    wait_for(lambda: not processes_in_group(ipc["pid"]), what="no process of the section left")
