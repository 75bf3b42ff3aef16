"""Fault injection for the fault suite (tests/faults/), inert unless GPUDESK_FAULT names a point.

TEST ONLY. Each point stands in for a crash at the worst moment, made deterministic:

    after-spawn   the engine freezes the wrapper it has just started (SIGSTOP: a wrapper that is
                  slow to start on a loaded machine, before it wrote anything) and dies at once
                  (os._exit), before recording the wrapper's pid in the store.
"""

from __future__ import annotations

import os
import signal

FAULT_ENV = "GPUDESK_FAULT"
EXIT_STATUS = 70  # how an engine killed by a fault point exits


def after_spawn(pid: int) -> None:
    """Called between starting an attempt's wrapper and recording its pid."""
    if os.environ.get(FAULT_ENV) == "after-spawn":
        os.kill(pid, signal.SIGSTOP)
        os._exit(EXIT_STATUS)
