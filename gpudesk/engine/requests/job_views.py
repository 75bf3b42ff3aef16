"""A job and its attempts as the wire carries them, as the caller may see them: shared by the
listing (`jobs`) and `show`.
"""

from __future__ import annotations

from typing import cast

import msgspec

from gpudesk.core.identity import Caller
from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.records import AttemptRecord, JobRecord
from gpudesk.core.wire.base import PlacementMode
from gpudesk.core.wire.jobs import (
    AttemptView,
    ClusterView,
    JobSpecView,
    JobView,
    SlurmJobView,
    TrackingView,
)
from gpudesk.engine import runner
from gpudesk.engine.attempts import LiveAttempt
from gpudesk.engine.backends import slurm_views
from gpudesk.engine.requests.common import Requests
from gpudesk.engine.store.slurm import SlurmRow
from gpudesk.redact import redact_secrets


class JobViews(Requests):
    """Jobs and attempts shaped for a reply."""

    @staticmethod
    def attempt_reply(attempt: AttemptRecord) -> AttemptView:
        """An attempt on the wire: its record, and what contains its processes (its wrapper
        says, in wrapper.json)."""
        wrapper = runner.read_wrapper(attempt.dir)
        return attempt.view(wrapper.containment if wrapper is not None else None)

    def job_reply(
        self,
        job: JobRecord,
        caller: Caller,
        live: LiveAttempt | None,
        slurm: SlurmRow | None = None,
    ) -> JobView:
        """A job on the wire, as `caller` may see it: its record, and while it runs, where
        (`slot`, a label; `gpus`, `mode` and `mig_slice`, the same as data); a Slurm job's
        `slurm` row (the store's, which the caller reads, in one query for a whole listing)
        gives its Slurm part."""
        spec = spec_view(job.spec)
        if spec.tracking is not None and not self._sees_secrets(caller, job.owner.uid):
            tracking = spec.tracking
            hidden = msgspec.structs.replace(
                tracking, mlflow_uri=redact_secrets(tracking.mlflow_uri)
            )
            spec = msgspec.structs.replace(spec, tracking=hidden)
        # home.attempt_dir's path, joined as text: pathlib's joins were a quarter of the time
        # a page of 200 jobs took to build on the loop
        log = (
            f"{self._jobs_root}/{job.id}/{job.attempts}/{runner.LOG_FILE}" if job.attempts else None
        )
        slot = live.slot if live else None
        slurm_view = None
        if slurm is not None:
            fields = slurm_views.job_fields(job, slurm)
            log, slot = fields["log"], fields.get("slot", slot)
            slurm_view = SlurmJobView(**fields["slurm"])
        return JobView(
            id=job.id,
            name=job.spec.name,
            state=job.state.value,
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
            user=job.user,
            uid=job.owner.uid,
            spec=spec,
            slot=slot,
            gpus=list(live.gpus) if live else [],
            mode=cast(PlacementMode, live.mode) if live else None,  # one the engine placed
            mig_slice=live.mig_slice if live else None,
            pgid=live.pid if live else None,  # the attempt's process group, while it runs
            log=log,
            # the shared loader it reads: its dataset's, or the dataset's variant for its selection
            loader=self.parts.loaders.loader_for(job.spec.dataset, job.spec.selection),
            slurm=slurm_view,
        )

    def _add_wait_reasons(
        self, jobs: list[JobRecord], replies: list[JobView], on_slurm: dict[int, SlurmRow]
    ) -> None:
        """Each queued job's `wait_reason`, the short code `gpudesk queue` shows as squeue
        does (Scheduler.wait_codes; a Slurm job's is Slurm's own), for the whole page at once."""
        queued = [job for job in jobs if job.state is JobState.QUEUED]
        codes = self.parts.scheduler.wait_codes(job.id for job in queued)
        for index, job in enumerate(jobs):
            if job.state is not JobState.QUEUED:
                continue
            row = on_slurm.get(job.id)
            reason: str | None
            if row is not None:
                reason = slurm_views.wait_code(row)
            else:
                reason = "JobHeldUser" if job.held else codes.get(job.id)
            replies[index] = msgspec.structs.replace(replies[index], wait_reason=reason)


def spec_view(spec: JobSpec) -> JobSpecView:
    """The spec as listings carry it: without `env` (it can hold secrets and is large; `show`
    sends it on request)."""
    tracking, cluster = spec.tracking, spec.cluster
    return JobSpecView(
        name=spec.name,
        command=list(spec.command),
        shell=spec.shell,
        workdir=spec.workdir,
        gpus=spec.gpus,
        memory_gb=spec.memory_gb,
        sm_pct=spec.sm_pct,
        dataset=spec.dataset,
        selection=spec.selection,
        priority=spec.priority,
        max_attempts=spec.max_attempts,
        group=spec.group,
        after=list(spec.after),
        time_limit_s=spec.time_limit_s,
        sweep=spec.sweep,
        tracking=None if tracking is None else TrackingView(**tracking.to_dict()),
        cluster=None if cluster is None else ClusterView(**cluster.to_dict()),
    )
