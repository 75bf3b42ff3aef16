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


def group_processes(pgids: Iterable[int],
                    attrs: tuple[str, ...] = ()) -> dict[int, list[psutil.Process]]:
    """Live processes (not zombies) of each process group, in one pass over the process table;
    `attrs` are read on the way (`proc.info`)."""
    members: dict[int, list[psutil.Process]] = {pgid: [] for pgid in pgids}
    if not members:
        return members
    for proc in psutil.process_iter(["status", *attrs]):
        try:
            pgid = os.getpgid(proc.pid)
        except (ProcessLookupError, PermissionError):
            continue
        if pgid in members and proc.info["status"] != psutil.STATUS_ZOMBIE:
            members[pgid].append(proc)
    return members


def sample_groups(pgids: Iterable[int]) -> dict[int, GroupSample]:
    """CPU seconds and resident memory summed over each group's live processes."""
    samples = {}
    for pgid, procs in group_processes(pgids, ("cpu_times", "memory_info")).items():
        cpu_s = sum(p.info["cpu_times"].user + p.info["cpu_times"].system
                    for p in procs if p.info["cpu_times"])
        rss = sum(p.info["memory_info"].rss for p in procs if p.info["memory_info"])
        samples[pgid] = GroupSample(pgid, len(procs), cpu_s, rss)
    return samples


def cpu_percent(before: GroupSample | None, after: GroupSample, seconds: float) -> float | None:
    """CPU use of a group between two samples, in % of one core (None without a baseline)."""
    if before is None or seconds <= 0:
        return None
    return max(0.0, (after.cpu_seconds - before.cpu_seconds) / seconds * 100.0)
