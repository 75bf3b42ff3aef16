"""Preemption on a full station (docs/preemption.md): after each placement pass, ask the policy
layer's rule (gpudesk.policy.preemption) whether a running preemptible job should give way to
a waiting one, and if so send it its signal (Attempts.preempt: SIGTERM after its grace, then
SIGKILL as a cancel). The attempt then ends "preempted" and its job goes back to the queue
(Attempts' settle, policy.retry), to resume where it is placed next.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Sequence

from gpudesk.core.records import JobRecord
from gpudesk.engine.attempts import Attempts
from gpudesk.engine.events import EventPublisher
from gpudesk.engine.learning import StationLearning
from gpudesk.engine.live_attempt import LiveAttempt
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.schema import UnknownJob
from gpudesk.policy import preemption
from gpudesk.policy.policy import PlacementPolicy, StationView

log = logging.getLogger("gpudesk.engine")

# While a preemptible job runs and a GPU job waits, the rule is asked again this often even if
# nothing changes: its terms (run time, remaining time) move with the clock.
RECHECK_S = 5.0


class Preempting:
    def __init__(
        self, attempts: Attempts, store: Store, events: EventPublisher, learning: StationLearning
    ) -> None:
        self.attempts = attempts
        self.store = store
        self.events = events
        self.learning = learning

    def candidates(self) -> list[tuple[LiveAttempt, JobRecord]]:
        """The running GPU attempts whose jobs are preemptible, with their jobs."""
        found = []
        for live in self.attempts:
            if not live.gpus or not live.preemptible or live.suspended_since is not None:
                continue  # a suspended job stays as its owner stopped it
            try:
                job = self.store.job(live.attempt.job_id)
            except UnknownJob:
                continue
            if job.spec.preemptible and not job.cancel_requested:
                found.append((live, job))
        return found

    def consider(
        self, queue: Sequence[JobRecord], view: StationView, policy: PlacementPolicy
    ) -> bool:
        """Preempt one job where the rule calls for it. True while the rule is worth asking
        again soon (a GPU job waits and a preemptible job runs)."""
        if not any(job.spec.gpus for job in queue):
            return False
        found = self.candidates()
        if not found:
            return False
        # jobs told to leave, and the waiting jobs they make room for
        in_flight = {live.attempt.job_id for live, _ in found if live.preempted_for is not None}
        served = {live.preempted_for for live, _ in found if live.preempted_for is not None}
        running = self._preemptible(found)
        choice = preemption.choose(
            queue,
            view,
            running,
            preemption.placed_by(policy),
            skip=frozenset(in_flight) | frozenset(s for s in served if s is not None),
        )
        if choice is not None:
            self._preempt(choice, found)
        return True

    def explain(self, job: JobRecord, view: StationView, policy: PlacementPolicy) -> str | None:
        """Why no running preemptible job gives way to the waiting `job` (the rule's words,
        `preemption.held_back`), or None where none runs or the job never preempts."""
        found = self.candidates()
        if not found:
            return None
        leaving = {
            live.attempt.job_id: live.preempted_for
            for live, _ in found
            if live.preempted_for is not None
        }
        return preemption.held_back(
            job, view, self._preemptible(found), preemption.placed_by(policy), leaving
        )

    def _preemptible(
        self, found: list[tuple[LiveAttempt, JobRecord]]
    ) -> list[preemption.Preemptible]:
        """The running preemptible jobs not yet told to leave, as the rule weighs them."""
        return [
            preemption.Preemptible(
                job.id,
                job.spec.priority,
                live.elapsed_s() or 0.0,
                estimate.measured_s,
                job.spec.preempt_grace_s,
                # what resuming costs it: taken as what saving did, its grace (assumption;
                # docs/preemption.md)
                job.spec.preempt_grace_s,
            )
            for live, job in found
            if live.preempted_for is None
            for estimate in (self.learning.remaining(live),)
        ]

    def _preempt(
        self, choice: preemption.Preemption, found: list[tuple[LiveAttempt, JobRecord]]
    ) -> None:
        live, job = next(lj for lj in found if lj[1].id == choice.victim)
        sig = signal.Signals[job.spec.preempt_signal]
        grace = job.spec.preempt_grace_s
        if not self.attempts.preempt(live, sig, grace, choice.for_job):
            return  # it has just ended: the next pass sees the room it left
        message = (
            f"{choice.reason}; sent {sig.name}, SIGTERM after {grace:g} s unless it has left "
            f"(at {time.strftime('%H:%M:%S')})"
        )
        log.info("job %d: %s", job.id, message)
        self.store.add_event("preempt", message, job_id=job.id)
        self.events.job(job.id, message)
