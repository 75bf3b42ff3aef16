"""Which process a pid names: the pid and when it started, counted from the kernel's boot.

A pid is used again once its process is gone, so a process that other processes watch (a job's
wrapper in the store, a loader's producer in its info file, a consumer in its producer's table)
is recorded as its pid and its start. psutil's create_time() is no stable start: it is the
kernel's start tick (field 22 of /proc/PID/stat, clock ticks since boot, fixed for the
process's life) plus the boot's time as /proc/stat's `btime` says *at the moment it is read*,
and `btime` is the wall clock less the uptime, in whole seconds (proc(5)). It moves whenever the
wall clock is stepped (NTP, `date -s`, a VM resumed from a snapshot) and, under NTP's slewing,
by one second whenever the drift carries it across a whole second. A start recorded before such
a move and compared, within 0.01-0.05 s, by a process that reads `btime` after it said a live
process had gone: an engine restarted after a clock step settled its running jobs as lost, and
a consumer took its producer for dead.

Here the start is the tick itself, which no clock step moves. It means something only within
one boot: what keeps a start across a reboot (an info file in a member's home, the job store)
keeps the boot's id beside it (gpudesk.hw.boottime.boot_id) and is read as gone in another boot.
"""

from __future__ import annotations

import os

# A start in the older form, psutil's create_time() in seconds since the epoch (what stores and
# info files written before this module hold), is larger than any uptime: 1e9 s is 31 years.
_EPOCH_FORM = 1e9
# create_time() is `btime` (whole seconds) plus ticks: the older form's comparisons allowed this.
_EPOCH_TOLERANCE = 0.05

_HZ = os.sysconf("SC_CLK_TCK")  # clock ticks a second


def _stat(pid: int) -> tuple[str, int] | None:
    """Process `pid`'s state letter and start tick, from /proc/PID/stat; None when there is none
    (or /proc hides it: hidepid)."""
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
        # The command's name (field 2) is in parentheses and may hold spaces and ')': the
        # fields after it start two bytes past the last ')'. State is field 3, the start 22.
        fields = raw[raw.rindex(b")") + 2 :].split()
        return fields[0].decode("ascii", "replace"), int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def started(pid: int) -> float | None:
    """When process `pid` started, in seconds from this boot; None when there is no such process."""
    stat = _stat(pid)
    return None if stat is None else stat[1] / _HZ


def runs(pid: int, start: object = None) -> bool:
    """True while process `pid` runs (a zombie does not) and, where `start` is given, is the one
    that started then: a value from started() in this boot, or an older record's create_time().
    A start that is no number (a damaged record) names no process."""
    stat = _stat(pid)
    if stat is None or stat[0] in ("Z", "X"):
        return False
    if start is None:
        return True
    if isinstance(start, bool) or not isinstance(start, int | float):
        return False
    if start >= _EPOCH_FORM:
        import psutil  # only for records in the older form: a job's loader imports this module

        try:
            return abs(psutil.Process(pid).create_time() - start) <= _EPOCH_TOLERANCE
        except psutil.Error:
            return False
    return abs(stat[1] / _HZ - start) < 0.5 / _HZ
