"""Host-side readings through psutil: the machine's CPU and memory, and what each job's process
group (its whole process tree, unless a process left the group with setsid) uses. CPU time and
I/O bytes are cumulative; a rate is the change between two samples."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

import msgspec
import psutil


class HostSample(msgspec.Struct, frozen=True):
    taken_at: float
    cpu_pct: float  # since the previous psutil.cpu_percent() call of this process
    cores: int
    memory_used: int
    memory_total: int
    load_avg: tuple[float, float, float]
    busy_seconds: float  # CPU time spent not idle, summed over all cores, since boot


class GroupSample(msgspec.Struct, frozen=True):
    """One job attempt's process group, summed over its live processes."""

    pgid: int
    processes: int
    cpu_seconds: float
    rss_bytes: int
    io_read_bytes: int = 0  # storage I/O, where the kernel reports it for these processes
    io_write_bytes: int = 0


def sample_host() -> HostSample:
    memory = psutil.virtual_memory()
    times = psutil.cpu_times()
    idle = times.idle + getattr(times, "iowait", 0.0)
    return HostSample(
        taken_at=time.monotonic(),
        cpu_pct=psutil.cpu_percent(interval=None),
        cores=psutil.cpu_count() or 1,
        memory_used=memory.total - memory.available,
        memory_total=memory.total,
        load_avg=os.getloadavg(),
        busy_seconds=sum(times) - idle,
    )


def group_processes(
    pgids: Iterable[int], attrs: tuple[str, ...] = ()
) -> dict[int, list[psutil.Process]]:
    """Live processes (not zombies) of each process group, in one pass over the process table;
    `attrs` are read on the way (`proc.info`). Only members are read: a busy host has hundreds
    of processes, and reading each one's /proc files every sample would cost more than the rest
    of the sampler."""
    members: dict[int, list[psutil.Process]] = {pgid: [] for pgid in pgids}
    if not members:
        return members
    for pid in psutil.pids():
        try:
            pgid = os.getpgid(pid)
        except (ProcessLookupError, PermissionError):
            continue
        if pgid not in members:
            continue
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                info = proc.as_dict(["status", *attrs])
        except psutil.Error:
            continue
        if info["status"] != psutil.STATUS_ZOMBIE:
            proc.info = info  # the attribute process_iter sets, for callers used to it
            members[pgid].append(proc)
    return members


def sample_groups(pgids: Iterable[int]) -> dict[int, GroupSample]:
    """CPU seconds, resident memory and I/O bytes summed over each group's live processes."""
    samples = {}
    attrs = ("cpu_times", "memory_info", "io_counters")
    for pgid, procs in group_processes(pgids, attrs).items():
        cpu_s = sum(_cpu_seconds(p.info["cpu_times"]) for p in procs if p.info["cpu_times"])
        rss = sum(p.info["memory_info"].rss for p in procs if p.info["memory_info"])
        io = [p.info["io_counters"] for p in procs if p.info.get("io_counters")]
        samples[pgid] = GroupSample(
            pgid,
            len(procs),
            cpu_s,
            rss,
            sum(c.read_bytes for c in io),
            sum(c.write_bytes for c in io),
        )
    return samples


def _cpu_seconds(times: Any) -> float:  # psutil.Process.cpu_times()
    # Children the process waited for count too: a shell's finished commands stay in the total.
    return (
        times.user
        + times.system
        + getattr(times, "children_user", 0.0)
        + getattr(times, "children_system", 0.0)
    )


def cpu_percent(before: GroupSample | None, after: GroupSample, seconds: float) -> float | None:
    """CPU use of a group between two samples, in % of one core (None without a baseline)."""
    if before is None or seconds <= 0:
        return None
    return max(0.0, (after.cpu_seconds - before.cpu_seconds) / seconds * 100.0)
