"""The telemetry pieces that need no hardware: the simulated stations, energy accounting, RAPL,
the monitor's station view and GPU placement."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from test_jobs_protocol_policy import record  # same folder: on sys.path under pytest

from gpudesk.core.backend_names import check_backend_name, parse_sim_name
from gpudesk.core.station import StationConfig
from gpudesk.hw.telemetry.backend import make_backend
from gpudesk.hw.telemetry.energy import (
    AttemptUsage,
    GpuEnergyMeter,
    Interval,
    Occupant,
    attribute_cpu,
    attribute_gpu,
    split_interval,
    summarize,
)
from gpudesk.hw.telemetry.model import (
    BackendReading,
    BackendUnavailable,
    GpuInfo,
    GpuProcess,
    GpuReading,
    JobLoad,
)
from gpudesk.hw.telemetry.monitor import (
    JOB_POWER_SERIES,
    JOB_SIMULATED_SERIES,
    Monitor,
    TrackedAttempt,
)
from gpudesk.hw.telemetry.rapl import RaplReader
from gpudesk.hw.telemetry.sim import SimBackend
from gpudesk.policy.policy import FifoPolicy, GpuState, StationView, Tenant
from gpudesk.units import carbon_g


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# --------------------------------------------------------------- backends
@pytest.mark.parametrize(
    "name",
    [
        "auto",
        "nvml",
        "none",
        "sim:dgx-station-a100",
        "sim:h100",
        "sim:h200",
        "sim:h100x8",
        "sim:dgx-station-a100x2",
    ],
)
def test_backend_names_accepted(name: str) -> None:
    assert check_backend_name(name) == name


@pytest.mark.parametrize("name", ["cuda", "sim:", "sim:a40", "sim:h100x0", "sim:h100x99", 3, None])
def test_backend_names_rejected(name: object) -> None:
    with pytest.raises(ValueError, match="expected one of auto, nvml, none"):
        check_backend_name(name)


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("sim:h100x0", "found 0"),
        ("sim:h100x99", "found 99"),
        ("sim:h100x100000", "found 100000"),
        ("sim:h100x" + "9" * 5000, "found 999999999999... (5000 digits)"),
    ],
)
def test_a_count_out_of_range_is_said_whatever_its_length(name: str, shown: str) -> None:
    with pytest.raises(ValueError, match=r"has 1 to 64 GPUs, " + re.escape(shown)):
        parse_sim_name(name)


def test_sim_names_parse() -> None:
    assert parse_sim_name("sim:h100x8") == ("h100", 8)
    assert parse_sim_name("sim:dgx-station-a100") == ("dgx-station-a100", None)


def test_make_backend_builds_each_kind() -> None:
    assert make_backend("none").name == "none"
    station = make_backend("sim:dgx-station-a100")
    assert station.simulated and len(station.inventory()) == 4
    assert all(g.name == "NVIDIA A100-SXM4-40GB" and g.mig_capable for g in station.inventory())
    assert len(make_backend("sim:h100x8").inventory()) == 8
    assert make_backend("sim:h200").inventory()[0].memory_total_mib > 140_000


def test_auto_is_none_without_a_driver() -> None:
    # This machine has no NVIDIA driver: nvmlInit fails with LibraryNotFound.
    assert make_backend("auto").name == "none"


# ------------------------------------------------------------- simulator
def test_sim_load_follows_the_jobs_placed_on_it() -> None:
    clock = Clock()
    sim = SimBackend("dgx-station-a100", clock=clock)
    idle = sim.read()
    assert all(g.memory_used_mib == 0 and g.sm_activity_pct == 0 for g in idle.gpus)
    assert idle.gpus[0].power_w == pytest.approx(sim.model.idle_w)
    sim.set_load([JobLoad(1, 4242, (0,), 10.0, 80.0), JobLoad(2, 4343, (1, 2), None, None)])
    clock.now += 10
    gpus = sim.read().gpus
    assert gpus[0].memory_used_mib == pytest.approx(512 + 10 * 1024)
    assert 75 <= gpus[0].sm_activity_pct <= 85
    assert gpus[0].kernel_active_pct >= gpus[0].sm_activity_pct  # kernel-active overstates
    assert [p.pid for p in gpus[0].processes] == [4242]
    assert gpus[1].processes[0].pid == gpus[2].processes[0].pid == 4343
    assert gpus[3].memory_used_mib == 0 and not gpus[3].processes
    assert gpus[0].power_w > gpus[1].power_w > gpus[3].power_w  # 80% SM > default 50% > idle
    # The counter integrates power: 10 s at idle power, then it keeps counting.
    assert gpus[3].energy_counter_j == pytest.approx(10 * sim.model.idle_w)
    clock.now += 5
    assert sim.read().gpus[0].energy_counter_j > gpus[0].energy_counter_j


def test_sim_time_slices_an_oversubscribed_gpu() -> None:
    clock = Clock()
    sim = SimBackend("h100", clock=clock)
    sim.set_load([JobLoad(1, 10, (0,), 1.0, 90.0), JobLoad(2, 11, (0,), 1.0, 60.0)])
    clock.now += 10
    (gpu,) = sim.read().gpus
    assert gpu.sm_activity_pct == pytest.approx(100.0)
    shares = [p.sm_pct for p in gpu.processes]
    assert sum(shares) == pytest.approx(100.0, abs=0.2) and shares[0] > shares[1]


def test_sim_memory_fills_over_the_first_seconds() -> None:
    clock = Clock()
    sim = SimBackend("h100", clock=clock)
    sim.set_load([JobLoad(1, 10, (0,), 8.0, 50.0)])
    first = sim.read().gpus[0].memory_used_mib
    clock.now += 1
    second = sim.read().gpus[0].memory_used_mib
    clock.now += 5
    third = sim.read().gpus[0].memory_used_mib
    assert first < second < third == pytest.approx(512 + 8 * 1024)


# ----------------------------------------------------------------- energy
def reading(t: float, *gpus: GpuReading) -> BackendReading:
    return BackendReading(taken_at=t, monotonic=t, gpus=gpus)


def test_meter_uses_counter_deltas_and_falls_back_to_integrated_power() -> None:
    meter = GpuEnergyMeter()
    meter.update(
        reading(
            0,
            GpuReading(0, "a", "x", power_w=100, energy_counter_j=5000),
            GpuReading(1, "b", "y", power_w=100),
        )
    )
    intervals = meter.update(
        reading(
            2,
            GpuReading(0, "a", "x", power_w=300, energy_counter_j=5500),
            GpuReading(1, "b", "y", power_w=300),
        )
    )
    assert intervals[0] == Interval(2, 500, "counter", 200.0)  # idle learned from the idle read
    assert intervals[1].energy_j == pytest.approx(400) and intervals[1].source == "integrated"
    assert (meter.energy_j(0), meter.source(0)) == (500, "counter")
    assert (meter.energy_j(1), meter.source(1)) == (400, "integrated")


def test_meter_survives_a_counter_reset_and_a_lost_gpu() -> None:
    meter = GpuEnergyMeter(default_idle_w=50)
    meter.update(reading(0, GpuReading(0, "a", "x", power_w=100, energy_counter_j=9000)))
    # A driver reload resets the counter: that interval is integrated instead of negative.
    got = meter.update(reading(1, GpuReading(0, "a", "x", power_w=100, energy_counter_j=10)))
    assert got[0].energy_j == pytest.approx(100) and got[0].source == "integrated"
    assert meter.update(reading(2, GpuReading(0, "a", "x", lost=True))) == {}
    assert meter.energy_j(0) == pytest.approx(100)


def test_idle_baseline_is_learned_only_while_nothing_runs() -> None:
    meter = GpuEnergyMeter()
    busy_gpu = GpuReading(0, "a", "x", power_w=300, processes=(GpuProcess(7, 100.0),))
    meter.update(reading(0, busy_gpu))
    assert meter.idle_power_w(0) is None
    meter.update(reading(1, GpuReading(0, "a", "x", power_w=60)), busy=[0])  # placed: not idle
    assert meter.idle_power_w(0) is None
    meter.update(reading(2, GpuReading(0, "a", "x", power_w=60)))
    assert meter.idle_power_w(0) == 60
    assert meter.learned_idle([GpuReading(0, "a", "x")]) == {"a": 60}


def test_split_is_exclusive_by_sm_share_or_even() -> None:
    interval = Interval(1.0, 100.0, "counter", 50.0)
    assert split_interval(interval, [Occupant(1, None)]) == [(1, 1.0, "exclusive")]
    assert split_interval(interval, [Occupant(1, 30.0), Occupant(2, 10.0)]) == [
        (1, 0.75, "sm share"),
        (2, 0.25, "sm share"),
    ]
    assert split_interval(interval, [Occupant(1, None), Occupant(2, None)]) == [
        (1, 0.5, "even"),
        (2, 0.5, "even"),
    ]
    assert split_interval(interval, [Occupant(1, 0.0), Occupant(2, 0.0)])[0] == (1, 0.5, "sm share")


def test_attempt_usage_accumulates_and_marks_estimates() -> None:
    usage = {1: AttemptUsage(1, 10), 2: AttemptUsage(2, 20)}
    attribute_gpu(usage, {0: Interval(1.0, 300.0, "counter", 60.0)}, {0: [Occupant(1, None)]})
    attribute_gpu(
        usage,
        {0: Interval(1.0, 300.0, "counter", 60.0)},
        {0: [Occupant(1, 20.0), Occupant(2, 60.0)]},
    )
    first = usage[1].figures(475.0)
    assert first.gpu_j == 375.0 and first.gpu_idle_j == 75.0
    assert first.gpu_above_idle_j == 300.0
    assert first.split == "sm share" and first.estimate is True
    assert usage[2].gpu_j == 225.0
    assert first.carbon_g == pytest.approx(carbon_g(375.0, 475.0), abs=1e-3)
    attribute_cpu(usage, 100.0, {1: 3.0, 2: 1.0}, host_busy_s=8.0)
    assert usage[1].cpu_j == pytest.approx(37.5) and usage[2].cpu_j == pytest.approx(12.5)


def test_unknown_idle_baseline_stays_unknown() -> None:
    usage = {1: AttemptUsage(1, 10)}
    attribute_gpu(usage, {0: Interval(1.0, 300.0, "integrated", None)}, {0: [Occupant(1, None)]})
    attribute_gpu(usage, {0: Interval(1.0, 300.0, "counter", 60.0)}, {0: [Occupant(1, None)]})
    data = usage[1].figures(475.0)
    assert data.gpu_j == 600 and data.gpu_idle_j is None and data.gpu_above_idle_j is None
    assert data.gpu_source == "counter+integrated"


def test_summarize_adds_attempts() -> None:
    a = AttemptUsage(1, 10, gpu_j=100.0, gpu_idle_j=10.0, gpu_source="counter", split="exclusive")
    b = AttemptUsage(
        2, 10, gpu_j=50.0, gpu_idle_j=5.0, gpu_source="counter", split="even", cpu_s=2.0
    )
    total = summarize([a.figures(400.0), b.figures(400.0)], 400.0)
    assert total is not None
    assert (total.gpu_j, total.gpu_idle_j, total.split, total.estimate) == (
        150.0,
        15.0,
        "even",
        True,
    )
    assert total.carbon_g == pytest.approx(150 / 3.6e6 * 400, abs=1e-3)
    assert summarize([], 400.0) is None


def test_carbon() -> None:
    assert carbon_g(3.6e6, 475.0) == 475.0
    assert carbon_g(None, 475.0) is None


# ------------------------------------------------------------------- RAPL
def make_rapl(root: Path, energy_uj: int, max_uj: int = 1000) -> Path:
    domain = root / "intel-rapl:0"
    domain.mkdir(parents=True, exist_ok=True)
    (domain / "name").write_text("package-0\n")
    (domain / "max_energy_range_uj").write_text(f"{max_uj}\n")
    (domain / "energy_uj").write_text(f"{energy_uj}\n")
    sub = root / "intel-rapl:0:0"  # a sub-domain (core): must not be counted twice
    sub.mkdir(exist_ok=True)
    (sub / "name").write_text("core\n")
    (sub / "energy_uj").write_text("5\n")
    return domain


def test_rapl_reads_package_energy_and_handles_wrap(tmp_path: Path) -> None:
    domain = make_rapl(tmp_path, 900)
    rapl = RaplReader(str(tmp_path / "intel-rapl:*"))
    assert rapl.available and rapl.read() == 0.0
    (domain / "energy_uj").write_text("100\n")  # wrapped past max_energy_range_uj = 1000
    assert rapl.read() == pytest.approx(200 / 1e6)


def test_rapl_unreadable_says_why(tmp_path: Path) -> None:
    assert RaplReader(str(tmp_path / "nothing*")).read() is None
    domain = make_rapl(tmp_path, 5)
    os.chmod(domain / "energy_uj", 0)
    rapl = RaplReader(str(tmp_path / "intel-rapl:*"))
    if os.geteuid() != 0:  # root reads a mode-0 file anyway
        assert not rapl.available and "not readable" in (rapl.problem or "")


# ---------------------------------------------------------------- monitor
def test_monitor_view_credits_each_job_its_gpu_energy() -> None:
    clock = Clock()
    sim = SimBackend("dgx-station-a100", clock=clock)
    monitor = Monitor(sim, grid_g_per_kwh=500.0)
    me = os.getpgid(0)
    attempts = [
        TrackedAttempt(1, 10, "train", me, "gpu:0", (0,), 8.0, 60.0, 0.0),
        TrackedAttempt(2, 11, "other", 2**22 + 7, "gpu:1", (1,), 4.0, 30.0, 0.0),
    ]
    for _ in range(6):
        view = monitor.ingest(monitor.collect(attempts))
        clock.now += 1.0
    assert (view.backend, view.simulated) == ("sim:dgx-station-a100", True)
    gpu0, gpu1, gpu2 = view.gpus[:3]
    assert gpu0.jobs == [10] and gpu1.jobs == [11] and gpu2.jobs == []
    assert gpu0.processes[0].job_id == 10
    assert gpu0.energy_j is not None and gpu2.energy_j is not None
    assert gpu0.energy_source == "counter" and gpu0.energy_j > gpu2.energy_j > 0
    train = view.jobs[0]
    assert train.gpu_memory_mib == pytest.approx(512 + 8 * 1024)
    assert train.processes >= 1 and train.rss_mib is not None and train.rss_mib > 0
    energy = train.energy
    assert energy.split == "exclusive" and not energy.estimate
    # Exclusive: the job's energy is the GPU's counter delta since it was first seen.
    assert energy.gpu_j == pytest.approx(gpu0.energy_j, rel=1e-3)
    assert energy.gpu_idle_j == pytest.approx(5 * sim.model.idle_w, rel=1e-3)
    final = monitor.finish(1)
    assert final is not None and final.gpu_j == pytest.approx(energy.gpu_j, rel=1e-3)
    # A sample collected before the attempt ended must not bring it back.
    monitor.ingest(monitor.collect(attempts), running={2})
    assert 1 not in monitor.usage and 2 in monitor.usage


def test_a_job_on_a_mig_slice_counts_its_gpu_memory_once() -> None:
    """The backend lists a MIG GPU's processes on the GPU and again on their MIG device; a job's
    GPU memory and SM share count each process once (the recorded desk data showed it doubled)."""
    clock = Clock()
    sim = SimBackend("dgx-station-a100", clock=clock, mig={3: ["3g.20gb", "3g.20gb"]})
    monitor = Monitor(sim)
    job = TrackedAttempt(
        1, 10, "mig", 2**22 + 9, "gpu:3/3g.20gb", (3,), 8.0, 30.0, 0.0, sim.mig_uuid(3, 0)
    )
    for _ in range(5):
        view = monitor.ingest(monitor.collect([job]))
        clock.now += 1.0
    gpu3 = view.gpus[3]
    assert [p.pid for p in gpu3.mig_devices[0].processes] == [2**22 + 9]
    assert [p.pid for p in gpu3.processes] == [2**22 + 9]  # listed twice by design
    (mig_job,) = view.jobs
    assert mig_job.gpu_memory_mib == pytest.approx(512 + 8 * 1024)
    assert mig_job.gpu_sm_pct == pytest.approx(gpu3.processes[0].sm_pct)


def test_monitor_splits_a_shared_gpu_by_sm_share() -> None:
    clock = Clock()
    monitor = Monitor(SimBackend("h100", clock=clock))
    attempts = [
        TrackedAttempt(1, 10, "a", 2**22 + 1, "gpu:0", (0,), 2.0, 60.0, 0.0),
        TrackedAttempt(2, 11, "b", 2**22 + 2, "gpu:0", (0,), 2.0, 20.0, 0.0),
    ]
    for _ in range(8):
        monitor.ingest(monitor.collect(attempts))
        clock.now += 1.0
    a, b = monitor.usage[1], monitor.usage[2]
    assert a.split == b.split == "sm share"
    assert a.gpu_j == pytest.approx(3 * b.gpu_j, rel=0.1)
    # each job's share of the GPU's power goes with its series (what `show --plot` draws):
    # together the GPU's power, split as its energy is
    averages = monitor.drain_averages()
    share_a = averages.jobs[(10, 1, JOB_POWER_SERIES)].value
    share_b = averages.jobs[(11, 2, JOB_POWER_SERIES)].value
    assert share_a is not None and share_b is not None
    assert share_a == pytest.approx(3 * share_b, rel=0.1)
    assert share_a + share_b == pytest.approx(averages.gpus[(0, "power_w")].value, rel=0.1)
    assert averages.jobs[(10, 1, JOB_SIMULATED_SERIES)].value == 1  # the GPUs were simulated


def test_a_telemetry_restart_stores_the_window_it_cuts_short(tmp_path: Path) -> None:
    """A station change restarts telemetry with a fresh monitor: the means of the window not
    stored yet are stored then, not lost with the old monitor (a job's last points)."""
    from gpudesk.core.jobs import JobSpec
    from gpudesk.engine.state import CurrentStation
    from gpudesk.engine.station.telemetry_sink import TelemetrySink
    from gpudesk.engine.store.database import Store

    store = Store.open(tmp_path / "db")
    (job,) = store.submit([JobSpec(name="j", command=("true",))])
    attempt = store.start_attempt(job.id, {"slot": "gpu:0"}, tmp_path / "jobs")
    station = CurrentStation(store, StationConfig(backend="sim:a100-40gb"))
    sink = TelemetrySink(store, station, lambda: None, lambda view: None, lambda: None)
    try:
        sink.monitor.averages.add_job(job.id, attempt.id, "cpu_pct", 50.0)
        sink.restart()
        assert [v for _, v in store.job_series(job.id, "cpu_pct")] == [50.0]
    finally:
        sink.close()
        store.close()


class BrokenBackend:
    name = "nvml"
    simulated = False

    def __init__(self) -> None:
        self.opens = 0

    def open(self) -> None:
        self.opens += 1
        raise BackendUnavailable("no NVIDIA driver answers (NVML Shared Library Not Found)")

    def inventory(self) -> list[GpuInfo]:
        return []

    def read(self) -> BackendReading:
        raise AssertionError("never opened")

    def set_load(self, loads: object) -> None:
        pass

    def close(self) -> None:
        pass


def test_monitor_with_an_unavailable_backend_shows_a_banner_and_retries_later() -> None:
    backend = BrokenBackend()
    monitor = Monitor(backend)
    first = monitor.ingest(monitor.collect())
    second = monitor.ingest(monitor.collect())
    assert first.gpus == [] and "no NVIDIA driver" in (first.banner or "")
    assert second.banner == first.banner
    assert backend.opens == 1  # not retried on every sample
    assert first.host.memory_total_mib > 0


# -------------------------------------------------------------- placement
def gpu_station(
    count: int = 4, busy: tuple[int, ...] = (), lost: tuple[int, ...] = ()
) -> StationView:
    gpus = tuple(
        GpuState(
            i,
            f"GPU-{i}",
            40536.0,
            lost=i in lost,
            tenants=(Tenant(100 + i, "exclusive", 1024.0, 50.0),) if i in busy else (),
        )
        for i in range(count)
    )
    return StationView(StationConfig(slots=2), cores=8, backend="nvml", gpu_states=gpus)


def test_fifo_places_gpu_jobs_exclusively_and_cpu_jobs_on_slots() -> None:
    station = gpu_station(busy=(1,))
    decision = FifoPolicy().place([record(1, gpus=2), record(2), record(3, gpus=1)], station)
    placed = {p.job_id: p for p in decision.placements}
    assert placed[1].gpus == (0, 2) and placed[1].slot == "gpu:0,2"
    assert placed[1].env["CUDA_VISIBLE_DEVICES"] == "GPU-0,GPU-2"
    assert placed[1].mode == "exclusive" and placed[1].env_defaults == {"OMP_NUM_THREADS": "4"}
    assert placed[2].slot == "cpu:0"
    assert placed[3].gpus == (3,)


def test_fifo_gpu_jobs_do_not_overtake_and_lost_gpus_are_skipped() -> None:
    station = gpu_station(lost=(0,), busy=(1,))
    decision = FifoPolicy().place([record(1, gpus=3), record(2, gpus=1)], station)
    assert decision.placements == [] and decision.rejections == []
    wait = FifoPolicy().explain_wait(
        record(2, gpus=1), [record(1, gpus=3), record(2, gpus=1)], station
    )
    assert wait == "waiting for 1 GPU (2 of 3 free, 1 queued ahead of it)"


def test_fifo_rejects_impossible_gpu_jobs_but_waits_while_gpus_are_unreadable() -> None:
    station = gpu_station(2)
    decision = FifoPolicy().place([record(1, gpus=3), record(2, gpus=1, memory_gb=80.0)], station)
    (reason,) = [r.reason for r in decision.rejections]
    assert "only 2" in reason  # an 80 GB hint is no reason: whole GPUs, one each, anyway
    assert [p.job_id for p in decision.placements] == [2]
    blind = StationView(StationConfig(), cores=2, backend="nvml", gpu_problem="no driver")
    assert FifoPolicy().place([record(1, gpus=1)], blind).rejections == []
    assert "cannot be read" in FifoPolicy().explain_wait(record(1, gpus=1), [], blind)


def test_simulated_gpus_hide_real_devices_from_the_job() -> None:
    gpus = tuple(GpuState(i, f"GPU-SIM{i}", 40536.0) for i in range(2))
    station = StationView(
        StationConfig(), cores=4, backend="sim:x", gpu_states=gpus, simulated=True
    )
    (placement,) = FifoPolicy().place([record(1, gpus=1)], station).placements
    assert placement.env["CUDA_VISIBLE_DEVICES"] == ""
    assert placement.env["GPUDESK_SIMULATED_GPUS"] == "0"


def test_sim_mig_layout_reports_each_job_under_its_slice() -> None:
    clock = Clock()
    sim = SimBackend("dgx-station-a100", clock=clock, mig={3: ["3g.20gb", "2g.10gb"]})
    sim.set_load([JobLoad(1, 77, (3,), 4.0, 20.0, sim.mig_uuid(3, 1))])
    clock.now += 5
    gpu = sim.read().gpus[3]
    assert gpu.mig_enabled and [d.name.rsplit(" ", 1)[-1] for d in gpu.mig_devices] == [
        "3g.20gb",
        "2g.10gb",
    ]
    assert [p.pid for p in gpu.mig_devices[1].processes] == [77]
    assert gpu.mig_devices[1].memory_used_mib == pytest.approx(512 + 4 * 1024)
    assert gpu.mig_devices[0].processes == () and gpu.processes[0].mig_device == 1
