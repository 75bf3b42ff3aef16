"""What each job is assumed to need: raised after an out-of-memory death, else its hints
completed by what earlier runs of the same command measured (the store's measured-demand
history, kept in memory too), else defaults. The scheduler asks it for queued jobs, `attempts`
for a retry after an OOM, and tells it what a succeeded job measured.
"""

from __future__ import annotations

import logging

from gpudesk.core.records import JobRecord
from gpudesk.engine.store.database import Store
from gpudesk.hw.telemetry.energy import AttemptUsage
from gpudesk.policy.demand import DEFAULT_SM_PCT, Demand, from_hints, signature

log = logging.getLogger("gpudesk.engine")


class JobDemand:
    """The measured-demand history and the demand it gives each job."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.history = store.demand_history()  # command signature -> measured (MiB, SM %, runs)

    def of(self, job: JobRecord) -> Demand:
        """What a job is assumed to need: raised after an OOM, else its hints completed by what
        earlier runs of the same command measured, else defaults."""
        if job.demand:
            return Demand(
                float(job.demand["memory_mib"]),
                float(job.demand["sm_pct"]),
                str(job.demand.get("source", "after OOM")),
                bool(job.demand.get("exclusive", True)),
            )
        known = self.history.get(signature(job.spec.command, job.spec.workdir))
        history = Demand(known[0], known[1], "history") if known else None
        return from_hints(job.spec.memory_gb, job.spec.sm_pct, history)

    def remember(self, job: JobRecord, usage: AttemptUsage) -> None:
        """A succeeded run's measured peak memory and mean SM activity, folded into its
        command's history (the store's, and this copy the same way)."""
        key = signature(job.spec.command, job.spec.workdir)
        sm = usage.gpu_sm_mean_pct
        if sm is None:
            sm = job.spec.sm_pct if job.spec.sm_pct is not None else DEFAULT_SM_PCT
        try:
            self.store.record_demand(key, usage.gpu_memory_peak_mib or 0.0, sm)
        except Exception:  # a hint for later runs; never worth failing a settle over
            log.exception("could not record the measured demand of job %d", job.id)
            return
        old = self.history.get(key)
        runs = old[2] if old else 0
        memory = (
            max(old[0], usage.gpu_memory_peak_mib or 0.0)
            if old
            else usage.gpu_memory_peak_mib or 0.0
        )
        mean = (old[1] * runs + sm) / (runs + 1) if old else sm
        self.history[key] = (memory, mean, runs + 1)
