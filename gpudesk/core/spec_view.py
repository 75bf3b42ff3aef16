"""A job's spec as the engine's replies carry it (`JobSpecView`): a listing's, a `show`'s."""

from __future__ import annotations

import msgspec

from gpudesk.core.jobs import JobSpec
from gpudesk.core.wire.jobs import ClusterView, JobSpecView, TrackingView
from gpudesk.redact import redact_secrets


def spec_view(spec: JobSpec, *, secrets: bool = True) -> JobSpecView:
    """The spec as listings carry it: without `env` (it can hold secrets and is large; `show`
    sends it on request); its tracking store's URI with its secrets redacted unless
    `secrets` (the caller may see them: the owner, an admin)."""
    tracking, cluster = spec.tracking, spec.cluster
    tracked = None if tracking is None else TrackingView(**tracking.to_dict())
    if tracked is not None and not secrets:
        tracked = msgspec.structs.replace(tracked, mlflow_uri=redact_secrets(tracked.mlflow_uri))
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
        tracking=tracked,
        cluster=None if cluster is None else ClusterView(**cluster.to_dict()),
        preemptible=spec.preemptible,
        preempt_signal=spec.preempt_signal if spec.preemptible else None,
        preempt_grace_s=spec.preempt_grace_s if spec.preemptible else None,
        begin_at=spec.begin_at,
        comment=spec.comment,
        array_job=spec.array_job,
        array_task=spec.array_task,
        array_limit=spec.array_limit,
        after_any=list(spec.after_any),
        after_notok=list(spec.after_notok),
        notify=None if spec.notify is None else redact_secrets(spec.notify),
        umask=spec.umask,
    )
