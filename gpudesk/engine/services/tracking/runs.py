"""A tracked run as the engine holds it (`TrackedRun`), and how long a placed job waits for its
run (`run_wait_s`)."""

from __future__ import annotations

import msgspec

from gpudesk.engine.services.tracking.replies import EventBudget
from gpudesk.env_seconds import env_seconds
from gpudesk.tracking import messages

# How long a placed job waits for its MLflow run to exist. MLFLOW_RUN_ID must name a run that
# exists (mlflow.start_run() with it fails otherwise), and the run is made when the job is
# placed, so a job waits the store's answer (milliseconds; longer when it is slow or down); past
# this it starts without MLFLOW_RUN_ID, at most this late, and its run is made and filled in
# when the store answers again.
RUN_WAIT_S = 30.0
RUN_WAIT_ENV = "GPUDESK_TRACKING_WAIT_S"  # the engine's environment may set another bound


def run_wait_s() -> float:
    """RUN_WAIT_S, or the engine's GPUDESK_TRACKING_WAIT_S (0 to 3600 s; tests use a short one)."""
    return env_seconds(RUN_WAIT_ENV, RUN_WAIT_S, 0.0, 3600.0)


class TrackedRun(msgspec.Struct):
    """A run the engine made or is making, until its end is in MLflow."""

    key: str
    job_id: int | None  # None: a sweep's parent run
    uid: int
    uri: str
    create: messages.CreateRun
    run_id: str | None = None
    step: int = 0  # the step of its next sample's points
    final_ops: list[messages.Op] = msgspec.field(default_factory=list)  # its end, once sent
    running: bool = False  # a parent: told RUNNING
    # its worker's rejections' events
    events: EventBudget = msgspec.field(default_factory=EventBudget)
