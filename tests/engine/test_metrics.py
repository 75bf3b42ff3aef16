"""The engine's Prometheus endpoint, end to end: a real engine on the SIMULATED DGX Station A100
with `[station] metrics_listen` on a free port, real jobs on its GPUs, scraped over HTTP and
parsed as Prometheus parses it; and a real Prometheus server scraping it (Debian's `prometheus`
package, when installed)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import EngineHandle, EngineInProcess, Run, wait_for
from prometheus_client.parser import text_string_to_metric_families

from gpudesk.core.identity import Caller, Identity
from gpudesk.core.jobs import JobSpec
from gpudesk.core.station import StationConfig
from gpudesk.engine.store.database import Store
from gpudesk.paths import Home, user_name
from gpudesk.policy.access import Access

SIM = "sim:dgx-station-a100"
GPUS = 4
ME = user_name(os.getuid())
PROMETHEUS = "/usr/bin/prometheus"


def light_job(name: str) -> dict[str, Any]:
    """A GPU job that sleeps: light enough that a fifth shares a GPU with one of four."""
    return {"name": name, "command": ["sleep", "120"], "gpus": 1, "memory_gb": 4, "sm_pct": 20}


Samples = dict[str, list[tuple[str, dict[str, str], float]]]


def engine_events(home: Home) -> list[str]:
    """The engine's events as its store keeps them (read-only, beside the running engine)."""
    with contextlib.closing(sqlite3.connect(f"file:{home.db}?mode=ro", uri=True)) as db:
        return [message for (message,) in db.execute("SELECT message FROM events")]


def scrape(url: str) -> Samples:
    """GET the endpoint; each family's samples as prometheus_client's parser reads them."""
    with urllib.request.urlopen(url, timeout=5.0) as reply:
        text = reply.read().decode()
    return {
        family.name: [(s.name, dict(s.labels), s.value) for s in family.samples]
        for family in text_string_to_metric_families(text)
    }


def by_gpu(samples: Samples, name: str) -> dict[int, tuple[dict[str, str], float]]:
    """A DCGM family's whole-GPU series (no MIG labels) by GPU index."""
    return {
        int(labels["gpu"]): (labels, value)
        for _, labels, value in samples.get(name, [])
        if "GPU_I_ID" not in labels
    }


def listening_ports(pid: int) -> list[int]:
    return [
        c.laddr.port
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    ]


@pytest.fixture
def metrics_engine(home: Home) -> Iterator[tuple[EngineHandle, str]]:
    """A real daemon on the simulated station, sampling every 0.2 s, metrics on any free port."""
    handle = EngineHandle(home)
    handle.start(backend=SIM, sample_interval=0.2, metrics_listen="127.0.0.1:0")
    url = handle.client.request("status")["station"]["metrics_url"]
    assert url and url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
    yield handle, url
    handle.client.close()


def running_on_gpus(
    engine: EngineHandle, count: int, allocated: bool = True
) -> tuple[list[int], dict[str, Any]]:
    """Submit `count` light GPU jobs; wait until each runs and a sample shows it on its GPU
    (`allocated`: with its memory allocated, which the simulator does over 3 s). Returns the
    ids and that sample."""
    ids = engine.submit(*(light_job(f"light-{i}") for i in range(count)))
    for job_id in ids:
        engine.wait_state(job_id, "running")
    started = time.time()

    def settled() -> dict[str, Any] | None:
        snapshot = engine.client.request("telemetry")["snapshot"]
        on_gpus = {j for g in snapshot["gpus"] for j in g["jobs"]} if snapshot else set()
        later = snapshot is not None and snapshot["taken_at"] > started + (3.5 if allocated else 0)
        return snapshot if on_gpus == set(ids) and later else None

    return ids, wait_for(settled, 15.0, 0.1, "a sample with every job on its GPU")  # type: ignore[return-value]


def scrape_with_sample(engine: EngineHandle, url: str) -> tuple[Samples, dict[str, Any]]:
    """A scrape and the engine's own `telemetry` view of the same sample (the endpoint says
    when its readings were taken): the two must then agree exactly, up to the view's rounding."""
    for _ in range(100):
        view = engine.client.request("telemetry")["snapshot"]
        got = scrape(url)
        taken = got["gpudesk_telemetry_sample_timestamp_seconds"][0][2]
        if taken == view["taken_at"]:
            return got, view
        time.sleep(0.01)
    raise AssertionError("the endpoint never showed the sample the telemetry request did")


# ------------------------------------------------------------------------------- the tests
def test_dcgm_metrics_match_the_engines_own_readings_and_name_the_jobs(
    metrics_engine: tuple[EngineHandle, str],
) -> None:
    engine, url = metrics_engine
    ids, _ = running_on_gpus(engine, GPUS + 1)  # five jobs, four GPUs: one GPU has two
    (waiting,) = engine.submit({**light_job("after"), "after": [ids[0]]})  # stays queued
    got, view = scrape_with_sample(engine, url)
    hostname = socket.gethostname()
    gpus = {g["index"]: g for g in view["gpus"]}
    assert sorted(gpus) == list(range(GPUS))
    for name in (
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_SM_CLOCK",
    ):
        series = by_gpu(got, name)
        assert sorted(series) == list(range(GPUS)), name  # one series per GPU, not per job
        for index, (labels, _) in series.items():
            gpu = gpus[index]
            jobs = {"hpc_job": ",".join(str(j) for j in sorted(gpu["jobs"])), "user": ME}
            if name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
                jobs = {}  # a counter keeps one series per GPU, whatever runs there
            assert labels == {
                "gpu": str(index),
                "UUID": gpu["uuid"],
                "device": f"nvidia{index}",
                "modelName": gpu["name"],
                "Hostname": hostname,
                **jobs,
                "simulated": "true",
            }, name
    shared = [g for g in gpus.values() if len(g["jobs"]) == 2]
    assert len(shared) == 1  # the fifth job's GPU names both
    assert sorted(j for g in gpus.values() for j in g["jobs"]) == sorted(ids)
    for index, gpu in gpus.items():

        def value(name: str, index: int = index) -> float:
            return by_gpu(got, name)[index][1]

        # the same sample: equal up to the telemetry view's rounding to 0.1
        assert value("DCGM_FI_DEV_GPU_UTIL") == pytest.approx(gpu["kernel_active_pct"], abs=0.051)
        assert value("DCGM_FI_PROF_SM_ACTIVE") == pytest.approx(
            gpu["sm_activity_pct"] / 100.0, abs=0.00051
        )  # a ratio, as DCGM reports it
        assert value("DCGM_FI_DEV_FB_USED") == pytest.approx(gpu["memory_used_mib"], abs=0.051)
        assert value("DCGM_FI_DEV_FB_USED") + value("DCGM_FI_DEV_FB_FREE") == pytest.approx(
            gpu["memory_total_mib"], abs=0.11
        )
        assert value("DCGM_FI_DEV_POWER_USAGE") == pytest.approx(gpu["power_w"], abs=0.051)
        assert value("DCGM_FI_DEV_GPU_TEMP") == pytest.approx(gpu["temperature_c"], abs=0.51)
        assert value("DCGM_FI_DEV_SM_CLOCK") == gpu["sm_clock_mhz"] == 1410.0  # busy clock
        # mJ of the device counter; the engine's own count began with its first reading, so
        # it is at most the counter's, and both grew with the jobs
        energy_mj = value("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        assert 0 < gpu["energy_j"] * 1000.0 <= energy_mj + 100.0
        gpudesk_energy = {int(s[1]["gpu"]): s[2] for s in got["gpudesk_gpu_energy_joules"]}
        assert gpudesk_energy[index] == pytest.approx(gpu["energy_j"], abs=0.051)
    # the queue, as the engine's jobs request has it
    counts: dict[str, int] = {}
    for job in engine.client.request("jobs", ids=[*ids, waiting])["jobs"]:
        counts[job["state"]] = counts.get(job["state"], 0) + 1
    assert counts == {"running": GPUS + 1, "queued": 1}
    exported = {s[1]["state"]: s[2] for s in got["gpudesk_jobs"] if s[1]["user"] == ME}
    assert exported == {"suspended": 0, "succeeded": 0, "failed": 0, "cancelled": 0, **counts}
    placements = {s[1]["mode"]: s[2] for s in got["gpudesk_placements"]}
    assert sum(placements.values()) == GPUS + 1 and placements["cpu"] == 0
    assert got["gpudesk_oom_recoveries"] == [("gpudesk_oom_recoveries_total", {}, 0.0)]
    decisions = {s[0]: s[2] for s in got["gpudesk_placement_decision_seconds"] if not s[1]}
    assert decisions["gpudesk_placement_decision_seconds_count"] >= 1
    gpu_energy = {
        int(s[1]["job_id"]): s for s in got["gpudesk_job_energy_joules"] if s[1]["source"] == "gpu"
    }
    assert sorted(gpu_energy) == sorted(ids)  # running jobs only: not the queued one
    assert all(s[1]["user"] == ME and s[2] > 0 for s in gpu_energy.values())
    info = got["gpudesk_station_info"][0][1]
    assert (info["backend"], info["simulated"]) == (SIM, "true")


def test_mig_devices_carry_dcgm_exporters_mig_labels_and_their_own_jobs(home: Home) -> None:
    engine = EngineHandle(home)
    engine.start(
        backend=SIM,
        policy="mig",  # onto the MIG slices, whatever else is idle
        sample_interval=0.2,
        metrics_listen="127.0.0.1:0",
        mig={"1": "3g.20gb,3g.20gb"},
    )
    url = engine.client.request("status")["station"]["metrics_url"]
    ids, _ = running_on_gpus(engine, 2)
    assert {engine.job(j).mode for j in ids} == {"mig"}
    got, view = scrape_with_sample(engine, url)
    (gpu,) = [g for g in view["gpus"] if g["mig_devices"]]
    slices = [s for s in got["DCGM_FI_DEV_FB_USED"] if "GPU_I_ID" in s[1]]
    assert len(slices) == 2
    for mig in gpu["mig_devices"]:
        (series,) = [s for s in slices if s[1]["GPU_I_ID"] == str(mig["gpu_instance_id"])]
        jobs = sorted({p["job_id"] for p in mig["processes"]})
        assert len(jobs) == 1
        assert series[1] == {
            "gpu": "1",
            "UUID": gpu["uuid"],  # the parent GPU's, as dcgm-exporter labels a MIG device
            "device": "nvidia1",
            "modelName": gpu["name"],
            "Hostname": socket.gethostname(),
            "GPU_I_PROFILE": "3g.20gb",
            "GPU_I_ID": str(mig["gpu_instance_id"]),
            "hpc_job": str(jobs[0]),
            "user": ME,
            "simulated": "true",
        }
        assert series[2] == pytest.approx(mig["memory_used_mib"], abs=0.051)
    # no per-instance utilization (NVML has none in MIG mode): only framebuffer for slices
    assert all("GPU_I_ID" not in s[1] for s in got["DCGM_FI_DEV_GPU_UTIL"])
    whole = by_gpu(got, "DCGM_FI_DEV_POWER_USAGE")[1][0]
    assert whole["hpc_job"] == ",".join(str(j) for j in sorted(ids))


def test_an_out_of_memory_recovery_is_counted(metrics_engine: tuple[EngineHandle, str]) -> None:
    engine, url = metrics_engine
    dies = (
        "print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB'); exit(1)"
    )
    (job,) = engine.submit(
        {"name": "oom", "command": [sys.executable, "-c", dies], "gpus": 1, "max_attempts": 1}
    )
    done = engine.wait_state(job, "failed", timeout=30.0)
    # its own attempt, then one OOM retry alone on a whole GPU; dying there too, its need is
    # measured beyond every GPU (policy/retry.py) and a third try could only die the same way
    assert done.attempts == 2
    wait_for(
        lambda: (
            scrape(url)["gpudesk_oom_recoveries"] == [("gpudesk_oom_recoveries_total", {}, 1.0)]
        ),
        5.0,
        0.1,
        "the endpoint to count one recovery",
    )


def test_job_counts_name_each_owner_as_stored_with_her_jobs(home: Home) -> None:
    """The exporter runs on the engine's loop, which never waits on the user database (LDAP
    may hang): an owner is named as her jobs were stored (before: looked up, once a uid)."""
    home.root.mkdir(parents=True, exist_ok=True)
    gone = Identity.of(61077, 61077, [], "gdstored")  # no user has this uid: no lookup names it
    store = Store.open(home.db)
    try:
        spec = JobSpec.from_dict({"name": "held", "command": ["true"], "workdir": "/"})
        store.submit([spec], dict(os.environ), owner=gone, held=True)
    finally:
        store.close()
    handle = EngineHandle(home)
    handle.start(backend=SIM, sample_interval=0.2, metrics_listen="127.0.0.1:0")
    try:
        url = handle.client.request("status")["station"]["metrics_url"]
        counted = [(s[1]["user"], s[2]) for s in scrape(url)["gpudesk_jobs"] if s[2]]
        assert counted == [("gdstored", 1.0)], counted
    finally:
        handle.client.close()


def test_a_stuck_scraper_does_not_stall_the_engine_or_other_scrapes(
    metrics_engine: tuple[EngineHandle, str],
) -> None:
    engine, url = metrics_engine
    address = urllib.parse.urlsplit(url)
    stuck = []
    for _ in range(3):  # connections that send half a request and never read
        conn = socket.create_connection((address.hostname, address.port))
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        stuck.append(conn)
    try:
        started = time.monotonic()
        assert engine.client.request("ping")["pid"] == engine.pid
        assert scrape(url)["gpudesk_station_info"]
        assert time.monotonic() - started < 2.0
    finally:
        for conn in stuck:
            conn.close()


def test_the_loops_request_and_step_times_are_histograms(
    metrics_engine: tuple[EngineHandle, str],
) -> None:
    engine, url = metrics_engine
    for _ in range(3):
        engine.client.request("ping")

    def pings_counted() -> Samples | None:
        got = scrape(url)
        counts = {
            labels["op"]: value
            for name, labels, value in got.get("gpudesk_engine_request_seconds", [])
            if name == "gpudesk_engine_request_seconds_count"
        }
        return got if counts.get("ping", 0) >= 3 else None

    got = wait_for(pings_counted, 10.0, 0.1, "the endpoint to count 3 pings")
    assert isinstance(got, dict)
    ping = {
        (name, labels.get("le")): value
        for name, labels, value in got["gpudesk_engine_request_seconds"]
        if labels["op"] == "ping"
    }
    # cumulative buckets up to +Inf, which holds every ping; a ping is well under a second
    assert (
        ping[("gpudesk_engine_request_seconds_bucket", "+Inf")]
        == ping[("gpudesk_engine_request_seconds_count", None)]
    )
    assert ping[("gpudesk_engine_request_seconds_bucket", "1.0")] >= 3
    steps = {labels["step"] for _, labels, _ in got["gpudesk_engine_step_seconds"]}
    assert {"attempts", "schedule", "telemetry", "metrics"} <= steps


def test_engine_status_shows_the_endpoint(
    metrics_engine: tuple[EngineHandle, str], home: Home, gpudesk: Run
) -> None:
    _, url = metrics_engine
    code, out, _ = gpudesk("engine", "status")
    assert code == 0 and f"metrics: {url} (Prometheus) (SIMULATED station)" in out
    log = (home.root / "engine.log").read_text()
    assert f"metrics: serving {url}" in log  # the real port, in the log too


def test_metrics_are_off_by_default_and_nothing_listens(sim_engine: EngineHandle) -> None:
    station = sim_engine.client.request("status")["station"]
    # a null field is left out of the reply (omit_defaults): .get reads it as the types do
    assert station.get("metrics_listen") is None
    assert station.get("metrics_url") is None and station.get("metrics_problem") is None
    assert sim_engine.pid is not None and listening_ports(sim_engine.pid) == []


def test_a_port_in_use_is_said_and_the_engine_runs_on(home: Home) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        engine = EngineHandle(home)
        engine.start(backend=SIM, sample_interval=0.2, metrics_listen=f"127.0.0.1:{port}")
        station = engine.client.request("status")["station"]
        assert station.get("metrics_url") is None
        problem = station["metrics_problem"]
        assert problem.startswith(f"metrics: not serving 127.0.0.1:{port}: port {port} is in use")
        log = (home.root / "engine.log").read_text()
        assert log.count("metrics: not serving") == 1 and "Traceback" not in log
        assert any(problem == message for message in engine_events(home))
        # the engine goes on: jobs run
        (job,) = engine.submit({"name": "cpu", "command": ["true"]})
        engine.wait_state(job, "succeeded")
        # an admin moves it to a free port: served at once, and the reply says where
        moved = engine.client.request("configure", station={"metrics_listen": "127.0.0.1:0"})
        (change,) = moved["changes"]
        assert change["message"].startswith(
            f"metrics_listen 127.0.0.1:{port} → 127.0.0.1:0 (serving http://127.0.0.1:"
        )
        url = engine.client.request("status")["station"]["metrics_url"]
        assert scrape(url)["gpudesk_station_info"]
        # back onto the taken port: refused by the OS, said in the reply; the old one is freed
        back = engine.client.request("configure", station={"metrics_listen": f"127.0.0.1:{port}"})
        assert f"port {port} is in use by another program" in back["changes"][0]["message"]
        assert engine.pid is not None and listening_ports(engine.pid) == []
    off = engine.client.request("configure", station={"metrics_listen": None})
    assert off["changes"][0]["message"].endswith("(metrics no longer served)")
    assert engine.client.request("status")["station"].get("metrics_problem") is None
    assert engine.client.request("ping")["pid"] == engine.pid


def test_only_an_admin_turns_the_endpoint_on(home: Home) -> None:
    admins = 7000
    user = Caller(Identity.of(5002, 5002, [5002]), 102)
    admin = Caller(Identity.of(5003, 5003, [5003, admins]), 103)
    engine = EngineInProcess(
        home, StationConfig(backend="none", slots=1), Access(os.getuid(), admins)
    )
    try:
        asked = engine.ok(user, "configure", station={"metrics_listen": "127.0.0.1:0"})
        assert asked["changes"] == [] and asked["not_applied"][0]["key"] == "metrics_listen"
        assert engine.engine.metrics.server is None
        done = engine.ok(admin, "configure", station={"metrics_listen": "127.0.0.1:0"})
        assert done["changes"][0]["key"] == "metrics_listen"
        url = engine.ok(user, "status")["station"]["metrics_url"]
        engine.step()  # the loop's step builds the first snapshot
        assert scrape(url)["gpudesk_station_info"][0][1]["simulated"] == "false"
    finally:
        engine.close()  # frees the port
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2.0)


def test_a_taken_port_is_tried_again_until_it_is_free(home: Home) -> None:
    engine = EngineInProcess(home, StationConfig(backend="none", slots=1))
    now = [1000.0]
    engine.engine.metrics.clock = lambda: now[0]
    me = Caller.of_process()
    taken = socket.socket()
    try:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        reply = engine.ok(me, "configure", station={"metrics_listen": f"127.0.0.1:{port}"})
        assert "is in use by another program" in reply["changes"][0]["message"]
        taken.close()  # the other program lets go
        now[0] += 29.0
        engine.step()
        assert engine.ok(me, "status")["station"].get("metrics_url") is None  # not due yet
        now[0] += 2.0
        engine.step()
        station = engine.ok(me, "status")["station"]
        assert station["metrics_url"] == f"http://127.0.0.1:{port}/metrics"
        assert station.get("metrics_problem") is None
        assert scrape(station["metrics_url"])["gpudesk_station_info"]
    finally:
        taken.close()
        engine.close()


# ------------------------------------------------------------------- a real Prometheus
@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Any]:
    """Start Debian's prometheus scraping a target every second; yields a function that starts
    it for a given target and returns its base URL. Stopped at the end: terminate, wait, kill."""
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.skip(
            "Debian's prometheus package is not installed (.ci/run installs it when run as root)"
        )
    started: list[subprocess.Popen[bytes]] = []

    def start(target: str) -> str:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: gpudesk\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "prometheus.log").open("wb"),
            start_new_session=True,
        )
        started.append(process)
        return f"http://127.0.0.1:{port}"

    yield start
    for process in started:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def query(base: str, promql: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?query={urllib.parse.quote(promql)}"
    with urllib.request.urlopen(url, timeout=5.0) as reply:
        answer = json.load(reply)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]  # type: ignore[no-any-return]


def test_a_real_prometheus_scrapes_the_engine(
    metrics_engine: tuple[EngineHandle, str], prometheus: Any
) -> None:
    engine, url = metrics_engine
    ids, _ = running_on_gpus(engine, 2, allocated=False)
    target = urllib.parse.urlsplit(url).netloc
    base = prometheus(target)

    def target_up() -> bool:
        try:
            with urllib.request.urlopen(f"{base}/api/v1/targets", timeout=2.0) as reply:
                active = json.load(reply)["data"]["activeTargets"]
        except OSError:
            return False  # not listening yet
        return any(t["health"] == "up" and t["scrapeUrl"] == url for t in active)

    wait_for(target_up, 15.0, 0.2, "prometheus to scrape the engine")
    util = wait_for(lambda: query(base, "DCGM_FI_DEV_GPU_UTIL"), 5.0, 0.2, "a series")
    assert sorted(int(s["metric"]["gpu"]) for s in util) == list(range(GPUS))
    for series in util:
        labels = series["metric"]
        assert labels["job"] == "gpudesk"  # Prometheus's own target label, untouched
        assert labels["instance"] == target and labels["simulated"] == "true"
        assert labels["device"] == f"nvidia{labels['gpu']}" and labels["UUID"].startswith("GPU-")
    named = sorted(int(s["metric"]["hpc_job"]) for s in util if s["metric"].get("hpc_job"))
    assert named == sorted(ids)  # an idle GPU's empty hpc_job is no label in Prometheus
    running = query(base, 'gpudesk_jobs{state="running"}')
    assert [(s["metric"]["user"], s["value"][1]) for s in running] == [(ME, "2")]
    energy = query(base, "gpudesk_gpu_energy_joules_total")
    assert len(energy) == GPUS
    assert engine.client.request("ping")["pid"] == engine.pid


def test_promtool_finds_nothing_but_dcgm_exporters_own_camelcase_label(
    metrics_engine: tuple[EngineHandle, str],
) -> None:
    """`promtool check metrics` (Prometheus's own linter) on the endpoint with a job running:
    exits 0 but for the DCGM series' `modelName`, dcgm-exporter's own label (listed in
    collector.DCGM_CAMELCASE_LABELS); gpudesk's own metrics have nothing it objects to."""
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    if not os.access(promtool, os.X_OK):
        pytest.skip("promtool is not installed (Debian's prometheus package has it)")
    from gpudesk.metrics.collector import DCGM_CAMELCASE_LABELS, DCGM_NAMES

    engine, url = metrics_engine
    running_on_gpus(engine, 1, allocated=False)
    with urllib.request.urlopen(url, timeout=5.0) as reply:
        text = reply.read()
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, timeout=30
    )
    said = (checked.stdout + checked.stderr).decode().splitlines()
    assert said, "promtool said nothing: the DCGM series' modelName should be named"
    camel = "label names should be written in 'snake_case' not 'camelCase'"
    for line in said:
        name, _, complaint = line.partition(" ")
        assert name in DCGM_NAMES and complaint == camel, line
    assert DCGM_CAMELCASE_LABELS == ("modelName",)
    assert b"modelName" not in b"".join(
        row for row in text.splitlines() if row.startswith(b"gpudesk_")
    )


DCGM_DASHBOARD = Path(__file__).resolve().parents[1] / "fixtures/grafana/dcgm-exporter-12239.promql"


def dashboard_queries() -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
    """The panels (title, expression) and variables (name, metric, label) of NVIDIA's DCGM
    dashboard, as the fixture writes them out."""
    panels, variables = [], []
    for line in DCGM_DASHBOARD.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("var "):
            name, metric, label = line[4:].split("\t")
            variables.append((name, metric, label))
        else:
            title, expr = line.split("\t")
            panels.append((title, expr))
    return panels, variables


def label_values(base: str, metric: str, label: str) -> list[str]:
    """What Grafana's label_values(METRIC, LABEL) asks Prometheus for."""
    url = f"{base}/api/v1/label/{label}/values?{urllib.parse.urlencode({'match[]': metric})}"
    with urllib.request.urlopen(url, timeout=5.0) as reply:
        answer = json.load(reply)
    assert answer["status"] == "success", answer
    return answer["data"]  # type: ignore[no-any-return]


def test_nvidias_dcgm_dashboard_finds_data_for_every_panel(
    metrics_engine: tuple[EngineHandle, str], prometheus: Any
) -> None:
    """Every panel of NVIDIA's DCGM Grafana dashboard (12239) returns series from a real
    Prometheus scraping a SIMULATED station, its variables set to "All" as Grafana sets them.
    Its GPU Utilization and Tensor Core Utilization panels read DCGM_FI_PROF_GR_ENGINE_ACTIVE
    and DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, which gpudesk did not export before."""
    import re

    panels, variables = dashboard_queries()
    assert len(panels) == 8 and [v[0] for v in variables] == ["Hostname", "gpu"]
    engine, url = metrics_engine
    running_on_gpus(engine, 2, allocated=False)
    base = prometheus(urllib.parse.urlsplit(url).netloc)

    def scraped() -> list[dict[str, Any]]:
        try:
            return query(base, "DCGM_FI_DEV_FB_FREE")
        except OSError:
            return []  # not listening yet

    wait_for(scraped, 20.0, 0.2, "prometheus to scrape the engine")
    chosen = {}
    for name, metric, label in variables:
        values = label_values(base, metric, label)
        assert values, (name, metric)
        chosen[name] = "(" + "|".join(re.escape(v) for v in values) + ")"  # Grafana's "All"
    assert chosen["gpu"] == "(" + "|".join(str(i) for i in range(GPUS)) + ")"
    empty = []
    for title, expr in panels:
        promql = expr.replace("$Hostname", chosen["Hostname"]).replace("$gpu", chosen["gpu"])
        try:
            wait_for(lambda q=promql: query(base, q), 5.0, 0.2, title)
        except AssertionError:
            empty.append(title)
    assert not empty, f"panels of dashboard 12239 with no data: {empty}"
    tensor = query(base, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
    assert all(s["metric"]["simulated"] == "true" for s in tensor)
    assert all(0.0 <= float(s["value"][1]) <= 1.0 for s in tensor)
    # the simulated GPUs' memory health: a healthy GPU's zeros, labelled SIMULATED, no job label
    remap = query(base, "DCGM_FI_DEV_ROW_REMAP_FAILURE")
    assert len(remap) == GPUS and all(s["value"][1] == "0" for s in remap)
    assert all(s["metric"]["simulated"] == "true" and "hpc_job" not in s["metric"] for s in remap)
