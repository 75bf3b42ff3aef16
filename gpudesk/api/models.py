"""Typed models of everything the engine answers and publishes.

One model per reply and event, decoded once, strictly, where a message arrives
(`gpudesk.api.client`): a field the model does not know, a field it needs that is missing, or a
value of the wrong type is a `DecodeError` naming the path — never a `KeyError` three views
later. `docs/protocol.md` documents each request and event; `tests/integration/test_contract.py`
decodes every one of them from a real engine.

The models are `msgspec.Struct`s (frozen, keyword-only, unknown fields forbidden), chosen over
dataclasses and pydantic on measured decode cost (bench/api_decode.py, docs/benchmarks.md).
`to_builtins(model)` gives back the wire's JSON shape, for `--json` output.

Nullable is not optional: a field the engine sends as `null` is `T | None` with no default, so a
reply that leaves it out fails to decode.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import msgspec

__all__ = [
    "REPLY_MODELS",
    "ActionOutcome",
    "ActionResult",
    "AttemptUsageFigures",
    "AttemptUsageView",
    "AttemptView",
    "ClusterView",
    "ConfigureResult",
    "DamagedJob",
    "DatasetsResult",
    "DemandView",
    "EventView",
    "GpuCounts",
    "GpuModelView",
    "GpuView",
    "HistoryGpu",
    "HistoryPoint",
    "HostView",
    "JobDetail",
    "JobEvent",
    "JobList",
    "JobRunView",
    "JobSeriesView",
    "JobSpecView",
    "JobStateName",
    "JobTelemetry",
    "JobView",
    "LoaderConsumer",
    "LoaderSelection",
    "LoaderSpec",
    "LoaderStatus",
    "LoaderView",
    "LogChunk",
    "LoopRequest",
    "LoopTimingView",
    "LoopTurn",
    "LoopTurns",
    "MigApplyResult",
    "MigDeviceCreated",
    "MigDeviceView",
    "MigPlanResult",
    "MigPlanView",
    "ModelObserveResult",
    "ModelParamView",
    "ModelResetResult",
    "ModelShowResult",
    "MpsFault",
    "MpsInfo",
    "PingResult",
    "PlacementMode",
    "PlacementView",
    "PlanBlocker",
    "PlanLeftOut",
    "PlanSlice",
    "ProcessView",
    "SettingChange",
    "SettingNotApplied",
    "SettingValue",
    "ShutdownResult",
    "SlotCounts",
    "SlurmJobView",
    "Snapshot",
    "StationConfigView",
    "StationInfo",
    "StationStatus",
    "SubmitResult",
    "TelemetryEvent",
    "TelemetryResult",
    "TrackingHealth",
    "TrackingView",
    "UsageFigures",
    "UsageSummary",
    "WireModel",
    "to_builtins",
]

JobStateName = Literal["queued", "running", "succeeded", "failed", "cancelled"]
PlacementMode = Literal["cpu", "exclusive", "naive", "mps", "mig"]


class WireModel(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """The base of every model: immutable, fields by name, nothing unknown accepted.
    (Subclasses repeat `frozen=True` only for type checkers; msgspec inherits it.) A field with
    a default is one the engine sends only where it applies; `to_builtins` leaves it out again
    when it holds its default (None), so `--json` prints what the engine sent."""


def to_builtins(value: Any) -> Any:
    """A model (or a list of them) as the plain JSON data the engine sent."""
    return msgspec.to_builtins(value)


# ------------------------------------------------------------------------------------ jobs
class TrackingView(WireModel, frozen=True):
    """A job's MLflow tracking as submitted (docs/tracking.md)."""

    mlflow_uri: str
    experiment: str
    params: dict[str, str] = {}  # its sweep values, logged as params
    sweep_params: dict[str, str] = {}  # its sweep's grid: the parent run's params


class ClusterView(WireModel, frozen=True):
    """The cluster a job was submitted to (gpudesk.core.cluster.ClusterSpec, docs/slurm.md)."""

    kind: str
    name: str | None
    partition: str | None
    account: str | None
    qos: str | None
    share: str
    gpu_type: str | None
    mig_profile: str | None
    cpus_per_task: int
    mem_gb: float | None
    conf: str | None


class JobSpecView(WireModel, frozen=True):
    """What was submitted, as the engine keeps it (the environment is left out of listings:
    it can hold secrets; `show --env` asks for it)."""

    name: str
    command: list[str]
    shell: bool
    workdir: str | None
    gpus: int
    memory_gb: float | None
    sm_pct: float | None
    dataset: str | None
    selection: str | None
    priority: int
    max_attempts: int
    group: str | None
    after: list[int] = []  # jobs that must succeed first
    time_limit_s: float | None = None  # wall-clock seconds an attempt may run
    sweep: str | None = None  # the [[sweeps]] table of its profile that made it
    tracking: TrackingView | None = None  # its MLflow run's store and experiment
    cluster: ClusterView | None = None  # the Slurm cluster it was submitted to; None: the station


class UsageFigures(WireModel, frozen=True):
    """What a job or an attempt used. Energy in joules (GPU energy split among the jobs that
    shared a GPU, by `split`), carbon in g CO2e; None where it was not measured."""

    gpu_j: float | None
    gpu_idle_j: float | None
    gpu_above_idle_j: float | None
    gpu_source: str | None
    split: str | None
    estimate: bool
    cpu_j: float | None
    total_j: float | None
    carbon_g: float | None
    cpu_s: float | None
    rss_peak_mib: float | None
    io_read_mib: float | None
    io_write_mib: float | None


class AttemptUsageFigures(UsageFigures, frozen=True):
    """One attempt's usage, with its GPU memory peak and mean SM activity."""

    gpu_memory_peak_mib: float | None
    gpu_sm_mean_pct: float | None


class AttemptUsageView(AttemptUsageFigures, frozen=True):
    attempt: int  # the attempt's number within its job


class UsageSummary(UsageFigures, frozen=True):
    """A job's usage summed over its attempts (a running attempt's figures are live)."""

    grid_g_per_kwh: float
    per_attempt: list[AttemptUsageView]


class SlurmJobView(WireModel, frozen=True):
    """A job the engine submitted to a Slurm cluster (docs/slurm.md): its id there ("123", or
    "123_4" for task 4 of array 123) and what Slurm last said of it."""

    cluster: str  # the cluster's name (its ClusterName, or [cluster] name)
    job_id: str | None  # None until sbatch answered
    state: str | None  # Slurm's word: PENDING, RUNNING, COMPLETED, TIMEOUT ...
    reason: str | None  # Slurm's reason: Resources, Priority, DependencyNeverSatisfied ...
    node: str | None  # where it runs or ran
    gres: str | None  # the gres it asked for ("gpu:1g.10gb:1"); None: a CPU job
    script: str  # the sbatch script gpudesk wrote and submitted


class JobView(WireModel, frozen=True):
    """A job as `jobs` and `show` list it. While it runs, `gpus`, `mode` and `mig_slice` say
    where (structured; `slot` is only the display label, e.g. "gpu:0/mps")."""

    id: int
    name: str
    state: JobStateName
    group: str | None
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    attempts: int
    max_attempts: int
    exit_code: int | None
    reason: str | None
    cancel_requested: bool
    held: bool
    attempts_before_requeue: int
    user: str  # the owner's user name (the uid as text when the system has none for it)
    uid: int
    spec: JobSpecView
    slot: str | None
    gpus: list[int]
    mode: PlacementMode | None
    mig_slice: str | None
    pgid: int | None
    log: str | None
    loader: str | None
    usage: UsageSummary | None = None  # only when `jobs` is asked for usage
    # Also only with usage: where its last attempt ran (`slot` is only set while it runs), and
    # its GPU-seconds over every attempt (wall time × GPUs held, as allocated).
    last_slot: str | None = None
    gpu_s: float | None = None
    slurm: SlurmJobView | None = None  # a job submitted to Slurm: its id there and state
    # A queued job: why it waits, as a short code in squeue's words: Priority (a job ahead of
    # it waits too), Resources (next to start, waiting for room), Dependency (its --after
    # jobs), JobHeldUser, QOSMaxGRESPerUser (its owner's GPU limit), TrackingRun (its MLflow
    # run is being made); a Slurm job's is Slurm's own. `show`'s `waiting` says it at length.
    wait_reason: str | None = None

    @property
    def terminal(self) -> bool:
        return self.state in ("succeeded", "failed", "cancelled")

    @property
    def queue_order(self) -> tuple[int, int]:
        """Where a waiting job stands in the queue, as the engine orders it (its placement
        queue's order_key): the higher priority first, then the one submitted first."""
        return (-self.spec.priority, self.id)

    @property
    def exit_status(self) -> int:
        """What `gpudesk wait` and `logs -f` exit with once the job has ended: 0 when it
        succeeded; its own exit code when it ended with one (128 + N when signal N killed it);
        1 otherwise (it could not start, was lost, or was cancelled before it ran)."""
        if self.state == "succeeded":
            return 0
        if self.exit_code is not None and 0 < self.exit_code < 256:
            return self.exit_code
        return 1

    @property
    def outcome(self) -> str:
        """One line for a job that has ended: `job 3 (prep) failed: exit code 4`."""
        why = f": {self.reason}" if self.reason else ""
        return f"job {self.id} ({self.name}) {self.state}{why}"


class DemandView(WireModel, frozen=True):
    """What placement assumed a job needs, and where the figure came from ("hints",
    "history", "default", "after OOM")."""

    memory_mib: float
    sm_pct: float
    source: str
    exclusive: bool


class AlternativeView(WireModel, frozen=True):
    """A placement the policy weighed and what the interference model predicted there: the
    job's speed (1.0 = alone on a whole GPU) and the work per second the station gains."""

    slot: str
    mode: str
    rate: float
    gain: float
    note: str


class PlacementView(WireModel, frozen=True):
    """Where and how an attempt was placed, and why. The last five are sent only where they
    apply (a GPU job's demand, a MIG slice, an MPS client's limits, the alternatives `auto`
    weighed, best first)."""

    slot: str
    mode: PlacementMode
    reason: str
    gpus: list[int]
    env: dict[str, str]
    env_defaults: dict[str, str]
    demand: DemandView | None = None
    mig_slice: str | None = None
    mps_thread_pct: int | None = None
    mps_memory_limit_mib: int | None = None
    alternatives: list[AlternativeView] = []


class DamagedJob(WireModel, frozen=True):
    """A job row the engine's store cannot read (its spec is not JSON, say): left out of the
    listing, and why."""

    id: int
    reason: str


class JobList(WireModel, frozen=True):
    """`jobs`: one page of the jobs asked for, oldest first (at most the engine's page cap).
    `more`: further jobs match; go on with `after_id` (oldest-first pages) or `before_id`
    (newest-first pages), whichever is set. `total` (asked with `count`): how many match in
    all. `damaged`: rows skipped because the store cannot read them. `Client.job_listing`
    follows the pages and gathers them into one JobList."""

    jobs: list[JobView]
    more: bool = False
    after_id: int | None = None
    before_id: int | None = None
    total: int | None = None
    damaged: list[DamagedJob] = []
    simulated: str | None = None  # the station's backend (sim:MODEL) when its GPUs are simulated


class AttemptView(WireModel, frozen=True):
    number: int
    state: str  # "running", "exited", "lost", "launch_failed"
    placement: PlacementView
    pid: int | None
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    signal: int | None
    reason: str | None
    log: str | None
    # "cgroup PATH (pids.max 4096, memory.max 21.6 GiB)" (the limits read back from it, or
    # which is missing and why), or "process group only: why" (a cancel or its end cannot reach
    # a process that left the group); absent until its wrapper has started
    containment: str | None = None


class EventView(WireModel, frozen=True):
    """One line of a job's (or the engine's) history."""

    id: int
    ts: float
    job_id: int | None
    attempt: int | None
    kind: str
    state: str | None
    message: str


class JobRunView(WireModel, frozen=True):
    """A tracked job's MLflow run: `run_id` once the store made it; `error`, the store's last
    error while it fails."""

    mlflow_uri: str
    experiment: str
    run_id: str | None
    error: str | None


SeriesPoints: TypeAlias = list[tuple[float, float]]


class JobSeriesView(WireModel, frozen=True):
    """`show` with `series: true`: the job's telemetry over its life, each metric as (time,
    value) points oldest first. A stored point is the mean of the `window_s` window that ended
    at its time (a long job's are averaged further, to at most 2,000 points); while a window
    is open, the job's means so far are its last point. `gpu_power_w` is the job's share of its
    GPUs' power as the energy split credits it; `simulated`: the job ran on simulated GPUs."""

    window_s: float
    simulated: bool
    cpu_pct: SeriesPoints
    rss_mib: SeriesPoints
    gpu_memory_mib: SeriesPoints
    gpu_sm_pct: SeriesPoints
    gpu_power_w: SeriesPoints


class JobDetail(WireModel, frozen=True):
    """`show`: a job, its attempts and events, why it waits, what it used."""

    job: JobView
    attempts: list[AttemptView]
    events: list[EventView]
    waiting: str | None
    usage: UsageSummary | None
    env: dict[str, str] | None = None  # only when asked for
    tracking: JobRunView | None = None  # a tracked job's MLflow run
    series: JobSeriesView | None = None  # only when asked for


class LogChunk(WireModel, frozen=True):
    """`log`: a piece of an attempt's output, read by the engine (docs/protocol.md)."""

    job: int
    attempt: int
    data: bytes  # base64 on the wire
    skipped: int  # bytes before `data` rotated away before they could be read
    next: int  # the stream position after `data`
    end: int  # where the stream ends now


class SubmitResult(WireModel, frozen=True):
    ids: list[int]
    simulated: str | None = None  # the station's backend (sim:MODEL) when its GPUs are simulated
    # job id -> why it waits, for the jobs that can start only once the station changes (an
    # admin leaving MIG mode, a lost GPU coming back): draining the GPUs will not start them
    waits_for_change: dict[int, str] = {}


class ActionOutcome(WireModel, frozen=True):
    """What a job-control request did to one job; `ok` false where it was refused (another
    user's job, a running job held), and `outcome` says why."""

    id: int
    name: str
    outcome: str
    ok: bool


class ActionResult(WireModel, frozen=True):
    results: list[ActionOutcome]


# --------------------------------------------------------------------------------- station
class MpsFault(WireModel, frozen=True):
    """A GPU whose MPS server cannot take clients: new jobs there are time-sliced."""

    gpu: int
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


class LoaderConsumer(WireModel, frozen=True):
    pid: int
    batch_size: int
    epoch: int
    position: list[int] | None
    delivered: int
    batches_per_s: float
    held_slots: int
    makeups_left: int


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


class PingResult(WireModel, frozen=True):
    pid: int
    version: str
    protocol: int


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


# ------------------------------------------------------------------------------- telemetry
class ProcessView(WireModel, frozen=True):
    pid: int
    used_memory_mib: float | None
    sm_pct: float | None
    mig_device: int | None  # the MIG device (index on its GPU) the process runs on
    job_id: int | None
    # "server": the GPU's MPS server (nvidia-cuda-mps-server); "client": a process running
    # through it (NVML gives no SM share of its own); None: outside MPS
    mps: str | None = None

    @property
    def mps_server(self) -> bool:
        return self.mps == "server"


class MigDeviceView(WireModel, frozen=True):
    index: int
    uuid: str | None
    name: str | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    memory_used_mib: float | None
    memory_total_mib: float | None
    sm_count: int | None
    processes: list[ProcessView]

    @property
    def profile(self) -> str:
        """ "3g.20gb" from the device name "NVIDIA A100-SXM4-40GB MIG 3g.20gb"."""
        return (self.name or "").rsplit(" ", 1)[-1]


class GpuView(WireModel, frozen=True):
    """One GPU in a telemetry snapshot. `kernel_active_pct` is NVML's "GPU utilization"
    (time a kernel ran); `sm_activity_pct` is SM activity (DCGM or GPM), None where unknown."""

    index: int
    uuid: str | None
    name: str | None
    lost: bool
    memory_used_mib: float | None
    memory_total_mib: float | None
    kernel_active_pct: float | None
    sm_activity_pct: float | None
    power_w: float | None
    power_limit_w: float | None
    energy_j: float | None
    energy_source: str | None
    idle_power_w: float | None
    temperature_c: float | None
    sm_clock_mhz: float | None
    memory_clock_mhz: float | None
    mig_enabled: bool
    mig_devices: list[MigDeviceView]
    processes: list[ProcessView]
    jobs: list[int]
    unavailable: list[str]


class JobTelemetry(WireModel, frozen=True):
    """A running attempt in a snapshot: its process group's CPU, memory, I/O and GPU use."""

    id: int
    attempt_id: int
    name: str
    user: str  # its job's owner
    slot: str
    gpus: list[int]
    runtime_s: float | None
    processes: int
    cpu_pct: float | None
    cpu_s: float | None
    rss_mib: float | None
    io_read_mib: float | None
    io_write_mib: float | None
    gpu_memory_mib: float | None
    gpu_sm_pct: float | None
    energy: AttemptUsageFigures


class HostView(WireModel, frozen=True):
    cpu_pct: float | None
    cores: int
    memory_used_mib: int
    memory_total_mib: int
    load_avg: list[float]
    cpu_energy_j: float | None
    cpu_energy_note: str | None
    grid_g_per_kwh: float
    gpu_energy_carbon_g: float | None


class Snapshot(WireModel, frozen=True):
    """The station at one sample: what the `telemetry` event carries and `telemetry` answers."""

    taken_at: float
    backend: str
    simulated: bool
    banner: str | None
    sampling_since: float
    interval_s: float
    host: HostView
    gpus: list[GpuView]
    jobs: list[JobTelemetry]

    def gpu(self, index: int) -> GpuView | None:
        return next((g for g in self.gpus if g.index == index), None)


class HistoryGpu(WireModel, frozen=True):
    index: int
    memory_used_mib: float | None
    kernel_active_pct: float | None
    sm_activity_pct: float | None
    power_w: float | None
    temperature_c: float | None
    energy_j: float | None


class HistoryPoint(WireModel, frozen=True):
    t: float
    gpus: list[HistoryGpu]


class TelemetryResult(WireModel, frozen=True):
    snapshot: Snapshot | None  # None before the first sample
    history: list[HistoryPoint]
    energy_today_j: dict[int, float]  # GPU index -> joules since local midnight


# ------------------------------------------------------------------------------------- MIG
class PlanSlice(WireModel, frozen=True):
    """A MIG slice a plan creates, and the queued job it is for."""

    profile: str
    profile_id: int
    memory_mib: float
    compute_slices: int
    job_id: int
    job_name: str
    job_memory_mib: float
    job_sm_pct: float
    job_held: bool
    jobs: list[int]


class PlanLeftOut(WireModel, frozen=True):
    job_id: int
    job_name: str
    reason: str


class PlanBlocker(WireModel, frozen=True):
    code: str
    message: str


class MigPlanView(WireModel, frozen=True):
    """The MIG layout the queue would want on one GPU, and whether it may be applied."""

    gpu: int
    name: str
    mig_mode: str
    mig_enabled: bool
    simulated: bool
    current: list[str]
    wanted: list[str]
    slices: list[PlanSlice]
    left_out: list[PlanLeftOut]
    left_out_total: int
    commands: list[str]
    allowed: bool
    blockers: list[PlanBlocker]
    reason: str | None
    enable_hint: str | None
    running_jobs: list[int]
    auto: str | None = None  # what auto's own repartitioning predicts of it now, if it weighs it


class MigPlanResult(WireModel, frozen=True):
    plans: list[MigPlanView]
    simulated: bool


class MigDeviceCreated(WireModel, frozen=True):
    gpu: int
    device: int
    profile: str
    uuid: str
    gpu_instance_id: int | None
    compute_instance_id: int | None
    placement: str | None


class MigApplyResult(WireModel, frozen=True):
    gpu: int
    previous: list[str]
    profiles: list[str]
    commands: list[str]
    mig_devices: list[MigDeviceCreated]
    simulated: bool
    applied: bool
    message: str


# ----------------------------------------------------------------- interference model
ParamKind = Literal["published", "derived", "assumption", "learned", "calibrated"]


class ModelParamView(WireModel, frozen=True):
    """One parameter of the interference model for one GPU model: the value placement uses,
    the prior it started from, where it comes from (`kind`: the prior's provenance, or
    "learned" / "calibrated" once observed on this station), how many observations moved it
    (`calibrated` of them from calibration probes) and when the last came (epoch seconds)."""

    name: str
    value: float
    prior: float
    kind: ParamKind
    source: str
    observations: int
    calibrated: int
    updated_at: float | None


class GpuModelView(WireModel, frozen=True):
    """The parameters for one GPU model (its name as NVML gives it; "" for the defaults a GPU
    of no known model gets) and the station's GPUs of that model."""

    gpu_model: str
    gpus: list[int]
    params: list[ModelParamView]


class ModelShowResult(WireModel, frozen=True):
    """`model_show`: the interference model as this station's placement uses it."""

    backend: str
    simulated: bool
    observe_min_s: float  # the shortest interval of steady co-tenants that teaches anything
    commands_with_rate_alone: int  # commands whose progress rate alone is remembered
    models: list[GpuModelView]


class ModelObserveResult(WireModel, frozen=True):
    """`model_observe`: how many observations moved a parameter (`moved`: by name) and the
    GPU model's parameters after them."""

    gpu_model: str
    accepted: int
    ignored: int
    moved: dict[str, int]
    params: list[ModelParamView]


class ModelResetResult(WireModel, frozen=True):
    gpu_model: str | None  # None: every GPU model
    dropped: int  # (GPU model, parameter) pairs that had moved from their prior


# ---------------------------------------------------------------------------------- events
class JobEvent(WireModel, frozen=True):
    """Published on topic "job" whenever a job changes."""

    v: int
    ts: float
    id: int
    name: str
    state: JobStateName
    group: str | None
    user: str
    attempts: int
    exit_code: int | None
    held: bool
    priority: int
    message: str


class TelemetryEvent(Snapshot, frozen=True):
    """Published on topic "telemetry" at every sample: the snapshot, with the protocol
    version every event carries."""

    v: int


# Each request's reply model, by op: the one table of the protocol's replies (docs/protocol.md).
# `Client`'s methods decode with these; the contract test checks the engine knows exactly these
# ops and answers each in its model.
REPLY_MODELS: dict[str, type[WireModel]] = {
    "ping": PingResult,
    "status": StationStatus,
    "shutdown": ShutdownResult,
    "configure": ConfigureResult,
    "check_configure": ConfigureResult,
    "datasets": DatasetsResult,
    "submit": SubmitResult,
    "check_submit": SubmitResult,
    "jobs": JobList,
    "show": JobDetail,
    "log": LogChunk,
    "cancel": ActionResult,
    "hold": ActionResult,
    "release": ActionResult,
    "priority": ActionResult,
    "requeue": ActionResult,
    "telemetry": TelemetryResult,
    "mig_plan": MigPlanResult,
    "mig_apply": MigApplyResult,
    "model_show": ModelShowResult,
    "model_observe": ModelObserveResult,
    "model_reset": ModelResetResult,
}
