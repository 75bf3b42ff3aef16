"""XID errors, as NVML delivers them: events on an event set registered beforehand.

NVML has no "last XID" to ask for. A GPU's XID errors reach only an event set on which
nvmlDeviceRegisterEvents(handle, nvmlEventTypeXidCriticalError, set) was called before they
happened; nvmlEventSetWait_v2(set, timeout) then hands them out one at a time, each an
nvmlEventData_t whose `eventData` is the XID number (on a GPU in MIG mode `gpuInstanceId` and
`computeInstanceId` name the instance it is attributable to), and raises NVMLError_Timeout when
none is waiting. With a timeout of 0 it never sleeps.

So the NVML backend registers one set per GPU when it opens (`XidWatch.open`) and drains it at
each read with a timeout of 0 (`XidWatch.drain`): the sampler never waits on it. What it keeps
is what dcgm-exporter exports as DCGM_FI_DEV_XID_ERRORS (dcgm-exporter's default-counters.csv:
"Value of the last XID error encountered"; DCGM's dcgm_fields.h: "The value is the specific XID
error"): the last XID since the engine started, 0 before the first. A GPU that answers
NotSupported at registration (a vGPU without events, say) has none.

`XID_NAMES`: the well-known XIDs by the names NVIDIA's Xid catalog gives them
(https://docs.nvidia.com/deploy/xid-errors/, "Xid Error Listing"), which dcgm-exporter's
`err_msg` label uses too (its internal/pkg/collector/xid_errors.go is built from that page).
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

import msgspec

from gpudesk.hw.telemetry.model import BackendReading, XidEvent

# dcgm-exporter's err_msg for 0 (no XID since it started) and for an XID it has no name for.
NO_XID_NAME = "No Error"
UNKNOWN_XID_NAME = "Unknown Error"

XID_NAMES: dict[int, str] = {
    13: "Graphics Engine Exception",  # most often a job's own bug (an illegal access)
    31: "GPU memory page fault",  # most often a job's illegal address
    43: "GPU stopped processing",  # a job's fault; the GPU goes on
    45: (
        "Preemptive cleanup, due to previous errors -- "
        "Most likely to see when running multiple cuda"
    ),
    48: "Double Bit ECC Error",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    140: "Unrecovered ECC Error",
    154: "GPU Recovery Action Changed",
}

# At most this many events are taken from one GPU's set per read: a storm of XIDs delays a
# sample by this many calls that do not wait, the rest come with the next read.
MAX_EVENTS_PER_READ = 64


def xid_name(xid: int) -> str:
    """The XID's name as dcgm-exporter's err_msg label gives it ("No Error" for 0)."""
    if xid == 0:
        return NO_XID_NAME
    return XID_NAMES.get(xid, UNKNOWN_XID_NAME)


def describe(xid: int) -> str:
    """The XID and its name: XID 79 (GPU has fallen off the bus); XID 150 where unnamed."""
    name = XID_NAMES.get(xid)
    return f"XID {xid}" if name is None else f"XID {xid} ({name})"


def xid_message(gpu: int, event: XidEvent, mig_enabled: bool | None = False) -> str:
    """The engine's line for an XID: "GPU 2: XID 79 (GPU has fallen off the bus)"; on a GPU in
    MIG mode, the instance it is attributable to where NVML names one."""
    where = f"GPU {gpu}"
    if mig_enabled and event.gpu_instance_id is not None:
        where += f" (MIG GPU instance {event.gpu_instance_id}"
        if event.compute_instance_id is not None:
            where += f", compute instance {event.compute_instance_id}"
        where += ")"
    return f"{where}: {describe(event.xid)}"


def xid_messages(reading: BackendReading) -> list[str]:
    """A line for each XID the reading brought, GPU by GPU, oldest first (docs/metrics.md)."""
    return [
        xid_message(gpu.index, event, gpu.mig_enabled) for gpu in reading.gpus for event in gpu.xids
    ]


def _instance(value: int, nv: Any) -> int | None:
    """An event's GPU or compute instance id; None where NVML marks it not available."""
    return None if value == nv.NVML_VALUE_NOT_AVAILABLE_uint.value else int(value)


class XidWatch(msgspec.Struct):
    """One GPU's XID event set and what came through it since it was registered."""

    event_set: Any
    last: int = 0  # the last XID delivered (0: none yet)
    fresh: list[XidEvent] = msgspec.field(default_factory=list)  # delivered since the last `take`

    @classmethod
    def open(cls, nv: Any, handle: Any) -> XidWatch:
        """A set with the GPU's XID events registered; NotSupported (or any error) is raised
        after the set is freed."""
        event_set = nv.nvmlEventSetCreate()
        try:
            nv.nvmlDeviceRegisterEvents(handle, nv.nvmlEventTypeXidCriticalError, event_set)
        except BaseException:
            with suppress(Exception):
                nv.nvmlEventSetFree(event_set)
            raise
        return cls(event_set)

    def drain(self, nv: Any) -> int:
        """Take the events waiting on the set, without waiting for one (timeout 0); how many
        were taken."""
        taken = 0
        while taken < MAX_EVENTS_PER_READ:
            try:
                data = nv.nvmlEventSetWait_v2(self.event_set, 0)
            except nv.NVMLError_Timeout:
                break
            taken += 1
            if data.eventType != nv.nvmlEventTypeXidCriticalError:
                continue  # only XIDs are registered; anything else is not ours to count
            event = XidEvent(
                int(data.eventData),
                _instance(data.gpuInstanceId, nv),
                _instance(data.computeInstanceId, nv),
            )
            self.last = event.xid
            self.fresh.append(event)
        return taken

    def take(self) -> tuple[XidEvent, ...]:
        """The XIDs delivered since the last call, oldest first."""
        fresh, self.fresh = tuple(self.fresh), []
        return fresh

    def close(self, nv: Any) -> None:
        with suppress(Exception):
            nv.nvmlEventSetFree(self.event_set)
