"""The variables the engine gives each attempt of a job, on top of the environment it was
submitted with (docs/shared-station.md, "A job's environment")."""

from __future__ import annotations

from pathlib import Path

from gpudesk.core.records import JobRecord


def with_job_variables(
    env: dict[str, str], job: JobRecord, attempt: int, home: Path, station: Path | None
) -> dict[str, str]:
    """`env` with attempt `attempt` of `job`'s GPUDESK_* variables, for an engine whose state
    is `home` and, a system engine, whose socket is `station`."""
    if station is None:
        env["GPUDESK_HOME"] = str(home)  # a personal engine's jobs are its user's: her home
    else:
        # A station's job talks to the station (`gpudesk` in a job that chains jobs, a shared
        # loader): its state folder is root's, no home of the owner's, and a `gpudesk` given it
        # as GPUDESK_HOME takes it for a personal home of someone else's. One an older engine
        # gave a job that submitted this one goes too.
        env["GPUDESK_SOCKET"] = str(station)
        if env.get("GPUDESK_HOME") == str(home):
            del env["GPUDESK_HOME"]
    env["GPUDESK_JOB_ID"], env["GPUDESK_JOB_NAME"] = str(job.id), job.name
    env["GPUDESK_ATTEMPT"] = str(attempt)
    if job.spec.preemptible:  # what it must catch, and how long it has (preempting.py)
        env["GPUDESK_PREEMPT_SIGNAL"] = job.spec.preempt_signal
        env["GPUDESK_PREEMPT_GRACE_S"] = f"{job.spec.preempt_grace_s:g}"
    if job.spec.array_task is not None:  # sbatch's SLURM_ARRAY_JOB_ID / _TASK_ID
        env["GPUDESK_ARRAY_JOB_ID"] = str(job.spec.array_job or job.id)
        env["GPUDESK_ARRAY_TASK_ID"] = str(job.spec.array_task)
    if job.preemptions:  # it resumes: its checkpoint is where it left it
        env.update({"GPUDESK_PREEMPTED": "1", "GPUDESK_PREEMPTIONS": str(job.preemptions)})
    return env
