"""The engine and its station on the wire: `status` (the config in force, MPS, loaders, users
by fair share, tracking stores, the loop's timing), `ping`, `shutdown`, `configure` and
`check_configure`, `datasets`.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from gpudesk.core.wire.base import WireModel
from gpudesk.core.wire.control import DrainView
from gpudesk.core.wire.jobs import EventView


class MpsFault(WireModel, frozen=True):
    """A GPU whose MPS server cannot take clients: new jobs there are time-sliced."""

    gpu: int | None  # its index; None for a UUID the station no longer lists
    uuid: str
    message: str


class MpsInfo(WireModel, frozen=True):
    available: bool
    faults: list[MpsFault]

    def fault_of(self, gpu: int) -> MpsFault | None:
        return next((fault for fault in self.faults if fault.gpu == gpu), None)


class StationConfigView(WireModel, frozen=True):
    """A station's configuration: a profile's `[station]` table, as the engine applies it."""

    backend: str
    policy: str
    slots: int | None
    sample_interval: float
    grid_intensity: float
    mig: dict[str, str] | None
    isolation: bool
    mig_repartition: bool
    log_max_mb: float
    log_keep: int
    fairshare_half_life_h: float
    fairshare_cpu_weight: float
    max_running_gpus_per_user: int | None
    max_queued_per_user: int | None
    # Sent only where grid_intensity was given as a code of the engine's bundled table: the
    # code ("FR", "US-CA") and where its figure comes from ("Our World in Data 2023 via
    # codecarbon 3.3.2"). grid_intensity is the figure in use either way.
    grid_region: str | None = None
    grid_source: str | None = None
    # "HOST:PORT" of the Prometheus endpoint (docs/metrics.md); None: off. An engine from before
    # the setting existed leaves it out.
    metrics_listen: str | None = None
    # Each job's cgroup's pids.max and memory.max in GiB (0: none; memory None: 90 % of the
    # host's memory). An engine from before the settings existed leaves them out.
    job_pids_max: int | None = None
    job_memory_max_gb: float | None = None
    # Days a finished job stays in the live listings before it is archived (0: never); an
    # engine from before the setting existed leaves it out.
    keep_finished_days: float | None = None
    # The queue's order within priority and fair share ("submission" or "shortest"); an engine
    # from before the setting existed leaves it out.
    queue_order: str | None = None

    @property
    def grid_text(self) -> str:
        """ "56.039 g CO2e/kWh (FR, Our World in Data 2023 via codecarbon 3.3.2)", or
        "475 g CO2e/kWh" for a figure given as a number."""
        where = f" ({self.grid_region}, {self.grid_source})" if self.grid_region else ""
        return f"{self.grid_intensity:g} g CO2e/kWh{where}"


# kw_only repeated for type checkers: its fields without defaults follow grid_region's.
class StationInfo(StationConfigView, frozen=True, kw_only=True):
    """The station's configuration and what the engine made of it."""

    effective_backend: str
    simulated: bool
    gpu_problem: str | None
    effective_slots: int
    cores: int
    gpus: int
    mps: MpsInfo
    # With metrics_listen set: where the metrics are served (the real port when 0 was asked),
    # or why they are not (a port in use, ...).
    metrics_url: str | None = None
    metrics_problem: str | None = None
    # Who its admins are, as its start named them ("a member of gpudesk-admin", "root"; a
    # personal engine's: "root or ada (the engine's user)"); None: an engine from before it
    admins: str | None = None


class SlotCounts(WireModel, frozen=True):
    total: int
    busy: int


class GpuCounts(WireModel, frozen=True):
    total: int
    busy: int
    lost: int


class LoaderSpec(WireModel, frozen=True):
    """A dataset's shared-loader settings (a profile's `[datasets.NAME]`)."""

    name: str
    factory: str
    args: dict[str, Any]
    batch_size: int
    workers: int
    seed: int
    slots: int
    shuffle: bool
    selection: str | None
    selection_target: str | None
    selection_target_args: dict[str, Any]
    device: str = "cpu"  # where batches are staged for their jobs (gpudesk.loader.staging)
    share: str = "private"  # "group": every member's jobs may read it (a system engine)
    owner: str | None = None  # whom its producer runs as on a system engine; None: first job's


class LoaderConsumer(WireModel, frozen=True):
    pid: int
    batch_size: int
    epoch: int
    position: list[int] | None
    delivered: int
    batches_per_s: float
    held_slots: int
    makeups_left: int
    data_path: str | None = None  # "staged", or "host: " and why (as the consumer said)


class LoaderSelection(WireModel, frozen=True):
    """The data selection a producer serves, and what preparing it cost."""

    preset: str
    kept: int
    of: int
    seed: int
    key: str | None
    reused: bool | None
    prepass_wall_s: float
    select_s: float
    notes: dict[str, Any]
    cpu_s: float


class LoaderStaging(WireModel, frozen=True):
    """Whether a producer stages batches on its GPU (`device`), and what it staged."""

    device: str
    kind: str | None  # "cuda" (or "shm" in tests); None: not staging, `why`
    why: str | None = None
    gpu_uuid: str | None = None
    generation: int = 0
    mirror_bytes: int = 0
    batches_staged: int = 0
    bytes_staged: int = 0
    source: str | None = None  # the host ring "page-locked" or "pageable" for the copies


class LoaderDecoding(WireModel, frozen=True):
    """A producer that decodes its dataset's batches itself, on its GPU (device_decode.py)."""

    device: str
    batches: int
    samples: int


class LoaderOrphan(WireModel, frozen=True):
    """A managed producer whose engine is gone (gpudesk/loader/orphan.py): it serves on while a
    consumer reads it, and stops by itself `grace_s` after the last one. Times are the wall
    clock's (time.time())."""

    engine_pid: int  # the engine that started it
    since: float  # when it saw that engine gone
    grace_s: float
    stops_at: float | None = None  # when it stops unless a consumer connects; None: one reads


class LoaderStatus(WireModel, frozen=True):
    """A producer's own report (gpudesk.loader.producer)."""

    name: str
    pid: int
    dataset: str
    dataset_len: int
    batch_size: int
    batches_per_epoch: int
    workers: int
    worker_processes: int
    seed: int
    stream: list[int]
    produced: int
    makeups_produced: int
    bytes_written: int
    consumers_total: int
    delivered_total: int
    slots: int
    slots_used: int
    slot_bytes: int
    cpu_s: float
    uptime_s: float
    managed: bool
    selection: LoaderSelection | None
    consumers: list[LoaderConsumer]
    bytes_copied: int = 0  # of bytes_written, what the producer copied (workers wrote the rest)
    staging: LoaderStaging | None = None
    decoding: LoaderDecoding | None = None
    orphaned: LoaderOrphan | None = None  # None: its engine is there (or it is not managed)


class LoaderView(WireModel, frozen=True):
    """A dataset's producer as the engine supervises it, with the CPU sharing saved."""

    name: str
    pid: int | None
    spec: LoaderSpec
    running: bool
    restarts: int
    cpu_s: float | None
    unshared_cpu_s: float | None
    saved_cpu_s: float | None
    status: LoaderStatus | None
    # a station's producer whose owner is being asked of the user database (not yet started)
    starting: bool = False
    # why it is not serving: it died and a restart waits its turn (loader.restarts), or why it
    # is not started again (failed for good, or given up after its restarts); None: it serves
    problem: str | None = None


class UserShare(WireModel, frozen=True):
    """A user as fair share weighs them: decayed usage in GPU-hour equivalents (lightest goes
    first), the GPUs their running jobs hold, their waiting jobs."""

    user: str
    uid: int
    usage_gpu_h: float
    running_gpus: int
    waiting: int


class TrackingHealth(WireModel, frozen=True):
    """An MLflow store as one user's tracking worker finds it: updates `queued` for it (about:
    those not yet handed to the worker count for each store of that user), its last `error`
    while it fails and since when, metric points `dropped` because too many waited."""

    user: str
    uid: int
    mlflow_uri: str
    queued: int
    error: str | None
    error_since: float | None
    dropped: int
    # its owner's tracking worker is being started: whom it runs as is asked of the user
    # database off the engine's loop (the updates wait for it meanwhile)
    starting: bool = False


class LoopRequest(WireModel, frozen=True):
    """One of the slowest requests of the window: its op, how long it held the loop, whose."""

    op: str
    ms: float
    uid: int


class LoopTurn(WireModel, frozen=True):
    """One of the slowest turns of the loop's periodic steps, and its slowest step."""

    ms: float
    step: str
    step_ms: float


class LoopTurns(WireModel, frozen=True):
    turns: int  # since the engine started
    window: int  # the latest turns the figures cover
    p50_ms: float | None  # None: no turn yet
    p99_ms: float | None
    max_ms: float | None
    slowest: list[LoopTurn]


class LoopTimingView(WireModel, frozen=True):
    """How long requests held the engine's one loop (every other client waits meanwhile): over
    the latest `window` requests, with the slowest named; and its periodic steps' turns."""

    requests: int  # since the engine started
    window: int
    p50_ms: float | None  # None: no request yet
    p99_ms: float | None
    max_ms: float | None
    slowest: list[LoopRequest]
    turns: LoopTurns


class StationStatus(WireModel, frozen=True):
    """`status`: the engine, the station, the queue's counts and the shared loaders."""

    pid: int
    version: str
    protocol: int
    home: str
    started_at: float
    station: StationInfo
    slots: SlotCounts
    gpus: GpuCounts
    counts: dict[str, int]
    loaders: list[LoaderView]
    users: list[UserShare]  # lightest recent usage first
    station_changes: list[EventView]  # the latest changes of station settings, oldest first
    tracking: list[TrackingHealth] = []  # the MLflow stores tracked jobs log to
    loop: LoopTimingView | None = None  # None: an engine from before issue 36
    drain: DrainView | None = None  # the station is drained (`gpudesk drain`); None: it is not
    # the store cannot be written now (a full disk under GPUDESK_HOME), and what waits to be
    # saved meanwhile; None: it can
    store_problem: str | None = None


class PingResult(WireModel, frozen=True):
    pid: int
    version: str
    protocol: int
    # its state folder (a system engine's --state-dir, a personal engine's home), where a
    # client finds the station's files (the selection cache); None: an engine from before it
    home: str | None = None


class ShutdownResult(WireModel, frozen=True):
    running_attempts: int


# A station setting's value as the wire carries it (StationConfig's fields).
SettingValue: TypeAlias = str | int | float | bool | dict[str, str] | None


class SettingChange(WireModel, frozen=True):
    """A station setting `configure` changed; `message` says so ("policy auto → fifo")."""

    key: str
    old: SettingValue
    new: SettingValue
    message: str


class SettingNotApplied(WireModel, frozen=True):
    """A station setting `configure` was asked for and did not apply; `message` says what and
    why ("not applied: policy fifo (the station runs auto; only an admin ...)")."""

    key: str
    value: SettingValue
    current: SettingValue
    reason: str
    message: str


class ConfigureResult(WireModel, frozen=True):
    """The station config in force after `configure`, and what the request did to it."""

    station: StationConfigView
    changed: bool
    changes: list[SettingChange]
    not_applied: list[SettingNotApplied]


class DatasetsResult(WireModel, frozen=True):
    datasets: list[str]
    specs: list[LoaderSpec]
