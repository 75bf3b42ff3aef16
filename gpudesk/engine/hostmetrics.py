"""Host-side readings through psutil: the machine's CPU and memory, and what each job's process
group uses. CPU use is cumulative (seconds); a percentage is the change between two samples."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class HostSample:
    taken_at: float
    cpu_pct: float  # since the previous psutil.cpu_percent() call of this process
    cores: int
    memory_used: int
    memory_total: int
    load_avg: tuple[float, float, float]


@dataclass(frozen=True)
class GroupSample:
    """One job attempt's process group, summed over its live processes."""

    pgid: int
    processes: int
    cpu_seconds: float
    rss_bytes: int


def sample_host() -> HostSample:
    memory = psutil.virtual_memory()
    return HostSample(
        taken_at=time.monotonic(),
        cpu_pct=psutil.cpu_percent(interval=None),
        cores=psutil.cpu_count() or 1,
        memory_used=memory.total - memory.available,
        memory_total=memory.total,
        load_avg=os.getloadavg(),
    )


def sample_groups(pgids: Iterable[int]) -> dict[int, GroupSample]:
    """One pass over the process table for all the groups asked for."""
    wanted = set(pgids)
    totals: dict[int, list[float]] = {pgid: [0, 0.0, 0] for pgid in wanted}
    if not wanted:
        return {}
    for proc in psutil.process_iter(["cpu_times", "memory_info", "status"]):
        try:
            pgid = os.getpgid(proc.pid)
        except (ProcessLookupError, PermissionError):
            continue
        if pgid not in wanted or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        cpu, memory = proc.info["cpu_times"], proc.info["memory_info"]
        entry = totals[pgid]
        entry[0] += 1
        entry[1] += (cpu.user + cpu.system) if cpu else 0.0
        entry[2] += memory.rss if memory else 0
    return {pgid: GroupSample(pgid, int(n), cpu_s, int(rss))
            for pgid, (n, cpu_s, rss) in totals.items()}


def cpu_percent(before: GroupSample | None, after: GroupSample, seconds: float) -> float | None:
    """CPU use of a group between two samples, in % of one core (None without a baseline)."""
    if before is None or seconds <= 0:
        return None
    return max(0.0, (after.cpu_seconds - before.cpu_seconds) / seconds * 100.0)
