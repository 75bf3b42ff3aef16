"""What a job's MLflow run holds (docs/tracking.md), as pure functions of gpudesk's records:
the keys that name runs, the params and tags, the metric points of a telemetry sample, the
totals and result metrics at the end, and the status each job state maps to."""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping
from typing import Protocol

from gpudesk.core.jobs import JobState
from gpudesk.core.records import JobRecord
from gpudesk.core.tracking_spec import MLFLOW_MAX_PARAM_VALUE
from gpudesk.core.wire.jobs import UsageFigures
from gpudesk.core.wire.telemetry import GpuView, JobTelemetry
from gpudesk.results import LINE, metrics_of
from gpudesk.tracking.messages import MetricPoint

# A job's state as its run's status (MLflow's RunStatus names).
STATUS_OF = {
    JobState.QUEUED: "SCHEDULED",
    JobState.RUNNING: "RUNNING",
    JobState.SUCCEEDED: "FINISHED",
    JobState.FAILED: "FAILED",
    JobState.CANCELLED: "KILLED",
}
# The metric names MLflow takes (mlflow.utils.validation): a result key outside them is left out
# rather than failing the batch it would share with the others.
METRIC_NAME = re.compile(r"^[\w\-. /]{1,250}$")
CUT_NOTE = " … [cut to MLflow's 6000-character limit; `gpudesk show` has it whole]"


class Where(Protocol):
    """What `placement_values` reads of an attempt's placement (gpudesk.policy's `Placement`):
    this library stands beside the policy and imports none of it."""

    @property
    def slot(self) -> str: ...

    @property
    def mode(self) -> str: ...

    @property
    def gpus(self) -> tuple[int, ...]: ...

    @property
    def mig_slice(self) -> str | None: ...


def job_key(station: str, job_id: int) -> str:
    """The key of a job's run: unique across the engines (homes) that share a store."""
    return f"{station}:job:{job_id}"


def sweep_key(station: str, owner_uid: int, group: str, sweep: str) -> str:
    """The key of a sweep's parent run: one per owner, profile invocation (`group`) and
    [[sweeps]] table. The owner is in it because a group's name is whatever the client sent
    (and `queue` shows it to everyone): another user naming the same group and sweep gets a
    parent of his own, never a say in hers. Hashed: group and sweep names may hold characters a
    search filter would trip on."""
    named = f"{owner_uid}\0{group}\0{sweep}"
    digest = hashlib.sha256(named.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{station}:sweep:{digest[:20]}"


def param_value(text: str) -> str:
    if len(text) <= MLFLOW_MAX_PARAM_VALUE:
        return text
    return text[: MLFLOW_MAX_PARAM_VALUE - len(CUT_NOTE)] + CUT_NOTE


def command_text(job: JobRecord) -> str:
    return job.spec.command[0] if job.spec.shell else shlex.join(job.spec.command)


# Every param gpudesk logs into a job's run is under this prefix. MLflow refuses to change a
# param's value, and the job logs into the same run (MLFLOW_RUN_ID): a script's own
# `mlflow.log_params({"mode": "train"})` beside gpudesk's `mode` made it raise and exit 1.
PARAM_PREFIX = "gpudesk."
# ... and a sweep job's grid values under this one (its script may log `lr` itself, in its own
# spelling); the sweep's parent run, which no job logs into, has the grid under plain names.
GRID_PREFIX = "gpudesk.grid."


def run_params(job: JobRecord) -> dict[str, str]:
    """The params a job's run gets when it is made: what was asked for, and its sweep values,
    each under `PARAM_PREFIX`."""
    spec = job.spec
    params = {
        "command": param_value(command_text(job)),
        "job_id": str(job.id),
        "user": job.user,
        "gpus": str(spec.gpus),
        "max_attempts": str(spec.max_attempts),
    }
    for key in ("dataset", "selection", "memory_gb", "sm_pct", "time_limit_s"):
        value = getattr(spec, key)
        if value is not None:
            params[key] = f"{value:g}" if isinstance(value, float) else str(value)
    named = {PARAM_PREFIX + k: v for k, v in params.items()}
    if spec.tracking is not None:
        named.update({GRID_PREFIX + k: v for k, v in spec.tracking.params.items()})
    return named


def run_tags(job: JobRecord) -> dict[str, str]:
    tags = {
        "mlflow.user": job.user,
        "mlflow.source.name": param_value(command_text(job)),
        "mlflow.source.type": "JOB",  # MLflow's SourceType for a batch job
        "gpudesk.job_id": str(job.id),
        "gpudesk.job_name": job.name,
    }
    if job.spec.group:
        tags["gpudesk.group"] = job.spec.group
    if job.spec.sweep:
        tags["gpudesk.sweep"] = job.spec.sweep
    return tags


def sweep_run_name(sweep: str, group: str) -> str:
    """A sweep's parent run's name: the sweep's name with each `{placeholder}` of a name
    template shown as `*` (each child is named by its own values), and its run group."""
    return f"{re.sub(r'{[^{}]*}', '*', sweep)} ({group})"


def sweep_tags(job: JobRecord) -> dict[str, str]:
    return {
        "mlflow.user": job.user,
        "mlflow.source.type": "JOB",
        "gpudesk.group": job.spec.group or "",
        "gpudesk.sweep": job.spec.sweep or "",
    }


def placement_values(
    placement: Where, gpu_models: Mapping[int, str | None], simulated: bool
) -> dict[str, str]:
    """Where an attempt runs: the slot, mode, GPU model (SIMULATED marked) and MIG slice, each
    under `PARAM_PREFIX` (the first attempt's are params, every attempt's tags)."""
    values = {"slot": placement.slot, "mode": placement.mode}
    names = sorted({gpu_models.get(i) or "unknown" for i in placement.gpus})
    if names:
        model = ", ".join(names)
        values["gpu_model"] = f"{model} (SIMULATED)" if simulated else model
    if placement.mig_slice:
        values["mig_slice"] = placement.mig_slice
    return {PARAM_PREFIX + k: v for k, v in values.items()}


# A GPU's readings as MLflow's own system metrics name them (mlflow.system_metrics: each
# under `system/`, per GPU index), so its UI's System Metrics tab draws them; SM activity,
# which MLflow does not read, beside them. The job's own share (its processes) follows as
# `system/job_*`.
SYSTEM = "system/"
MIB = 1024 * 1024 / 1e6  # MLflow's "megabytes" are 10^6 bytes


def sample_points(
    job: JobTelemetry, gpus: Mapping[int, GpuView], ts_ms: int, step: int
) -> list[MetricPoint]:
    """One telemetry sample of a running job as metric points under `system/`: each of its
    GPUs' readings (a shared GPU's whole reading), its own share of them, its processes' CPU
    and memory, and its energy so far."""
    rss, gpu_memory = job.rss_mib, job.gpu_memory_mib
    values: dict[str, float | None] = {
        "job_cpu_utilization_percentage": job.cpu_pct,
        "job_memory_usage_megabytes": None if rss is None else rss * MIB,
        "job_gpu_memory_usage_megabytes": None if gpu_memory is None else gpu_memory * MIB,
        "job_gpu_sm_percentage": job.gpu_sm_pct,
        "job_energy_joules": job.energy.total_j,
    }
    for index in job.gpus:
        gpu = gpus.get(index)
        if gpu is None:
            continue
        used, total = gpu.memory_used_mib, gpu.memory_total_mib
        power, limit = gpu.power_w, gpu.power_limit_w
        values[f"gpu_{index}_utilization_percentage"] = gpu.kernel_active_pct
        values[f"gpu_{index}_sm_activity_percentage"] = gpu.sm_activity_pct
        values[f"gpu_{index}_memory_usage_megabytes"] = None if used is None else used * MIB
        values[f"gpu_{index}_memory_usage_percentage"] = (
            100.0 * used / total if used is not None and total else None
        )
        values[f"gpu_{index}_power_usage_watts"] = power
        values[f"gpu_{index}_power_usage_percentage"] = (
            100.0 * power / limit if power is not None and limit else None
        )
    return [
        MetricPoint(SYSTEM + name, float(value), ts_ms, step)
        for name, value in values.items()
        if value is not None
    ]


def total_points(
    summary: UsageFigures | None, gpu_s: float | None, ts_ms: int, step: int
) -> list[MetricPoint]:
    """What the job used, over every attempt: the figures `gpudesk history` prints."""
    values = {"gpu_seconds": gpu_s}
    if summary is not None:
        values |= {
            "energy_j": summary.total_j,
            "gpu_energy_j": summary.gpu_j,
            "cpu_energy_j": summary.cpu_j,
            "co2e_g": summary.carbon_g,
            "cpu_seconds": summary.cpu_s,
        }
    return [
        MetricPoint(name, float(value), ts_ms, step)
        for name, value in values.items()
        if value is not None
    ]


# A result line's metrics go under this prefix: the job logs into the same run, and a script
# that logs `val_acc` itself and prints it in its result line would otherwise have the two
# interleaved in one history (MLflow shows the latest step's, whichever wrote it). MLflow's UI
# groups the charts of `result/...` in a section of their own, as it does `system/...`.
RESULT_PREFIX = "result/"


def result_points(text: str, ts_ms: int) -> list[MetricPoint]:
    """Every `result {json}` line in `text` (gpudesk.results), the n-th at step n, each key
    under `RESULT_PREFIX`: a job that prints one per epoch gets a history, and the last line is
    each metric's last value."""
    import json

    points = []
    step = 0
    for found in LINE.findall(text):
        try:
            value = json.loads(found)
        except (ValueError, RecursionError):  # `{"x": [[[[…` nested past the stack: no result
            continue
        if not isinstance(value, dict):
            continue
        named = {RESULT_PREFIX + k: v for k, v in metrics_of(value).items()}
        points += [MetricPoint(k, v, ts_ms, step) for k, v in named.items() if METRIC_NAME.match(k)]
        step += 1
    return points
