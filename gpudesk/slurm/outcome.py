"""How a Slurm job's end reads in gpudesk, as pure functions of what Slurm's clients said: the
times they gave (Slurm's local timestamps) kept within what the engine saw itself, the exit code
as gpudesk keeps it, and a failure's reason. The engine's Slurm backend
(gpudesk.engine.backends.slurm) applies them to the jobs it follows."""

from __future__ import annotations

import math
import time

from gpudesk.slurm.records import SlurmRow


def within(moment: float | None, low: float, high: float) -> float | None:
    """A time Slurm's clients gave, kept within what the engine knows itself. Those clients run
    as the job's owner, who may trace them and make them print anything (docs/security.md), so
    a start or end she forges moves her job's wall time and GPU-seconds only within the engine's
    own bounds: after the submit, no later than the engine saw it running, never in the future.
    Slurm's times are whole seconds, cut down: a start in the second of the submit reads as
    that second's beginning, so the bound below is the submit's whole second."""
    low = math.floor(low)
    return None if moment is None else min(max(moment, low), max(low, high))


def slurm_time(text: str | None) -> float | None:
    """Slurm's local timestamps ("2026-11-25T02:20:42")."""
    if not text:
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def exit_code(code: int | None, sig: int | None) -> int | None:
    """An exit code as gpudesk keeps them: 128 + N for a death by signal N."""
    if sig:
        return 128 + sig
    return code


def failure(state: str, code: int | None, sig: int | None, row: SlurmRow) -> str:
    """Why a Slurm job that neither succeeded nor was cancelled failed, naming it."""
    where = f"Slurm job {row.slurm_id}"
    if state == "TIMEOUT":
        return f"timed out: Slurm's time limit (--time) passed ({where})"
    if state == "OUT_OF_MEMORY":
        return f"out of memory: the job went past its host memory (--mem) ({where}, OUT_OF_MEMORY)"
    if state == "FAILED" and code is not None:
        return f"exit code {code}" + (f", signal {sig}" if sig else "") + f" ({where})"
    return f"Slurm ended it {state} ({where})"
