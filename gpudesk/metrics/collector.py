"""A `MetricsSnapshot` as Prometheus metric families: the DCGM names dcgm-exporter uses for the
same readings, with its labels, and gpudesk's own `gpudesk_*` metrics (docs/metrics.md).

`SnapshotCollector.collect()` runs on the HTTP server's thread at each scrape. It reads one
reference (the exporter's latest snapshot, swapped whole by the engine's loop) and renders it;
it touches nothing else the engine owns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gpudesk.hw.telemetry.xid import xid_name
from gpudesk.metrics.histogram import Buckets
from gpudesk.metrics.snapshot import Device, DeviceReading, MetricsSnapshot

# (name, help, the DeviceReading field) as dcgm-exporter's default-counters.csv and
# dcp-metrics-included.csv have them: the same name, unit and help text, so a dashboard built
# on dcgm-exporter reads these unchanged.
DCGM_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "gpu_util_pct"),
    (
        "DCGM_FI_PROF_SM_ACTIVE",
        "The ratio of cycles an SM has at least 1 warp assigned.",
        "sm_active",
    ),
    (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "Ratio of time the graphics engine is active.",
        "gr_engine_active",
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        "pipe_tensor_active",
    ),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "fb_used_mib"),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "fb_free_mib"),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power_w"),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temperature_c"),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "sm_clock_mhz"),
)
# dcgm-exporter declares this one a counter. Prometheus client libraries name every counter
# NAME_total (the OpenMetrics rule; prometheus_client writes `# TYPE NAME_total counter`), so
# the DCGM name cannot be kept with the counter type: it is exported untyped under its DCGM name,
# which is what dashboards query (`rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[5m])` works on it
# as on dcgm-exporter's). gpudesk_gpu_energy_joules_total is the typed counter.
DCGM_ENERGY = (
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "Total energy consumption since boot (in mJ).",
)
# A GPU's memory health, dcgm-exporter's names and help texts (default-counters.csv,
# dcp-metrics-included.csv), from NVML (gpudesk.hw.telemetry.health): (name, help, kind, the
# GpuHealth field). Its counters are exported untyped as the energy counter is (their DCGM names
# kept), and none carries job labels: a GPU's counts, not a job's, one series per GPU.
DCGM_HEALTH: tuple[tuple[str, str, str, str], ...] = (
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "Total number of single-bit volatile ECC errors.",
        "unknown",
        "ecc_sbe_volatile",
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "Total number of double-bit volatile ECC errors.",
        "unknown",
        "ecc_dbe_volatile",
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for correctable errors",
        "unknown",
        "remapped_correctable",
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for uncorrectable errors",
        "unknown",
        "remapped_uncorrectable",
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "Whether remapping of rows has failed",
        "gauge",
        "remap_failure",
    ),
    (
        "DCGM_FI_DEV_RETIRED_SBE",
        "Total number of retired pages due to single-bit errors.",
        "unknown",
        "retired_sbe",
    ),
    (
        "DCGM_FI_DEV_RETIRED_DBE",
        "Total number of retired pages due to double-bit errors.",
        "unknown",
        "retired_dbe",
    ),
)
# The last XID error on a GPU since the engine started (0: none), dcgm-exporter's gauge: its
# name and help text (default-counters.csv) and the err_code and err_msg labels it adds to this
# field alone (the XID and its name: gpudesk.hw.telemetry.xid). A GPU's, so no job labels.
DCGM_XID = ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.")
DCGM_NAMES = (
    *(name for name, _, _ in DCGM_GAUGES),
    *(name for name, _, _, _ in DCGM_HEALTH),
    DCGM_XID[0],
    DCGM_ENERGY[0],
)
# Label names of dcgm-exporter's own that Prometheus's naming rules (`promtool check metrics`)
# call camelCase: kept on the DCGM_* series, where dashboards built on dcgm-exporter match on
# them; gpudesk's own metrics use snake_case.
DCGM_CAMELCASE_LABELS = ("modelName",)


class SnapshotCollector(Collector):
    """Renders whatever snapshot `latest()` returns at the time of the scrape."""

    def __init__(self, latest: Callable[[], MetricsSnapshot | None]) -> None:
        self.latest = latest

    def collect(self) -> Iterator[Metric]:
        snapshot = self.latest()
        if snapshot is not None:
            yield from render(snapshot)


def render(snapshot: MetricsSnapshot) -> list[Metric]:
    """Every metric family of a snapshot (pure: tests/engine/test_metrics_snapshot.py)."""
    return [
        _station_info(snapshot),
        *_sampled_at(snapshot),
        *_dcgm(snapshot),
        _gpu_energy(snapshot),
        *_jobs(snapshot),
        *_activity(snapshot),
        *_loaders(snapshot),
        *_loop(snapshot),
    ]


# ------------------------------------------------------------------------------- station
def _station_info(snapshot: MetricsSnapshot) -> Metric:
    info = GaugeMetricFamily(
        "gpudesk_station_info",
        "The station gpudesk watches: its GPU backend, whether it is SIMULATED (sim:* "
        "backends: no reading is from real hardware), the host and gpudesk's version. Always 1.",
        labels=["backend", "simulated", "hostname", "version"],
    )
    info.add_metric(
        [
            snapshot.backend,
            "true" if snapshot.simulated else "false",
            snapshot.hostname,
            snapshot.version,
        ],
        1.0,
    )
    return info


def _sampled_at(snapshot: MetricsSnapshot) -> list[Metric]:
    if snapshot.taken_at is None:
        return []
    taken = GaugeMetricFamily(
        "gpudesk_telemetry_sample_timestamp_seconds",
        "When the GPU readings these metrics carry were taken (Unix time): a value that stops "
        "moving means the sampler stopped delivering.",
    )
    taken.add_metric([], snapshot.taken_at)
    return [taken]


# ---------------------------------------------------------------------------------- DCGM
def _device_labels(
    snapshot: MetricsSnapshot, device: Device, with_jobs: bool = True
) -> dict[str, str]:
    """dcgm-exporter's labels for a device, then what runs there. GPU_I_PROFILE and GPU_I_ID
    only on MIG devices (dcgm-exporter leaves both out on a whole GPU; Prometheus stores an
    empty label as none). `hpc_job` is dcgm-exporter's own label for the job on a GPU outside
    Kubernetes; `job` itself is the label Prometheus gives every series of a scrape target."""
    labels = {
        "gpu": str(device.gpu),
        "UUID": device.uuid,
        "device": f"nvidia{device.gpu}",
        "modelName": device.model_name,
        "Hostname": snapshot.hostname,
    }
    if device.mig_profile is not None:
        labels["GPU_I_PROFILE"] = device.mig_profile
        labels["GPU_I_ID"] = str(device.mig_instance_id)
    if with_jobs:
        labels["hpc_job"] = ",".join(str(job) for job in device.jobs)
        labels["user"] = ",".join(device.users)
    if snapshot.simulated:
        labels["simulated"] = "true"
    return labels


def _dcgm(snapshot: MetricsSnapshot) -> list[Metric]:
    families: list[Metric] = []
    for name, text, field in DCGM_GAUGES:
        family = GaugeMetricFamily(name, text)
        _add(family, name, snapshot, field)
        families.append(family)
    # The energy counter carries no job labels: a counter whose series changes each time the
    # jobs on its GPU do is split into pieces, and `sum by (gpu) (increase(...[15m]))` then
    # extrapolates each piece to the window's edges and adds them (an outside check measured
    # 4.4 % too much across job changes). One series per GPU, as a counter must be; per-job
    # energy is gpudesk_job_energy_joules.
    energy = Metric(DCGM_ENERGY[0], DCGM_ENERGY[1], "unknown")
    _add(energy, DCGM_ENERGY[0], snapshot, "energy_mj", with_jobs=False)
    families.append(energy)
    for name, text, kind, field in DCGM_HEALTH:
        health = Metric(name, text, kind)
        for reading in snapshot.devices:
            value = None if reading.health is None else getattr(reading.health, field)
            if value is not None:
                labels = _device_labels(snapshot, reading.device, with_jobs=False)
                health.add_sample(name, labels, float(value))
        families.append(health)
    families.append(_xid(snapshot))
    return families


def _xid(snapshot: MetricsSnapshot) -> Metric:
    family = GaugeMetricFamily(*DCGM_XID)
    for reading in snapshot.devices:
        if reading.xid is not None:
            labels = _device_labels(snapshot, reading.device, with_jobs=False)
            labels.update(err_code=str(reading.xid), err_msg=xid_name(reading.xid))
            family.add_sample(DCGM_XID[0], labels, float(reading.xid))
    return family


def _add(
    family: Metric, name: str, snapshot: MetricsSnapshot, field: str, with_jobs: bool = True
) -> None:
    """One sample per device whose reading has `field` (a missing reading is no sample). The
    label set differs between a GPU and a MIG device, as dcgm-exporter's does, hence samples
    added one by one rather than through a family's fixed label names."""
    for reading in snapshot.devices:
        value = getattr(reading, field)
        if value is not None:
            labels = _device_labels(snapshot, reading.device, with_jobs)
            family.add_sample(name, labels, float(value))


def _gpu_energy(snapshot: MetricsSnapshot) -> Metric:
    energy = CounterMetricFamily(
        "gpudesk_gpu_energy_joules",
        "Energy each GPU used since this engine began sampling it, in joules: its total-energy "
        "counter's increase, or integrated power where it has none. Starts at 0 with each "
        "engine (a counter reset).",
        labels=["gpu", "uuid", "model_name", "hostname"],
    )
    for reading in _whole_gpus(snapshot.devices):
        if reading.energy_j is not None:
            device = reading.device
            energy.add_metric(
                [str(device.gpu), device.uuid, device.model_name, snapshot.hostname],
                reading.energy_j,
            )
    return energy


def _whole_gpus(devices: tuple[DeviceReading, ...]) -> Iterator[DeviceReading]:
    return (d for d in devices if d.device.mig_profile is None)


# ---------------------------------------------------------------------------------- jobs
def _jobs(snapshot: MetricsSnapshot) -> list[Metric]:
    queue = GaugeMetricFamily(
        "gpudesk_jobs",
        "Jobs in the engine's store by state (queued, held ones included; running; suspended; "
        "succeeded; failed; cancelled) and owner.",
        labels=["state", "user"],
    )
    for count in snapshot.jobs:
        queue.add_metric([count.state, count.user], count.count)
    energy = GaugeMetricFamily(
        "gpudesk_job_energy_joules",
        "Energy a running job's current attempt used so far, in joules: source gpu is its "
        "share of its GPUs' energy (split by SM share or evenly where GPUs are shared), cpu "
        "its share of the CPU package energy (RAPL, where readable). Running jobs only.",
        labels=["job_id", "job_name", "user", "source"],
    )
    carbon = GaugeMetricFamily(
        "gpudesk_job_co2e_grams",
        "Grams of CO2e of a running job's current attempt so far, at the station's "
        "grid_intensity. Running jobs only.",
        labels=["job_id", "job_name", "user"],
    )
    for job in snapshot.running:
        names = [str(job.job_id), job.name, job.user]
        for source, joules in (("gpu", job.gpu_j), ("cpu", job.cpu_j)):
            if joules is not None:
                energy.add_metric([*names, source], joules)
        if job.co2e_g is not None:
            carbon.add_metric(names, job.co2e_g)
    return [queue, energy, carbon]


# ------------------------------------------------------------------------------ activity
def _activity(snapshot: MetricsSnapshot) -> list[Metric]:
    placements = CounterMetricFamily(
        "gpudesk_placements",
        "Attempts the scheduler started, by placement mode: exclusive (a GPU alone), naive "
        "(time-slicing), mps, mig, cpu. Since this engine started.",
        labels=["mode"],
    )
    counted = dict(snapshot.placements)
    for mode in sorted(set(snapshot.modes) | set(counted)):
        placements.add_metric([mode], counted.get(mode, 0))
    ooms = CounterMetricFamily(
        "gpudesk_oom_recoveries",
        "Attempts that died of a GPU out-of-memory error and whose job was requeued with a "
        "raised memory estimate on a GPU of its own. Since this engine started.",
    )
    ooms.add_metric([], snapshot.oom_recoveries)
    out: list[Metric] = [placements, ooms]
    decisions = snapshot.decisions
    if decisions is not None:
        out.append(
            HistogramMetricFamily(
                "gpudesk_placement_decision_seconds",
                "Time the placement policy took per call, in seconds (the policy's decision "
                "alone). Since this engine started.",
                buckets=_buckets(decisions),
                sum_value=decisions.sum_s,
            )
        )
    return out


def _le(bound: float) -> str:
    return repr(bound)


# ---------------------------------------------------------------------------------- loop
def _loop(snapshot: MetricsSnapshot) -> list[Metric]:
    """How long the engine's one loop was held, per request op and per periodic step: every
    other client waits that long (docs/metrics.md, "The engine's loop")."""
    requests = HistogramMetricFamily(
        "gpudesk_engine_request_seconds",
        "Time each request held the engine's loop, in seconds, each hold one observation: "
        "decoding it, its handler and encoding its reply; a request answered in later turns "
        "(job control of many jobs a slice a turn, work done off the loop) is observed once a "
        "step, each step's own time (not the time the client waited). By op (an op the engine "
        "does not know is `unknown`, an undecodable request `invalid`). Every other client "
        "waits meanwhile. Since this engine started.",
        labels=["op"],
    )
    for op, buckets in snapshot.requests:
        requests.add_metric([op], _buckets(buckets), buckets.sum_s)
    steps = HistogramMetricFamily(
        "gpudesk_engine_step_seconds",
        "Time each of the loop's periodic steps took per turn, in seconds, by step (attempts, "
        "schedule, telemetry, metrics, ...). Requests wait meanwhile. Since this engine started.",
        labels=["step"],
    )
    for step, buckets in snapshot.steps:
        steps.add_metric([step], _buckets(buckets), buckets.sum_s)
    return [requests, steps]


def _buckets(buckets: Buckets) -> list[tuple[str, float]]:
    out = [
        (_le(bound), float(count))
        for bound, count in zip(buckets.bounds, buckets.cumulative, strict=False)
    ]
    out.append(("+Inf", float(buckets.cumulative[-1])))
    return out


# ------------------------------------------------------------------------------- loaders
LOADER_FIELDS: tuple[tuple[str, str, str, str], ...] = (
    # (name, type, help, field)
    (
        "gpudesk_loader_batches",
        "counter",
        "Batches a shared loader's producer made (resets when the producer restarts).",
        "batches",
    ),
    (
        "gpudesk_loader_delivered_batches",
        "counter",
        "Batches a shared loader handed to its consumers, each consumer's counted.",
        "delivered",
    ),
    (
        "gpudesk_loader_batches_per_second",
        "gauge",
        "Batches per second a shared loader's consumers read, summed.",
        "batches_per_s",
    ),
    (
        "gpudesk_loader_samples_per_second",
        "gauge",
        "Samples per second a shared loader's consumers read, summed (batches x batch size).",
        "samples_per_s",
    ),
    (
        "gpudesk_loader_cpu_seconds",
        "counter",
        "CPU seconds a shared loader's producer used.",
        "cpu_s",
    ),
    (
        "gpudesk_loader_cpu_saved_seconds",
        "gauge",
        "CPU seconds a shared loader saved: what its consumers would have spent loading their "
        "own batches at the producer's cost per batch, less what the producer spent.",
        "saved_cpu_s",
    ),
)


def _loaders(snapshot: MetricsSnapshot) -> list[Metric]:
    running = GaugeMetricFamily(
        "gpudesk_loader_running",
        "1 while a shared loader's producer runs, 0 once it stopped (its last figures stay).",
        labels=["dataset"],
    )
    consumers = GaugeMetricFamily(
        "gpudesk_loader_consumers",
        "Jobs reading from a shared loader.",
        labels=["dataset"],
    )
    out: list[Metric] = [running, consumers]
    for loader in snapshot.loaders:
        running.add_metric([loader.dataset], 1.0 if loader.running else 0.0)
        consumers.add_metric([loader.dataset], loader.consumers)
    for name, kind, text, field in LOADER_FIELDS:
        family: CounterMetricFamily | GaugeMetricFamily = (
            CounterMetricFamily(name, text, labels=["dataset"])
            if kind == "counter"
            else GaugeMetricFamily(name, text, labels=["dataset"])
        )
        for loader in snapshot.loaders:
            value = getattr(loader, field)
            if value is not None:
                family.add_metric([loader.dataset], value)
        out.append(family)
    return out
