"""What each job is assumed to need: raised after an out-of-memory death, else its hints
completed by what earlier runs measured, else defaults. Earlier runs are looked up by the same
command first (the store's measured-demand history, by `demand.signature`), then by its command
family (`gpudesk.policy.command_family`: the command with its numeric values taken out, so a
sweep's members share what the first measured). A family's peak is recorded as soon as a run's
memory has settled (`history_settled_s`), not only when it ends, so the second member of a
sweep started while the first still runs already benefits. The family's mean run time is kept
too, for the remaining-time estimate (`gpudesk.policy.remaining`), and how far its memory hints
were off, which corrects its later members' hints (`gpudesk.policy.hint_correction`; the
simulator's view does the same). The scheduler asks it for
queued jobs, `attempts` for a retry after an OOM, and tells it what an ended attempt measured.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping

from gpudesk.core.records import AttemptRecord, JobRecord
from gpudesk.engine.live_attempt import LiveAttempt
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.family_history import FamilyRecord, SettledPeak
from gpudesk.env_seconds import env_seconds
from gpudesk.hw.telemetry.energy import AttemptUsage
from gpudesk.policy.command_family import family
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


def owned(job: JobRecord) -> str:
    """The key of a job's hint ratios: its owner and its command family. A member's hints are
    corrected by her own runs only: on a shared station another user's runs (in a shared
    folder, where the family is the same) never shrink the room her jobs are placed for."""
    return f"{job.owner.uid}:{family(job.spec.command, job.spec.workdir)}"


def history_settled_s() -> float:
    return env_seconds(HISTORY_SETTLED_S_ENV, PEAK_SETTLED_S, 0.1, 86400.0)


class JobDemand:
    """The measured-demand history and the demand it gives each job."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.history = store.demand_history()  # command signature -> measured (MiB, SM %, runs)
        self.families: dict[str, FamilyRecord] = store.family_history()
        self.settled_s = history_settled_s()
        self._recorded: set[int] = set()  # attempts whose settled peak their family holds
        self._checked: set[int] = set()  # attempts looked up in the store (after a restart)
        self._family_of: dict[int, str] = {}  # running job id -> its family
        # running job id -> (its hint ratios' key, its memory hint in MiB), if it gave one
        self._hint_of: dict[int, tuple[str, float]] = {}
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
        known = self.history.get(signature(job.spec.command, job.spec.workdir))
        history = Demand(known[0], known[1], "history") if known else None
        key = family(job.spec.command, job.spec.workdir)
        if history is None:
            kin = self.families.get(key)
            if kin is not None and kin.memory_mib:
                sm = kin.sm_pct if kin.sm_pct is not None else DEFAULT_SM_PCT
                history = Demand(kin.memory_mib, sm, FAMILY_SOURCE)
        demand = from_hints(job.spec.memory_gb, job.spec.sm_pct, history)
        # only a memory hint is corrected (an SM hint alone makes the source "hint" too)
        return self.hint_ratios.corrected(owned(job), demand) if job.spec.memory_gb else demand

    def corrects(self, job: JobRecord) -> bool:
        """Whether the job's memory hint is corrected by its family (`of`)."""
        return bool(job.spec.memory_gb) and self.hint_ratios.factor(owned(job)) is not None

    def typical_run_s(self, job: JobRecord) -> float | None:
        """The mean run time of a (queued) job's family's succeeded runs (None: none)."""
        kin = self.families.get(family(job.spec.command, job.spec.workdir))
        return kin.run_s if kin is not None and kin.finished else None

    def typical_s(self, job_id: int) -> float | None:
        """The mean run time of the running job's family's succeeded runs (None: none)."""
        key = self._family(job_id)
        kin = self.families.get(key) if key else None
        return kin.run_s if kin is not None and kin.finished else None

    def _family(self, job_id: int) -> str | None:
        key = self._family_of.get(job_id)
        if key is None:
            try:
                job = self.store.job(job_id)
            except Exception:
                return None
            key = self._family_of[job_id] = family(job.spec.command, job.spec.workdir)
            if job.spec.memory_gb:
                self._hint_of[job_id] = (owned(job), job.spec.memory_gb * MIB_PER_GB)
        return key

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
            key = self._family(attempt.attempt.job_id)
            if key is None:
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
            self._record(key, peak, DEFAULT_SM_PCT if sm is None else sm, told=told)
            hinted = self._hint_of.get(attempt.attempt.job_id)
            if hinted is not None:
                self._record_ratio(*hinted, peak)

    def _record_ratio(self, key: str, hint: float, peak: float) -> None:
        """How far a hinted run's hint was off, for its owner's later members of its family
        (counted once per attempt by `watch`'s and `ended`'s own checks)."""
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
        self._family_of.pop(job.id, None)
        self._hint_of.pop(job.id, None)
        if not succeeded:
            return
        key = family(job.spec.command, job.spec.workdir)
        if usage is not None and usage.gpu_memory_peak_mib is not None:
            self.remember(job, usage)
            sm = usage.gpu_sm_mean_pct
            if sm is None:
                sm = job.spec.sm_pct if job.spec.sm_pct is not None else DEFAULT_SM_PCT
            self._record(key, usage.gpu_memory_peak_mib, sm, new_run=not counted)
            if job.spec.memory_gb:  # its hint's ratio, raised to the peak it held by its end
                hint = job.spec.memory_gb * MIB_PER_GB
                self._record_ratio(owned(job), hint, usage.gpu_memory_peak_mib)
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
