"""Learning on the station: the interference model's parameters moved toward what this machine
shows, from the progress the jobs report, and kept in the store.

Each running single-GPU attempt's log is read for progress lines (`gpudesk.joblog.progress`).
Its run is cut into intervals (`gpudesk.policy.progress_intervals`, the pure rules) during which
its *tenancy* stayed the same: its mode, its MIG slice and the other attempts on its GPU. When an
interval of at least `observe_min_s` ends (a co-tenant starts or ends, or the job ends), its
rate (DONE per second, from the interval's first to its last progress line) is compared with the
job's rate alone on a GPU: measured earlier in the same attempt, or remembered for the same
command (its `demand.signature`) from its owner's earlier runs (never another member's: she
would set the yardstick of this one's observations). Their ratio is an
`interference.Observation`, its workloads the steady SM shares remembered alone for each
tenant's command (none known for one: it teaches nothing; the policy module says why). The
`Learner` keeps it (if it informs a parameter) and refits every parameter jointly from the
observations it keeps; the observation is stored at once, and placement sees the new parameters
at its next decision. While an attempt runs alone after its first progress line, its GPU's SM
activity and kernel-active time are read at each step: when its time alone ends they give its
command's steady SM share and measure the kernel-active gap, one more observation. A new engine
refits from the stored observations, and takes the totals a store from before the refit holds
(schema 5, observations not kept) as they are.

`gpudesk calibrate` feeds observations measured by probes through `observe` (source
"calibrated"); `gpudesk model show` reads `describe`; `gpudesk model reset` calls `reset`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial

import msgspec

from gpudesk.core.records import JobRecord
from gpudesk.engine.attempts import Attempts
from gpudesk.engine.live_attempt import LiveAttempt
from gpudesk.engine.station.telemetry_sink import TelemetrySink
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.model_params import StoredObservation
from gpudesk.env_seconds import env_seconds
from gpudesk.hw import runner
from gpudesk.hw.telemetry.model import MPS_SERVER
from gpudesk.joblog.progress import ProgressLine, ProgressReader
from gpudesk.policy.command_family import owner_key
from gpudesk.policy.demand import signature
from gpudesk.policy.interference import (
    FrozenTotal,
    InterferenceModel,
    KeptObservation,
    LearnedParam,
    Learner,
    Observation,
)
from gpudesk.policy.observation_wire import observation_from_json, observation_to_json
from gpudesk.policy.progress_intervals import (
    AloneActivity,
    AloneRate,
    Placed,
    Progress,
    Tenancy,
    alone_rate_after,
    progress_lesson,
    slice_size,
    telemetry_lesson,
    tenancies,
)
from gpudesk.policy.remaining import RecentProgress, Remaining, estimate

log = logging.getLogger("gpudesk.engine")

# The shortest interval that counts: long enough that a job printing progress every few seconds
# is measured to a few per cent. GPUDESK_OBSERVE_MIN_S overrides it, for tests only.
OBSERVE_MIN_S = 60.0
OBSERVE_MIN_S_ENV = "GPUDESK_OBSERVE_MIN_S"
SOURCES = ("learned", "calibrated")
Lesson = Callable[[str, float], str]  # what an observation taught: its parameter, their value


def observe_min_s() -> float:
    """OBSERVE_MIN_S, or GPUDESK_OBSERVE_MIN_S (at least 0.1 s: tests only)."""
    return env_seconds(OBSERVE_MIN_S_ENV, OBSERVE_MIN_S, 0.1, 86400.0)


class Tracker(msgspec.Struct):
    """One running attempt's progress: its log's reader, and its intervals."""

    attempt_id: int
    job_id: int
    alone_key: str  # its owner's and command's (`owner_key`): the key of its rate alone
    owner: int  # the job's owner's uid: whose voice its observations are (learner `_blend`)
    reader: ProgressReader
    progress: Progress
    activity: AloneActivity = msgspec.field(default_factory=AloneActivity)  # while alone on its GPU
    steady_after: float = math.inf  # its samples alone count after this one (its first line's)


class LearningCounts(msgspec.Struct):
    intervals: int = 0  # long enough intervals that ended
    observations: int = 0  # ... that told the learner something
    without_alone_rate: int = 0  # shared intervals of jobs whose rate alone was unknown
    without_measured_sm: int = 0  # ... where a tenant's command had no steady SM share known
    sources: dict[str, int] = msgspec.field(default_factory=dict)


class StationLearning:
    """The station's learner, its persistence, and the progress watch that feeds it."""

    def __init__(
        self,
        store: Store,
        attempts: Attempts,
        telemetry: TelemetrySink,
        min_s: float | None = None,
    ) -> None:
        self.store = store
        self.attempts = attempts
        self.telemetry = telemetry
        self.min_s = observe_min_s() if min_s is None else min_s
        self.learner = Learner()
        self._restore()
        self.model = InterferenceModel(self.learner)
        self.alone: dict[str, AloneRate] = store.alone_rates()
        self.trackers: dict[int, Tracker] = {}
        # every running attempt's recent progress (its remaining time), and the log readers of
        # those that are not tracked for learning (multi-GPU, CPU)
        self.recent: dict[int, RecentProgress] = {}
        self.readers: dict[int, ProgressReader] = {}
        self.counts = LearningCounts()
        self._next_at = 0.0
        self._seen: frozenset[tuple[int, bool]] = frozenset()

    # ------------------------------------------------------------- the model
    def _restore(self) -> None:
        """The learner as the store left it: its kept observations, refitted, and the totals a
        version-5 store holds (they cannot be refitted: the observations behind them were not
        kept; they count as they are until `reset`)."""
        frozen: dict[str, dict[str, FrozenTotal]] = {}
        for t in self.store.model_param_totals():
            frozen.setdefault(t.gpu_model, {})[t.param] = FrozenTotal(
                t.total, t.count, t.calibrated, t.updated_at
            )
        kept: dict[str, list[KeptObservation]] = {}
        for row in self.store.model_observations():
            try:
                obs = observation_from_json(row.observation)
            except ValueError as exc:  # written by this code, so only a damaged row
                log.warning("a stored observation on %s is unreadable: %s", row.gpu_model, exc)
                continue
            kept.setdefault(row.gpu_model, []).append(
                KeptObservation(obs, row.observed_at, row.source == "calibrated", row.owner)
            )
        for gpu_model in sorted({*frozen, *kept}):
            self.learner.restore(gpu_model, kept.get(gpu_model, ()), frozen.get(gpu_model))

    def gpu_models(self) -> list[str]:
        """The GPU models on the station, then any other the store has learned about."""
        station = [info.name or "" for info in self.telemetry.monitor.inventory]
        return list(dict.fromkeys([*station, *self.learner.gpu_models()]))

    def gpus_of(self, gpu_model: str) -> list[int]:
        return [
            info.index
            for info in self.telemetry.monitor.inventory
            if (info.name or "") == gpu_model
        ]

    def describe(self, gpu_model: str) -> list[LearnedParam]:
        return self.learner.describe(gpu_model)

    def observe(
        self,
        gpu_model: str,
        obs: Observation,
        source: str = "learned",
        at: float | None = None,
        owner: int | None = None,
    ) -> str | None:
        """Feed one observation (`owner`: the uid whose job showed it); returns the parameter it
        informs (None: it said nothing and is not kept). It is stored at once and placement
        sees the refitted parameters."""
        return self.observe_many(gpu_model, [obs], source, at, owner)[0]

    def observe_many(
        self,
        gpu_model: str,
        observations: Sequence[Observation],
        source: str = "learned",
        at: float | None = None,
        owner: int | None = None,
    ) -> list[str | None]:
        """`observe` each, stored in one transaction and refitted once (a calibration sends
        dozens): for each, the parameter it informs, or None."""
        if source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}, not {source!r}")
        at = time.time() if at is None else at
        names = [self.learner.informs(gpu_model, obs) for obs in observations]
        kept = [
            KeptObservation(obs, at, source == "calibrated", owner)
            for obs, name in zip(observations, names, strict=True)
            if name is not None
        ]
        if not kept:
            return names
        rows = [
            StoredObservation(gpu_model, source, at, observation_to_json(k.obs), owner)
            for k in kept
        ]
        for row in rows:
            # what is stored must read back, or a new engine would refit from less (ValueError:
            # a rate above the wire's bound, which only a bad rate alone could give)
            observation_from_json(row.observation)
        # the store first: if it fails, the learner has not changed either
        self.store.add_model_observations(rows, keep=self.learner.keep)
        self.learner.observe_all(gpu_model, kept)
        self.counts.sources[source] = self.counts.sources.get(source, 0) + len(kept)
        return names

    def reset(self, gpu_model: str | None = None) -> int:
        """Forget what was learned and calibrated (one GPU model, or all): back to the
        defaults. Returns how many (GPU model, parameter) had moved from their prior."""
        models = self.learner.gpu_models() if gpu_model is None else [gpu_model]
        moved = sum(1 for m in models for param in self.learner.describe(m) if param.observations)
        self.store.reset_model_params(gpu_model)
        self.learner.forget(gpu_model)
        return moved

    # ------------------------------------------------------- watching progress
    def step(self) -> None:
        """Read new progress and close the intervals whose tenancy changed: at most once a
        telemetry interval, and at once when attempts started or ended. Every running
        attempt's recent progress is kept for its remaining time (`recent`); only single-GPU
        attempts' intervals teach the model."""
        now = time.monotonic()
        every = list(self.attempts)
        # a suspended attempt teaches nothing and, stopped, is no tenant of its GPU
        live = [
            a for a in every if len(a.gpus) == 1 and a.mode != "cpu" and a.suspended_since is None
        ]
        seen = frozenset(a.attempt.id for a in every)
        states = frozenset((a.attempt.id, a.suspended_since is None) for a in every)
        if now < self._next_at and states == self._seen:
            return
        self._next_at = now + self.telemetry.station.config.sample_interval
        self._seen = states
        tenancies = self._tenancies(live)
        learning = frozenset(a.attempt.id for a in live)
        for attempt_id in [i for i in self.trackers if i not in learning]:
            # ended: its last interval ends at its last progress line
            self._close(self.trackers.pop(attempt_id))
        for gone in [i for i in self.recent if i not in seen]:
            self.recent.pop(gone)
            self.readers.pop(gone, None)
        for attempt in live:
            tenancy = tenancies[attempt.attempt.id]
            tracker = self.trackers.get(attempt.attempt.id) or self._tracker(attempt, tenancy)
            if tracker is None:
                continue
            self.trackers[attempt.attempt.id] = tracker
            lines = tracker.reader.read_lines()
            if lines and tracker.steady_after == math.inf:
                latest = self.telemetry.monitor.latest
                tracker.steady_after = 0.0 if latest is None else latest.taken_at
            for line in lines:
                tracker.progress.add(now, line.done)
            recent = self._recent(attempt.attempt.id, now, lines)
            if tracker.progress.tenancy != tenancy:
                self._close(tracker)
                tracker.progress.tenancy = tenancy
                recent.restart()  # its rate from now on is under the new tenancy
            if tenancy.alone:
                self._sample_alone(tracker, tenancy.gpu)
        for attempt in every:
            if attempt.attempt.id not in learning:
                reader = self.readers.get(attempt.attempt.id) or self._reader(attempt)
                if reader is not None:
                    self.readers[attempt.attempt.id] = reader
                    self._recent(attempt.attempt.id, now, reader.read_lines())

    def remaining(self, attempt: LiveAttempt) -> Remaining:
        """A running attempt's remaining time: from its recent progress, else its command
        family's mean run time, else unknown (gpudesk.policy.remaining)."""
        return estimate(
            self.recent.get(attempt.attempt.id),
            self.attempts.demands.typical_s(attempt.attempt.job_id),
            attempt.elapsed_s(),
            time.monotonic(),  # the clock its progress was read on
        )

    def _recent(self, attempt_id: int, now: float, lines: list[ProgressLine]) -> RecentProgress:
        """The attempt's recent progress, with what its log gained now: the latest DONE placed
        at this read (a batch read at once has one time), the latest TOTAL kept."""
        recent = self.recent.setdefault(attempt_id, RecentProgress())
        if lines:
            total = next((line.total for line in reversed(lines) if line.total), None)
            recent.add(now, lines[-1].done, total)
        return recent

    def _gpu_model(self, index: int) -> str:
        for info in self.telemetry.monitor.inventory:
            if info.index == index:
                return info.name or ""
        return ""

    def _tenancies(self, live: Iterable[LiveAttempt]) -> dict[int, Tenancy]:
        placed = []
        for attempt in live:
            gpu = attempt.gpus[0]
            compute, memory = (
                slice_size(self.telemetry.monitor.latest, gpu, attempt.mig_slice)
                if attempt.mode == "mig"
                else (0, 0)
            )
            placed.append(
                Placed(
                    attempt.attempt.id,
                    attempt.attempt.job_id,
                    gpu,
                    attempt.mode,
                    attempt.mig_slice if attempt.mode == "mig" else None,
                    compute,
                    memory,
                )
            )
        return tenancies(placed)

    def _job(self, job_id: int) -> JobRecord | None:
        try:
            return self.store.job(job_id)
        except Exception:  # not in the store (or unreadable): nothing to read or learn of it
            return None

    def _reader(self, attempt: LiveAttempt) -> ProgressReader | None:
        job = self._job(attempt.attempt.job_id)
        return None if job is None else _log_reader(attempt, job)

    def _tracker(self, attempt: LiveAttempt, tenancy: Tenancy) -> Tracker | None:
        if (job := self._job(attempt.attempt.job_id)) is None:
            return None
        reader = _log_reader(attempt, job)
        return Tracker(
            attempt.attempt.id, job.id, _key(job), job.owner.uid, reader, Progress(tenancy)
        )

    def _steady_sm(self, job_id: int) -> float | None:
        """The steady SM share (%) remembered alone for the job's command, or None."""
        known = self.alone.get(_key(job)) if (job := self._job(job_id)) else None
        return None if known is None else known.sm_pct

    def _sample_alone(self, tracker: Tracker, gpu: int) -> None:
        """Add the latest telemetry of the GPU the tracker's attempt has to itself, where it
        was taken after the attempt's first progress line was read (its steady phase, where
        its rate is measured: not its start-up), read both SM activity and kernel-active time
        and no process outside gpudesk (other than an MPS server) was on it."""
        latest = self.telemetry.monitor.latest
        if latest is None or latest.taken_at <= tracker.steady_after:
            return
        reading = latest.gpu(gpu)
        if reading is None:
            return
        sm, active = reading.sm_activity_pct, reading.kernel_active_pct
        foreign = any(
            p.job_id not in (None, tracker.job_id) or (p.job_id is None and p.mps != MPS_SERVER)
            for p in reading.processes
        )
        if sm is None or active is None or foreign:
            return
        tracker.activity.add(latest.taken_at, sm / 100.0, active / 100.0)

    def _close_alone(self, tracker: Tracker) -> AloneActivity:
        """The tracker's time alone ended: what telemetry read of it there measures the
        kernel-active gap, if enough of it was read. Returns what it read."""
        activity, tracker.activity = tracker.activity, AloneActivity()
        gpu_model = self._gpu_model(tracker.progress.tenancy.gpu)
        obs = activity.observation(self.model.params(gpu_model), self.min_s)
        if obs is not None and obs.kernel_active is not None:
            seconds = (activity.last_at or 0.0) - (activity.first_at or 0.0)
            self._learn(tracker, gpu_model, obs, partial(telemetry_lesson, obs, seconds, gpu_model))
        return activity

    def _close(self, tracker: Tracker) -> None:
        """The tracker's interval ended: learn from it if it counts."""
        alone_sm = self._close_alone(tracker).sm_pct if tracker.progress.tenancy.alone else None
        interval = tracker.progress.end(self.min_s)
        if interval is None:
            return
        self.counts.intervals += 1
        if interval.tenancy.alone:
            self._remember_alone(tracker.alone_key, interval.rate, alone_sm)
            return
        alone = tracker.progress.alone_rate
        if alone is None and tracker.alone_key in self.alone:
            alone = self.alone[tracker.alone_key].rate
        if alone is None or alone <= 0:
            self.counts.without_alone_rate += 1
            return
        gpu_model = self._gpu_model(interval.tenancy.gpu)
        tenants = (tracker.job_id, *(o.job_id for o in interval.tenancy.others))
        sm_pcts = [self._steady_sm(job_id) for job_id in tenants]
        obs = interval.observation(alone, sm_pcts, self.model.params(gpu_model))
        if obs is None:
            self.counts.without_measured_sm += 1
            return
        self._learn(tracker, gpu_model, obs, partial(progress_lesson, interval, obs, gpu_model))

    def _learn(self, tracker: Tracker, gpu_model: str, obs: Observation, lesson: Lesson) -> None:
        """Tell the learner what the tracker's job showed, and the job's events what that
        taught (`lesson(parameter, its new value)`)."""
        try:
            name = self.observe(gpu_model, obs, "learned", owner=tracker.owner)
        except Exception:
            log.exception("could not store what job %d showed", tracker.job_id)
            return
        if name is not None:
            self.counts.observations += 1
            value = self.learner.params(gpu_model).to_dict()[name]
            self._event(tracker.job_id, lesson(name, value))

    def _event(self, job_id: int, message: str) -> None:
        """What a job taught the model, in the log and as a `model` event."""
        log.info("job %d: %s", job_id, message)
        try:
            self.store.add_event("model", message, job_id=job_id)
        except Exception:
            log.exception("could not record a learning event")

    def _remember_alone(self, key: str, rate: float, sm_pct: float | None) -> None:
        try:
            self.store.record_alone_rate(key, rate, sm_pct)
        except Exception:  # a hint for later runs; never worth failing a step over
            log.exception("could not record a rate alone")
            return
        self.alone[key] = alone_rate_after(self.alone.get(key), rate, time.time(), sm_pct)


def _key(job: JobRecord) -> str:
    """Whose command it is: the key its rate and steady SM share alone are remembered by."""
    return owner_key(job.owner.uid, signature(job.spec.command, job.spec.workdir))


def _log_reader(attempt: LiveAttempt, job: JobRecord) -> ProgressReader:
    """A reader of the attempt's log: one this engine started is read from its start; one
    re-adopted after a restart from now on (its earlier tenancy is unknown)."""
    owner_uid = runner.log_owner_uid(job.owner)
    path = attempt.attempt.log_path
    if attempt.is_child:
        return ProgressReader(path, 0, owner_uid)
    return ProgressReader.from_end(path, owner_uid)
