"""A job and its attempts as the wire carries them, as the caller may see them: shared by the
listing (`jobs`) and `show`.
"""

from __future__ import annotations

from gpudesk.core.identity import Caller
from gpudesk.core.jobs import (
    JobState,
)
from gpudesk.core.records import AttemptRecord, JobRecord
from gpudesk.engine import runner
from gpudesk.engine.attempts import LiveAttempt
from gpudesk.engine.backends import slurm_views
from gpudesk.engine.requests.common import Reply, Requests
from gpudesk.engine.store.slurm import SlurmRow
from gpudesk.redact import redact_secrets


class JobViews(Requests):
    """Jobs and attempts shaped for a reply."""

    @staticmethod
    def attempt_reply(attempt: AttemptRecord) -> Reply:
        """An attempt on the wire: its record, and what contains its processes (its wrapper
        says, in wrapper.json)."""
        data = attempt.to_dict()
        wrapper = runner.read_wrapper(attempt.dir)
        if wrapper is not None and wrapper.containment:
            data["containment"] = wrapper.containment
        return data

    def job_reply(
        self,
        job: JobRecord,
        caller: Caller,
        live: LiveAttempt | None,
        slurm: SlurmRow | None = None,
    ) -> Reply:
        """A job on the wire, as `caller` may see it: its record, and while it runs, where
        (`slot`, a label; `gpus`, `mode` and `mig_slice`, the same as data); a Slurm job's
        `slurm` row (the store's, which the caller reads, in one query for a whole listing)
        gives its Slurm part."""
        data = job.to_dict()
        tracking = data["spec"].get("tracking")
        if tracking and not self._sees_secrets(caller, job.owner.uid):
            tracking["mlflow_uri"] = redact_secrets(tracking["mlflow_uri"])
        data["slot"] = live.slot if live else None
        data["gpus"] = list(live.gpus) if live else []
        data["mode"] = live.mode if live else None
        data["mig_slice"] = live.mig_slice if live else None
        data["pgid"] = live.pid if live else None  # the attempt's process group, while it runs
        # home.attempt_dir's path, joined as text: pathlib's joins were a quarter of the time
        # a page of 200 jobs took to build on the loop
        data["log"] = (
            f"{self._jobs_root}/{job.id}/{job.attempts}/{runner.LOG_FILE}" if job.attempts else None
        )
        if slurm is not None:
            data.update(slurm_views.job_fields(job, slurm))
        # the shared loader it reads: its dataset's, or the dataset's variant for its selection
        data["loader"] = self.parts.loaders.loader_for(job.spec.dataset, job.spec.selection)
        return data

    def _add_wait_reasons(
        self, jobs: list[JobRecord], replies: list[Reply], on_slurm: dict[int, SlurmRow]
    ) -> None:
        """Each queued job's `wait_reason`, the short code `gpudesk queue` shows as squeue
        does (Scheduler.wait_codes; a Slurm job's is Slurm's own), for the whole page at once."""
        queued = [job for job in jobs if job.state is JobState.QUEUED]
        codes = self.parts.scheduler.wait_codes(job.id for job in queued)
        for job, data in zip(jobs, replies, strict=True):
            if job.state is not JobState.QUEUED:
                continue
            row = on_slurm.get(job.id)
            if row is not None:
                data["wait_reason"] = slurm_views.wait_code(row)
            else:
                data["wait_reason"] = "JobHeldUser" if job.held else codes.get(job.id)
