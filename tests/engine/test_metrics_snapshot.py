"""The engine's Prometheus metrics without an engine: `[station] metrics_listen` checked, typed
readings turned into a snapshot, and a snapshot built by hand rendered and parsed back as a
scraper would read it."""

from __future__ import annotations

import dataclasses
import errno
import re
import socket
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpudesk.core.jobs import JobSpec
from gpudesk.core.listen import ListenAddress, bind_problem, check_metrics_listen, parse_listen
from gpudesk.core.station import StationConfig
from gpudesk.core.wire.station import LoaderConsumer, LoaderSpec, LoaderStatus, LoaderView
from gpudesk.engine.activity import DECISION_BUCKETS_S, EngineActivity
from gpudesk.engine.services.metrics.exporter import RETRY_BIND_S
from gpudesk.engine.store.database import Store
from gpudesk.hw.telemetry.energy import AttemptUsage
from gpudesk.hw.telemetry.model import BackendReading, GpuHealth, GpuReading, MigDevice
from gpudesk.hw.telemetry.monitor import TrackedAttempt
from gpudesk.metrics.collector import DCGM_GAUGES, SnapshotCollector
from gpudesk.metrics.server import MetricsServer
from gpudesk.metrics.snapshot import (
    Device,
    DeviceReading,
    JobCount,
    MetricsSnapshot,
    RunningJob,
    device_readings,
    job_counts,
    loader_figures,
    running_jobs,
)

A100 = "NVIDIA A100-SXM4-40GB"
STATES = ("queued", "running", "suspended", "succeeded", "failed", "cancelled")


# ------------------------------------------------------------------------- metrics_listen
@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ("9400", "127.0.0.1:9400"),  # a bare port: loopback
        ("127.0.0.1:9400", "127.0.0.1:9400"),
        ("localhost:9400", "127.0.0.1:9400"),
        ("0.0.0.0:9400", "0.0.0.0:9400"),  # every interface, only when written
        ("10.1.2.3:9400", "10.1.2.3:9400"),
        ("[::1]:9400", "[::1]:9400"),
        (" 127.0.0.1:0 ", "127.0.0.1:0"),  # 0: any free port
    ],
)
def test_metrics_listen_accepts_an_address_and_port(written: str, canonical: str) -> None:
    assert check_metrics_listen(written) == canonical
    assert StationConfig.from_dict({"metrics_listen": written}).metrics_listen == canonical


@pytest.mark.parametrize(
    ("written", "said"),
    [
        (":9400", "127.0.0.1:9400 for this machine only, or 0.0.0.0:9400 for every interface"),
        ("gpu-server:9400", "'gpu-server' in 'gpu-server:9400' is no IP address"),
        ("999.1.1.1:9400", "is no IP address"),
        ("127.0.0.1", "no port"),
        ("127.0.0.1:65536", "must be a whole number from 1 to 65535 (0: any free port)"),
        ("127.0.0.1:-1", "must be a whole number from 1 to 65535"),
        ("127.0.0.1:http", "must be a whole number from 1 to 65535"),
        ("127.0.0.1:" + "9" * 5000, "must be a whole number from 1 to 65535"),
        ("[::1]9400", "expected [IPv6 address]:PORT"),
        ("", "no port"),
        (9400, 'expected "127.0.0.1:9400" (HOST:PORT), found 9400 (integer) (write it in quotes)'),
        (True, "found true (boolean)"),
        (["127.0.0.1:9400"], "found"),
    ],
)
def test_metrics_listen_refuses_bad_input_in_one_sentence(written: object, said: str) -> None:
    with pytest.raises(ValueError) as raised:
        StationConfig.from_dict({"metrics_listen": written})
    message = str(raised.value)
    assert message.startswith("station.metrics_listen: ")
    assert said in message
    assert "\n" not in message and "Traceback" not in message


def test_metrics_are_off_by_default() -> None:
    assert StationConfig().metrics_listen is None
    assert StationConfig.from_dict({}).metrics_listen is None
    assert StationConfig.from_dict({"metrics_listen": None}).metrics_listen is None
    assert StationConfig.from_dict({"metrics_listen": "off"}).metrics_listen is None  # TOML


def test_a_listen_address_knows_loopback_and_its_text() -> None:
    assert parse_listen("9400").loopback and parse_listen("[::1]:1").loopback
    assert not parse_listen("0.0.0.0:9400").loopback
    assert parse_listen("[::1]:0").text(port=41000) == "[::1]:41000"


def test_a_port_in_use_is_said_in_one_sentence() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError) as raised:
            MetricsServer(ListenAddress("127.0.0.1", port), CollectorRegistry())
    assert raised.value.errno == errno.EADDRINUSE
    text = bind_problem(ListenAddress("127.0.0.1", port), raised.value, RETRY_BIND_S)
    assert f"port {port} is in use by another program" in text
    assert "engine runs on" in text and "\n" not in text
    not_here = bind_problem(
        ListenAddress("10.255.255.1", 9400), OSError(errno.EADDRNOTAVAIL, "x"), RETRY_BIND_S
    )
    assert "10.255.255.1 is no address of this machine" in not_here


# ---------------------------------------------------------------------- from typed readings
def tracked(job: int, gpus: tuple[int, ...], user: str, mig: str | None = None) -> TrackedAttempt:
    return TrackedAttempt(
        100 + job, job, f"job{job}", 1000 + job, "gpu", gpus, mig_slice=mig, user=user
    )


def test_device_readings_follow_dcgm_units_and_name_the_jobs_placed_there() -> None:
    reading = BackendReading(
        1000.0,
        5.0,
        gpus=(
            GpuReading(
                0,
                "GPU-a",
                A100,
                memory_used_mib=1000.0,
                memory_total_mib=40536.0,
                memory_free_mib=39000.0,
                kernel_active_pct=87.0,
                sm_activity_pct=42.5,
                power_w=250.0,
                energy_counter_j=1234.5,
                temperature_c=55.0,
                sm_clock_mhz=1410.0,
            ),
            GpuReading(1, "GPU-b", A100, lost=True),
            GpuReading(
                2,
                "GPU-c",
                A100,
                memory_used_mib=5000.0,
                mig_enabled=True,
                mig_devices=(
                    MigDevice(
                        0, "MIG-x", f"{A100} MIG 3g.20gb", 2, 0, 4000.0, 19968.0, 42, (), 15968.0
                    ),
                    MigDevice(1, "MIG-y", f"{A100} MIG 1g.5gb", 9, 0, 0.0, 4864.0, 14, (), 4864.0),
                ),
            ),
        ),
    )
    attempts = [
        tracked(3, (0,), "bob"),
        tracked(5, (0,), "ada"),
        tracked(6, (0,), "ada"),
        tracked(7, (2,), "cy", mig="MIG-x"),
        tracked(8, (), "dee"),  # a CPU job: on no device
    ]
    devices = device_readings(reading, attempts, {0: 99.0, 2: 10.0})
    # GPU 1 is lost: nothing for it, not even zeros
    assert [(d.device.gpu, d.device.mig_profile) for d in devices] == [
        (0, None),
        (2, None),
        (2, "3g.20gb"),
        (2, "1g.5gb"),
    ]
    whole, mig_gpu, slice_a, slice_b = devices
    assert whole.device == Device(0, "GPU-a", A100, jobs=(3, 5, 6), users=("ada", "bob"))
    assert (whole.gpu_util_pct, whole.sm_active) == (87.0, 0.425)  # SM activity as a ratio
    assert whole.energy_mj == 1234500.0 and whole.energy_j == 99.0
    assert (whole.fb_used_mib, whole.fb_free_mib) == (1000.0, 39000.0)
    assert mig_gpu.power_w is None and mig_gpu.gpu_util_pct is None  # absent, not 0
    assert mig_gpu.device.jobs == (7,)  # the GPU names the jobs on its slices too
    assert slice_a.device == Device(
        2, "GPU-c", A100, mig_profile="3g.20gb", mig_instance_id=2, jobs=(7,), users=("cy",)
    )
    assert (slice_a.fb_used_mib, slice_a.fb_free_mib, slice_a.power_w) == (4000.0, 15968.0, None)
    assert slice_b.device.jobs == () and slice_b.device.mig_instance_id == 9
    assert device_readings(None, attempts) == ()


def test_graphics_engine_and_tensor_activity_are_dcgm_ratios_from_gpm_or_utilization() -> None:
    """DCGM_FI_PROF_GR_ENGINE_ACTIVE from GPM's GRAPHICS_UTIL, else NVML's utilization (the
    documented fallback); DCGM_FI_PROF_PIPE_TENSOR_ACTIVE from GPM's ANY_TENSOR_UTIL only: an
    A100 read through NVML has none, and none is made up."""
    hopper = GpuReading(
        0, "GPU-h", "NVIDIA H100 80GB HBM3", kernel_active_pct=99.0,
        graphics_active_pct=97.5, tensor_active_pct=31.25, sm_activity_pct=40.0,
    )  # fmt: skip
    ampere = GpuReading(1, "GPU-a", A100, kernel_active_pct=87.0)
    devices = device_readings(BackendReading(1000.0, 5.0, gpus=(hopper, ampere)), [])
    assert (devices[0].gr_engine_active, devices[0].pipe_tensor_active) == (0.975, 0.3125)
    assert (devices[1].gr_engine_active, devices[1].pipe_tensor_active) == (0.87, None)
    snapshot = MetricsSnapshot("nvml", False, "host", "0", 1000.0, devices=devices)
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: snapshot))
    text = generate_latest(registry).decode()
    active = {
        s.labels["gpu"]: s.value
        for family in text_string_to_metric_families(text)
        if family.name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
        for s in family.samples
    }
    tensor = [line for line in text.splitlines() if line.startswith("DCGM_FI_PROF_PIPE_TENSOR")]
    assert active == {"0": 0.975, "1": 0.87}
    assert len(tensor) == 1 and 'gpu="0"' in tensor[0] and tensor[0].endswith(" 0.3125")
    assert (
        "# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active." in text
    )


def test_memory_health_is_exported_under_dcgm_exporters_names_one_series_per_gpu() -> None:
    """ECC counts, remapped rows and retired pages as dcgm-exporter names them, with no job
    labels (a GPU's counts); a count the GPU does not give is no series."""
    hopper = GpuReading(0, "GPU-h", "NVIDIA H100 80GB HBM3", health=GpuHealth(3, 1, 2, 1, True))
    volta = GpuReading(1, "GPU-v", "Tesla V100-SXM2-32GB", health=GpuHealth(retired_dbe=2))
    bare = GpuReading(2, "GPU-n", A100)  # no health read
    attempts = [tracked(9, (0,), "ada")]
    devices = device_readings(BackendReading(1000.0, 5.0, gpus=(hopper, volta, bare)), attempts)
    snapshot = MetricsSnapshot("nvml", False, "host", "0", 1000.0, devices=devices)
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: snapshot))
    text = generate_latest(registry).decode()
    got = {
        (s.name, s.labels["gpu"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith(("DCGM_FI_DEV_ECC", "DCGM_FI_DEV_RETIRED", "DCGM_FI_DEV_ROW"))
        or "REMAPPED" in family.name
        for s in family.samples
        if "hpc_job" not in s.labels
    }
    assert got == {
        ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "0"): 3.0,
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "0"): 1.0,
        ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "0"): 2.0,
        ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "0"): 1.0,
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "0"): 1.0,
        ("DCGM_FI_DEV_RETIRED_DBE", "1"): 2.0,
    }
    assert "# TYPE DCGM_FI_DEV_ROW_REMAP_FAILURE gauge" in text
    assert "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL untyped" in text  # its DCGM name kept
    health_lines = [line for line in text.splitlines() if "VOL_TOTAL{" in line]
    assert health_lines and not any("hpc_job" in line for line in health_lines)


def test_running_jobs_carry_their_energy_and_carbon_so_far() -> None:
    attempts = [tracked(4, (0,), "ada"), tracked(2, (), "bob")]
    usage = {104: AttemptUsage(104, 4, gpu_j=3_600_000.0, cpu_j=None)}
    jobs = running_jobs(attempts, usage, grid_g_per_kwh=500.0)
    assert jobs == (
        RunningJob(2, "job2", "bob", None, None, None),  # no figure yet: nothing exported
        RunningJob(4, "job4", "ada", 3_600_000.0, None, 500.0),  # 1 kWh at 500 g/kWh
    )


def test_job_counts_are_per_state_and_user_name() -> None:
    names = {1000: "ada", None: "me"}
    rows = [(1000, "queued", 2), (None, "running", 1), (1000, "running", 3)]
    counts = {(c.state, c.user): c.count for c in job_counts(rows, names.__getitem__)}
    assert counts == {
        **{(state, user): 0 for state in STATES for user in ("ada", "me")},  # 0s are series too
        ("queued", "ada"): 2,
        ("running", "ada"): 3,
        ("running", "me"): 1,
    }


def test_a_suspended_job_is_counted_suspended_not_running(tmp_path: Path) -> None:
    # the store's rows, as the exporter reads them: three running jobs, one suspended
    store = Store.open(tmp_path / "db")
    try:
        jobs = store.submit([JobSpec(name=f"j{i}", command=("true",)) for i in range(3)])
        attempts = [store.start_attempt(j.id, {"slot": "cpu:0"}, tmp_path) for j in jobs]
        store.set_suspended(jobs[0].id, attempts[0].id, 1.0, "suspended by ada (SIGSTOP)")
        rows = store.counts_by_owner()
    finally:
        store.close()
    counts = {(c.state, c.user): c.count for c in job_counts(rows, lambda uid: "ada")}
    assert counts == {
        **{(state, "ada"): 0 for state in STATES},
        ("running", "ada"): 2,
        ("suspended", "ada"): 1,
    }
    got = scrape(dataclasses.replace(snapshot_by_hand(), jobs=job_counts(rows, lambda uid: "ada")))
    assert ("gpudesk_jobs", {"state": "suspended", "user": "ada"}, 1.0) in got["gpudesk_jobs"]


def loader_view(
    name: str,
    cpu_s: float | None = None,
    saved_cpu_s: float | None = None,
    status: tuple[int, int, list[tuple[float, int]]] | None = None,
) -> LoaderView:
    """A dataset as the engine's loader summary lists it; `status`: its producer's batches
    made, handed out, and per consumer (batches per second, batch size); None: no report."""
    spec = LoaderSpec(name, "pkg:factory", {}, 32, 2, 0, 4, True, None, None, {})
    report = None
    if status is not None:
        produced, delivered, consumers = status
        report = LoaderStatus(
            name=name, pid=4242, dataset="pkg:factory", dataset_len=1000, batch_size=32,
            batches_per_epoch=32, workers=2, worker_processes=2, seed=0, stream=[0, 0],
            produced=produced, makeups_produced=0, bytes_written=0,
            consumers_total=len(consumers), delivered_total=delivered, slots=4, slots_used=0,
            slot_bytes=0, cpu_s=cpu_s or 0.0, uptime_s=60.0, managed=True, selection=None,
            consumers=[
                LoaderConsumer(
                    pid=5000 + i, batch_size=size, epoch=0, position=None, delivered=0,
                    batches_per_s=rate, held_slots=0, makeups_left=0,
                )
                for i, (rate, size) in enumerate(consumers)
            ],
        )  # fmt: skip
    return LoaderView(
        name=name,
        pid=4242 if report else None,
        spec=spec,
        running=report is not None,
        restarts=0,
        cpu_s=cpu_s,
        unshared_cpu_s=None,
        saved_cpu_s=saved_cpu_s,
        status=report,
    )


def test_loader_figures_sum_their_consumers() -> None:
    summary = [
        loader_view("images", 12.0, 30.5, (100, 250, [(4.0, 32), (2.0, 64)])),
        loader_view("text"),
    ]
    images, text = loader_figures(summary)
    assert (images.batches, images.delivered, images.consumers) == (100, 250, 2)
    assert (images.batches_per_s, images.samples_per_s) == (6.0, 256.0)
    assert (images.cpu_s, images.saved_cpu_s, images.running) == (12.0, 30.5, True)
    assert (text.batches, text.batches_per_s, text.running) == (None, None, False)


def test_decision_times_fall_in_le_buckets() -> None:
    activity = EngineActivity()
    for seconds in (0.00005, 0.001, 0.001, 0.3, 7.0):
        activity.decided(seconds)
    times = activity.decision_times()
    assert times.bounds == DECISION_BUCKETS_S
    cumulative = dict(zip(times.bounds, times.cumulative, strict=False))
    assert cumulative[0.0001] == 1 and cumulative[0.001] == 3  # le: 0.001 counts in 0.001
    assert cumulative[0.25] == 3 and cumulative[0.5] == 4 and cumulative[1.0] == 4
    assert times.cumulative[-1] == times.count == 5  # +Inf
    assert times.sum_s == pytest.approx(7.30205)


# --------------------------------------------------------------------------- rendering
def snapshot_by_hand() -> MetricsSnapshot:
    activity = EngineActivity()
    activity.placed("mps")
    activity.placed("mps")
    activity.placed("mig")
    activity.oom_recovered()
    activity.decided(0.002)
    return MetricsSnapshot(
        backend="sim:dgx-station-a100",
        simulated=True,
        hostname="station1",
        version="0.1.0",
        taken_at=1000.0,
        devices=(
            DeviceReading(
                Device(0, "GPU-a", A100, jobs=(3, 5), users=("ada", "bob")),
                gpu_util_pct=87.0,
                sm_active=0.425,
                fb_used_mib=1000.0,
                fb_free_mib=39000.0,
                power_w=250.0,
                energy_mj=1234500.0,
                temperature_c=55.0,
                sm_clock_mhz=1410.0,
                energy_j=99.5,
            ),
            DeviceReading(
                Device(1, "GPU-b", A100), gpu_util_pct=0.0, fb_used_mib=0.0, fb_free_mib=40536.0
            ),
            DeviceReading(
                Device(
                    1,
                    "GPU-b",
                    A100,
                    mig_profile="3g.20gb",
                    mig_instance_id=2,
                    jobs=(7,),
                    users=("cy",),
                ),
                fb_used_mib=4000.0,
                fb_free_mib=15968.0,
            ),
        ),
        running=(RunningJob(3, "lr0.1", "ada", 1800.0, 200.0, 0.26),),
        jobs=(JobCount("queued", "ada", 2), JobCount("running", "ada", 1)),
        placements=tuple(activity.placements.items()),
        oom_recoveries=activity.oom_recoveries,
        decisions=activity.decision_times(),
        loaders=loader_figures([loader_view("images", 12.0, 30.5, (100, 250, [(4.0, 32)]))]),
    )


def scrape(snapshot: MetricsSnapshot | None) -> dict[str, list]:
    """The snapshot as text exposition, parsed back: family name -> its samples."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snapshot))
    text = generate_latest(registry).decode()
    families = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family
    return {
        name: [(s.name, s.labels, s.value) for s in f.samples] for name, f in families.items()
    } | {
        "__types__": {name: f.type for name, f in families.items()},
        "__text__": text,
    }


def test_a_snapshot_renders_as_dcgm_exporter_names_and_labels() -> None:
    got = scrape(snapshot_by_hand())
    whole = {
        "gpu": "0",
        "UUID": "GPU-a",
        "device": "nvidia0",
        "modelName": A100,
        "Hostname": "station1",
        "hpc_job": "3,5",
        "user": "ada,bob",
        "simulated": "true",
    }
    assert got["DCGM_FI_DEV_GPU_UTIL"][0] == ("DCGM_FI_DEV_GPU_UTIL", whole, 87.0)
    assert got["DCGM_FI_PROF_SM_ACTIVE"] == [("DCGM_FI_PROF_SM_ACTIVE", whole, 0.425)]
    assert got["DCGM_FI_DEV_POWER_USAGE"] == [("DCGM_FI_DEV_POWER_USAGE", whole, 250.0)]
    assert got["DCGM_FI_DEV_GPU_TEMP"] == [("DCGM_FI_DEV_GPU_TEMP", whole, 55.0)]
    assert got["DCGM_FI_DEV_SM_CLOCK"] == [("DCGM_FI_DEV_SM_CLOCK", whole, 1410.0)]
    energy = got["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    # a counter keeps one series per GPU whatever runs there: no job labels on it
    counter = {k: v for k, v in whole.items() if k not in ("hpc_job", "user")}
    assert energy == [("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", counter, 1234500.0)]  # mJ
    # GPU 1 has no power reading: no sample, not a 0; an idle GPU says no job and no user
    idle = next(s for s in got["DCGM_FI_DEV_GPU_UTIL"] if s[1]["gpu"] == "1")
    assert (idle[1]["hpc_job"], idle[1]["user"], idle[2]) == ("", "", 0.0)
    assert "GPU_I_PROFILE" not in idle[1] and "GPU_I_ID" not in idle[1]  # as dcgm-exporter
    # the MIG device: its framebuffer, with dcgm-exporter's MIG labels and its own job
    mig = [s for s in got["DCGM_FI_DEV_FB_USED"] if "GPU_I_PROFILE" in s[1]]
    assert len(mig) == 1 and mig[0][2] == 4000.0
    assert (mig[0][1]["GPU_I_PROFILE"], mig[0][1]["GPU_I_ID"], mig[0][1]["hpc_job"]) == (
        "3g.20gb",
        "2",
        "7",
    )
    assert len(got["DCGM_FI_DEV_FB_FREE"]) == 3 and len(got["DCGM_FI_DEV_GPU_UTIL"]) == 2
    types = got["__types__"]
    assert all(types[name] == "gauge" for name, _, _ in DCGM_GAUGES)
    text = got["__text__"]
    assert (
        "# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ)."
        in text
    )
    assert "\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in text  # its DCGM name, no _total


def test_a_snapshot_renders_gpudesk_metrics_in_base_units() -> None:
    got = scrape(snapshot_by_hand())
    assert got["gpudesk_station_info"] == [
        (
            "gpudesk_station_info",
            {
                "backend": "sim:dgx-station-a100",
                "simulated": "true",
                "hostname": "station1",
                "version": "0.1.0",
            },
            1.0,
        )
    ]
    assert got["gpudesk_jobs"] == [
        ("gpudesk_jobs", {"state": "queued", "user": "ada"}, 2.0),
        ("gpudesk_jobs", {"state": "running", "user": "ada"}, 1.0),
    ]
    placements = {s[1]["mode"]: s[2] for s in got["gpudesk_placements"]}
    assert placements == {"cpu": 0.0, "exclusive": 0.0, "naive": 0.0, "mps": 2.0, "mig": 1.0}
    assert {s[0] for s in got["gpudesk_placements"]} == {"gpudesk_placements_total"}
    assert got["gpudesk_oom_recoveries"] == [("gpudesk_oom_recoveries_total", {}, 1.0)]
    assert got["__types__"]["gpudesk_placements"] == "counter"
    job = {"job_id": "3", "job_name": "lr0.1", "user": "ada"}
    assert got["gpudesk_job_energy_joules"] == [
        ("gpudesk_job_energy_joules", {**job, "source": "gpu"}, 1800.0),
        ("gpudesk_job_energy_joules", {**job, "source": "cpu"}, 200.0),
    ]
    assert got["gpudesk_job_co2e_grams"] == [("gpudesk_job_co2e_grams", job, 0.26)]
    assert got["gpudesk_gpu_energy_joules"] == [
        (
            "gpudesk_gpu_energy_joules_total",
            {"gpu": "0", "uuid": "GPU-a", "model_name": A100, "hostname": "station1"},
            99.5,
        )
    ]
    histogram = {(s[0], s[1].get("le")): s[2] for s in got["gpudesk_placement_decision_seconds"]}
    assert histogram[("gpudesk_placement_decision_seconds_bucket", "0.001")] == 0.0
    assert histogram[("gpudesk_placement_decision_seconds_bucket", "0.0025")] == 1.0
    assert histogram[("gpudesk_placement_decision_seconds_bucket", "+Inf")] == 1.0
    assert histogram[("gpudesk_placement_decision_seconds_count", None)] == 1.0
    assert histogram[("gpudesk_placement_decision_seconds_sum", None)] == pytest.approx(0.002)
    loader = {"dataset": "images"}
    assert got["gpudesk_loader_batches"] == [("gpudesk_loader_batches_total", loader, 100.0)]
    assert got["gpudesk_loader_samples_per_second"] == [
        ("gpudesk_loader_samples_per_second", loader, 128.0)
    ]
    assert got["gpudesk_loader_cpu_saved_seconds"] == [
        ("gpudesk_loader_cpu_saved_seconds", loader, 30.5)
    ]
    assert got["gpudesk_telemetry_sample_timestamp_seconds"][0][2] == 1000.0
    for name, kind in got["__types__"].items():  # a help text on every family
        exposed = f"{name}_total" if kind == "counter" else name
        assert re.search(rf"^# HELP {exposed} \S", got["__text__"], re.MULTILINE), name


def test_real_hardware_carries_no_simulated_label_and_nothing_before_a_snapshot() -> None:
    snapshot = snapshot_by_hand()
    real = MetricsSnapshot(
        backend="nvml", simulated=False, hostname="h", version="0", devices=snapshot.devices
    )
    got = scrape(real)
    assert all("simulated" not in s[1] for s in got["DCGM_FI_DEV_FB_USED"])
    assert got["gpudesk_station_info"][0][1]["simulated"] == "false"
    assert "gpudesk_telemetry_sample_timestamp_seconds" not in got  # no sample yet
    assert scrape(None)["__text__"] == ""
