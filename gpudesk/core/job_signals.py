"""The signals `gpudesk cancel --signal` sends a running job (op `signal`; Slurm's `scancel
--signal`), by name or number, and the one sentence anything else gets."""

from __future__ import annotations

import signal as signals

from gpudesk.core.jobs import PREEMPT_SIGNALS

# The signals `gpudesk cancel --signal` may send a job: those its wrapper outlives (the wrapper
# shares the job's process group and must live to record the exit). SIGKILL is a cancel,
# SIGSTOP/SIGCONT are `suspend`/`resume`, each with its bookkeeping.
JOB_SIGNALS = PREEMPT_SIGNALS
_SIGNAL_VERBS = {
    "SIGKILL": "gpudesk cancel ends a job (SIGTERM, then SIGKILL after --grace)",
    "SIGSTOP": "gpudesk suspend stops a job (and keeps its time limit's clock from counting)",
    "SIGTSTP": "gpudesk suspend stops a job (and keeps its time limit's clock from counting)",
    "SIGCONT": "gpudesk resume continues a suspended job",
}


def job_signal(value: str | int) -> str:
    """A signal for `cancel --signal`, by name (`USR1`, `SIGUSR1`, any case) or number (`10`):
    its full name, one of JOB_SIGNALS. Anything else raises ValueError with one sentence
    saying what is taken (and, for SIGKILL, SIGSTOP and SIGCONT, which command does that)."""
    text = str(value).strip()
    if isinstance(value, int) or text.isdigit():
        try:
            name = signals.Signals(int(text)).name
        except ValueError:
            raise ValueError(
                f"{text} is no signal number; use one of {', '.join(JOB_SIGNALS)}"
            ) from None
    else:
        name = text.upper()
        name = name if name.startswith("SIG") else "SIG" + name
    if name in JOB_SIGNALS:
        return name
    instead = _SIGNAL_VERBS.get(name)
    if instead:
        raise ValueError(f"{name} is not sent with --signal: {instead}")
    known = name in signals.Signals.__members__
    raise ValueError(
        f"{name if known else repr(text)} cannot be sent to a job: "
        f"use one of {', '.join(JOB_SIGNALS)} (by name, without SIG, or by number), the "
        "signals the job's wrapper outlives"
    )
