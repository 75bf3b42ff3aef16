"""What each job is assumed to need: raised after an out-of-memory death, else its hints
completed by what its owner's earlier runs measured (`owned`: per owner), else defaults. They
are looked up by the same command first (the store's measured-demand history, by
`demand.signature`), then by its command family (`gpudesk.policy.command_family`: the command
with its numeric values taken out, so a sweep's members share what the first measured). A
family's peak is recorded as soon as a run's memory has settled (`history_settled_s`), not only
when it ends, so the second member of a sweep started while the first still runs already
benefits. The family's mean run time is kept too, for the remaining-time estimate
(`gpudesk.policy.remaining`), and how far its memory hints were off, which corrects its later
members' hints (`gpudesk.policy.hint_correction`; the simulator's view does the same). The
scheduler asks it for queued jobs, `attempts` for a retry after an OOM, and tells it what an
ended attempt measured.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

from gpudesk.core.records import AttemptRecord, JobRecord
from gpudesk.engine.live_attempt import LiveAttempt
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.family_history import FamilyRecord, SettledPeak
from gpudesk.env_seconds import env_seconds
from gpudesk.hw.telemetry.energy import AttemptUsage
from gpudesk.policy.command_family import family, owner_key
from gpudesk.policy.demand import DEFAULT_SM_PCT, PEAK_SETTLED_S, Demand, from_hints, signature
from gpudesk.policy.hint_correction import HintRatios
from gpudesk.units import MIB_PER_GB

log = logging.getLogger("gpudesk.engine")

# A run's peak is recorded for its family once its memory has not grown for this long: the same
# notion as placement's "peak settled" (demand.PEAK_SETTLED_S), so what the family learns is
# what placement already trusts for the running job. GPUDESK_HISTORY_SETTLED_S: tests only.
HISTORY_SETTLED_S_ENV = "GPUDESK_HISTORY_SETTLED_S"
# The source of a demand taken from the command family's history: placed with the margin of a
# guess (demand.margin_mib), since a sweep over a size changes the memory its members need.
FAMILY_SOURCE = "family history"


def owned(job: JobRecord, of: Callable[[tuple[str, ...], str | None], str] = family) -> str:
    """The key of a job's history: its owner and its command family (`of=signature`: its exact
    command). A member's jobs are given what her own runs measured only: on a shared station
    another user's runs (in a shared folder, where the keys are the same) never set the room
    her jobs are placed for, her hints' correction or her remaining-time estimate."""
    return owner_key(job.owner.uid, of(job.spec.command, job.spec.workdir))


def history_settled_s() -> float:
    return env_seconds(HISTORY_SETTLED_S_ENV, PEAK_SETTLED_S, 0.1, 86400.0)


class JobDemand:
    """The measured-demand history and the demand it gives each job."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.history = store.demand_history()  # owner:signature -> measured (MiB, SM %, runs)
        self.families: dict[str, FamilyRecord] = store.family_history()
        self.settled_s = history_settled_s()
        self._recorded: set[int] = set()  # attempts whose settled peak their family holds
        self._checked: set[int] = set()  # attempts looked up in the store (after a restart)
        self._running: dict[int, JobRecord] = {}  # running job id -> its record, once read
        self.hint_ratios = HintRatios()
        for key, hint_mib, ratio in store.family_hint_ratios():
            self.hint_ratios.note(key, hint_mib, ratio)

    @property
    def known(self) -> bool:
        """Whether any earlier run measured anything a queued job could be given."""
        return bool(self.history) or any(f.memory_mib for f in self.families.values())

    def of(self, job: JobRecord) -> Demand:
        """What a job is assumed to need: raised after an OOM, else its hints completed by what
        earlier runs of the same command, else of its family, measured, else defaults."""
        if job.demand:
            return Demand(
                float(job.demand["memory_mib"]),
                float(job.demand["sm_pct"]),
                str(job.demand.get("source", "after OOM")),
                bool(job.demand.get("exclusive", True)),
            )
        known = self.history.get(owned(job, signature))
        history = Demand(known[0], known[1], "history") if known else None
        if history is None:
            kin = self.families.get(owned(job))
            if kin is not None and kin.memory_mib:
                sm = kin.sm_pct if kin.sm_pct is not None else DEFAULT_SM_PCT
                history = Demand(kin.memory_mib, sm, FAMILY_SOURCE)
        demand = from_hints(job.spec.memory_gb, job.spec.sm_pct, history)
        # only a memory hint is corrected (an SM hint alone makes the source "hint" too)
        return self.hint_ratios.corrected(owned(job), demand) if job.spec.memory_gb else demand

    def corrects(self, job: JobRecord) -> bool:
        """Whether the job's memory hint is corrected by its family (`of`)."""
        if not self.hint_ratios.ratios or not job.spec.memory_gb:
            return False  # (a long queue, before any run measured a hint, costs nothing)
        return self.hint_ratios.factor(owned(job)) is not None

    def typical_run_s(self, job: JobRecord) -> float | None:
        """The mean run time of a (queued) job's family's succeeded runs (None: none)."""
        kin = self.families.get(owned(job))
        return kin.run_s if kin is not None and kin.finished else None

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
        old = self.families.get(key) or FamilyRecord(None, None, 0, None, 0)
        runs = old.runs + 1 if new_run else old.runs
        mean = (
            ((old.sm_pct or 0.0) * old.runs + sm) / runs
            if new_run
            else (old.sm_pct if old.sm_pct is not None else sm)
        )
        peak = max(old.memory_mib or 0.0, memory)
        self.families[key] = FamilyRecord(peak, mean, runs, old.run_s, old.finished)
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
        old = self.families.get(key) or FamilyRecord(None, None, 0, None, 0)
        mean = ((old.run_s or 0.0) * old.finished + run_s) / (old.finished + 1)
        self.families[key] = FamilyRecord(
            old.memory_mib, old.sm_pct, old.runs, mean, old.finished + 1
        )

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
        old = self.history.get(key)
        runs = old[2] if old else 0
        memory = (
            max(old[0], usage.gpu_memory_peak_mib or 0.0)
            if old
            else usage.gpu_memory_peak_mib or 0.0
        )
        mean = (old[1] * runs + sm) / (runs + 1) if old else sm
        self.history[key] = (memory, mean, runs + 1)
