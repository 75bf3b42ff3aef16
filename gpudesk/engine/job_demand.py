"""What each job is assumed to need, kept in the store: the measured-demand history by command
and by command family, the hints' ratios, and the demand they give each job, are the pure
`gpudesk.policy.demand_history`'s (`DemandHistory`, which `JobDemand` is); this keeps them in the
store and feeds them. A family's peak is recorded as soon as a run's memory has settled
(`history_settled_s`), not only when it ends, so the second member of a sweep started while the
first still runs already benefits. The family's mean run time is kept too, for the
remaining-time estimate (`gpudesk.policy.remaining`), and how far its memory hints were off,
which corrects its later members' hints (`gpudesk.policy.hint_correction`; the simulator's view
does the same). The scheduler asks it for queued jobs, `attempts` for a retry after an OOM, and
tells it what an ended attempt measured.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping

from gpudesk.core.records import AttemptRecord, JobRecord
from gpudesk.engine.live_attempt import LiveAttempt
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.family_history import SettledPeak
from gpudesk.env_seconds import env_seconds
from gpudesk.hw.telemetry.energy import AttemptUsage
from gpudesk.policy.demand import DEFAULT_SM_PCT, PEAK_SETTLED_S, signature
from gpudesk.policy.demand_history import DemandHistory, owned
from gpudesk.policy.hint_correction import HintRatios
from gpudesk.units import MIB_PER_GB

log = logging.getLogger("gpudesk.engine")

# A run's peak is recorded for its family once its memory has not grown for this long: the same
# notion as placement's "peak settled" (demand.PEAK_SETTLED_S), so what the family learns is
# what placement already trusts for the running job. GPUDESK_HISTORY_SETTLED_S: tests only.
HISTORY_SETTLED_S_ENV = "GPUDESK_HISTORY_SETTLED_S"


def history_settled_s() -> float:
    return env_seconds(HISTORY_SETTLED_S_ENV, PEAK_SETTLED_S, 0.1, 86400.0)


class JobDemand(DemandHistory):
    """The measured-demand history, read from the store and kept there, and the demand it gives
    each job (`DemandHistory`)."""

    def __init__(self, store: Store) -> None:
        hint_ratios = HintRatios()
        for key, hint_mib, ratio in store.family_hint_ratios():
            hint_ratios.note(key, hint_mib, ratio)
        super().__init__(store.demand_history(), store.family_history(), hint_ratios)
        self.store = store
        self.settled_s = history_settled_s()
        self._recorded: set[int] = set()  # attempts whose settled peak their family holds
        self._checked: set[int] = set()  # attempts looked up in the store (after a restart)
        self._running: dict[int, JobRecord] = {}  # running job id -> its record, once read

    def typical_s(self, job_id: int) -> float | None:
        """The mean run time of the running job's family's succeeded runs (None: none)."""
        job = self._job(job_id)
        return self.typical_run_s(job) if job is not None else None

    def _job(self, job_id: int) -> JobRecord | None:
        """A running job's record, read from the store once."""
        job = self._running.get(job_id)
        if job is None:
            try:
                job = self._running[job_id] = self.store.job(job_id)
            except Exception:
                return None
        return job

    def watch(
        self,
        live: Iterable[LiveAttempt],
        usage: Mapping[int, AttemptUsage],
        now: float | None = None,
    ) -> None:
        """Record the peak of each running GPU attempt whose memory has settled into its
        family's history, once (`now` is time.monotonic(), as the peaks' times)."""
        now = time.monotonic() if now is None else now
        for attempt in live:
            attempt_id = attempt.attempt.id
            measured = usage.get(attempt_id)
            if (
                not attempt.gpus
                or self._counted(attempt.attempt)
                or measured is None
                or not measured.gpu_memory_peak_mib
                or measured.gpu_memory_peak_at is None
                or now - measured.gpu_memory_peak_at < self.settled_s
            ):
                continue
            job = self._job(attempt.attempt.job_id)
            if job is None:
                continue
            sm = measured.gpu_sm_mean_pct
            peak = measured.gpu_memory_peak_mib
            self._recorded.add(attempt_id)  # tried once: a failure is logged, not retried
            told = SettledPeak(
                attempt.attempt.job_id,
                attempt.attempt.number,
                f"its GPU memory settled at {peak / 1024:.1f} GiB: kept for its command family, "
                "whose next runs start with it",
            )
            key = owned(job)
            self._record(key, peak, DEFAULT_SM_PCT if sm is None else sm, told=told)
            self._record_ratio(job, peak)

    def _record_ratio(self, job: JobRecord, peak: float) -> None:
        """How far a run's memory hint, if it gave one, was off, for its owner's later members
        of its family (counted once per attempt by `watch`'s and `ended`'s own checks)."""
        if not job.spec.memory_gb:
            return
        key, hint = owned(job), job.spec.memory_gb * MIB_PER_GB
        ratio = self.hint_ratios.learn(key, hint, peak)
        if ratio:
            try:
                self.store.record_hint_ratio(key, round(hint), ratio)
            except Exception:  # a correction for later runs; never worth failing a step
                log.exception("could not record how far %s's hint was off", key)

    def _counted(self, attempt: AttemptRecord) -> bool:
        """Whether the attempt's settled peak is in its family's history: recorded by this
        engine, or, the first time an engine sees it, by the one before a restart."""
        if attempt.id not in self._checked:
            self._checked.add(attempt.id)
            try:
                if self.store.family_counted(attempt.job_id, attempt.number):
                    self._recorded.add(attempt.id)
            except Exception:
                log.exception("could not read whether attempt %d was counted", attempt.id)
        return attempt.id in self._recorded

    def _record(
        self,
        key: str,
        memory: float,
        sm: float,
        new_run: bool = True,
        told: SettledPeak | None = None,
    ) -> bool:
        try:
            self.store.record_family_demand(key, memory, sm, new_run, told=told)
        except Exception:  # a hint for later runs; never worth failing a step or a settle
            log.exception("could not record what a run of command family %s measured", key)
            return False
        self.fold_family(key, memory, sm, new_run)
        return True

    def ended(
        self,
        job: JobRecord,
        attempt: AttemptRecord,
        usage: AttemptUsage | None,
        run_s: float | None,
        succeeded: bool,
    ) -> None:
        """An attempt ended. A succeeded one's peak and run time are folded into its command's
        and its family's history, and its hint's ratio into its owner's ratios for the family
        (a peak already recorded when it settled is only raised to what it held by the end)."""
        counted = succeeded and self._counted(attempt)
        self._recorded.discard(attempt.id)
        self._checked.discard(attempt.id)
        self._running.pop(job.id, None)
        if not succeeded:
            return
        key = owned(job)
        if usage is not None and usage.gpu_memory_peak_mib is not None:
            self.remember(job, usage)
            sm = usage.gpu_sm_mean_pct
            if sm is None:
                sm = job.spec.sm_pct if job.spec.sm_pct is not None else DEFAULT_SM_PCT
            self._record(key, usage.gpu_memory_peak_mib, sm, new_run=not counted)
            self._record_ratio(job, usage.gpu_memory_peak_mib)  # raised to its peak by its end
        if run_s is not None and run_s > 0:
            self._record_run(key, run_s)

    def _record_run(self, key: str, run_s: float) -> None:
        try:
            self.store.record_family_run(key, run_s)
        except Exception:
            log.exception("could not record the run time of command family %s", key)
            return
        self.fold_run(key, run_s)

    def remember(self, job: JobRecord, usage: AttemptUsage) -> None:
        """A succeeded run's measured peak memory and mean SM activity, folded into its
        command's history (the store's, and this copy the same way)."""
        key = owned(job, signature)
        sm = usage.gpu_sm_mean_pct
        if sm is None:
            sm = job.spec.sm_pct if job.spec.sm_pct is not None else DEFAULT_SM_PCT
        try:
            self.store.record_demand(key, usage.gpu_memory_peak_mib or 0.0, sm)
        except Exception:  # a hint for later runs; never worth failing a settle over
            log.exception("could not record the measured demand of job %d", job.id)
            return
        self.fold_command(key, usage.gpu_memory_peak_mib or 0.0, sm)
