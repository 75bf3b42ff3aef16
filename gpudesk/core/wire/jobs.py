"""Jobs on the wire: a job, its spec, attempts, events, usage and series (`jobs`, `show`,
`log`), and what `submit` and the job-control ops answer.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Literal, TypeAlias

from gpudesk.core.wire.base import JobStateName, PlacementMode, WireModel
from gpudesk.core.wire.control import DrainView


class TrackingView(WireModel, frozen=True):
    """A job's MLflow tracking as submitted (docs/tracking.md)."""

    mlflow_uri: str
    experiment: str
    params: dict[str, str] = {}  # its sweep values, logged as params
    sweep_params: dict[str, str] = {}  # its sweep's grid: the parent run's params
    objective: str | None = None  # the result metric its sweep's parent rolls up ([report])
    goal: str | None = None  # "max" or "min", with `objective`


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
    # It may be preempted (docs/preemption.md); its signal and grace only when it may.
    preemptible: bool = False
    preempt_signal: str | None = None
    preempt_grace_s: float | None = None
    # issue 41 item 5 (gpudesk.core.submit_options): not before this wall-clock time (sbatch
    # --begin); a comment or label; its array (the array's first job, null on that job itself;
    # its task index; at most how many of the array run at once); Slurm's afterany/afternotok.
    begin_at: float | None = None
    comment: str | None = None
    array_job: int | None = None
    array_task: int | None = None
    array_limit: int | None = None
    after_any: list[int] = []
    after_notok: list[int] = []
    # run as its owner when it ends (submit --notify), its secrets hidden (gpudesk.redact)
    notify: str | None = None
    umask: int | None = None  # its command's (core/umask.py); null: the engine's (an old client)


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
    # jobs), BadConstraints (placement fails it on a later turn: it can never run here),
    # JobHeldUser, JobHeldClient (its client's, while its submission arrives in parts),
    # QOSMaxGRESPerUser (its owner's GPU limit), TrackingRun (its MLflow
    # run is being made), Drained (the station is drained), BeginTime (--begin ahead),
    # JobArrayTaskLimit (its array's throttle); a Slurm job's is Slurm's own. `show`'s
    # `waiting` says it at length.
    wait_reason: str | None = None
    # attempts since the last requeue that ended preempted: they do not count against
    # max_attempts (docs/preemption.md)
    preemptions: int = 0
    # a suspended job (state `suspended`, `gpudesk suspend`): when it was suspended
    suspended_at: float | None = None
    # the seconds its current (or last) attempt spent suspended before `suspended_at` (the
    # store's attempts.suspended_s, the figure its time limit leaves out): `run_s` leaves it out
    suspended_s: float = 0.0
    # a job running on the station: how long it has left, and where that came from
    # (gpudesk.policy.remaining; a job on Slurm has none)
    remaining: RemainingView | None = None
    # A job whose attempt ended while the engine could not write its store (a full disk): why
    # its end is not saved yet. `state`, `exit_code`, `ended_at` and `reason` are then the end
    # the engine worked out and keeps in memory (where it got that far), saved when there is
    # room; None: what is shown is what is stored.
    unsaved: str | None = None

    @property
    def terminal(self) -> bool:
        return self.state in ("succeeded", "failed", "cancelled")

    def run_s(self, now: float | None = None) -> float | None:
        """How long its current (or last) attempt has run (squeue's TIME; `queue`, `show`, the
        desk): `run_seconds`."""
        return run_seconds(self.started_at, self.ended_at, self.suspended_s, self.suspended_at, now)

    @property
    def state_detail(self) -> str | None:
        """`reason` as said after the state, without the state's word where the reason starts
        with it: `cancelled (killed by SIGTERM)`, not `cancelled (cancelled (killed by
        SIGTERM))`; `cancelled (while queued)`."""
        reason = self.reason
        if reason is None or not reason.startswith(self.state + " "):
            return reason
        rest = reason[len(self.state) + 1 :]
        return rest[1:-1] if _wrapped(rest) else rest

    @property
    def array_head(self) -> bool:
        """Is it an array's first job, whose id names every task of the array (as Slurm reads
        an array's id: docs/jobs.md)?"""
        return self.spec.array_task is not None and self.spec.array_job is None

    @property
    def own_ref(self) -> int | str:
        """The reference that names this job alone: its id, but an array's first job's id
        names the whole array, so `ID_TASK` (Slurm's `144_0`) for that one."""
        return f"{self.id}_{self.spec.array_task}" if self.array_head else self.id

    @property
    def placed(self) -> bool:
        """Running or suspended: its attempt lives and holds where it runs (`slot`, `gpus`)."""
        return self.state in ("running", "suspended")

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
    """What placement assumed a job needs, and where the figure came from ("hint",
    "hint, corrected by its family" (scaled by how far its family's hints were off),
    "history" (the same command's runs), "family history" (its command family's runs),
    "default", "after OOM")."""

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
    all. `damaged`: rows skipped because the store cannot read them. `own_only`: asked
    `actable`, the caller is no admin, so only her own jobs were listed. `Client.job_listing`
    follows the pages and gathers them into one JobList."""

    jobs: list[JobView]
    more: bool = False
    after_id: int | None = None
    before_id: int | None = None
    total: int | None = None
    damaged: list[DamagedJob] = []
    simulated: str | None = None  # the station's backend (sim:MODEL) when its GPUs are simulated
    drain: DrainView | None = None  # the station is drained (`gpudesk drain`): nothing starts
    own_only: bool = False


class AttemptView(WireModel, frozen=True):
    number: int
    state: str  # "running", "exited", "preempted", "lost", "launch_failed"
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
    suspended_s: float = 0.0  # the seconds it spent suspended, its current suspension not counted

    def run_s(self, suspended_at: float | None = None, now: float | None = None) -> float | None:
        """How long it has run (`run_seconds`); `suspended_at`: its job's, while suspended."""
        return run_seconds(self.started_at, self.ended_at, self.suspended_s, suspended_at, now)


def run_seconds(
    started: float | None,
    ended: float | None,
    suspended_s: float,
    suspended_at: float | None,
    now: float | None = None,
) -> float | None:
    """An attempt's run time, its time suspended left out, as squeue's TIME and its time limit
    count it (LiveAttempt.elapsed_s): from its start until it ended, was suspended (it is now),
    or `now` (default this moment), less `suspended_s`, its suspensions before. None: never
    started."""
    if started is None:
        return None
    end = ended or (time.time() if now is None else now)
    if suspended_at is not None:
        end = min(end, suspended_at)
    return max(0.0, end - started - suspended_s)


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


class RemainingView(WireModel, frozen=True):
    """A running job's remaining time (gpudesk.policy.remaining): `seconds` null when unknown;
    `source` is `progress` (its `progress DONE/TOTAL` lines at its current rate), `history`
    (its command family's mean run time minus `elapsed_s`) or `unknown`."""

    seconds: float | None
    source: Literal["progress", "history", "unknown"]
    done: float | None = None  # its latest progress DONE
    total: float | None = None  # its latest TOTAL (null: it prints none)
    rate_per_s: float | None = None  # DONE per second over its recent progress
    typical_s: float | None = None  # its command family's mean run time
    elapsed_s: float | None = None  # how long its attempt has run


class ArrayTasksView(WireModel, frozen=True):
    """The tasks of the array whose first job `show` shows (its id names them all, `ID_TASK`
    one): each one's task index and job id, in task order."""

    tasks: list[int]
    jobs: list[int]

    @classmethod
    def of(cls, tasks: Mapping[int, int] | None) -> ArrayTasksView | None:
        """From the store's task index -> job id (None: not an array's first job)."""
        return cls(tasks=list(tasks), jobs=list(tasks.values())) if tasks else None


class JobDetail(WireModel, frozen=True):
    """`show`: a job, its attempts and events, why it waits, what it used, and while it runs
    how long it has left."""

    job: JobView
    attempts: list[AttemptView]
    events: list[EventView]
    waiting: str | None
    usage: UsageSummary | None
    env: dict[str, str] | None = None  # only when asked for
    tracking: JobRunView | None = None  # a tracked job's MLflow run
    series: JobSeriesView | None = None  # only when asked for
    remaining: RemainingView | None = None  # a running job's (absent otherwise): job.remaining
    simulated: str | None = None  # the station's backend (sim:MODEL) when its GPUs are simulated
    # `events` are the job's latest (protocol.SHOWN_EVENTS); how many came before them
    earlier_events: int = 0
    array: ArrayTasksView | None = None  # an array's first job: every task of its array


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


class EditResult(WireModel, frozen=True):
    """What `edit` changed, a phrase per field ("time_limit_s 3600 -> 7200"; an environment
    variable by name only); empty when the edit changed nothing. The job keeps its id and its
    place in the queue."""

    id: int
    name: str
    changes: list[str] = []


def _wrapped(text: str) -> bool:
    """Is `text` one parenthesis around the rest ("(a (b))", not "(a) and (b)")?"""
    if not (text.startswith("(") and text.endswith(")")):
        return False
    depth = 0
    for position, char in enumerate(text):
        depth += (char == "(") - (char == ")")
        if depth == 0:
            return position == len(text) - 1
    return False
