"""Reading jobs: `jobs` (a page of the listing), `show` (one job in full) and `log` (a piece of an
attempt's output, read by the engine for a client that may not read the file). A job's reply is
its record, then its backend's part (engine/backends/: where it runs, its log, its wait code, its
attempts), each backend's read once for a page.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator

import msgspec

from gpudesk import joblog
from gpudesk.core import protocol
from gpudesk.core.identity import Caller, user_arg
from gpudesk.core.job_changes import held_text, unsaved_view
from gpudesk.core.jobs import JobState
from gpudesk.core.protocol import ProtocolError
from gpudesk.core.records import JobRecord
from gpudesk.core.spec_view import spec_view
from gpudesk.core.wire.jobs import ArrayTasksView, DamagedJob, JobDetail, JobList, JobView, LogChunk
from gpudesk.core.wire.requests import JobsArgs, LogArgs, ShowArgs
from gpudesk.engine.backends.base import JobsView, OwnerRead
from gpudesk.engine.offloop import Later, NextTurn, in_turns
from gpudesk.engine.requests.common import Handler, Requests, by_uid
from gpudesk.text import ends_in_c1_lead, printable_bytes
from gpudesk.trust import UntrustedFileError


class ListingRequests(Requests):
    """The read-only job requests."""

    def ops(self) -> dict[str, Handler]:
        return {
            "jobs": by_uid(self.jobs),
            "show": self.show,
            "log": self.log,
        }

    def jobs(self, args: JobsArgs, caller: Caller) -> JobList | NextTurn:
        """One page of jobs, oldest first, at most `limit` (and at most JOBS_PAGE_CAP): from
        the oldest, or after `after_id`; with `limit` alone the newest, or with `before_id` the
        newest before it. `more` says rows match beyond the page, and `after_id` or
        `before_id` where to go on; `total` (with `count`) how many match; `damaged` the rows
        skipped because the store cannot read them. Archived jobs only with `archived`, or
        when named by `ids`. With a `name`, a slice of the ids a turn (store/listing.py)."""
        return in_turns(self._jobs(args, caller))

    def _jobs(self, args: JobsArgs, caller: Caller) -> Generator[None, None, JobList]:
        states = None if args.states is None else [JobState(s) for s in args.states]
        group, ids, limit = args.group, args.ids, args.limit
        if (problem := args.text_problem()) is not None:  # the group's and the name's
            raise ProtocolError(protocol.INVALID_ARGS, problem)
        cursors = {
            key: value
            for key, value in (("after_id", args.after_id), ("before_id", args.before_id))
            if value is not None
        }
        if len(cursors) > 1:
            raise ProtocolError(
                protocol.INVALID_ARGS,
                "give 'after_id' (oldest first) or 'before_id' (newest first), not both",
            )
        owner = self.parts.access.actable_owner(caller, user_arg(args.user), args.actable)
        # newest first: with `before_id`, or with `limit` and no `after_id` (the newest N)
        descending = "before_id" in cursors or (limit is not None and "after_id" not in cursors)
        page = yield from self.parts.store.jobs_page_in_slices(
            limit=min(limit or protocol.JOBS_PAGE_CAP, protocol.JOBS_PAGE_CAP),
            states=states,
            group=group,
            name=args.name,
            ids=ids,
            owner_uid=owner,
            after_id=cursors.get("after_id"),
            before_id=cursors.get("before_id"),
            newest=descending,
            archived=args.archived,
            count=args.count,
        )
        jobs = page.jobs
        view_of = self.parts.control.backends.views(jobs)  # each backend's part, read once
        result = [self.job_reply(job, caller, view_of(job)) for job in jobs]
        self._add_wait_reasons(jobs, result, view_of)
        if args.usage:
            self._add_usage(jobs, result, view_of)
        cursor = page.cursor if page.more else None
        return JobList(
            jobs=result,
            more=page.more,
            before_id=cursor if descending else None,
            after_id=None if descending else cursor,
            total=page.total,
            damaged=[DamagedJob(id=d.id, reason=d.reason) for d in page.damaged],
            simulated=self.parts.control.backends.local.simulated(),
            drain=self.parts.scheduler.drain.state,
            own_only=args.user is None and owner is not None,  # `actable` narrowed it
        )

    def _add_usage(
        self,
        jobs: list[JobRecord],
        replies: list[JobView],
        view_of: Callable[[JobRecord], JobsView],
    ) -> None:
        """Each listed job's usage, its last slot and the GPU-seconds it held (`jobs` with
        `usage`; a Slurm job's, Slurm's allocation), for the whole page at once."""
        usage = self._usage([job.id for job in jobs])
        allocations = self.parts.store.allocations([job.id for job in jobs], time.time())
        for index, job in enumerate(jobs):
            stored = allocations.get(job.id, (None, 0.0))
            last_slot, gpu_s = view_of(job).allocation(job, stored)
            replies[index] = msgspec.structs.replace(
                replies[index], usage=usage.get(job.id), last_slot=last_slot, gpu_s=gpu_s
            )

    def job_reply(self, job: JobRecord, caller: Caller, view: JobsView) -> JobView:
        """A job on the wire, as `caller` may see it: its record, then its backend's part (while
        it runs, where: `slot`, a label; `gpus`, `mode` and `mig_slice`, the same as data; its
        log; a Slurm job's `slurm`), then the shared loader it reads."""
        spec = spec_view(job.spec, secrets=self._sees_secrets(caller, job.owner.uid))
        part = view.fields(job)
        reply = JobView(
            id=job.id,
            name=job.spec.name,
            state=job.shown_state.value,
            group=job.spec.group,
            submitted_at=job.submitted_at,
            started_at=job.started_at,
            ended_at=job.ended_at,
            attempts=job.attempts,
            max_attempts=job.spec.max_attempts,
            exit_code=job.exit_code,
            reason=job.reason,
            cancel_requested=job.cancel_requested,
            held=job.held,
            attempts_before_requeue=job.attempts_before_requeue,
            preemptions=job.preemptions,
            suspended_at=job.suspended_at,
            suspended_s=part.suspended_s,
            user=job.user,
            uid=job.owner.uid,
            spec=spec,
            slot=part.slot,
            gpus=list(part.gpus),
            mode=part.mode,
            mig_slice=part.mig_slice,
            pgid=part.pgid,
            log=part.log,
            # the shared loader it reads: its dataset's, or the dataset's variant for its selection
            loader=self.parts.loaders.loader_for(job.spec.dataset, job.spec.selection),
            slurm=part.slurm,
            remaining=part.remaining,
            unsaved=part.unsaved,
        )
        live = self.parts.attempts.unsaved().get(job.id)
        return reply if live is None else unsaved_view(reply, live.unsaved, live.unsaved_why)

    @staticmethod
    def _add_wait_reasons(
        jobs: list[JobRecord], replies: list[JobView], view_of: Callable[[JobRecord], JobsView]
    ) -> None:
        """Each queued job's `wait_reason`, the short code `gpudesk queue` shows as squeue
        does (its backend's: the station's Scheduler.wait_codes, read for the whole page at
        once; a Slurm job's is Slurm's own)."""
        for index, job in enumerate(jobs):
            if job.state is JobState.QUEUED:
                reason = view_of(job).wait_code(job)
                replies[index] = msgspec.structs.replace(replies[index], wait_reason=reason)

    def show(self, args: ShowArgs, caller: Caller) -> JobDetail:
        parts = self.parts
        job = self._find(args.job, "job", caller)
        backend = parts.control.backends.for_job(job)
        view = backend.view([job])
        views = [self.job_reply(job, caller, view)]
        self._add_wait_reasons([job], views, lambda _job: view)
        shown = protocol.SHOWN_EVENTS  # the latest: a job requeued for weeks has thousands
        events, waiting = parts.store.events(job.id, shown + 1), None
        earlier = parts.store.event_count(job.id) - shown if len(events) > shown else 0
        if job.state is JobState.QUEUED and job.held:  # by its user, or its client (in parts)
            waiting = held_text(job, events)
        elif job.state is JobState.QUEUED:
            waiting = backend.explain(job)
        env = None
        if args.env:
            # The environment can hold secrets: the owner's and the admins' to read only.
            refusal = parts.access.job_refusal(caller, job, "see its environment")
            if refusal:
                raise ProtocolError(protocol.REFUSED, refusal)
            env = {**parts.store.base_env(job.id), **job.spec.env}
        # what `gpudesk show --plot` draws; anyone may read it, as the usage
        series = parts.telemetry.job_series(job.id).view() if args.series else None
        return JobDetail(
            job=views[0],
            attempts=view.attempts(job),
            events=[e.view() for e in events[-shown:]],
            waiting=waiting,
            usage=self._usage([job.id]).get(job.id),
            env=env,
            tracking=parts.tracking.job_view(job, self._sees_secrets(caller, job.owner.uid)),
            series=series,
            remaining=views[0].remaining,
            simulated=self.parts.control.backends.local.simulated(),
            earlier_events=earlier,
            array=ArrayTasksView.of(parts.store.array_tasks([job.id]).get(job.id)),
        )

    def log(self, args: LogArgs, caller: Caller) -> LogChunk | Later[tuple[bytes, int]]:
        """{"job", "attempt"?, "offset"?, "max_bytes"?}: at most `max_bytes` of an attempt's
        output (default: its latest) from stream position `offset`, read by the engine, for a
        client that may not read the file itself (an admin reading another user's job on a
        system engine; the owner where the state folder is not theirs to enter). The owner's
        and the admins' only (policy/access.py). `data` is base64; `skipped` the bytes before it
        that were rotated away; `next` the position after it; `end` the stream's end now."""
        parts = self.parts
        job = self._find(args.job, "job", caller)
        refusal = parts.access.job_refusal(caller, job, "read its logs")
        if refusal:
            raise ProtocolError(protocol.REFUSED, refusal)
        number, offset, limit = args.attempt_of(job.id, job.attempts), args.offset, args.max_bytes
        place = parts.control.backends.for_job(job).log(job, number)
        spelled_out = caller.uid != job.owner.uid

        def reply(data: bytes, skipped: int, position: int, end: int) -> LogChunk:
            if spelled_out:
                # someone else's output (an admin reading it) never drives their terminal: its
                # control characters are spelled out (gpudesk.text); a \xc2 that ends the piece
                # waits for the next one, which may make it a C1 control
                if ends_in_c1_lead(data):
                    data, position = data[:-1], position - 1
                data = printable_bytes(data)
            return LogChunk(  # msgspec sends `data` as base64
                job=job.id, attempt=number, data=data, skipped=skipped, next=position, end=end
            )

        if isinstance(place, OwnerRead):  # read by a process run as the job's owner
            read = place.read
            return Later(
                lambda: read(offset, limit),
                lambda got: reply(got[0], 0, offset + len(got[0]), got[1]),
                place.bound_s,
                place.what,
            )
        path, owner_uid = place.path, place.owner_uid
        # On the loop, never waiting on the log's lock (wait=False): a job can hold its own
        # output.log locked for good, and a wait here stalled every client 2 x 3 s per request
        # (issue 36). Reading it is safe unlocked: the loop is what rotates it (gpudesk.joblog).
        # Not moved off the loop: the files are opened O_NONBLOCK and regular, so a read of
        # at most `limit` bytes does not wait on anyone.
        stream = joblog.LogStream(path, offset, owner_uid, wait=False)
        try:
            piece = stream.read(limit) if limit else None
            end = joblog.stream_end(path, owner_uid, wait=False)
        except UntrustedFileError as exc:
            raise ProtocolError(protocol.REFUSED, joblog.refusal(job.id, exc)) from None
        data = piece.data if piece else b""
        skipped = piece.skipped if piece else 0
        return reply(data, skipped, stream.position, end)
