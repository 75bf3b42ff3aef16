"""`submit` and `check_submit`: a request's jobs checked whole (specs, dependencies, the station's
size, tracking, priorities, the caller's queued limit), then queued here or sent to Slurm.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpudesk.core import protocol
from gpudesk.core.identity import Caller
from gpudesk.core.jobs import (
    JobSpec,
    SpecError,
    check_env,
)
from gpudesk.core.protocol import ProtocolError
from gpudesk.core.records import JobRecord
from gpudesk.core.wire.jobs import SubmitResult
from gpudesk.core.wire.requests import SubmitArgs
from gpudesk.engine import user_limits
from gpudesk.engine.backends.slurm import Prepared, Sent
from gpudesk.engine.offloop import Later
from gpudesk.engine.requests.common import Handler, Requests
from gpudesk.policy.policy import gpu_job_impossible
from gpudesk.slurm.commands import TIMEOUT_S as SLURM_TIMEOUT_S
from gpudesk.text import safe_text
from gpudesk.tracking.available import missing_for
from gpudesk.units import MIB_PER_GB

# How many job shapes of one submit are judged for waiting on a station change: a sweep's
# jobs share a few, and the loop does not weigh thousands of different ones at submit.
CHANGE_CHECKS = 100
# A Slurm submit's first step runs up to four clients (the slurm.conf check, sinfo twice,
# scontrol), each bounded by Slurm's client timeout; one more of margin.
PREPARE_BOUND_S = 5 * SLURM_TIMEOUT_S


class SubmitRequests(Requests):
    """Submitting jobs, and checking a submit without queueing anything."""

    def ops(self) -> dict[str, Handler]:
        return {
            "submit": self.submit,
            "check_submit": self.check_submit,
        }

    def submit(self, args: SubmitArgs, caller: Caller) -> SubmitResult | Later[Any]:
        specs, base_env = self._accepted(args, caller)
        if specs and specs[0].cluster is not None:
            return self._submit_to_slurm(specs, base_env, caller)
        records = self.parts.store.submit(specs, base_env, owner=caller.identity)
        for record in records:
            self.parts.queue.add(record)
            self.parts.events.job(record.id, "submitted", record)
        self.parts.due.mark()
        return SubmitResult(
            ids=[r.id for r in records],
            simulated=self._simulated(),
            waits_for_change=self._waits_for_change(records),
        )

    def _waits_for_change(self, records: Sequence[JobRecord]) -> dict[int, str]:
        """The new GPU jobs that can start only once the station changes (an admin leaving MIG
        mode, a lost GPU coming back, a GPU set in MIG mode under policy mig), with the policy's
        reason: the submitter hears it at once, not from `queue` later. Judged once per shape
        (what the policy weighs of a new job: its GPUs and hints), for at most CHANGE_CHECKS
        shapes (a huge sweep is not judged job by job on the loop); a job of a shape judged is
        always told."""
        gpu_jobs = [r for r in records if r.spec.gpus]
        if not gpu_jobs or not self.parts.telemetry.monitor.opened:
            return {}
        view = self.parts.scheduler.station_view(queued_demands=False)
        policy = self.parts.scheduler.policy
        reasons: dict[tuple[int, float | None, float | None], str] = {}
        changes = {}
        for record in gpu_jobs:
            spec = record.spec
            shape = (spec.gpus, spec.memory_gb, spec.sm_pct)
            reason = reasons.get(shape)
            if reason is None:
                if len(reasons) >= CHANGE_CHECKS:
                    continue
                reason = reasons[shape] = policy.change_needed(record, view)
            if reason:
                changes[record.id] = reason
        return changes

    def _submit_to_slurm(
        self, specs: list[JobSpec], base_env: dict[str, str] | None, caller: Caller
    ) -> Later[Prepared]:
        """A Slurm submit in the backend's three steps (gpudesk.engine.backends.slurm): its
        Slurm commands run off the loop, so a slow cluster keeps only its submitter waiting."""
        backend, owner = self.parts.slurm, caller.identity
        backend.check_after(specs)
        prepare = backend.prepared(specs, base_env, owner)

        def prepared(ready: Prepared) -> Later[Sent]:
            ids, work, bound = backend.record_intent(specs, base_env, owner, ready)

            def sent(outcome: Sent) -> SubmitResult:
                records = backend.record_sent(ids, outcome)
                for record in records:
                    self.parts.events.job(record.id, "submitted to Slurm", record)
                return SubmitResult(ids=ids)

            return Later(work, sent, bound, f"submitting job(s) {ids[0]}-{ids[-1]} to Slurm")

        return Later(prepare, prepared, PREPARE_BOUND_S, "asking the Slurm cluster what it has")

    def check_submit(self, args: SubmitArgs, caller: Caller) -> SubmitResult | Later[Prepared]:
        """`submit`'s checks without queueing anything: whether these jobs would be accepted.
        An op of its own, not a flag on `submit`, so that an engine from before it answers
        `unknown_op` instead of queueing the jobs."""
        specs, base_env = self._accepted(args, caller)
        if specs and specs[0].cluster is not None:
            backend = self.parts.slurm
            backend.check_after(specs)
            prepare = backend.prepared(specs, base_env, caller.identity)
            return Later(
                prepare,
                lambda _ready: SubmitResult(ids=[]),
                PREPARE_BOUND_S,
                "asking the Slurm cluster",
            )
        return SubmitResult(ids=[])

    def _accepted(
        self, args: SubmitArgs, caller: Caller
    ) -> tuple[list[JobSpec], dict[str, str] | None]:
        """The jobs of a submit request and the submitter's environment, once every check
        passed; raises ProtocolError naming the first that failed."""
        specs: list[JobSpec] = []
        for index, raw in enumerate(args.jobs):
            try:
                specs.append(JobSpec.from_dict(raw))
            except SpecError as exc:
                raise ProtocolError(protocol.INVALID_ARGS, f"jobs[{index}].{exc}") from None
            for job_id in specs[-1].after:
                if job_id < 0:  # -k: the k-th job of this request, which must come before it
                    if -job_id > index:
                        raise ProtocolError(
                            protocol.INVALID_ARGS,
                            f"jobs[{index}].after: {job_id} names job {-job_id} of this request; "
                            "a job can run only after jobs before it in the request",
                        )
                elif not self.parts.store.job_exists(job_id):
                    raise ProtocolError(
                        protocol.UNKNOWN_JOB,
                        f"jobs[{index}].after: there is no job {job_id} to run after "
                        "(gpudesk queue --all lists the jobs)",
                    )
        base_env = args.env
        if base_env is not None:
            try:
                base_env = check_env(base_env, inherited=True)
            except ValueError as exc:
                raise ProtocolError(protocol.INVALID_ARGS, f"env: {exc}") from None
        self._check_one_place(specs)
        self._check_station_fits([s for s in specs if s.cluster is None])
        self._check_tracking(specs)
        self._check_priorities(specs, caller)
        self._check_queued_limit(caller, len(specs))
        return specs, base_env

    @staticmethod
    def _check_one_place(specs: list[JobSpec]) -> None:
        """One request's jobs all run on the station or all on one cluster: a run is followed,
        and refused, as a whole."""
        places = {spec.cluster for spec in specs}
        if len(places) > 1:
            raise ProtocolError(
                protocol.INVALID_ARGS,
                "one request's jobs go to one place: some of these name a Slurm cluster and "
                "some do not (or name another); submit them separately",
            )

    @staticmethod
    def _check_tracking(specs: list[JobSpec]) -> None:
        """Refuse, whole, jobs tracked to a store this engine's Python cannot reach (the mlflow
        extra is missing): each would run untracked while the user believes otherwise."""
        for uri in sorted({s.tracking.mlflow_uri for s in specs if s.tracking is not None}):
            missing = missing_for(uri)
            if missing:
                raise ProtocolError(protocol.REFUSED, missing)

    def _check_station_fits(self, specs: list[JobSpec]) -> None:
        """Refuse, at once and whole, jobs this station could never run, whatever an admin
        changes on its GPUs: more GPUs than it has, more memory than its largest GPU offers
        (placement.policy.gpu_job_impossible). They could only wait and then fail. A job that
        fits only after such a change (leaving MIG mode on a GPU) is accepted and waits, its
        reason naming the change (placement.station_fit). Not while the GPUs cannot be read
        (they may come back): placement fails an impossible job then."""
        if not any(spec.gpus for spec in specs):
            return
        monitor = self.parts.telemetry.monitor
        if not monitor.opened:
            return  # never waited for: the engine's one loop serves every client
        view = self.parts.scheduler.station_view(queued_demands=False)
        kept_free = self.parts.scheduler.policy.kept_free_mib
        for spec in specs:
            if not spec.gpus:
                continue
            need = spec.memory_gb * MIB_PER_GB if spec.memory_gb is not None else 0.0
            impossible = gpu_job_impossible(spec.gpus, need, view, kept_free)
            if impossible:
                others = len(specs) - 1
                raise ProtocolError(
                    protocol.INVALID_ARGS,
                    f"job {safe_text(spec.name)!r} {impossible}. It could never "
                    "run here, so nothing was submitted"
                    + (
                        f" (nor the {others} other job{'s' if others != 1 else ''})"
                        if others
                        else ""
                    )
                    + ".",
                )

    def _check_queued_limit(self, caller: Caller, adding: int) -> None:
        """Refuse a submit that would leave the caller more queued jobs than `[station]
        max_queued_per_user` (engine/user_limits.py says what counts). All of a request's jobs
        or none."""
        queued = user_limits.queued_count(self.parts.queue, caller.uid)
        refusal = user_limits.queued_refusal(
            self.parts.station.config.max_queued_per_user,
            caller.name,
            queued,
            adding,
            "submitting",
            "Nothing was submitted",
        )
        if refusal:
            raise ProtocolError(protocol.REFUSED, refusal)

    def _check_priorities(self, specs: list[JobSpec], caller: Caller) -> None:
        """Refuse, whole, a member's submit that asks a priority above the default: only an
        admin may raise one (engine/user_limits.py)."""
        if self.parts.access.is_admin(caller):
            return
        for index, spec in enumerate(specs):
            refusal = user_limits.priority_refusal(
                user_limits.DEFAULT_PRIORITY, spec.priority, self.parts.access.admins
            )
            if refusal:
                raise ProtocolError(
                    protocol.REFUSED,
                    f"jobs[{index}] ({safe_text(spec.name)!r}).priority: {refusal} "
                    "Nothing was submitted.",
                )
