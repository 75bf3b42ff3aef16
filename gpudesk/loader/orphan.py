"""When a producer stops by itself: after `--idle-exit` seconds without a consumer, and, for one
the engine started (`--managed`), once its engine is gone and no consumer has read it for
ORPHAN_GRACE_S.

A managed producer outlives an engine that stops while jobs read it (`gpudesk engine stop` keeps
them running, and their producer with them). Once those jobs end, nobody would stop it: it would
hold its shared memory until some later engine adopted and stopped it. The engine starts it as its
direct child and names itself in ENV_ENGINE_PID, so "its engine is gone" is "its parent is not that
pid any more": the kernel reparents an orphan to init or a subreaper. Comparing `os.getppid()`
with a number the engine gave has no pid-reuse hazard (a live parent is never reused), and an
engine that died before the producer looked (it logged starting it, then stopped 50 ms later) is
seen as gone at once, which a `getppid()` taken at start would not see.

A producer a restarted engine adopted (through its info file) is not that engine's child either:
it counts as orphaned too. That is harmless: it stops only with no consumer for the grace, and
the engine starts again a producer a job needs (`services/loaders.py` `tick`).

It says so while it serves on (`IdleExit.orphan`, a LoaderOrphan): in its info file and its
status, so in `gpudesk loader status` and the desk; `orphan_of` reads a status's back.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import msgspec

from gpudesk.core.wire.station import LoaderOrphan
from gpudesk.env_seconds import env_seconds
from gpudesk.units import seconds

log = logging.getLogger("gpudesk.loader")

ENV_ENGINE_PID = "GPUDESK_LOADER_ENGINE_PID"  # the engine's pid, set where it starts a producer
# Long enough for every consumer that is coming back to find it: one between two SharedLoaders or
# epochs reconnects in well under a second, and one that lost its producer waits up to RESUME_S
# (30 s, services/loaders.py) for it. Twice that, so a consumer's wait never ends first.
ORPHAN_GRACE_S = 60.0
ENV_ORPHAN_GRACE_S = "GPUDESK_LOADER_ORPHAN_GRACE_S"  # overrides it (tests)


def engine_pid() -> int:
    """The pid of the engine that started this producer: ENV_ENGINE_PID, else this process's
    parent now (a producer started by hand, or by an engine that did not say)."""
    try:
        pid = int(os.environ.get(ENV_ENGINE_PID, ""))
    except ValueError:
        return os.getppid()
    return pid if pid > 0 else os.getppid()


class IdleExit:
    """Tells the producer's loop, every liveness check, whether to stop for want of consumers,
    saying why (`why`, for its info file and the consumers that come too late). What an orphan
    does is logged as a warning: the loader's log (a managed one's,
    $GPUDESK_HOME/loaders/NAME.log) shows warnings only, and these answer "why does this
    producer still run, or why did it stop, with no engine"."""

    def __init__(self, name: str, idle_exit_s: float | None, managed: bool, now: float) -> None:
        self.name = name
        self.idle_exit_s = idle_exit_s
        self.engine = engine_pid() if managed else None  # None: no engine to outlive
        self.grace_s = env_seconds(ENV_ORPHAN_GRACE_S, ORPHAN_GRACE_S, 0.0, 86400.0)
        self.idle_since = now
        self.orphaned_at: float | None = None  # monotonic, as `now`
        self.orphaned_wall = 0.0  # the same moment on the wall clock, for others to read
        self.why: str | None = None  # why it stops, once `stops` said so

    def stops(self, serving: bool, now: float) -> bool:
        if self.orphaned_at is None and self.engine is not None and os.getppid() != self.engine:
            self.orphaned_at, self.orphaned_wall = now, time.time()
            log.warning(
                "loader %s: its engine (pid %d) is gone; it serves on while consumers read it, "
                "and stops once none has for %s",
                self.name,
                self.engine,
                seconds(self.grace_s),
            )
        if serving:
            self.idle_since = now
            return False
        idle = now - self.idle_since
        if self.idle_exit_s is not None and idle >= self.idle_exit_s:
            self.why = f"no consumer has read it for {seconds(self.idle_exit_s)} (--idle-exit)"
            log.info("loader %s: %s: stopping", self.name, self.why)
            return True
        # Counted from when it was orphaned too: an engine restarted at once finds it still there
        # for its queued jobs, even after a long idle under the engine before.
        if self.orphaned_at is None or now - max(self.idle_since, self.orphaned_at) < self.grace_s:
            return False
        self.why = (
            f"its engine (pid {self.engine}) is gone and no consumer has read it for "
            f"{seconds(self.grace_s)}"
        )
        log.warning("loader %s: %s: stopping", self.name, self.why)
        return True

    def orphan(self, serving: bool, now: float) -> LoaderOrphan | None:
        """Its orphaned state, for its info file and status (None while its engine is there):
        since when, and when it stops if no consumer reads it (None while one does)."""
        if self.orphaned_at is None or self.engine is None:
            return None
        stops_in = max(self.idle_since, self.orphaned_at) + self.grace_s - now
        return LoaderOrphan(
            engine_pid=self.engine,
            since=self.orphaned_wall,
            grace_s=self.grace_s,
            stops_at=None if serving else time.time() + max(0.0, stops_in),
        )


def orphan_of(report: dict[str, Any] | None) -> LoaderOrphan | None:
    """The orphaned state a status report gives: None where it has none (its engine is there,
    or the producer predates the field) or one that is not one. (An info file's is typed:
    `protocol.ProducerInfo.orphaned`.)"""
    raw = (report or {}).get("orphaned")
    try:
        return None if raw is None else msgspec.convert(raw, LoaderOrphan)
    except msgspec.ValidationError:
        return None
