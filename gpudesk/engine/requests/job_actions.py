"""Job control requests: cancel, hold, release, priority and requeue, each acting on a list of
jobs named by id or name, each job's outcome its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from functools import partial

from gpudesk import diskspace
from gpudesk.core import protocol
from gpudesk.core.identity import Caller
from gpudesk.core.protocol import ProtocolError
from gpudesk.core.records import JobRecord
from gpudesk.core.wire.jobs import ActionOutcome, ActionResult
from gpudesk.core.wire.requests import CancelArgs, JobRefsArgs, PriorityArgs, ReleaseArgs
from gpudesk.engine.job_control import JobOutcome
from gpudesk.engine.offloop import SLICE_JOBS, NextTurn, in_turns
from gpudesk.engine.requests.common import Handler, Requests
from gpudesk.policy import user_limits

log = logging.getLogger("gpudesk.engine")

GONE = "no longer a job: its submission to Slurm failed as a whole, and it was forgotten"


class JobActionRequests(Requests):
    """The job-control ops (the work is `engine/job_control.py`'s)."""

    def ops(self) -> dict[str, Handler]:
        return {
            "cancel": self.cancel,
            "hold": self.hold,
            "release": self.release,
            "priority": self.priority,
            "requeue": self.requeue,
        }

    def act_on_jobs(
        self,
        args: JobRefsArgs,
        caller: Caller,
        verb: str,
        action: Callable[[JobRecord], JobOutcome] | None,
        at_once: Callable[[list[JobRecord]], dict[int, JobOutcome]] | None = None,
    ) -> ActionResult | NextTurn:
        """The shape of every job-control op: resolve all of `args["jobs"]` (ids or names)
        first, so one unknown job fails the request with none touched, then act on each job
        once; the outcomes in the order given. A job the caller may not `verb` (not theirs,
        and they are no admin) is refused on its own: its outcome names the rule, the others
        go on; so is one whose change the store could not take (a full disk). `at_once`: the
        station's jobs it takes (every job, where there is no `action`), their changes stored
        in one transaction (a refused commit leaves each as it was); the rest one by one
        (`action`), those before a refused one staying changed.

        The jobs are acted on SLICE_JOBS at a time, a slice a turn of the loop (`in_turns`),
        each read as it is when its slice comes: every other client is answered, and
        placement runs, between two slices. Until its slice has come, a queued job named here
        is not started, and a later request naming it waits for this one
        (policy/job_claims.py)."""
        ids = self._find_ids(args.jobs, "jobs", caller)
        queue, access = self.parts.queue, self.parts.access
        # not claimed: a queued job the caller may not act on (another member's), so that
        # naming someone's jobs, each refused, cannot keep them from starting or her waiting
        claimed = [i for i in ids if (j := queue.get(i)) is None or access.may_act_on(caller, j)]
        act = partial(self._act_on, caller=caller, verb=verb, action=action, at_once=at_once)
        return in_turns(self._in_slices(ids, claimed, act))

    def _in_slices(
        self, ids: list[int], claimed: list[int], act: Callable[[list[int]], list[ActionOutcome]]
    ) -> Generator[None, None, ActionResult]:
        """`act` on `ids`, SLICE_JOBS a turn, once no earlier request has any of `claimed`
        still to act on; each slice's jobs let go as soon as it is done."""
        claims = self.parts.queue.claims
        ticket = claims.take(claimed)
        results: list[ActionOutcome] = []
        try:
            while not claims.first(ticket, claimed):
                yield
            for start in range(0, len(ids), SLICE_JOBS):
                if start:
                    yield
                part = ids[start : start + SLICE_JOBS]
                results += act(part)
                claims.drop(ticket, part)
        finally:
            claims.drop(ticket, ids)  # those of a request cut short by an error too
        return ActionResult(results=results)

    def _act_on(
        self,
        ids: list[int],
        caller: Caller,
        verb: str,
        action: Callable[[JobRecord], JobOutcome] | None,
        at_once: Callable[[list[JobRecord]], dict[int, JobOutcome]] | None,
    ) -> list[ActionOutcome]:
        """One slice's outcomes: its jobs read as they are now (a queued one as the queue holds
        it, the others in one query), then acted on as `act_on_jobs` says."""
        queue, backends = self.parts.queue, self.parts.control.backends
        read = {i: job for i in ids if (job := queue.get(i)) is not None}
        if len(read) < len(ids):
            read.update(
                (j.id, j) for j in self.parts.store.jobs(ids=[i for i in ids if i not in read])
            )
        jobs = [read[i] for i in ids if i in read]
        access = self.parts.access  # and a job that ended, its end not yet stored (`_ended`)
        refusals = {
            job.id: access.job_refusal(caller, job, f"{verb} it", outcome=True)
            or self._ended(job.id)
            for job in jobs
        }
        batch = [
            job
            for job in jobs
            if not refusals[job.id] and (action is None or backends.for_job(job) is backends.local)
        ]
        done = at_once(batch) if at_once and batch else {}
        results = []
        for job_id in ids:
            if (job := read.get(job_id)) is None:  # forgotten since: its Slurm submission failed
                results.append(ActionOutcome(id=job_id, name="", outcome=GONE, ok=False))
                continue
            refusal = refusals[job.id]
            outcome = JobOutcome(refusal, ok=False) if refusal else done.get(job.id)
            if outcome is None:
                assert action is not None  # without one, `at_once` answers for every job
                outcome = self._acted(job, action)
            results.append(
                ActionOutcome(id=job.id, name=job.name, outcome=outcome.message, ok=outcome.ok)
            )
        return results

    def _acted(self, job: JobRecord, action: Callable[[JobRecord], JobOutcome]) -> JobOutcome:
        """`action`'s outcome for `job`; one the store could not save (the disk holding it is
        full: the action changed nothing) is said as that, not failing the others."""
        try:
            return action(job)
        except Exception as exc:
            root = self.parts.home.root
            if not diskspace.is_full(exc, root):
                raise
            log.warning("job %d left as it was: %s", job.id, exc)
            return JobOutcome(diskspace.job_text(root), ok=False)

    def cancel(self, args: CancelArgs, caller: Caller) -> ActionResult | NextTurn:
        control, grace = self.parts.control, args.grace
        queued = control.backends.local.cancel_all  # a running job's cancel is one by one
        return self.act_on_jobs(args, caller, "cancel", lambda j: control.cancel(j, grace), queued)

    def hold(self, args: JobRefsArgs, caller: Caller) -> ActionResult | NextTurn:
        """{"jobs": [refs]}: hold queued jobs. The placement policy never starts a held job; it
        keeps its place in the queue. Outcomes: "held", "already held", or (ok false) why
        not, e.g. "running: only a queued job can be held"."""
        control = self.parts.control
        at_once = partial(control.backends.local.set_held_all, held=True)
        return self.act_on_jobs(args, caller, "hold", control.hold, at_once)

    def release(self, args: ReleaseArgs, caller: Caller) -> ActionResult | NextTurn:
        """{"jobs": [refs]}: release held jobs (`in_parts`: by the client that sent them in
        parts). Outcomes: "released", "not held" (a queued job free to start), or (ok false)
        why not, e.g. "running: only a held job can be released"."""
        control, in_parts = self.parts.control, args.in_parts
        at_once = partial(control.backends.local.set_held_all, held=False, in_parts=in_parts)
        return self.act_on_jobs(args, caller, "release", control.release, at_once)

    def priority(self, args: PriorityArgs, caller: Caller) -> ActionResult | NextTurn:
        """{"jobs": [refs], "priority": int} sets the priority (submit's range), or
        {"jobs": [refs], "delta": int} moves it (+1 raises, -1 lowers; kept in the range).
        A queued job moves in the queue at once; a running or finished one keeps the new
        priority for a retry or a requeue, and its outcome says it changes nothing now. A
        caller who is no admin may not raise one above the default (policy/user_limits.py).
        Every job's change is stored with the others' (engine/store/job_changes.py)."""
        control, access = self.parts.control, self.parts.access
        priority, step = args.priority, args.delta
        if (priority is None) == (step is None):
            raise ProtocolError(
                protocol.INVALID_ARGS,
                "give either 'priority' (the new value) "
                "or 'delta' (+1 raises, -1 lowers), not both",
            )
        admin = access.is_admin(caller)

        def wanted(job: JobRecord) -> int | JobOutcome:
            new = control.moved_priority(job, step or 0) if priority is None else priority
            old, admins = job.spec.priority, access.admins
            refusal = None if admin else user_limits.priority_refusal(old, new, admins)
            return JobOutcome(refusal, ok=False) if refusal else new

        at_once = partial(control.set_priorities, wanted=wanted)
        return self.act_on_jobs(args, caller, "re-prioritize", None, at_once)

    def requeue(self, args: JobRefsArgs, caller: Caller) -> ActionResult | NextTurn:
        """{"jobs": [refs]}: put finished jobs (failed, cancelled, or succeeded to rerun them)
        back in the queue as the same job, with a fresh attempt budget; attempt numbers
        continue. Outcomes: "requeued", "already queued", or (ok false)
        "running: only a finished job can be requeued", or the refusal when its owner would
        hold more queued jobs than `[station] max_queued_per_user` allows (whoever asks: the
        limit is the owner's)."""
        control = self.parts.control
        at_once = control.backends.local.requeue_all
        return self.act_on_jobs(args, caller, "requeue", control.requeue, at_once)
