"""XID errors through NVML's events: the backend registers each GPU's event set when it opens and
drains it without waiting at each read (gpudesk.hw.telemetry.xid), against the fake pynvml's
event API (tests/fakes/fake_pynvml.py)."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from fakes.fake_pynvml import FakeGpu, FakeMig, FakeNvml, real

from gpudesk.hw.telemetry.model import XidEvent
from gpudesk.hw.telemetry.nvml import NvmlBackend
from gpudesk.hw.telemetry.xid import describe, xid_message, xid_name


def opened(fake: FakeNvml) -> NvmlBackend:
    backend = NvmlBackend(module=fake)
    backend.open()
    return backend


def test_an_injected_xid_is_the_last_xid_of_its_gpu_only() -> None:
    fake = FakeNvml([FakeGpu(), FakeGpu(), FakeGpu()])
    backend = opened(fake)
    # registered when the backend opened, before any read: an XID from then on is seen
    assert fake.count("nvmlDeviceRegisterEvents") == 3
    assert fake.last_args["nvmlDeviceRegisterEvents"] == (real.nvmlEventTypeXidCriticalError,)
    assert fake.inject_xid(1, 79) == 1
    first = backend.read().gpus
    assert [g.last_xid for g in first] == [0, 79, 0]
    assert first[1].xids == (XidEvent(79),) and first[0].xids == first[2].xids == ()
    assert all("xid" not in g.unavailable for g in first)
    second = backend.read().gpus
    assert [g.last_xid for g in second] == [0, 79, 0]  # the last one, kept
    assert all(g.xids == () for g in second)  # each XID is new in one reading only


def test_nothing_injected_is_0_and_an_xid_before_opening_is_not_seen() -> None:
    """As dcgm-exporter: 0 when no XID came since it started. NVML delivers an XID only to a
    set registered before it: one from before the backend opened is not there."""
    fake = FakeNvml([FakeGpu(), FakeGpu()])
    assert fake.inject_xid(0, 48) == 0  # no set registered yet: it reaches none
    backend = opened(fake)
    for _ in range(3):
        gpus = backend.read().gpus
    assert [(g.last_xid, g.xids) for g in gpus] == [(0, ()), (0, ())]


def test_several_xids_between_reads_come_in_order_with_their_mig_instance() -> None:
    fake = FakeNvml([FakeGpu(mig_enabled=True, mig_devices=[FakeMig("MIG-a")])])
    backend = opened(fake)
    fake.inject_xid(0, 13, gpu_instance_id=1, compute_instance_id=0)
    fake.inject_xid(0, 31)
    (gpu,) = backend.read().gpus
    assert gpu.xids == (XidEvent(13, 1, 0), XidEvent(31)) and gpu.last_xid == 31
    assert xid_message(0, gpu.xids[0], gpu.mig_enabled) == (
        "GPU 0 (MIG GPU instance 1, compute instance 0): XID 13 (Graphics Engine Exception)"
    )
    assert xid_message(0, gpu.xids[1], gpu.mig_enabled) == "GPU 0: XID 31 (GPU memory page fault)"


def test_a_gpu_without_events_has_no_xid_and_no_error(caplog: pytest.LogCaptureFixture) -> None:
    """NotSupported at registration (a vGPU without events): no last XID, listed unavailable,
    logged once at INFO, never asked again; its set is freed. Its neighbour is unaffected."""
    fake = FakeNvml([FakeGpu(event_types=0), FakeGpu()])
    with caplog.at_level(logging.INFO, logger="gpudesk.telemetry"):
        backend = opened(fake)
        for _ in range(3):
            bare, other = backend.read().gpus
    assert bare.last_xid is None and "xid" in bare.unavailable and other.last_xid == 0
    assert fake.count("nvmlDeviceRegisterEvents", gpu=0) == 1
    assert fake.event_sets_freed == 1  # the one its registration refused
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in caplog.records if "xid" in r.getMessage()] == [
        "GPU 0: xid is not available (Not Supported); not asked again"
    ]


def test_the_fake_refuses_events_on_a_mig_device_and_a_type_the_gpu_lacks() -> None:
    """What the fake models of NVML: a MIG device's own handle takes no events (they come
    through its parent GPU), nor does a GPU for a type it does not give."""
    fake = FakeNvml([FakeGpu(mig_enabled=True, mig_devices=[FakeMig("MIG-a")])])
    fake.nvmlInit()
    gpu = fake.nvmlDeviceGetHandleByIndex(0)
    mig = fake.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
    event_set = fake.nvmlEventSetCreate()
    with pytest.raises(real.NVMLError_NotSupported):
        fake.nvmlDeviceRegisterEvents(mig, real.nvmlEventTypeXidCriticalError, event_set)
    with pytest.raises(real.NVMLError_NotSupported):
        fake.nvmlDeviceRegisterEvents(gpu, real.nvmlEventTypePowerSourceChange, event_set)
    fake.nvmlDeviceRegisterEvents(gpu, real.nvmlEventTypeXidCriticalError, event_set)
    fake.inject_xid(0, 79)
    data = fake.nvmlEventSetWait_v2(event_set, 0)
    assert isinstance(data, real.c_nvmlEventData_t)
    assert (data.eventType, data.eventData) == (real.nvmlEventTypeXidCriticalError, 79)
    assert ctypes_address(data.device) == ctypes_address(gpu)
    with pytest.raises(real.NVMLError_Timeout):
        fake.nvmlEventSetWait_v2(event_set, 0)
    fake.nvmlEventSetFree(event_set)


def ctypes_address(pointer: Any) -> int | None:
    import ctypes

    return ctypes.cast(pointer, ctypes.c_void_p).value


def test_reading_with_no_event_waiting_does_not_wait() -> None:
    """The sampler never blocks on XIDs: every wait is asked with a timeout of 0, and with no
    event waiting each returns at once. The fake sleeps a wait's timeout as NVML does, so a
    backend that waited would be seen waiting (checked first)."""
    fake = FakeNvml([FakeGpu() for _ in range(4)])
    backend = opened(fake)
    started = time.perf_counter()
    with pytest.raises(real.NVMLError_Timeout):
        fake.nvmlEventSetWait_v2(backend._devices[0].xid.event_set, 50)  # type: ignore[union-attr]
    assert time.perf_counter() - started >= 0.05

    waits: list[tuple[int, float]] = []
    wait = fake.nvmlEventSetWait_v2

    def timed(event_set: Any, timeoutms: int) -> Any:
        begun = time.perf_counter()
        try:
            return wait(event_set, timeoutms)
        finally:
            waits.append((timeoutms, time.perf_counter() - begun))

    fake.nvmlEventSetWait_v2 = timed  # type: ignore[method-assign]
    reads = []
    for _ in range(20):
        begun = time.perf_counter()
        backend.read()
        reads.append(time.perf_counter() - begun)
    assert len(waits) == 20 * 4 and {timeout for timeout, _ in waits} == {0}
    spent = sorted(seconds for _, seconds in waits)
    # microseconds each; the bounds leave room for a loaded machine's scheduling, far below
    # the 50 ms a wait of 50 took above
    median = spent[len(spent) // 2]
    assert median <= 0.001 and spent[-1] <= 0.025, f"waits took {median=:.6f}, {spent[-1]=:.6f} s"
    print(
        f"\nXID drain with no event, 4 GPUs: wait call median {spent[len(spent) // 2] * 1e6:.0f} "
        f"us, max {spent[-1] * 1e6:.0f} us; whole read median "
        f"{sorted(reads)[len(reads) // 2] * 1000:.2f} ms"
    )


def test_the_xid_that_comes_with_a_lost_gpu_is_kept() -> None:
    fake = FakeNvml([FakeGpu(), FakeGpu()])
    backend = opened(fake)
    backend.read()
    fake.inject_xid(1, 79)
    fake.lose(1)
    first = backend.read().gpus[1]
    assert first.lost and first.last_xid == 79 and first.xids == (XidEvent(79),)
    later = backend.read().gpus[1]
    assert later.lost and later.last_xid == 79 and later.xids == ()


def test_close_frees_every_event_set() -> None:
    fake = FakeNvml([FakeGpu(), FakeGpu(), FakeGpu(event_types=0)])
    backend = opened(fake)
    backend.read()
    backend.close()
    assert fake.event_sets_freed == 3  # two registered, one refused at registration
    assert fake._event_sets == {}


def test_xid_names_are_nvidias_and_dcgm_exporters() -> None:
    assert describe(79) == "XID 79 (GPU has fallen off the bus)"
    assert describe(150) == "XID 150"
    assert (xid_name(0), xid_name(48), xid_name(150)) == (
        "No Error",
        "Double Bit ECC Error",
        "Unknown Error",
    )
