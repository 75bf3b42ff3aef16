"""A GPU's memory health through NVML (`GpuHealth`): its volatile ECC error counts
(nvmlDeviceGetTotalEccErrors), its remapped rows (nvmlDeviceGetRemappedRows: Ampere and newer)
and its retired pages (nvmlDeviceGetRetiredPages: the GPUs before that). Each read goes through
the backend's error policy (`query`): a GPU that does not give one (ECC off, page retirement on
a GPU that remaps rows) has None there, asked once.

XID errors are not read: NVML gives no "last XID" to ask for, only events delivered to an event
set registered before they happen (nvmlDeviceRegisterEvents, nvmlEventSetWait); see
docs/metrics.md."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpudesk.hw.telemetry.model import GpuHealth

Query = Callable[..., Any]  # query(metric, fn, *args): fn's answer, or None under the policy


def read_health(nv: Any, handle: Any, query: Query) -> GpuHealth | None:
    """The GPU's health counts; None when it gives none of them."""
    corrected = query(
        "ecc",
        nv.nvmlDeviceGetTotalEccErrors,
        handle,
        nv.NVML_MEMORY_ERROR_TYPE_CORRECTED,
        nv.NVML_VOLATILE_ECC,
    )
    uncorrected = query(
        "ecc",
        nv.nvmlDeviceGetTotalEccErrors,
        handle,
        nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        nv.NVML_VOLATILE_ECC,
    )
    rows = query("remapped_rows", nv.nvmlDeviceGetRemappedRows, handle)
    single = query(
        "retired_pages",
        nv.nvmlDeviceGetRetiredPages,
        handle,
        nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
    )
    double = query(
        "retired_pages",
        nv.nvmlDeviceGetRetiredPages,
        handle,
        nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
    )
    health = GpuHealth(
        ecc_sbe_volatile=None if corrected is None else int(corrected),
        ecc_dbe_volatile=None if uncorrected is None else int(uncorrected),
        remapped_correctable=None if rows is None else int(rows[0]),
        remapped_uncorrectable=None if rows is None else int(rows[1]),
        remap_failure=None if rows is None else bool(rows[3]),
        retired_sbe=None if single is None else len(single),
        retired_dbe=None if double is None else len(double),
    )
    return None if health == GpuHealth() else health
