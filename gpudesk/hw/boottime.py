"""The clock a job's time limit runs on: CLOCK_BOOTTIME, not the wall clock.

The wall clock (time.time()) is stepped by NTP, an admin's `date -s`, a VM resumed from a
snapshot: measured on it, a +2 h step ended a `--time 60s` job after 7 s as "timed out", and a
−2 h step let a `--time 15s` job run 45 s and succeed. CLOCK_BOOTTIME only moves forward, at
the rate of real time, from the kernel's boot (clock_gettime(2); unlike CLOCK_MONOTONIC it also
counts time suspended, when the job held its GPUs all the same). It is one clock across engine
restarts as long as the machine has not rebooted: an attempt records its start on it with the
boot's id (/proc/sys/kernel/random/boot_id, random(4)), and an engine that finds another boot id
knows the attempt's processes cannot have survived the reboot, so no reading across boots is
ever compared.
"""

from __future__ import annotations

import functools
import time

import msgspec

BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"


class BootStamp(msgspec.Struct, frozen=True):
    """A moment on CLOCK_BOOTTIME (`at`, seconds) of the boot `boot_id`."""

    boot_id: str
    at: float


def now() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


@functools.cache
def boot_id() -> str | None:
    """This boot's id (constant while the process lives), or None where /proc does not say."""
    try:
        with open(BOOT_ID_FILE) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def stamp() -> BootStamp | None:
    """Now, on this boot's CLOCK_BOOTTIME; None where the boot cannot be told apart."""
    boot = boot_id()
    return None if boot is None else BootStamp(boot, now())


def start_in_this_boot(boot: str | None, at: float | None) -> float | None:
    """A stored start (`boot`, `at`) as a reading of this boot's CLOCK_BOOTTIME, or None when it
    was taken in another boot (or not at all) and cannot be compared with now()."""
    if boot is None or at is None or boot != boot_id():
        return None
    return at
