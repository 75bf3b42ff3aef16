"""`submit` and `check_submit`: a request's jobs checked whole (specs, dependencies, the station's
size, tracking, priorities, the caller's queued limit), then queued here or sent to Slurm.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpudesk.core import protocol
from gpudesk.core.identity import Caller
from gpudesk.core.jobs import JobSpec, SpecError, check_env, never_met, with_tasks
from gpudesk.core.protocol import ProtocolError
from gpudesk.core.records import JobRecord
from gpudesk.core.wire.jobs import SubmitResult
from gpudesk.core.wire.requests import PartOf, SubmitArgs
from gpudesk.engine.offloop import Later
from gpudesk.engine.requests.common import Handler, Requests, named
from gpudesk.engine.store.database import Store
from gpudesk.policy import job_gates, user_limits
from gpudesk.tracking.available import missing_for


def check_after_known(store: Store, job_ids: Iterable[int], where: str) -> None:
    """Refuse (`unknown_job`) a job to run after that does not exist, naming it and `where`."""
    for job_id in (i for i in job_ids if not store.job_exists(i)):
        raise ProtocolError(
            protocol.UNKNOWN_JOB,
            f"{where}: there is no job {job_id} to run after (gpudesk queue --all lists the jobs)",
        )


class SubmitRequests(Requests):
    """Submitting jobs, and checking a submit without queueing anything."""

    def ops(self) -> dict[str, Handler]:
        return {
            "submit": named(self.submit, "nothing was queued"),
            "check_submit": named(self.check_submit, "nothing was queued"),
        }

    def submit(self, args: SubmitArgs, caller: Caller) -> SubmitResult | Later[Any]:
        """Queued here, or sent to a Slurm cluster: the jobs' backend's (engine/backends/).
        `hold`: the station's jobs are queued held, in the transaction that queues them (none
        can start unheld, even where the store refuses a later write), by the user or, with
        `in_parts`, by the client sending them in parts; a Slurm cluster's are refused, whole."""
        specs, base_env = self._accepted(args, caller)
        if args.hold and any(spec.cluster is not None for spec in specs):
            raise ProtocolError(
                protocol.INVALID_ARGS,
                "hold: a job sent to Slurm cannot be held at submit yet; submit it, then "
                "`gpudesk hold JOB` (scontrol hold)",
            )
        if args.hold:
            local, in_parts = self.parts.control.backends.local, args.in_parts
            return local.submit(specs, base_env, caller, held=True, in_parts=in_parts)
        return self.parts.control.backends.for_specs(specs).submit(specs, base_env, caller)

    def check_submit(self, args: SubmitArgs, caller: Caller) -> SubmitResult | Later[Any]:
        """`submit`'s checks without queueing anything: whether these jobs would be accepted.
        An op of its own, not a flag on `submit`, so that an engine from before it answers
        `unknown_op` instead of queueing the jobs."""
        specs, base_env = self._accepted(args, caller)
        return self.parts.control.backends.for_specs(specs).check_submit(specs, base_env, caller)

    def _accepted(
        self, args: SubmitArgs, caller: Caller
    ) -> tuple[list[JobSpec], dict[str, str] | None]:
        """The jobs of a submit request and the submitter's environment, once every check
        passed; raises ProtocolError naming the first that failed. More than
        MAX_STATION_SUBMIT_JOBS for the station are refused first, as too large: the client
        sends them in parts (core/protocol.py says why)."""
        if problem := args.in_parts_problem():
            raise ProtocolError(protocol.INVALID_ARGS, problem)
        most = protocol.MAX_STATION_SUBMIT_JOBS
        if len(args.jobs) > most and not any(job.get("cluster") for job in args.jobs):
            raise ProtocolError(
                protocol.TOO_LARGE,
                f"one request queues at most {most:,} jobs on the station (it holds the "
                f"engine's loop, which serves every user, ~35 ms for {most:,}), and this one "
                f"has {len(args.jobs):,}. gpudesk's client sends that many in parts of "
                f"{most:,} itself (`gpudesk submit`, `gpudesk run`, the API's submit): one that "
                "sent them in one request is older than this engine; upgrade gpudesk where you "
                f"submit from, or submit at most {most:,} jobs at once",
            )
        specs: list[JobSpec] = []
        known: set[int] = set()  # the job ids named so far that exist: each looked up once
        tasks_of = self._tasks_of(args.first_tasks_alone)
        for index, raw in enumerate(args.jobs):
            try:  # the jobs named as given checked, then an array's id names its tasks too
                spec = JobSpec.from_dict({"umask": args.umask, **raw})  # the submitter's umask
                self._check_references(index, spec, known)
                specs.append(spec.with_array_tasks(tasks_of))
            except SpecError as exc:
                raise ProtocolError(protocol.INVALID_ARGS, f"jobs[{index}].{exc}") from None
        self._check_arrays_continued(specs, caller)
        base_env = args.env
        if base_env is not None:
            try:
                base_env = check_env(base_env, inherited=True)
            except ValueError as exc:
                raise ProtocolError(protocol.INVALID_ARGS, f"env: {exc}") from None
        if problem := job_gates.one_place_problem(specs):
            raise ProtocolError(protocol.INVALID_ARGS, problem)
        self.parts.control.backends.for_specs(specs).admit(specs)  # the station's size
        self._check_tracking(specs)
        access = self.parts.access  # a member's priority above the default: refused, whole
        if not access.is_admin(caller) and (
            refusal := user_limits.submit_priority_refusal(specs, access.admins)
        ):
            raise ProtocolError(protocol.REFUSED, refusal)
        self._check_queued_limit(caller, len(specs), args.part_of)
        return specs, base_env

    def _check_references(self, index: int, spec: JobSpec, known: set[int]) -> None:
        """The jobs a job waits for exist (-k: the k-th job of this request, before it; those
        in `known` were found), and its array's first job as -k is one of this request's."""
        for key, refs in (
            ("after", spec.after),
            ("after_any", spec.after_any),
            ("after_notok", spec.after_notok),
        ):
            for job_id in refs:
                if job_id < 0:  # -k: the k-th job of this request, which must come before it
                    if -job_id > index:
                        raise ProtocolError(
                            protocol.INVALID_ARGS,
                            f"jobs[{index}].{key}: {job_id} names job {-job_id} of this "
                            "request; a job can run only after jobs before it in the request",
                        )
                elif job_id not in known:
                    check_after_known(self.parts.store, (job_id,), f"jobs[{index}].{key}")
                    known.add(job_id)
        if spec.after and spec.after_notok:  # an array's id names its tasks (`144`, `144_2`)
            both = with_tasks(spec.after, spec.after_notok, self.parts.store.array_tasks)
            if never := never_met(*both):
                raise ProtocolError(protocol.INVALID_ARGS, f"jobs[{index}].after_notok: {never}")
        problem = job_gates.submit_problem(index, spec)
        if problem:
            raise ProtocolError(protocol.INVALID_ARGS, problem)

    def _check_arrays_continued(self, specs: list[JobSpec], caller: Caller) -> None:
        """Tasks naming their array's first job by its id continue an earlier request's array
        (a submission sent in parts): `job_gates.continued_array_refusal` says which may."""
        heads: dict[int, JobRecord | None] = {}
        for index, spec in enumerate(specs):
            if (head_id := spec.array_job) is not None and head_id > 0:
                if head_id not in heads:
                    heads[head_id] = next(iter(self.parts.store.jobs(ids=[head_id])), None)
                refusal = job_gates.continued_array_refusal(index, spec, heads[head_id], caller.uid)
                if refusal:
                    raise ProtocolError(*refusal)

    @staticmethod
    def _check_tracking(specs: list[JobSpec]) -> None:
        """Refuse, whole, jobs tracked to a store this engine's Python cannot reach (the mlflow
        extra is missing): each would run untracked while the user believes otherwise."""
        for uri in sorted({s.tracking.mlflow_uri for s in specs if s.tracking is not None}):
            missing = missing_for(uri)
            if missing:
                raise ProtocolError(protocol.REFUSED, missing)

    def _check_queued_limit(self, caller: Caller, adding: int, whole: PartOf | None) -> None:
        """Refuse a submit that would leave the caller more queued jobs than `[station]
        max_queued_per_user` (policy/user_limits.py says what counts; `whole`: the submission
        a part is of). All of a request's jobs or none."""
        queued = user_limits.queued_count(self.parts.queue, caller.uid)
        limit = self.parts.station.config.max_queued_per_user
        undone, owner = "Nothing was submitted", caller.identity.login or str(caller.uid)  # named
        refusal = user_limits.queued_refusal(limit, owner, queued, adding, "submit", undone, whole)
        if refusal:
            raise ProtocolError(protocol.REFUSED, refusal)
