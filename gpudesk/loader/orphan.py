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
"""

from __future__ import annotations

import logging
import os

from gpudesk.env_seconds import env_seconds

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
    saying why. What an orphan does is logged as a warning: the loader's log (a managed one's,
    $GPUDESK_HOME/loaders/NAME.log) shows warnings only, and these answer "why does this
    producer still run, or why did it stop, with no engine"."""

    def __init__(self, name: str, idle_exit_s: float | None, managed: bool, now: float) -> None:
        self.name = name
        self.idle_exit_s = idle_exit_s
        self.engine = engine_pid() if managed else None  # None: no engine to outlive
        self.grace_s = env_seconds(ENV_ORPHAN_GRACE_S, ORPHAN_GRACE_S, 0.0, 86400.0)
        self.idle_since = now
        self.orphaned_at: float | None = None

    def stops(self, serving: bool, now: float) -> bool:
        if self.orphaned_at is None and self.engine is not None and os.getppid() != self.engine:
            self.orphaned_at = now
            log.warning(
                "loader %s: its engine (pid %d) is gone; it serves on while consumers read it, "
                "and stops once none has for %.0f s",
                self.name,
                self.engine,
                self.grace_s,
            )
        if serving:
            self.idle_since = now
            return False
        idle = now - self.idle_since
        if self.idle_exit_s is not None and idle >= self.idle_exit_s:
            log.info("loader %s: no consumer for %.0f s, stopping", self.name, self.idle_exit_s)
            return True
        # Counted from when it was orphaned too: an engine restarted at once finds it still there
        # for its queued jobs, even after a long idle under the engine before.
        if self.orphaned_at is None or now - max(self.idle_since, self.orphaned_at) < self.grace_s:
            return False
        log.warning(
            "loader %s: its engine (pid %d) is gone and no consumer has read it for %.0f s: "
            "stopping",
            self.name,
            self.engine,
            self.grace_s,
        )
        return True
