"""Durations the engine and its libraries read from the environment: test suites and unusual
stations shorten or lengthen a bound (GPUDESK_TRACKING_WAIT_S, GPUDESK_SLURM_POLL_S,
GPUDESK_LOADER_GRACE_S, GPUDESK_LOADER_ORPHAN_GRACE_S, GPUDESK_OBSERVE_MIN_S). One reading for
all of them: a value that is unset, not a number or not finite gives the default; one outside the
bounds is brought to the nearer bound."""

from __future__ import annotations

import math
import os


def env_seconds(name: str, default: float, low: float, high: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    if not math.isfinite(value):
        return default
    return min(max(value, low), high)
