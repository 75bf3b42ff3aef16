"""The probe runner: `gpudesk calibrate`'s plan run on a real GPU. It reads the plan and fills the
measurements (`gpudesk.core.calibration_records`); the fit and the report are pure
(`gpudesk.policy.calibration`) and run the same on a SIMULATED station.

Each run of the plan starts its probes (`python -m gpudesk.workloads.probe`) as real processes on
the GPU, waits until each has printed `ready` (torch loaded, CUDA context made, warmed up), then
tells them all `go` on stdin at once so that they measure the same seconds, and reads each one's
JSON summary. Alone runs calibrate the probe (kernels per burst, host gap); the shared runs pass
the same burst and gap, so a step is the same work alone and shared.

- naive: two plain CUDA processes on the GPU in its default compute mode (the driver
  time-slices their contexts). Their CUDA_MPS_PIPE_DIRECTORY points at an empty folder, so they
  cannot join an MPS daemon someone else runs on the default pipe.
- mps: an MPS control daemon of its own for this GPU, with its pipe and log folders in a
  temporary directory (the engine's `MpsManager`, which honours GPUDESK_MPS_CONTROL), quit
  (`quit` on its control pipe) when the runs end, whatever happens.
- mig: a probe alone on each free MIG slice, by the slice's UUID.

During each alone run NVML is read: SM activity and DRAM bandwidth from GPM (Hopper and newer),
kernel-active time and memory-controller busy time from nvmlDeviceGetUtilizationRates; whatever
the GPU does not support (NVMLError_NotSupported and its kin) is left out and the report says
what was assumed instead.

Never changed: MIG mode, the compute mode, clocks, power limits, persistence mode. The runner
refuses (`CalibrationRefused`, one paragraph) when the GPU is busy or cannot be probed.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudesk.core.calibration_records import (
    AloneMeasurement,
    Measurements,
    MigSlice,
    Plan,
    ProbeRun,
    RunMeasurement,
)
from gpudesk.core.mig_profiles import compute_slices, memory_slices, table_for_gpu
from gpudesk.spawn import SAFE_CWD, module_argv

PROBE_MODULE = "gpudesk.workloads.probe"
READY_TIMEOUT_S = 120.0  # python + torch + a CUDA context + warm-up, on a slow disk
FINISH_GRACE_S = 30.0
UTIL_POLL_S = 0.1
SETTLE_S = 0.5  # readings this long after `go` are left out (the first bursts ramp up)


class CalibrationRefused(RuntimeError):
    """Calibration cannot run here; the message is the paragraph to show."""


# --- the GPU ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuTarget:
    index: int
    uuid: str
    name: str
    mig_mode: bool
    free_slices: tuple[MigSlice, ...] = ()
    exclusive_process: bool = False
    notes: tuple[str, ...] = ()


def _nvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - a dependency of gpudesk
        raise CalibrationRefused(
            "gpudesk calibrate needs nvidia-ml-py (pynvml) to read the GPU; install it."
        ) from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise CalibrationRefused(
            f"gpudesk calibrate needs an NVIDIA GPU and its driver, and NVML did not answer "
            f"({exc}). Run it on the GPU server itself, or try it on a SIMULATED station with "
            "`--station sim:h100`."
        ) from exc
    return pynvml


def _processes(nv: Any, handle: Any) -> list[int]:
    pids: set[int] = set()
    for call in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        with contextlib.suppress(nv.NVMLError):
            pids.update(p.pid for p in getattr(nv, call)(handle))
    return sorted(pids)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def inspect_gpu(index: int) -> GpuTarget:
    """The GPU to calibrate, as NVML sees it; refuses when it is busy or cannot be probed."""
    nv = _nvml()
    try:
        count = nv.nvmlDeviceGetCount()
        if not 0 <= index < count:
            raise CalibrationRefused(
                f"--gpu {index}: this station has {count} GPU{'s' if count != 1 else ''} "
                f"(0 to {count - 1})."
            )
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        name = _text(nv.nvmlDeviceGetName(handle))
        uuid = _text(nv.nvmlDeviceGetUUID(handle))
        mode = None
        with contextlib.suppress(nv.NVMLError):
            mode = nv.nvmlDeviceGetComputeMode(handle)
        if mode == nv.NVML_COMPUTEMODE_PROHIBITED:
            raise CalibrationRefused(
                f"GPU {index} ({name}) is in the PROHIBITED compute mode: no process may use it. "
                "calibrate never changes the compute mode; ask the administrator to set it to "
                "DEFAULT (`nvidia-smi -i N -c DEFAULT`) and run it again."
            )
        mig_mode = False
        with contextlib.suppress(nv.NVMLError):
            mig_mode = nv.nvmlDeviceGetMigMode(handle)[0] == nv.NVML_DEVICE_MIG_ENABLE
        busy = _processes(nv, handle)
        free: list[MigSlice] = []
        if mig_mode:
            table = table_for_gpu(name)
            for slot in range(nv.nvmlDeviceGetMaxMigDeviceCount(handle)):
                try:
                    mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
                except nv.NVMLError:
                    continue
                if _processes(nv, mig):
                    continue
                mig_name = _text(nv.nvmlDeviceGetName(mig))
                c = compute_slices(mig_name)
                if c:
                    free.append(
                        MigSlice(
                            mig_name.rpartition("MIG ")[2] or mig_name,
                            c,
                            memory_slices(mig_name, table or None),
                            _text(nv.nvmlDeviceGetUUID(mig)),
                        )
                    )
        elif busy:
            shown = ", ".join(str(p) for p in busy[:8])
            raise CalibrationRefused(
                f"GPU {index} ({name}) has other processes on it (pid {shown}). Calibration "
                "measures how probes slow each other, so anything else on the GPU would spoil "
                "every number: run it when the GPU is idle (stop the jobs, or pick another GPU "
                "with --gpu), including any MPS server."
            )
        notes = []
        exclusive = mode == nv.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
        if exclusive:
            notes.append(
                "the GPU is in EXCLUSIVE_PROCESS compute mode: two plain processes cannot share "
                "it, so no naive probes (calibrate never changes the compute mode)"
            )
        return GpuTarget(index, uuid, name, mig_mode, tuple(free), exclusive, tuple(notes))
    finally:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()


def check_torch(python: str = sys.executable) -> dict[str, Any]:
    """What torch sees, from a process of its own (this one never imports torch)."""
    try:
        done = subprocess.run(
            [python, "-m", PROBE_MODULE, "--check"],
            cwd=SAFE_CWD,  # nothing in the caller's directory shadows a module (gpudesk.spawn)
            capture_output=True,
            text=True,
            timeout=READY_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CalibrationRefused(f"could not ask torch about CUDA: {exc}") from exc
    try:
        info: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError) as exc:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise CalibrationRefused(
            "gpudesk calibrate runs torch probes on the GPU, and torch could not be loaded "
            f"here ({tail[0]}). Install a CUDA build of torch in this environment."
        ) from exc
    if not info.get("cuda"):
        raise CalibrationRefused(
            f"torch {info.get('torch')} here has no CUDA (a CPU-only build, or the driver is "
            "not visible to it), so the probes cannot run on the GPU. Install a CUDA build of "
            "torch in this environment, or try calibrate on a SIMULATED station with "
            "`--station sim:h100`."
        )
    return info


# --- NVML readings over a window --------------------------------------------------------------
@dataclass
class Reading:
    sm: float | None = None
    membw: float | None = None
    kernel_active: float | None = None
    membw_source: str = ""


class NvmlMeter:
    """SM activity and DRAM bandwidth (GPM) between start and stop, and the mean of NVML's
    utilization rates polled in between."""

    def __init__(self, index: int) -> None:
        self.index = index
        self._nv: Any = None
        self._handle: Any = None
        self._gpm: tuple[Any, Any] | None = None
        self._polls: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0

    def __enter__(self) -> NvmlMeter:
        nv = self._nv = _nvml()
        self._handle = nv.nvmlDeviceGetHandleByIndex(self.index)
        with contextlib.suppress(nv.NVMLError, AttributeError):
            if nv.nvmlGpmQueryDeviceSupport(self._handle).isSupportedDevice:
                self._gpm = (nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc())
        return self

    def __exit__(self, *exc: object) -> None:
        nv = self._nv
        if self._gpm:
            for sample in self._gpm:
                with contextlib.suppress(Exception):
                    nv.nvmlGpmSampleFree(sample)
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()

    def start(self) -> None:
        nv = self._nv
        self._polls = []
        self._stop.clear()
        self._started = time.monotonic()
        if self._gpm:
            try:
                nv.nvmlGpmSampleGet(self._handle, self._gpm[0])
            except nv.NVMLError:
                self._gpm = None
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        nv = self._nv
        while not self._stop.wait(UTIL_POLL_S):
            try:
                util = nv.nvmlDeviceGetUtilizationRates(self._handle)
            except nv.NVMLError:
                return  # not supported: kernel-active stays unknown
            self._polls.append((time.monotonic(), float(util.gpu), float(util.memory)))

    def stop(self) -> Reading:
        nv = self._nv
        self._stop.set()
        if self._thread:
            self._thread.join()
        reading = Reading()
        polls = [p for p in self._polls if p[0] >= self._started + SETTLE_S] or self._polls
        if polls:
            reading.kernel_active = sum(p[1] for p in polls) / len(polls) / 100.0
            reading.membw = sum(p[2] for p in polls) / len(polls) / 100.0
            reading.membw_source = "memory-controller busy time (NVML utilization.memory)"
        if self._gpm:
            with contextlib.suppress(nv.NVMLError, AttributeError):
                nv.nvmlGpmSampleGet(self._handle, self._gpm[1])
                request = nv.c_nvmlGpmMetricsGet_t()
                request.version = nv.NVML_GPM_METRICS_GET_VERSION
                request.numMetrics = 2
                request.sample1 = self._gpm[0]
                request.sample2 = self._gpm[1]
                request.metrics[0].metricId = nv.NVML_GPM_METRIC_SM_UTIL
                request.metrics[1].metricId = nv.NVML_GPM_METRIC_DRAM_BW_UTIL
                result = nv.nvmlGpmMetricsGet(request)
                sm, bw = result.metrics[0], result.metrics[1]
                if sm.nvmlReturn == nv.NVML_SUCCESS:
                    reading.sm = float(sm.value) / 100.0
                if bw.nvmlReturn == nv.NVML_SUCCESS:
                    reading.membw = float(bw.value) / 100.0
                    reading.membw_source = "DRAM bandwidth (GPM)"
        return reading


# --- probe processes --------------------------------------------------------------------------
class ProbeProcess:
    """One probe: started, `ready`, told `go`, its summary read."""

    def __init__(
        self, intensity: str, seconds: float, env: Mapping[str, str], extra: Sequence[str]
    ):
        self.intensity = intensity
        self.seconds = seconds
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        self.proc = subprocess.Popen(
            [
                *module_argv(PROBE_MODULE),
                "--intensity",
                intensity,
                "--seconds",
                f"{seconds:g}",
                "--device",
                "cuda",
                "--wait-go",
                *extra,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(env),
            cwd=SAFE_CWD,
        )
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip())
            del self.stderr[:-20]

    def _next(self, deadline: float) -> str | None:
        try:
            return self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            raise self._failure("did not answer in time") from None

    def _failure(self, what: str) -> CalibrationRefused:
        tail = " | ".join(self.stderr[-3:]) or "(no error output)"
        return CalibrationRefused(f"the {self.intensity} probe {what}: {tail}")

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while True:
            line = self._next(deadline)
            if line is None:
                self.proc.wait()
                raise self._failure(f"exited with status {self.proc.returncode} before `ready`")
            if line == "ready":
                return

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def summary(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.seconds + FINISH_GRACE_S
        found: dict[str, Any] | None = None
        while True:
            line = self._next(deadline)
            if line is None:
                break
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    found = json.loads(line)
        self.proc.wait(timeout=FINISH_GRACE_S)
        if found is None or self.proc.returncode != 0:
            raise self._failure(f"exited with status {self.proc.returncode} without a summary")
        return found

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _run_together(
    probes: Sequence[tuple[str, Mapping[str, str], Sequence[str]]],
    seconds: float,
    meter: NvmlMeter | None = None,
) -> tuple[list[dict[str, Any]], Reading | None]:
    started = [ProbeProcess(i, seconds, env, extra) for i, env, extra in probes]
    try:
        for p in started:
            p.wait_ready()
        if meter:
            meter.start()
        for p in started:
            p.go()
        time.sleep(seconds)
        reading = meter.stop() if meter else None
        return [p.summary() for p in started], reading
    finally:
        for p in started:
            p.kill()


# --- the plan ---------------------------------------------------------------------------------
@dataclass
class RealRun:
    measurements: Measurements
    wall_s: float
    notes: list[str] = field(default_factory=list)


@contextlib.contextmanager
def _mps_daemon(root: Path, uuid: str) -> Iterator[dict[str, str]]:
    from gpudesk.hw.mps import MpsError, MpsManager

    manager = MpsManager(root / "home")
    try:
        manager.ensure(uuid)
    except MpsError as exc:
        raise CalibrationRefused(f"MPS could not be started for the probes: {exc}") from exc
    try:
        yield manager.client_env(uuid)
    finally:
        with contextlib.suppress(MpsError):
            manager.stop(uuid, force=True)


def _base_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
    empty = root / "no-mps"
    empty.mkdir(exist_ok=True)
    env["CUDA_MPS_PIPE_DIRECTORY"] = str(empty)  # join no one's MPS daemon
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _shape(summary: Mapping[str, Any]) -> list[str]:
    return ["--burst", str(int(summary["burst"])), "--gap-ms", f"{float(summary['gap_ms']):.4f}"]


def run_plan(
    plan: Plan,
    target: GpuTarget,
    *,
    reference: Mapping[str, AloneMeasurement] | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> RealRun:
    """Run every probe of the plan on `target`; alone measurements come from the plan's alone
    runs, else from `reference` (a GPU in MIG mode: an earlier whole-GPU calibration)."""
    started = time.monotonic()
    alone: dict[str, AloneMeasurement] = dict(reference or {})
    shapes: dict[str, list[str]] = {
        name: ["--burst", str(m.burst), "--gap-ms", f"{m.gap_ms:.4f}"]
        for name, m in alone.items()
        if m.burst
    }
    runs: list[RunMeasurement] = []
    notes: list[str] = list(target.notes)
    total = len(plan.runs)
    with tempfile.TemporaryDirectory(prefix="gpudesk-calibrate-") as tmp:
        root = Path(tmp)
        base = _base_env(root)
        whole = {**base, "CUDA_VISIBLE_DEVICES": target.uuid}
        mps_runs = [r for r in plan.runs if r.mechanism == "mps"]
        other_runs = [r for r in plan.runs if r.mechanism != "mps"]
        done = 0

        def announce(run: ProbeRun) -> None:
            nonlocal done
            done += 1
            say(f"[{done}/{total}] {run.key} ({run.seconds:g} s)")

        with NvmlMeter(target.index) as meter:
            for run in other_runs:
                if run.mechanism == "naive" and target.exclusive_process:
                    continue
                announce(run)
                if run.mechanism == "alone":
                    (summary,), reading = _run_together(
                        [(run.intensities[0], whole, [])], run.seconds, meter
                    )
                    assert reading is not None
                    name = run.intensities[0]
                    shapes[name] = _shape(summary)
                    alone[name] = AloneMeasurement(
                        name,
                        float(summary["steps_per_s"]),
                        sm=reading.sm,
                        membw=reading.membw,
                        kernel_active=reading.kernel_active,
                        sm_source="GPM SM activity" if reading.sm is not None else "",
                        burst=int(summary["burst"]),
                        gap_ms=float(summary["gap_ms"]),
                    )
                    continue
                runs.append(_shared(run, whole, base, shapes, target))
        if mps_runs:
            with _mps_daemon(root, target.uuid) as mps_env:
                env = {**base, **mps_env}
                for run in mps_runs:
                    announce(run)
                    runs.append(_shared(run, env, base, shapes, target))
    return RealRun(Measurements(alone, tuple(runs)), time.monotonic() - started, notes)


def _shared(
    run: ProbeRun,
    env: Mapping[str, str],
    base: Mapping[str, str],
    shapes: Mapping[str, list[str]],
    target: GpuTarget,
) -> RunMeasurement:
    if run.mig is not None:
        env = {**base, "CUDA_VISIBLE_DEVICES": run.mig.uuid}
    missing = [i for i in run.intensities if i not in shapes]
    if missing:
        raise CalibrationRefused(
            f"{run.key}: no alone measurement of {', '.join(missing)} to compare with "
            f"(on a GPU in MIG mode, calibrate a {target.name} outside MIG mode first)."
        )
    summaries, _ = _run_together([(i, env, shapes[i]) for i in run.intensities], run.seconds, None)
    return RunMeasurement(run, tuple(float(s["steps_per_s"]) for s in summaries))
