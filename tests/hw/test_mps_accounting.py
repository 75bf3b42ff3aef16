"""Jobs under MPS as a real driver reports them, through the NVML backend and the monitor.

What NVML answers under MPS was seen on an H200 (driver 580.159.04, 2026-11-29,
bench/results/h200-2026-11-29/run2/hardware_truth.json, `checks.mps_engine.meter_windows`): the
compute-process list holds the MPS server (about 66 MiB) and the clients; the process-utilization
samples name the server alone, its smUtil the whole GPU's. tests/fakes/fake_pynvml.py answers so.
"""

from __future__ import annotations

import pytest
from fakes.fake_pynvml import FakeGpu, FakeNvml, FakeProcess

from gpudesk.api.models import Snapshot
from gpudesk.cli.top_view import TopView, render_frame
from gpudesk.hw.telemetry.energy import GpuEnergyMeter
from gpudesk.hw.telemetry.model import BackendReading
from gpudesk.hw.telemetry.monitor import Monitor, TrackedAttempt
from gpudesk.hw.telemetry.nvml import NvmlBackend
from gpudesk.hw.telemetry.rapl import RaplReader
from gpudesk.screens.widgets.gpu_card import job_shares

# pids no process has here: the monitor takes each for its own process group, as it does for
# the simulator's jobs
CLIENT_A, CLIENT_B, NAIVE = 2**22 + 1, 2**22 + 2, 2**22 + 3
SERVER = 797
# as NVML named it on the H200 (bench/results/h200-2026-11-29/nvml_mps_names.json)
SERVER_NAME = "nvidia-cuda-mps-server"


def mps_server(pid: int = SERVER) -> FakeProcess:
    return FakeProcess(pid, 66.0, name=SERVER_NAME, mps="server")


def client(pid: int) -> FakeProcess:
    return FakeProcess(pid, 1448.0, name="/opt/torch/.venv/bin/python3", mps="client")


def attempt(attempt_id: int, pgid: int, slot: str = "gpu:0/mps") -> TrackedAttempt:
    return TrackedAttempt(attempt_id, attempt_id + 100, f"j{attempt_id}", pgid, slot, (0,))


def opened(fake: FakeNvml) -> NvmlBackend:
    backend = NvmlBackend(module=fake)
    backend.open()
    return backend


def sample_intervals(
    fake: FakeNvml,
    monitor: Monitor,
    attempts: list[TrackedAttempt],
    sm_by_pid: dict[int, int],
    intervals: int = 4,
) -> Snapshot | None:
    """`intervals` seconds of the processes keeping these SM shares, each read by the monitor;
    the last view it made."""
    view = None
    for _ in range(intervals):
        for pid, sm in sm_by_pid.items():
            fake.add_sample(0, pid, sm_util=sm)
        fake.advance(1.0)
        view = monitor.ingest(monitor.collect(attempts))
    return view


def test_the_fake_answers_as_the_h200_did_under_mps() -> None:
    fake = FakeNvml([FakeGpu(processes=[mps_server(), client(746), client(747)])])
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    listed = fake.nvmlDeviceGetComputeRunningProcesses(handle)
    assert [(p.pid, p.usedGpuMemory) for p in listed] == [
        (797, 66 * 2**20),
        (746, 1448 * 2**20),
        (747, 1448 * 2**20),
    ]
    assert [p.pid for p in fake.nvmlDeviceGetMPSComputeRunningProcesses(handle)] == [746, 747]
    fake.add_sample(0, 746, sm_util=60, mem_util=10)
    fake.add_sample(0, 747, sm_util=55, mem_util=9)
    (sample,) = fake.nvmlDeviceGetProcessUtilization(handle, 0)
    assert (sample.pid, sample.smUtil, sample.memUtil) == (797, 100, 19)  # capped at 100
    assert fake.nvmlSystemGetProcessName(797) == SERVER_NAME


def test_the_backend_names_the_mps_server_and_its_clients() -> None:
    fake = FakeNvml([FakeGpu(processes=[mps_server(), client(746), FakeProcess(900, 800.0)])])
    backend = opened(fake)
    fake.add_sample(0, 746, sm_util=70)
    fake.add_sample(0, 900, sm_util=20)
    processes = {p.pid: p for p in backend.read().gpus[0].processes}
    assert {pid: getattr(p, "mps", None) for pid, p in processes.items()} == {
        797: "server",
        746: "client",
        900: None,
    }
    # the driver's figures as they are: the server's SM is the clients', a client has none
    assert {pid: p.sm_pct for pid, p in processes.items()} == {797: 70.0, 746: None, 900: 20.0}
    backend.read()
    backend.read()
    # each process's name is asked once, a client's never
    assert fake.count("nvmlSystemGetProcessName") == 2
    # the clients end; the server stays (it does until its control daemon stops it)
    fake.gpus[0].processes = [mps_server()]
    (alone,) = backend.read().gpus[0].processes
    assert (alone.pid, getattr(alone, "mps", None)) == (797, "server")


def test_mps_clients_share_the_servers_sm_and_a_time_sliced_tenant_keeps_its_own() -> None:
    """Two MPS clients and a plain (time-sliced) process on one GPU. The server's samples say
    the clients kept 60 % of the SMs busy, the plain one's own say 40 %: the energy goes 30/30/40,
    where the driver's per-pid figures alone would give the plain job all of it."""
    fake = FakeNvml(
        [
            FakeGpu(
                power_w=400.0,
                processes=[
                    mps_server(),
                    client(CLIENT_A),
                    client(CLIENT_B),
                    FakeProcess(NAIVE, 2000.0),
                ],
            )
        ]
    )
    monitor = Monitor(opened(fake), rapl=RaplReader("/nonexistent/*"))
    attempts = [attempt(1, CLIENT_A), attempt(2, CLIENT_B), attempt(3, NAIVE, "gpu:0/naive")]
    view = sample_intervals(
        fake, monitor, attempts, {CLIENT_A: 35, CLIENT_B: 25, NAIVE: 40}, intervals=6
    )
    a, b, naive = monitor.usage[1], monitor.usage[2], monitor.usage[3]
    assert a.gpu_j is not None and b.gpu_j is not None and naive.gpu_j is not None
    total = a.gpu_j + b.gpu_j + naive.gpu_j
    assert total == pytest.approx(400.0 * 5, rel=0.01)
    # the clients' 60 % evenly (NVML has no per-client figure), the plain job its own 40 %
    assert a.gpu_j == pytest.approx(b.gpu_j) == pytest.approx(0.3 * total, rel=0.01)
    assert naive.gpu_j == pytest.approx(0.4 * total, rel=0.01)
    assert a.split == b.split == naive.split == "mps share"
    # no SM figure is made up for a client: only the plain job has one of its own
    assert a.gpu_sm_mean_pct is None and b.gpu_sm_mean_pct is None
    assert naive.gpu_sm_mean_pct == pytest.approx(40.0)

    assert view is not None
    (gpu,) = view.gpus
    server = next(p for p in gpu.processes if p.pid == SERVER)
    assert (server.mps, server.job_id) == ("server", None)
    shares = dict(job_shares(gpu.processes))
    assert "MPS" in shares and "other" not in shares
    frame = render_frame(TopView(view, "direct", None, None))
    assert f"MPS server (pid {SERVER})" in frame and f"pid {SERVER}," not in frame


def test_without_a_known_server_mps_clients_and_a_plain_tenant_split_evenly() -> None:
    """NVML lists MPS clients, but the server's name cannot be read (NoPermission): its samples
    are a stranger's, nobody's share can be told, and the plain job must not take it all."""
    fake = FakeNvml(
        [
            FakeGpu(
                power_w=300.0,
                processes=[mps_server(), client(CLIENT_A), FakeProcess(NAIVE, 2000.0)],
                errors={"nvmlSystemGetProcessName": "NoPermission"},
            )
        ]
    )
    monitor = Monitor(opened(fake), rapl=RaplReader("/nonexistent/*"))
    attempts = [attempt(1, CLIENT_A), attempt(3, NAIVE, "gpu:0/naive")]
    sample_intervals(fake, monitor, attempts, {CLIENT_A: 60, NAIVE: 40})
    a, naive = monitor.usage[1], monitor.usage[3]
    assert a.gpu_j == pytest.approx(naive.gpu_j)
    assert a.split == naive.split == "even"


def test_mps_clients_alone_split_evenly_and_say_so() -> None:
    fake = FakeNvml([FakeGpu(power_w=300.0, processes=[mps_server(), client(CLIENT_A)])])
    fake.gpus[0].processes.append(client(CLIENT_B))
    monitor = Monitor(opened(fake), rapl=RaplReader("/nonexistent/*"))
    attempts = [attempt(1, CLIENT_A), attempt(2, CLIENT_B)]
    sample_intervals(fake, monitor, attempts, {CLIENT_A: 80, CLIENT_B: 10})
    a, b = monitor.usage[1], monitor.usage[2]
    assert a.gpu_j == pytest.approx(b.gpu_j)
    assert a.split == b.split == "even"
    assert a.gpu_sm_mean_pct is None and b.gpu_sm_mean_pct is None


def test_an_mps_server_left_alone_does_not_keep_the_gpu_from_idling() -> None:
    """The server outlives its clients (the H200 listed it alone for 10 s after both jobs
    ended): the GPU is idle meanwhile, and its idle power is learned."""
    fake = FakeNvml([FakeGpu(power_w=77.7, processes=[mps_server()])])
    backend = opened(fake)
    meter = GpuEnergyMeter()
    for _ in range(3):
        fake.advance(1.0)
        reading = backend.read()
        assert isinstance(reading, BackendReading)
        meter.update(reading, busy=())
    assert meter.idle_power_w(0) == pytest.approx(77.7)
