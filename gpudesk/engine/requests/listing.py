"""Reading jobs: `jobs` (a page of the listing), `show` (one job in full) and `log` (a piece of an
attempt's output, read by the engine for a client that may not read the file).
"""

from __future__ import annotations

import time
from pathlib import Path

import msgspec

from gpudesk import joblog
from gpudesk.core import protocol
from gpudesk.core.identity import Caller
from gpudesk.core.jobs import (
    JobState,
)
from gpudesk.core.protocol import ProtocolError
from gpudesk.core.records import JobRecord
from gpudesk.core.wire.jobs import (
    AttemptView,
    DamagedJob,
    JobDetail,
    JobList,
    JobView,
    LogChunk,
)
from gpudesk.core.wire.requests import JobsArgs, LogArgs, ShowArgs
from gpudesk.engine import runner
from gpudesk.engine.backends import slurm_views
from gpudesk.engine.offloop import Later
from gpudesk.engine.requests.common import Handler, user_arg
from gpudesk.engine.requests.job_views import JobViews
from gpudesk.engine.store.slurm import SlurmRow
from gpudesk.slurm import logs as slurm_logs
from gpudesk.slurm.as_owner import acts_for_other
from gpudesk.text import ends_in_c1_lead, is_text, printable_bytes
from gpudesk.trust import UntrustedFileError


class ListingRequests(JobViews):
    """The read-only job requests."""

    def ops(self) -> dict[str, Handler]:
        return {
            "jobs": self.jobs,
            "show": self.show,
            "log": self.log,
        }

    def jobs(self, args: JobsArgs, caller: Caller) -> JobList:
        """One page of jobs, oldest first, at most `limit` (and at most JOBS_PAGE_CAP): from
        the oldest, or after `after_id`; with `limit` alone the newest, or with `before_id` the
        newest before it. `more` says rows match beyond the page, and `after_id` or
        `before_id` where to go on; `total` (with `count`) how many match; `damaged` the rows
        skipped because the store cannot read them. Archived jobs only with `archived`, or
        when named by `ids`."""
        states = None if args.states is None else [JobState(s) for s in args.states]
        group, ids, limit = args.group, args.ids, args.limit
        if group is not None and not is_text(group):
            raise ProtocolError(protocol.INVALID_ARGS, "'group' must be a string (UTF-8 text)")
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
        owner = user_arg(args.user)
        # newest first: with `before_id`, or with `limit` and no `after_id` (the newest N)
        descending = "before_id" in cursors or (limit is not None and "after_id" not in cursors)
        page = self.parts.store.jobs_page(
            limit=min(limit or protocol.JOBS_PAGE_CAP, protocol.JOBS_PAGE_CAP),
            states=states,
            group=group,
            ids=ids,
            owner_uid=owner,
            after_id=cursors.get("after_id"),
            before_id=cursors.get("before_id"),
            newest=descending,
            archived=args.archived,
            count=args.count,
        )
        jobs = page.jobs
        live_by_job = self.parts.attempts.by_job()
        # one query for every Slurm job listed, not one per job: a run can list thousands
        on_slurm = self.parts.store.slurm_jobs([j.id for j in jobs if j.spec.cluster is not None])
        result = [
            self.job_reply(job, caller, live_by_job.get(job.id), on_slurm.get(job.id))
            for job in jobs
        ]
        self._add_wait_reasons(jobs, result, on_slurm)
        if args.usage:
            self._add_usage(jobs, result, on_slurm)
        cursor = page.cursor if page.more else None
        return JobList(
            jobs=result,
            more=page.more,
            before_id=cursor if descending else None,
            after_id=None if descending else cursor,
            total=page.total,
            damaged=[DamagedJob(id=d.id, reason=d.reason) for d in page.damaged],
            simulated=self._simulated(),
        )

    def _add_usage(
        self, jobs: list[JobRecord], replies: list[JobView], on_slurm: dict[int, SlurmRow]
    ) -> None:
        """Each listed job's usage, its last slot and the GPU-seconds it held (`jobs` with
        `usage`), for the whole page at once."""
        usage = self._usage([job.id for job in jobs])
        allocations = self.parts.store.allocations([job.id for job in jobs], time.time())
        for index, job in enumerate(jobs):
            last_slot, gpu_s = allocations.get(job.id, (None, 0.0))
            row = on_slurm.get(job.id)
            if row is not None and job.started_at is not None:
                # Slurm allocated it: the GPUs it asked for, over its wall time
                last_slot = slurm_views.slot(row)
                ended = job.ended_at or time.time()
                gpu_s = job.spec.gpus * (ended - job.started_at)
            replies[index] = msgspec.structs.replace(
                replies[index], usage=usage.get(job.id), last_slot=last_slot, gpu_s=gpu_s
            )

    def show(self, args: ShowArgs, caller: Caller) -> JobDetail:
        parts = self.parts
        job = self._find(args.job, "job")
        row = parts.store.slurm_job(job.id) if job.spec.cluster is not None else None
        views = [self.job_reply(job, caller, parts.attempts.by_job().get(job.id), row)]
        self._add_wait_reasons([job], views, {job.id: row} if row else {})
        attempts = [self.attempt_reply(a) for a in parts.store.attempts(job.id)]
        if row is not None and job.attempts:  # Slurm ran it: its one attempt, as Slurm tells
            attempts = [msgspec.convert(slurm_views.attempt(job, row), AttemptView)]
        waiting = None
        if job.state is JobState.QUEUED and job.held:
            waiting = f"held: it will not start until released (gpudesk release {job.id})"
        elif job.state is JobState.QUEUED and row is not None:
            waiting = slurm_views.explain_wait(row)
        elif job.state is JobState.QUEUED:
            waiting = parts.scheduler.explain_wait(job)
        env = None
        if args.env:
            # The environment can hold secrets: the owner's and the admins' to read only.
            refusal = parts.access.job_refusal(caller, job, "see the environment of")
            if refusal:
                raise ProtocolError(protocol.REFUSED, refusal)
            env = {**parts.store.base_env(job.id), **job.spec.env}
        # what `gpudesk show --plot` draws; anyone may read it, as the usage
        series = parts.telemetry.job_series(job.id).view() if args.series else None
        return JobDetail(
            job=views[0],
            attempts=attempts,
            events=[e.view() for e in parts.store.events(job.id)],
            waiting=waiting,
            usage=self._usage([job.id]).get(job.id),
            env=env,
            tracking=parts.tracking.job_view(job, self._sees_secrets(caller, job.owner.uid)),
            series=series,
        )

    def log(self, args: LogArgs, caller: Caller) -> LogChunk | Later[slurm_logs.LogRead]:
        """{"job", "attempt"?, "offset"?, "max_bytes"?}: at most `max_bytes` of an attempt's
        output (default: its latest) from stream position `offset`, read by the engine, for a
        client that may not read the file itself (an admin reading another user's job on a
        system engine; the owner where the state folder is not theirs to enter). The owner's
        and the admins' only (engine/access.py). `data` is base64; `skipped` the bytes before it
        that were rotated away; `next` the position after it; `end` the stream's end now."""
        parts = self.parts
        job = self._find(args.job, "job")
        refusal = parts.access.job_refusal(caller, job, "read the logs of")
        if refusal:
            raise ProtocolError(protocol.REFUSED, refusal)
        number, offset, limit = _log_range(args, job)
        path = parts.home.attempt_dir(job.id, number) / runner.LOG_FILE
        # whose files the log and its parts must be: its owner's where the job ran as them,
        # else the engine's own (gpudesk.joblog reads them as files a user may have planted)
        owner_uid = runner.log_owner_uid(job.owner)
        row = parts.store.slurm_job(job.id) if job.spec.cluster is not None else None
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

        if row is not None and acts_for_other(job.owner):
            # in her folder, every name of whose path is hers: read by a process run as her,
            # off the loop (the process may take up to slurm_logs.READ_S)
            output, owner = row.output, job.owner

            def read_hers() -> slurm_logs.LogRead:
                try:
                    return slurm_logs.read_as_owner(owner, output, offset, limit)
                except slurm_logs.LogUnreadable as exc:
                    raise ProtocolError(protocol.REFUSED, f"job {job.id}'s log: {exc}") from None

            return Later(
                read_hers,
                lambda read: reply(read.data, 0, offset + len(read.data), read.end),
                slurm_logs.READ_S + 5.0,
                f"reading job {job.id}'s log as {job.owner.name}",
            )
        if row is not None:
            path, owner_uid = Path(row.output), job.owner.uid
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


def _log_range(args: LogArgs, job: JobRecord) -> tuple[int, int, int]:
    """`log`'s attempt (default: the latest), stream position and byte limit: LogArgs checked
    their types and bounds; the attempt is checked against the job's."""
    number = job.attempts if args.attempt is None else args.attempt
    if job.attempts == 0:
        raise ProtocolError(protocol.INVALID_ARGS, f"job {job.id} has not started yet")
    if number > job.attempts:
        raise ProtocolError(
            protocol.INVALID_ARGS,
            f"'attempt': job {job.id} has attempts 1 to {job.attempts}",
        )
    return number, args.offset, args.max_bytes
