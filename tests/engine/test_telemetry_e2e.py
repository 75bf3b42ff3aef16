"""Telemetry end to end: a real engine sampling a simulated station, real jobs placed on its
GPUs, `gpudesk top`, `show` and `run` reading what the sampler measured."""

from __future__ import annotations

import itertools
import json
import os
import re
import select
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import EngineHandle, wait_for
from test_cli import GPUDESK, gpudesk

from gpudesk.api.errors import EngineError
from gpudesk.core import protocol
from gpudesk.paths import Home

SIM = "sim:dgx-station-a100"
GPU_KEYS = {
    "index",
    "uuid",
    "name",
    "memory_used_mib",
    "memory_total_mib",
    "kernel_active_pct",
    "sm_activity_pct",
    "power_w",
    "energy_j",
    "mig_devices",
    "processes",
}
# A real process that works a little, then idles: it holds its simulated GPU meanwhile.
WORK = [
    sys.executable,
    "-c",
    "import time; sum(range(3_000_000)); time.sleep(float(__import__('sys').argv[1]))",
]


def gpu_job(name: str, seconds: float, memory_gb: float = 6.0, sm_pct: float = 70.0) -> dict:
    return {
        "name": name,
        "command": [*WORK, str(seconds)],
        "gpus": 1,
        "memory_gb": memory_gb,
        "sm_pct": sm_pct,
    }


def top_json(env: dict[str, str] | None = None) -> dict:
    result = gpudesk("top", "--json", env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_top_without_an_engine_samples_the_simulated_station_directly(home: Home) -> None:
    env = {**os.environ, "GPUDESK_BACKEND": SIM}
    frame = gpudesk("top", "--once", env=env)
    assert frame.returncode == 0, frame.stderr
    lines = frame.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "SIMULATED" in lines[0] and "engine not running" in frame.stdout
    gpu_lines = [line for line in lines if line.startswith("GPU ")]
    assert len(gpu_lines) == 4 and all("(SIMULATED)" in line for line in gpu_lines)
    # energy for people in Wh, saying since when it counts (here: since top began sampling)
    energy = [line for line in lines if " energy " in line]
    assert len(energy) == 4 and " J" not in frame.stdout
    assert all(re.search(r" energy (<0\.01|\d+\.?\d*) k?Wh since \d\d:\d\d$", e) for e in energy)
    snapshot = top_json(env)
    assert (snapshot["backend"], snapshot["simulated"], snapshot["source"]) == (SIM, True, "direct")
    assert [g["index"] for g in snapshot["gpus"]] == [0, 1, 2, 3]
    for gpu in snapshot["gpus"]:
        assert set(gpu) >= GPU_KEYS
        assert gpu["memory_used_mib"] == 0 and gpu["energy_j"] > 0  # idle power over the window
    assert not home.lock.exists()  # top never starts an engine


def gated_gpu_job(name: str, gate: Path, sm_pct: float) -> dict:
    """A GPU job that works a little, then holds its GPU until `gate` exists: a loaded machine
    cannot end it before the test has looked."""
    hold = "while not os.path.exists(sys.argv[1]): time.sleep(0.05)"
    script = f"import os, sys, time\nsum(range(3_000_000))\n{hold}"
    return {
        **gpu_job(name, 0.0, sm_pct=sm_pct),
        "command": [sys.executable, "-c", script, str(gate)],
    }


def test_a_sweep_on_the_simulated_station_moves_memory_and_energy(
    sim_engine: EngineHandle, home: Home, tmp_path: Path
) -> None:
    # compute-heavy jobs (85 % SM) never share a GPU: one per GPU, the fifth waits
    gate = tmp_path / "done"
    ids = sim_engine.submit(*(gated_gpu_job(f"sweep-{i}", gate, 85.0) for i in range(5)))
    for job_id in ids[:4]:
        sim_engine.wait_state(job_id, "running")
    assert sim_engine.job(ids[4]).state == "queued"

    def in_use(snap: dict) -> list[dict]:
        return [g for g in snap["gpus"] if g["memory_used_mib"] > 6 * 1024 and g["jobs"]]

    def busy_snapshot() -> dict | None:
        snap = top_json()
        return snap if len(in_use(snap)) == 4 and len(snap["jobs"]) == 4 else None

    # The simulator allocates a job's memory over seconds: waited for in the engine's own
    # samples (a request), then asked of `gpudesk top` (a process each time, ~0.2 s of CPU)
    wait_for(
        lambda: (
            (snap := sim_engine.client.request("telemetry")["snapshot"]) and len(in_use(snap)) == 4
        ),
        10.0,
        interval=0.1,
        what="four GPUs in use in the engine's samples",
    )
    first = wait_for(busy_snapshot, 10.0, interval=0.1, what="four GPUs in use")
    assert first["source"] == "engine" and first["simulated"] is True
    for gpu in first["gpus"]:
        (job_id,) = gpu["jobs"]
        assert gpu["processes"][0]["job_id"] == job_id
        assert gpu["sm_activity_pct"] > 50 and gpu["power_w"] > 100
    frame = gpudesk("top", "--once").stdout
    assert "SIMULATED" in frame and all(len(line) <= 80 for line in frame.splitlines())
    assert f"jobs: {ids[0]} sweep-0" in frame
    wait_for(
        lambda: (
            sim_engine.client.request("telemetry")["snapshot"]["taken_at"] > first["taken_at"] + 0.5
        ),
        5.0,
        interval=0.1,
        what="a later sample in the engine",
    )
    later = wait_for(
        lambda: (s := top_json())["taken_at"] > first["taken_at"] + 0.5 and s,
        5.0,
        interval=0.1,
        what="a later sample",
    )
    for before, after in zip(first["gpus"], later["gpus"], strict=True):
        assert after["energy_j"] > before["energy_j"]

    # The first job holds its GPU at least 5 s (its energy below counts that long); then all end.
    started = sim_engine.job(ids[0]).started_at
    assert started is not None
    wait_for(lambda: time.time() - started >= 5.0, 10.0, interval=0.1, what="5 s on the GPU")
    gate.touch()
    jobs = sim_engine.wait_all_done(ids, timeout=30.0)
    assert all(j.state == "succeeded" for j in jobs)
    usage = sim_engine.show(ids[0]).usage
    assert usage.gpu_j > 0 and usage.gpu_source == "counter"
    assert usage.split == "exclusive" and usage.estimate is False
    # At least the idle draw for the ~5 s the job held its GPU, above-idle on top.
    assert usage.gpu_idle_j > 4.0 * 52 and usage.gpu_above_idle_j > 0
    assert usage.carbon_g > 0 and usage.cpu_s > 0
    shown = gpudesk("show", str(ids[0]))
    assert "GPU energy" in shown.stdout and "the GPU to itself" in shown.stdout
    assert re.search(r"GPU energy \d+\.?\d* k?Wh", shown.stdout)  # Wh for people, J in JSON
    assert "g CO2e at 475 g/kWh" in shown.stdout

    sim_engine.stop()
    with sqlite3.connect(home.db) as db:  # the downsampled series reached the store
        metrics = {row[0] for row in db.execute("SELECT DISTINCT metric FROM gpu_samples")}
        stored = {row[0] for row in db.execute("SELECT job_id FROM attempt_usage")}
    assert {"sm_activity_pct", "power_w", "memory_used_mib"} <= metrics
    # The four that held their GPUs for seconds were sampled; the fifth starts after the gate
    # is there and may end before any sample sees it (then it has no usage to store).
    assert set(ids[:4]) <= stored <= set(ids)


def test_samples_are_published_on_the_event_socket(sim_engine: EngineHandle) -> None:
    with sim_engine.client.subscribe("telemetry") as events:
        assert events.poll(5000), "no telemetry event within 5 s"
        kind, payload = protocol.decode_event(b"\n".join(events.recv_event()))
    assert kind == "telemetry" and payload["backend"] == SIM and len(payload["gpus"]) == 4


def test_telemetry_request_checks_its_arguments(sim_engine: EngineHandle) -> None:
    wait_for(lambda: sim_engine.client.request("telemetry")["snapshot"], 5.0, what="a first sample")
    reply = sim_engine.client.request("telemetry", history=5)
    assert 1 <= len(reply["history"]) <= 5 and reply["snapshot"]["interval_s"] == 0.2
    with pytest.raises(EngineError, match="'history' must be 0 to 600"):
        sim_engine.client.request("telemetry", history=-1)


def test_reconfiguring_the_backend_switches_what_is_sampled(sim_engine: EngineHandle) -> None:
    client = sim_engine.client
    client.request("configure", station={"backend": "sim:h100", "sample_interval": 0.2})
    snap = wait_for(
        lambda: (s := client.request("telemetry")["snapshot"]) and s["backend"] == "sim:h100" and s,
        5.0,
        what="the new backend's sample",
    )
    assert [g["name"] for g in snap["gpus"]] == ["NVIDIA H100 80GB HBM3"]
    assert client.request("status")["station"]["gpus"] == 1


def test_top_follows_the_requested_backend_when_the_engine_watches_another(
    engine: EngineHandle,
) -> None:
    snapshot = top_json({**os.environ, "GPUDESK_BACKEND": "sim:h200"})
    assert snapshot["backend"] == "sim:h200" and snapshot["source"] == "direct"
    assert "the engine watches none" in snapshot["note"]
    assert top_json()["source"] == "engine"
    frame = gpudesk("top", "--once", env={**os.environ, "GPUDESK_BACKEND": "sim:h200"}).stdout
    lines = frame.splitlines()
    assert "CPU slots 0/2" in lines[1] and "GPUs" not in lines[1]  # the engine's own station
    assert lines[2].startswith("!! the engine watches none")  # wrapped when longer than 80
    assert all(len(line) <= 80 for line in lines)


def test_gpu_jobs_the_station_can_never_run_are_refused_at_submission(
    engine: EngineHandle,
) -> None:
    with pytest.raises(EngineError, match="asks for 1 GPU but this station has none") as refused:
        engine.submit({"name": "cpu", "command": ["true"]}, gpu_job("wants-gpu", 0.1))
    assert refused.value.code == "invalid_args"
    assert "'wants-gpu'" in str(refused.value) and "nor the 1 other job" in str(refused.value)
    assert engine.client.request("jobs")["jobs"] == []  # all or nothing
    engine.client.request("configure", station={"backend": "sim:h100x2"})
    with pytest.raises(EngineError, match="asks for 3 GPUs but this station has only 2"):
        engine.submit({**gpu_job("three", 0.1), "gpus": 3})
    (fits,) = engine.submit({**gpu_job("two", 0.1), "gpus": 2})
    assert engine.client.request("jobs")["jobs"][0]["id"] == fits


def test_run_report_gives_energy_and_carbon(home: Home, tmp_path: Path) -> None:
    profile = tmp_path / "sim.toml"
    profile.write_text(
        textwrap.dedent(f"""
        name = "sim-run"
        [station]
        backend = "{SIM}"
        sample_interval = 0.2
        grid_intensity = 300
        [[jobs]]
        name = "train"
        command = {json.dumps([*WORK, "1.0"])}
        gpus = 1
        memory_gb = 4
        repeat = 2
    """)
    )
    result = gpudesk("run", str(profile), "--report", str(tmp_path / "report.json"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("energy"))
    # the paragraph, wrapped to the terminal's width: its first line and the indented rest
    wrapped = list(itertools.takewhile(lambda line: line.startswith(" "), lines[start + 1 :]))
    energy_line = " ".join([lines[start], *(line.strip() for line in wrapped)])
    assert "GPU" in energy_line and "g CO2e at 300 g/kWh" in energy_line
    assert "SIMULATED" in energy_line
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["simulated"] is True and report["energy"]["gpu_j"] > 0
    assert all(job["usage"]["gpu_j"] > 0 for job in report["jobs"])


def test_top_json_from_a_cpu_engine_keeps_the_contract(engine: EngineHandle) -> None:
    wait_for(lambda: engine.client.request("telemetry")["snapshot"], 5.0, what="a sample")
    snapshot = top_json()
    assert (snapshot["backend"], snapshot["simulated"], snapshot["gpus"]) == ("none", False, [])
    assert snapshot["host"]["cores"] >= 1 and snapshot["banner"] is None


@pytest.mark.parametrize("bad", ["cuda", "sim:a40"])
def test_an_unknown_backend_is_a_usage_error(home: Home, bad: str) -> None:
    result = gpudesk("top", "--once", env={**os.environ, "GPUDESK_BACKEND": bad})
    assert result.returncode == 2
    assert "GPUDESK_BACKEND" in result.stderr and "Traceback" not in result.stderr


# ------------------------------------------------------- NVML through the fake
SHIM = Path(__file__).resolve().parents[1] / "fakes" / "nvml_shim"


def nvml_env(tmp_path: Path, scenario: dict, backend: str = "nvml") -> dict[str, str]:
    path = tmp_path / "nvml-scenario.json"
    path.write_text(json.dumps(scenario))
    return {
        **os.environ,
        "GPUDESK_BACKEND": backend,
        "PYTHONPATH": str(SHIM),
        "GPUDESK_FAKE_NVML": str(path),
    }


TWO_GPUS = {
    "gpus": [
        {
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-0000-h100",
            "memory_total_mib": 81559,
            "memory_used_mib": 20480,
            "utilization_gpu": 97,
            "sm_util_pct": 41.5,
            "gpm_supported": True,
            "power_w": 420,
            "power_limit_w": 700,
            "energy_mj": 5_000_000,
            "processes": [{"pid": 4242, "used_memory_mib": 20000}],
            "errors": {"nvmlDeviceGetProcessUtilization": "NotFound"},
        },
        {
            "name": "NVIDIA A100-PCIE-40GB",
            "uuid": "GPU-0001-a100",
            "memory_total_mib": 40960,
            "memory_used_mib": 0,
            "utilization_gpu": 0,
            "power_w": 35,
            "power_limit_w": 250,
            "unsupported": ["nvmlDeviceGetTotalEnergyConsumption"],
            "errors": {"nvmlGpmQueryDeviceSupport": "FunctionNotFound"},
        },
    ]
}


def test_top_reads_real_nvml_structures_and_degrades_to_null(home: Home, tmp_path: Path) -> None:
    env = nvml_env(tmp_path, TWO_GPUS)
    snapshot = top_json(env)
    assert (snapshot["backend"], snapshot["simulated"], snapshot["banner"]) == ("nvml", False, None)
    h100, a100 = snapshot["gpus"]
    assert h100["sm_activity_pct"] == pytest.approx(41.5) and h100["kernel_active_pct"] == 97
    assert h100["energy_source"] == "counter" and h100["energy_j"] > 0
    assert h100["processes"][0]["pid"] == 4242 and h100["processes"][0]["sm_pct"] is None
    assert a100["sm_activity_pct"] is None and a100["energy_source"] == "integrated"
    assert {"sm_activity", "energy_counter"} <= set(a100["unavailable"])
    frame = gpudesk("top", "--once", env=env).stdout
    sm_lines = [line for line in frame.splitlines() if line.startswith("  SM  [")]
    assert (
        "SIMULATED" not in frame
        and "(integrated)" in frame
        and "\n  not gpudesk: pid 4242" in frame
    )
    assert re.search(r" energy \S+ k?Wh since \d\d:\d\d \(integrated\)$", frame, re.M)
    assert "n/a" not in sm_lines[0] and sm_lines[1].split("]")[1].split()[0] == "n/a"
    assert all(len(line) <= 80 for line in frame.splitlines())


# Two MPS clients and their server, as the H200's driver listed them (driver 580.159.04,
# bench/results/h200-2026-11-29/run2/hardware_truth.json, checks.mps_engine.meter_windows)
MPS_GPU = {
    "gpus": [
        {
            "name": "NVIDIA H200",
            "uuid": "GPU-4c185902-fd69-cccd-bdd0-08bfc0fbea09",
            "memory_total_mib": 143771,
            "processes": [
                {
                    "pid": 797,
                    "used_memory_mib": 66,
                    "name": "nvidia-cuda-mps-server",
                    "mps": "server",
                },
                {"pid": 746, "used_memory_mib": 1448, "mps": "client"},
                {"pid": 747, "used_memory_mib": 1448, "mps": "client"},
            ],
        }
    ]
}


def test_top_names_the_mps_server_rather_than_an_unknown_process(
    home: Home, tmp_path: Path
) -> None:
    env = nvml_env(tmp_path, MPS_GPU)
    (gpu,) = top_json(env)["gpus"]
    roles = {p["pid"]: p.get("mps") for p in gpu["processes"]}
    assert roles == {797: "server", 746: "client", 747: "client"}
    frame = gpudesk("top", "--once", env=env).stdout
    assert "MPS server (pid 797)" in frame and "pid 746" in frame
    assert all(len(line) <= 80 for line in frame.splitlines())


def test_auto_picks_nvml_when_a_driver_answers(home: Home, tmp_path: Path) -> None:
    assert top_json(nvml_env(tmp_path, TWO_GPUS, backend="auto"))["backend"] == "nvml"


def test_a_named_backend_that_cannot_start_ends_top_in_one_paragraph(
    home: Home, tmp_path: Path
) -> None:
    # as nvidia-smi, nvitop and gpustat do without a working driver
    env = nvml_env(tmp_path, {"init_error": "LibRmVersionMismatch", "gpus": [{}]})
    for mode in ("--once", "--json"):
        done = gpudesk("top", mode, env=env)
        assert (done.returncode, done.stdout) == (1, ""), done.stderr
        (line,) = done.stderr.splitlines()  # one paragraph: no log line, no traceback
        assert line.startswith("error: GPUDESK_BACKEND=nvml: the NVIDIA kernel module and ")
        assert "reboot" in line and "GPUDESK_BACKEND=auto" in line
    # auto does not pick a backend that cannot start, and says why it shows no GPUs
    auto = {**env, "GPUDESK_BACKEND": "auto"}
    snapshot = top_json(auto)
    assert snapshot["backend"] == "none" and snapshot["gpus"] == []
    assert "GPUDESK_BACKEND=auto looked for NVML and the NVIDIA kernel module" in snapshot["note"]
    frame = gpudesk("top", "--once", env=auto)
    assert frame.returncode == 0 and "!! no GPUs shown: GPUDESK_BACKEND=auto" in frame.stdout


def test_an_engine_on_nvml_places_gpu_jobs_and_accounts_their_energy(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in nvml_env(tmp_path, TWO_GPUS).items():
        monkeypatch.setenv(key, value)
    handle = EngineHandle(home)
    handle.start(backend="nvml", sample_interval=0.2)
    try:
        (job_id,) = handle.submit(gpu_job("on-nvml", 1.5))
        job = handle.wait_all_done([job_id])[0]
        assert job.state == "succeeded"
        shown = handle.show(job_id)
        placement = shown.attempts[0].placement
        assert placement.env["CUDA_VISIBLE_DEVICES"] == "GPU-0000-h100"
        usage = shown.usage
        assert usage.gpu_j > 0 and usage.gpu_source == "counter"
        status = handle.client.request("status")["station"]
        assert (status["effective_backend"], status["gpus"]) == ("nvml", 2)
    finally:
        handle.stop()
        handle.client.close()


def test_top_shows_mig_devices_under_their_gpu_and_a_lost_gpu(home: Home, tmp_path: Path) -> None:
    scenario = {
        "gpus": [
            {
                "name": "NVIDIA A100-SXM4-40GB",
                "uuid": "GPU-mig",
                "memory_total_mib": 40960,
                "gpm_supported": False,
                "mig_enabled": True,
                "mig_devices": [
                    {
                        "uuid": "MIG-aaaa",
                        "name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
                        "gpu_instance_id": 1,
                        "compute_instance_id": 0,
                        "memory_total_mib": 19968,
                        "memory_used_mib": 4096,
                        "processes": [{"pid": 5151, "used_memory_mib": 4000}],
                    },
                    None,
                    {
                        "uuid": "MIG-bbbb",
                        "name": "NVIDIA A100-SXM4-40GB MIG 2g.10gb",
                        "gpu_instance_id": 2,
                        "compute_instance_id": 0,
                        "memory_total_mib": 9856,
                    },
                ],
            },
            {"name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-gone", "lost": True},
        ]
    }
    env = nvml_env(tmp_path, scenario)
    snapshot = top_json(env)
    mig_gpu, lost = snapshot["gpus"]
    assert mig_gpu["mig_enabled"] is True
    assert [m["uuid"] for m in mig_gpu["mig_devices"]] == ["MIG-aaaa", "MIG-bbbb"]
    assert mig_gpu["mig_devices"][0]["processes"][0]["pid"] == 5151
    assert lost["lost"] is True and lost["memory_used_mib"] is None
    lines = gpudesk("top", "--once", env=env).stdout.splitlines()
    mig_lines = [line for line in lines if line.startswith("  MIG ")]
    assert len(mig_lines) == 2 and "3g.20gb" in mig_lines[0] and "5151" in mig_lines[0]
    assert any(line.startswith("GPU 1") and "LOST" in line for line in lines)
    assert all(len(line) <= 80 for line in lines)


def test_top_refreshes_as_plain_frames_in_a_dumb_terminal(home: Home) -> None:
    env = {**os.environ, "GPUDESK_BACKEND": "sim:h100", "TERM": "dumb", "NO_COLOR": "1"}
    proc = subprocess.Popen(
        [*GPUDESK, "top", "-n", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    seen = b""
    try:
        # until three frames came (start-up takes ~0.7 s alone, longer on a loaded machine);
        # raw reads, so a frame already in a pipe buffer is never waited for again
        assert proc.stdout is not None
        deadline = time.monotonic() + 20
        while seen.count(b"gpudesk top") < 3 and time.monotonic() < deadline:
            if select.select([proc.stdout], [], [], 0.2)[0]:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                seen += chunk
        proc.send_signal(signal.SIGINT)
        rest, err_bytes = proc.communicate(timeout=10)
    finally:
        proc.kill()
    out = (seen + rest).decode()
    err = err_bytes.decode()
    assert proc.returncode == 0, f"exit {proc.returncode}\nstderr: {err}\nstdout: {out[-2000:]}"
    assert out.count("gpudesk top") >= 3, f"stdout: {out[-2000:]}\nstderr: {err}"
    assert "\x1b" not in out and all(len(line) <= 80 for line in out.splitlines())


def test_a_gpu_lost_mid_run_is_marked_and_gets_no_more_jobs(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = {
        "gpus": [
            {"uuid": "GPU-stays", "power_w": 80},
            # answers twice, then falls off the bus
            {
                "uuid": "GPU-falls",
                "power_w": 80,
                "errors": {"nvmlDeviceGetPowerUsage": [None, None, "GpuIsLost"]},
            },
        ]
    }
    for key, value in nvml_env(tmp_path, scenario).items():
        monkeypatch.setenv(key, value)
    handle = EngineHandle(home)
    handle.start(backend="nvml", sample_interval=0.2)
    try:
        snap = wait_for(
            lambda: (
                (s := handle.client.request("telemetry")["snapshot"]) and s["gpus"][1]["lost"] and s
            ),
            10.0,
            what="GPU 1 to be lost",
        )
        assert snap["gpus"][0]["lost"] is False and snap["gpus"][0]["power_w"] == 80
        first, second = handle.submit(gpu_job("a", 3.0), gpu_job("b", 0.1))
        shown = handle.wait_state(first, "running")
        assert handle.show(first).attempts[0].placement.gpus == [0]
        waiting = handle.show(second).waiting
        # the default policy (auto) would collocate it, but two 70 % SM jobs time-sliced (no
        # MPS server here) gain nothing by the model, and GPU 1 is not considered at all
        assert waiting.startswith(
            "waiting (hint demand: needs 6.0 GiB + 2.0 GiB margin and 70% SM, and a GPU where "
            "sharing is predicted to gain even with its costs at the top of their range); "
            "GPU 0:"
        ) and waiting.endswith("; GPU 1 lost")
        assert shown.state == "running"
        assert handle.client.request("status")["gpus"]["lost"] == 1
    finally:
        handle.stop()
        handle.client.close()


def test_a_suspended_job_leaves_its_simulated_gpu_idle_and_keeps_its_memory(
    sim_engine: EngineHandle, tmp_path: Path
) -> None:
    """A stopped job launches no kernel: its SIMULATED GPU kept 98 % SM and full power, and the
    job went on being charged energy, while it was suspended."""
    gate = tmp_path / "done"
    (job_id,) = sim_engine.submit(gated_gpu_job("paused", gate, 85.0))
    sim_engine.wait_state(job_id, "running")

    def its_gpu(snap: dict | None, busy: bool) -> dict | None:
        gpus = [g for g in (snap or {"gpus": []})["gpus"] if job_id in g["jobs"]]
        if not gpus or gpus[0]["memory_used_mib"] < 6 * 1024:
            return None
        return gpus[0] if (gpus[0]["sm_activity_pct"] > 50) == busy else None

    def top_shows(busy: bool, what: str) -> dict:
        """`gpudesk top`'s view of the job's GPU once it is `busy` (or idle): waited for in the
        engine's own samples (a request), then asked of top (a process, ~0.2 s of CPU each)."""
        wait_for(
            lambda: its_gpu(sim_engine.client.request("telemetry")["snapshot"], busy),
            10.0,
            interval=0.1,
            what=f"{what} in the engine's samples",
        )
        return wait_for(lambda: its_gpu(top_json(), busy), 10.0, interval=0.1, what=what)  # type: ignore[return-value]

    top_shows(busy=True, what="the job's GPU busy")
    assert sim_engine.api.suspend([job_id])[0].outcome == "suspended"
    idle = top_shows(busy=False, what="its GPU idle")
    assert idle["sm_activity_pct"] < 5  # its memory is still held (its_gpu checked it)
    assert sim_engine.api.resume([job_id])[0].outcome == "resumed"
    top_shows(busy=True, what="its GPU busy again")
    gate.touch()
    sim_engine.wait_all_done([job_id], timeout=30.0)
