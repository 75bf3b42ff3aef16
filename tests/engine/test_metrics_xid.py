"""DCGM_FI_DEV_XID_ERRORS: the last XID error on each GPU since the engine started, as
dcgm-exporter exports it (docs/metrics.md). A snapshot built by hand, rendered; then a real
engine on the fake NVML (tests/fakes/nvml_shim) with its endpoint on, an XID happening on one
GPU while it runs."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import urllib.request
from pathlib import Path

import pytest
from conftest import EngineHandle, wait_for
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpudesk.hw.telemetry.model import BackendReading, GpuReading, MigDevice, XidEvent
from gpudesk.hw.telemetry.monitor import TrackedAttempt
from gpudesk.metrics.collector import SnapshotCollector
from gpudesk.metrics.snapshot import MetricsSnapshot, device_readings
from gpudesk.paths import Home

XID = "DCGM_FI_DEV_XID_ERRORS"
SHIM = Path(__file__).resolve().parents[1] / "fakes" / "nvml_shim"


def xid_series(text: str) -> list[tuple[dict[str, str], float]]:
    return [
        (dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        if family.name == XID
        for s in family.samples
    ]


def rendered(reading: BackendReading, attempts: list[TrackedAttempt]) -> str:
    snapshot = MetricsSnapshot(
        "nvml", False, "host", "0", 1000.0, devices=device_readings(reading, attempts)
    )
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: snapshot))
    return generate_latest(registry).decode()


def test_the_last_xid_per_gpu_with_dcgm_exporters_labels_and_no_job() -> None:
    """79 on GPU 1 alone; 0 ("No Error") where none came; no series for a GPU without XID
    events, nor for a MIG device (its XIDs are its GPU's). The labels are the other health
    fields' (no hpc_job/user: a GPU's error, not a job's) and dcgm-exporter's err_code and
    err_msg. A lost GPU keeps the XID that came with its loss."""
    mig = MigDevice(0, "MIG-a", "NVIDIA A100-SXM4-40GB MIG 3g.20gb", 1, 0, 10.0, 20000.0, 42)
    reading = BackendReading(
        1000.0,
        5.0,
        gpus=(
            GpuReading(0, "GPU-0", "NVIDIA H100 80GB HBM3", last_xid=0),
            GpuReading(1, "GPU-1", "NVIDIA H100 80GB HBM3", last_xid=79, xids=(XidEvent(79),)),
            GpuReading(2, "GPU-2", "NVIDIA A100-SXM4-40GB", mig_enabled=True, mig_devices=(mig,)),
            GpuReading(3, "GPU-3", "NVIDIA H100 80GB HBM3", lost=True, last_xid=48),
            GpuReading(4, "GPU-4", "NVIDIA H100 80GB HBM3", lost=True, last_xid=0),
        ),
    )
    attempts = [TrackedAttempt(101, 1, "j", 1001, "gpu", (1,), user="ada")]
    text = rendered(reading, attempts)
    got = {labels["gpu"]: (labels, value) for labels, value in xid_series(text)}
    assert sorted(got) == ["0", "1", "3"]
    labels, value = got["1"]
    assert value == 79.0
    assert labels == {
        "gpu": "1",
        "UUID": "GPU-1",
        "device": "nvidia1",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "host",
        "err_code": "79",
        "err_msg": "GPU has fallen off the bus",
    }
    assert got["0"][1] == 0.0 and (got["0"][0]["err_code"], got["0"][0]["err_msg"]) == (
        "0",
        "No Error",
    )
    assert got["3"][1] == 48.0 and got["3"][0]["err_msg"] == "Double Bit ECC Error"
    assert f"# TYPE {XID} gauge" in text
    assert f"# HELP {XID} Value of the last XID error encountered." in text


def scenario_env(tmp_path: Path, scenario: dict) -> tuple[Path, dict[str, str]]:
    path = tmp_path / "nvml-scenario.json"
    path.write_text(json.dumps(scenario))
    # the shim first; then this checkout's gpudesk, where PYTHONPATH names it
    python_path = os.pathsep.join(p for p in (str(SHIM), os.environ.get("PYTHONPATH")) if p)
    env = {"GPUDESK_BACKEND": "nvml", "PYTHONPATH": python_path, "GPUDESK_FAKE_NVML": str(path)}
    return path, env


def engine_events(home: Home) -> list[str]:
    with contextlib.closing(sqlite3.connect(f"file:{home.db}?mode=ro", uri=True)) as db:
        return [message for (message,) in db.execute("SELECT message FROM events")]


def scrape_xids(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=5.0) as reply:
        return {labels["gpu"]: value for labels, value in xid_series(reply.read().decode())}


def test_an_xid_on_a_running_engines_gpu_is_exported_and_said(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three GPUs, the third without events (a vGPU): 0, 0 and no series; then XID 79 on GPU
    1 while the engine runs: the endpoint shows 79 there alone, and the engine says it once,
    in its log and its events."""
    scenario = {
        "live": True,
        "gpus": [{"uuid": "GPU-a"}, {"uuid": "GPU-b"}, {"uuid": "GPU-v", "event_types": 0}],
    }
    path, env = scenario_env(tmp_path, scenario)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    engine = EngineHandle(home)
    engine.start(backend="nvml", sample_interval=0.2, metrics_listen="127.0.0.1:0")
    try:
        url = engine.client.request("status")["station"]["metrics_url"]
        assert wait_for(lambda: scrape_xids(url) == {"0": 0.0, "1": 0.0}, 10.0, 0.1, "XID 0s")
        path.write_text(json.dumps({**scenario, "xids": [[1, 79]]}))
        wait_for(lambda: scrape_xids(url) == {"0": 0.0, "1": 79.0}, 10.0, 0.1, "XID 79 on GPU 1")
        said = [m for m in engine_events(home) if "XID" in m]
        assert said == ["GPU 1: XID 79 (GPU has fallen off the bus)"]
        assert "GPU 1: XID 79 (GPU has fallen off the bus)" in home.engine_log.read_text()
        assert engine.client.request("ping")["pid"] == engine.pid
    finally:
        engine.stop()
        engine.client.close()
