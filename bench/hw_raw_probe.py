"""Raw answers of a real NVIDIA driver to every call gpudesk makes, recorded for the fakes.

    python bench/hw_raw_probe.py [--out FILE] [--time-limit S] [--gpu N]       # on a GPU server
    python bench/hw_raw_probe.py --fakes [--out FILE]                          # on the fakes
    python bench/hw_raw_probe.py [--fakes] --compare REAL.json [--against OTHER.json]

Writes one JSON document (to --out, default stdout) with these sections:

- `nvml`: every pynvml function gpudesk calls (gpudesk/hw/telemetry/nvml.py,
  gpudesk/hw/probe_runner.py), with the same arguments, on GPU --gpu and on each of its
  MIG devices: idle, while MPS clients run, and while a plain torch load runs (processes, process
  utilization since a timestamp, GPM between two samples). Each call is a record: the call
  as text, ok or the exception (class, `value`, str), the result's Python type and its value made
  JSON-able (ctypes structures as a dict of their fields). Driver, NVML and CUDA versions too.
- `torch`: what a torch subprocess sees (the probe itself never imports torch).
- `nvidia_smi`: the read-only nvidia-smi command lines gpudesk runs (gpudesk/hw/mig/manager.py)
  and a few read-only basics: argv, exit status, stdout, stderr (8 KB each at most).
- `mps`: the raw exchange with `nvidia-cuda-mps-control` as gpudesk/hw/mps.py holds it
  (a daemon of its own in a fresh temporary folder, commands on the control binary's stdin):
  answers before the daemon, after it starts, while two torch clients run (one plain, one with
  gpudesk's thread-percentage and pinned-memory settings), after they end, and to `quit`; the
  files of the pipe and log folders, the logs' tails, whether the daemon and servers ended.

It is read-only: only NVML getters and queries, no nvidia-smi command that changes anything
(no -mig, -cgi, -dgi, -r, -pm, -pl, -c, -lgc); the only things it starts are its own MPS control
daemon (stopped with `quit`, then SIGTERM if it lingers) and its torch subprocesses. Every call is
guarded (a failure is recorded, never raised), every subprocess has a timeout, and a watchdog
writes what was recorded and exits (status 3) at --time-limit. The sections run in the order
NVML idle, nvidia-smi, MPS, torch load, each within the time left (the load is skipped under
about 15 s); the --out file is rewritten after each, so a run cut short still leaves what it had.
On an H200 with torch already on disk the whole run should take about a minute: give it
--time-limit 90 or more to see every section.

--fakes runs it on gpudesk's hardware fakes (tests/fakes: the fake pynvml through nvml_shim on
PYTHONPATH, nvidia-smi and nvidia-cuda-mps-control on PATH, cuda-python for the torch clients),
set up as the tests set them up, and re-executes itself there. --compare REAL.json runs the probe
here (on the fakes with --fakes) and prints, call by call, where the answers differ in type,
fields, error class or text format; --against OTHER.json compares two recorded files instead.
It exits 0 when nothing differs in kind (numbers alone may), 1 when something does.

Needs only the standard library and nvidia-ml-py (pynvml); torch is used from subprocesses when
present. It does not import gpudesk, so it runs from a bare checkout on the GPU server.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import difflib
import json
import os
import platform
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SCHEMA = 1
TEXT_CAP = 8192  # bytes kept of each stdout / stderr
ARRAY_CAP = 16  # elements kept of a ctypes array inside a structure
MPS_BUDGET_S = 30.0
SMI_KEEPS_S = 12.0  # nvidia-smi stops short of this, for the MPS section after it
LOAD_NEEDS_S = 15.0  # the plain torch load: start, CUDA context, the reads
# Kept back from --time-limit for quitting the MPS daemon and shutting NVML down: the sections
# plan against the limit less this, the watchdog fires at the limit itself.
RESERVE_S = 8.0
SMI_TIMEOUT_S = 20.0
MPS_COMMAND_TIMEOUT_S = 5.0
# The environment names gpudesk reads (gpudesk/hw/mig/nvidia_smi.py ENV_NVIDIA_SMI,
# gpudesk/hw/mps.py CONTROL_ENV, CONTROL_BINARY, PID_FILE); repeated here so the
# probe runs without gpudesk installed, and checked against gpudesk's by its test.
ENV_NVIDIA_SMI = "GPUDESK_NVIDIA_SMI"
ENV_MPS_CONTROL = "GPUDESK_MPS_CONTROL"
MPS_CONTROL_BINARY = "nvidia-cuda-mps-control"
MPS_PID_FILE = "nvidia-cuda-mps-control.pid"
# Set by --fakes for the re-executed probe: the folder holding the fakes' scenario and logs.
ENV_FAKES = "GPUDESK_HW_PROBE_FAKES"

REPO = Path(__file__).resolve().parents[1]
FAKES_DIR = REPO / "tests" / "fakes"

# What a torch subprocess runs: one JSON line when ready (or why it cannot be), then a busy loop
# of matrix products until its stdin closes (at most argv[1] seconds), then one JSON line.
TORCH_CLIENT = r"""
import json, os, sys, threading, time
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
def say(**fields):
    print(json.dumps(fields), flush=True)
try:
    import torch
except Exception as exc:
    say(event="no-torch", error=repr(exc)); sys.exit(0)
if not torch.cuda.is_available():
    say(event="no-cuda", torch=torch.__version__); sys.exit(0)
seconds = float(sys.argv[1])
x = torch.randn(4096, 4096, device="cuda")
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
p = torch.cuda.get_device_properties(0)
say(event="ready", pid=os.getpid(), torch=torch.__version__, cuda=torch.version.cuda,
    device=p.name, sm_count=p.multi_processor_count, mem_free=free, mem_total=total,
    env={k: v for k, v in os.environ.items() if k.startswith(("CUDA_MPS", "CUDA_VISIBLE"))})
end, n = time.monotonic() + seconds, 0
while time.monotonic() < end and not stop.is_set():
    y = x @ x
    n += 1
    if n % 10 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
say(event="done", matmuls=n)
"""

TORCH_CHECK = r"""
import json
try:
    import torch
except Exception as exc:
    print(json.dumps({"torch": None, "error": repr(exc)}))
else:
    cuda = torch.cuda.is_available()
    print(json.dumps({"torch": torch.__version__, "cuda_build": torch.version.cuda,
                      "cuda_available": cuda,
                      "device_count": torch.cuda.device_count() if cuda else 0}))
"""


# --------------------------------------------------------------------------- values as JSON
def jsonable(value: Any, depth: int = 0) -> Any:
    """A JSON-able picture of what a pynvml call returned: ctypes structures as a dict of their
    fields, arrays and lists as lists, bytes decoded, pointers as their type and nullness."""
    if depth > 8:
        return repr(value)[:200]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (ctypes.Structure, ctypes.Union)):
        return {
            field[0]: jsonable(getattr(value, field[0]), depth + 1)
            for field in type(value)._fields_
        }
    if isinstance(value, ctypes.Array):
        items = [jsonable(v, depth + 1) for v in value[:ARRAY_CAP]]
        return items if len(value) <= ARRAY_CAP else {"length": len(value), "first": items}
    if isinstance(value, ctypes._Pointer):
        return {"pointer": type(value).__name__, "null": not bool(value)}
    if isinstance(value, ctypes._SimpleCData):
        return jsonable(value.value, depth + 1)
    if isinstance(value, (list, tuple)):
        return [jsonable(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if hasattr(value, "__dict__"):  # pynvml's nvmlFriendlyObject
        return {k: jsonable(v, depth + 1) for k, v in vars(value).items()}
    return repr(value)[:200]


def type_name(value: Any) -> str:
    if isinstance(value, (list, tuple)) and value:
        return f"{type(value).__name__}[{type(value[0]).__name__}]"
    return type(value).__name__


def exception_record(exc: BaseException) -> dict[str, Any]:
    value = getattr(exc, "value", None)
    return {
        "class": type(exc).__name__,
        "bases": [
            c.__name__ for c in type(exc).__mro__[1:] if c not in (Exception, BaseException, object)
        ],
        "value": value if isinstance(value, (int, str, type(None))) else repr(value),
        "str": str(exc)[:500],
    }


def capped(text: str | bytes | None) -> tuple[str, bool]:
    if text is None:
        return "", False
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    data = text.encode()
    if len(data) <= TEXT_CAP:
        return text, False
    return data[:TEXT_CAP].decode("utf-8", "ignore"), True


# --------------------------------------------------------------------------- the recorder
class Probe:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.started = time.monotonic()
        self.hard_deadline = self.started + args.time_limit
        self.deadline = self.hard_deadline - min(RESERVE_S, args.time_limit / 4)
        self.doc: dict[str, Any] = {
            "probe": {
                "schema": SCHEMA,
                "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "argv": sys.argv[1:],
                "fakes": bool(os.environ.get(ENV_FAKES)),
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "uid": os.getuid(),
                "time_limit_s": args.time_limit,
                "gpu": args.gpu,
                "client_python": args.python,
                "finished": False,
                "sections_done": [],
            }
        }
        self.lock = threading.Lock()
        self.children: list[subprocess.Popen[str]] = []  # every process started, for cleanup
        self.mps_pids: list[int] = []  # the MPS daemon and servers this probe caused
        self.mps_pipe: Path | None = None  # its daemon's pipe folder, once made
        self.nv: Any = None
        self.handle: Any = None
        self.gpu_uuid: str | None = None
        self.cuda = False

    # -- time ---------------------------------------------------------------------------------

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def use_reserve(self) -> None:
        """For the steps that must run (quit MPS, shut NVML down): up to the hard limit."""
        self.deadline = max(self.deadline, self.hard_deadline - 0.5)

    def elapsed_ms(self, since: float) -> float:
        return round((time.monotonic() - since) * 1000, 1)

    # -- output -------------------------------------------------------------------------------

    def dump(self) -> str:
        with self.lock:
            self.doc["probe"]["elapsed_s"] = round(time.monotonic() - self.started, 2)
            return json.dumps(self.doc, indent=1, default=repr)

    def checkpoint(self, section: str | None = None) -> None:
        if section:
            with self.lock:
                self.doc["probe"]["sections_done"].append(section)
        if self.args.out:
            write_atomically(Path(self.args.out), self.dump())

    # -- NVML calls ---------------------------------------------------------------------------

    def nvml(
        self,
        key: str,
        text: str,
        fn_name: str,
        *args: Any,
        record_value: Callable[[Any], Any] = jsonable,
        **kwargs: Any,
    ) -> Any:
        """Call pynvml's fn_name(*args, **kwargs) and record it under `key`; its result, or
        None when it raised."""
        record: dict[str, Any] = {"key": key, "call": text, "fn": fn_name}
        with self.lock:
            self.doc["nvml"]["calls"].append(record)
        if self.left() <= 0:
            record.update(ok=False, skipped="time limit")
            return None
        started = time.monotonic()
        try:
            fn = getattr(self.nv, fn_name)
            value = fn(*args, **kwargs)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            record.update(ok=False, ms=self.elapsed_ms(started), error=exception_record(exc))
            return None
        record["ms"] = self.elapsed_ms(started)
        try:
            record.update(ok=True, type=type_name(value), value=record_value(value))
        except Exception as exc:  # a value that does not serialize is still an answer
            record.update(ok=True, type=type_name(value), value=repr(value)[:500])
            record["value_error"] = exception_record(exc)
        return value

    # -- subprocesses -------------------------------------------------------------------------

    def run(
        self, argv: list[str], timeout: float, stdin: str | None = None, env: Any = None
    ) -> dict[str, Any]:
        """argv run to the end (timeout bounded by the time left): its raw answer."""
        record: dict[str, Any] = {"argv": argv}
        if stdin is not None:
            record["stdin"] = stdin
        limit = max(0.5, min(timeout, self.left()))
        started = time.monotonic()
        try:
            done = subprocess.run(
                argv,
                input=stdin,
                stdin=subprocess.DEVNULL if stdin is None else None,
                capture_output=True,
                text=True,
                timeout=limit,
                env=env,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            out, out_cut = capped(exc.stdout)
            err, err_cut = capped(exc.stderr)
            record.update(rc=None, timed_out=limit, stdout=out, stderr=err)
        except OSError as exc:
            record.update(rc=None, error=exception_record(exc))
        else:
            out, out_cut = capped(done.stdout)
            err, err_cut = capped(done.stderr)
            record.update(rc=done.returncode, stdout=out, stderr=err)
            if out_cut or err_cut:
                record["truncated"] = [
                    n for n, cut in (("stdout", out_cut), ("stderr", err_cut)) if cut
                ]
        record["ms"] = self.elapsed_ms(started)
        return record

    def start_torch(self, seconds: float, env: dict[str, str]) -> TorchProcess:
        proc = subprocess.Popen(
            [self.args.python, "-c", TORCH_CLIENT, str(seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tempfile.gettempdir(),
        )
        self.children.append(proc)
        return TorchProcess(proc)

    def cleanup(self) -> None:
        for proc in self.children:
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    proc.kill()
        pids = list(self.mps_pids)
        with contextlib.suppress(OSError, ValueError, IndexError):  # a daemon not yet asked
            if self.mps_pipe is not None:
                pids.append(int((self.mps_pipe / MPS_PID_FILE).read_text().split()[0]))
        for pid in pids:  # only if it still runs MPS (not a recycled pid)
            if alive(pid) and b"mps" in proc_cmdline(pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)

    # -- the sections -------------------------------------------------------------------------

    def probe(self) -> None:
        sections = [
            ("nvml-open", self.section_nvml_open),
            ("torch", self.section_torch),
            ("nvml-idle", self.section_nvml_idle),
            ("nvidia_smi", self.section_nvidia_smi),
            ("mps", self.section_mps),
            ("nvml-load", self.section_nvml_load),  # last: what the time left allows
        ]
        try:
            for name, section in sections:
                self.guarded(name, section)
        finally:
            self.cleanup()
            self.guarded("nvml-close", self.section_nvml_close)
            self.guarded("fakes", self.section_fakes)
            with self.lock:
                self.doc["probe"]["finished"] = True
            self.checkpoint()

    def guarded(self, name: str, section: Callable[[], None]) -> None:
        """Run one section; a bug or surprise in it is recorded and the next one still runs."""
        try:
            section()
        except Exception as exc:
            record = {"section": name, **exception_record(exc)}
            record["traceback"] = traceback.format_exc()[-3000:]
            with self.lock:
                self.doc["probe"].setdefault("section_errors", []).append(record)
            self.checkpoint()
            return
        self.checkpoint(name)

    # NVML ------------------------------------------------------------------------------------

    def section_nvml_open(self) -> None:
        section: dict[str, Any] = {"calls": []}
        self.doc["nvml"] = section
        try:
            import pynvml
        except BaseException as exc:
            section["import_error"] = exception_record(exc)
            return
        self.nv = pynvml
        section["module"] = {"file": getattr(pynvml, "__file__", None)}
        with contextlib.suppress(Exception):
            from importlib import metadata

            section["module"]["nvidia_ml_py"] = metadata.version("nvidia-ml-py")
        self.nvml("nvmlInit", "nvmlInit()", "nvmlInit")
        if not self._init_ok():
            return
        for fn in (
            "nvmlSystemGetDriverVersion",
            "nvmlSystemGetNVMLVersion",
            "nvmlSystemGetCudaDriverVersion",
            "nvmlSystemGetCudaDriverVersion_v2",
        ):
            self.nvml(fn, f"{fn}()", fn)
        count = self.nvml("nvmlDeviceGetCount", "nvmlDeviceGetCount()", "nvmlDeviceGetCount")
        gpu = self.args.gpu
        if not isinstance(count, int) or gpu >= count:
            section["skipped"] = f"no GPU {gpu} (count {count!r})"
            return
        self.handle = self.nvml(
            f"gpu{gpu} nvmlDeviceGetHandleByIndex",
            f"nvmlDeviceGetHandleByIndex({gpu})",
            "nvmlDeviceGetHandleByIndex",
            gpu,
        )

    def _init_ok(self) -> bool:
        last = self.doc["nvml"]["calls"][-1]
        return bool(last.get("ok"))

    def device_calls(self, phase: str, label: str, handle: Any, mig: bool) -> None:
        """Every getter gpudesk asks of a device (GPU or MIG device), as gpudesk asks it."""
        nv = self.nv
        p = f"{phase}/{label}"

        def call(fn: str, *args: Any, args_text: str = "", **kwargs: Any) -> Any:
            text = f"{fn}({label}{', ' + args_text if args_text else ''})"
            key = f"{p} {fn}{'(' + args_text + ')' if args_text else ''}"
            return self.nvml(key, text, fn, handle, *args, **kwargs)

        call("nvmlDeviceGetName")
        call("nvmlDeviceGetUUID")
        call("nvmlDeviceGetMemoryInfo")
        v2 = getattr(nv, "nvmlMemory_v2", None)
        if v2 is not None:
            call("nvmlDeviceGetMemoryInfo", version=v2, args_text="version=nvmlMemory_v2")
        call("nvmlDeviceGetUtilizationRates")
        call("nvmlDeviceGetAttributes")
        call("nvmlDeviceGetComputeRunningProcesses")
        call("nvmlDeviceGetGraphicsRunningProcesses")
        call("nvmlDeviceGetProcessUtilization", 0, args_text="timeStamp=0")
        call("nvmlDeviceGetGpuInstanceId")
        call("nvmlDeviceGetComputeInstanceId")
        if mig:
            return
        call("nvmlDeviceGetSerial")
        call("nvmlDeviceGetPowerUsage")
        call("nvmlDeviceGetTotalEnergyConsumption")
        call(
            "nvmlDeviceGetTemperature",
            getattr(nv, "NVML_TEMPERATURE_GPU", 0),
            args_text="NVML_TEMPERATURE_GPU",
        )
        call("nvmlDeviceGetClockInfo", getattr(nv, "NVML_CLOCK_SM", 1), args_text="NVML_CLOCK_SM")
        call("nvmlDeviceGetClockInfo", getattr(nv, "NVML_CLOCK_MEM", 2), args_text="NVML_CLOCK_MEM")
        call("nvmlDeviceGetEnforcedPowerLimit")
        call("nvmlDeviceGetComputeMode")
        call("nvmlDeviceGetPersistenceMode")
        call("nvmlDeviceGetMigMode")
        call("nvmlDeviceGetMaxMigDeviceCount")

    def gpm_calls(self, phase: str, label: str, handle: Any, pause: float) -> None:
        """GPM as gpudesk reads it: support, two samples `pause` apart, the SM activity metric
        alone (telemetry) and with DRAM bandwidth (calibrate), the samples freed."""
        p = f"{phase}/{label}"
        self.nvml(
            f"{p} nvmlGpmQueryDeviceSupport",
            f"nvmlGpmQueryDeviceSupport({label})",
            "nvmlGpmQueryDeviceSupport",
            handle,
        )
        samples = [
            self.nvml(f"{p} nvmlGpmSampleAlloc#{i}", "nvmlGpmSampleAlloc()", "nvmlGpmSampleAlloc")
            for i in (1, 2)
        ]
        try:
            if None in samples:
                return
            self.nvml(
                f"{p} nvmlGpmSampleGet#1",
                f"nvmlGpmSampleGet({label}, sample1)",
                "nvmlGpmSampleGet",
                handle,
                samples[0],
            )
            time.sleep(pause)
            self.nvml(
                f"{p} nvmlGpmSampleGet#2",
                f"nvmlGpmSampleGet({label}, sample2)",
                "nvmlGpmSampleGet",
                handle,
                samples[1],
            )
            metrics = {
                "SM_UTIL": ["NVML_GPM_METRIC_SM_UTIL"],
                "SM_UTIL+DRAM_BW_UTIL": ["NVML_GPM_METRIC_SM_UTIL", "NVML_GPM_METRIC_DRAM_BW_UTIL"],
            }
            for name, ids in metrics.items():
                request = self._gpm_request(samples, ids)
                if request is None:
                    continue
                self.nvml(
                    f"{p} nvmlGpmMetricsGet({name})",
                    f"nvmlGpmMetricsGet(version=NVML_GPM_METRICS_GET_VERSION, {'+'.join(ids)})",
                    "nvmlGpmMetricsGet",
                    request,
                    record_value=gpm_result,
                )
        finally:
            for i, sample in enumerate(samples, 1):
                if sample is not None:
                    self.nvml(
                        f"{p} nvmlGpmSampleFree#{i}",
                        f"nvmlGpmSampleFree(sample{i})",
                        "nvmlGpmSampleFree",
                        sample,
                    )

    def _gpm_request(self, samples: list[Any], ids: list[str]) -> Any:
        nv = self.nv
        try:
            request = nv.c_nvmlGpmMetricsGet_t()
            request.version = nv.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(ids)
            request.sample1, request.sample2 = samples
            for slot, name in enumerate(ids):
                request.metrics[slot].metricId = getattr(nv, name)
            return request
        except Exception as exc:
            self.doc["nvml"].setdefault("request_errors", []).append(exception_record(exc))
            return None

    def mig_calls(self, phase: str) -> None:
        """Each MIG device of the GPU, as gpudesk walks them (every slot; empty ones raise)."""
        nv, gpu = self.nv, self.args.gpu
        mode = self._last_value(f"{phase}/gpu{gpu} nvmlDeviceGetMigMode")
        slots = self._last_value(f"{phase}/gpu{gpu} nvmlDeviceGetMaxMigDeviceCount")
        enabled = isinstance(mode, list) and bool(mode) and mode[0] == nv.NVML_DEVICE_MIG_ENABLE
        if not enabled or not isinstance(slots, int):
            # what a GPU without MIG answers when asked for a MIG device anyway
            self.nvml(
                f"{phase}/gpu{gpu} nvmlDeviceGetMigDeviceHandleByIndex(0)",
                f"nvmlDeviceGetMigDeviceHandleByIndex(gpu{gpu}, 0)",
                "nvmlDeviceGetMigDeviceHandleByIndex",
                self.handle,
                0,
            )
            return
        for slot in range(slots):
            handle = self.nvml(
                f"{phase}/gpu{gpu} nvmlDeviceGetMigDeviceHandleByIndex({slot})",
                f"nvmlDeviceGetMigDeviceHandleByIndex(gpu{gpu}, {slot})",
                "nvmlDeviceGetMigDeviceHandleByIndex",
                self.handle,
                slot,
            )
            if handle is not None:
                self.device_calls(phase, f"mig{slot}", handle, mig=True)

    def _last_value(self, key: str) -> Any:
        for record in reversed(self.doc["nvml"]["calls"]):
            if record["key"] == key:
                return record.get("value")
        return None

    def section_nvml_idle(self) -> None:
        if self.handle is None:
            return
        gpu = self.args.gpu
        self.device_calls("idle", f"gpu{gpu}", self.handle, mig=False)
        uuid = self._last_value(f"idle/gpu{gpu} nvmlDeviceGetUUID")
        self.gpu_uuid = uuid if isinstance(uuid, str) else None
        self.mig_calls("idle")
        self.gpm_calls("idle", f"gpu{gpu}", self.handle, pause=0.2)
        time.sleep(0.5)
        self.nvml(
            f"idle/gpu{gpu} nvmlDeviceGetTotalEnergyConsumption#2",
            f"nvmlDeviceGetTotalEnergyConsumption(gpu{gpu}) 0.5 s later",
            "nvmlDeviceGetTotalEnergyConsumption",
            self.handle,
        )

    def section_nvml_load(self) -> None:
        """The calls whose answers are empty on an idle GPU, while a torch process works."""
        section: dict[str, Any] = {}
        self.doc["nvml"]["load"] = section
        if self.handle is None or not self.cuda:
            section["skipped"] = "no NVML device" if self.handle is None else "no CUDA torch"
            return
        if self.left() < LOAD_NEEDS_S:  # nvidia-smi and MPS came first
            section["skipped"] = "time limit"
            return
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
        if self.gpu_uuid:
            env["CUDA_VISIBLE_DEVICES"] = self.gpu_uuid
        client = self.start_torch(self.args.client_seconds, env)
        try:
            ready = client.wait_event(min(40.0, max(1.0, self.left() - 3)))
            section["client"] = ready
            if not ready or ready.get("event") != "ready":
                section["client_stderr"] = client.stderr_now()
                return
            list_on_fakes([gpu_process(ready.get("pid"), sm_util=99)])
            self._under_load("load", pid=ready.get("pid"))
        finally:
            section["client_end"] = client.finish(max(1.0, min(10.0, self.left())))

    def _under_load(self, phase: str, pid: Any) -> None:
        gpu, handle = self.args.gpu, self.handle
        label = f"gpu{gpu}"
        self.gpm_calls(phase, label, handle, pause=0.5)
        p = f"{phase}/{label}"
        for fn in (
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetGraphicsRunningProcesses",
            "nvmlDeviceGetUtilizationRates",
            "nvmlDeviceGetMemoryInfo",
            "nvmlDeviceGetPowerUsage",
            "nvmlDeviceGetTemperature",
        ):
            args = (self.nv.NVML_TEMPERATURE_GPU,) if fn == "nvmlDeviceGetTemperature" else ()
            self.nvml(f"{p} {fn}", f"{fn}({label})", fn, handle, *args)
        v2 = getattr(self.nv, "nvmlMemory_v2", None)
        if v2 is not None:
            self.nvml(
                f"{p} nvmlDeviceGetMemoryInfo(version=nvmlMemory_v2)",
                f"nvmlDeviceGetMemoryInfo({label}, version=nvmlMemory_v2)",
                "nvmlDeviceGetMemoryInfo",
                handle,
                version=v2,
            )
        # as gpudesk polls it: from 0, then from the newest sample's timestamp
        samples = self.nvml(
            f"{p} nvmlDeviceGetProcessUtilization(timeStamp=0)",
            f"nvmlDeviceGetProcessUtilization({label}, 0)",
            "nvmlDeviceGetProcessUtilization",
            handle,
            0,
        )
        newest = max((int(s.timeStamp) for s in samples or ()), default=0)
        time.sleep(0.5)
        self.nvml(
            f"{p} nvmlDeviceGetProcessUtilization(timeStamp=newest)",
            f"nvmlDeviceGetProcessUtilization({label}, {newest}) 0.5 s later",
            "nvmlDeviceGetProcessUtilization",
            handle,
            newest,
        )
        self.nvml(
            f"{p} nvmlDeviceGetProcessUtilization(timeStamp=now)",
            f"nvmlDeviceGetProcessUtilization({label}, now_us)",
            "nvmlDeviceGetProcessUtilization",
            handle,
            int(time.time() * 1e6),
        )
        if isinstance(pid, int):
            self.nvml(
                f"{p} nvmlSystemGetProcessName(client)",
                f"nvmlSystemGetProcessName({pid})",
                "nvmlSystemGetProcessName",
                pid,
            )

    def section_nvml_close(self) -> None:
        if self.nv is not None and any(
            r["fn"] == "nvmlInit" and r.get("ok") for r in self.doc["nvml"]["calls"]
        ):
            self.use_reserve()  # always shut down
            self.nvml("nvmlShutdown", "nvmlShutdown()", "nvmlShutdown")

    # torch -----------------------------------------------------------------------------------

    def section_torch(self) -> None:
        # bounded so that a torch slow to import cannot eat the MPS section's time
        timeout = min(60.0, max(10.0, 0.35 * self.left()))
        record = self.run([self.args.python, "-c", TORCH_CHECK], timeout=timeout)
        try:
            record["seen"] = json.loads(record.get("stdout", "").strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            record["seen"] = None
        self.cuda = bool(record["seen"] and record["seen"].get("cuda_available"))
        self.doc["torch"] = record

    # nvidia-smi ------------------------------------------------------------------------------

    def smi_commands(self) -> list[tuple[str, list[str]]]:
        gpu = str(self.args.gpu)
        missing = "7"  # a GPU index no single-GPU server has: the unknown-GPU answers
        return [
            # what gpudesk runs (gpudesk/hw/mig/manager.py), read-only ones only
            ("-L", ["-L"]),
            (
                "query mig.mode",
                ["--query-gpu=index,mig.mode.current,mig.mode.pending", "--format=csv,noheader"],
            ),
            ("mig -lgip", ["mig", "-i", gpu, "-lgip"]),
            ("mig -lgipp", ["mig", "-i", gpu, "-lgipp"]),
            ("mig -lgi", ["mig", "-i", gpu, "-lgi"]),
            ("mig -lci", ["mig", "-i", gpu, "-lci"]),
            # read-only basics the fakes also answer, or that show the driver's wording
            (
                "query with header",
                [
                    "--query-gpu=index,name,uuid,pci.bus_id,mig.mode.current,mig.mode.pending",
                    "--format=csv",
                ],
            ),
            ("mig -lcip", ["mig", "-i", gpu, "-lcip"]),
            ("mig -lgi unknown gpu", ["mig", "-i", missing, "-lgi"]),
            ("-L unknown gpu", ["-i", missing, "-L"]),
            ("query unknown field", ["--query-gpu=index,no.such.field", "--format=csv"]),
            (
                "query-compute-apps",
                ["--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv"],
            ),
            ("-q -d COMPUTE", ["-q", "-d", "COMPUTE"]),
            ("--version", ["--version"]),
            ("table", []),
        ]

    def section_nvidia_smi(self) -> None:
        section: dict[str, Any] = {"runs": []}
        self.doc["nvidia_smi"] = section
        binary = os.environ.get(ENV_NVIDIA_SMI) or shutil.which("nvidia-smi")
        section["binary"] = binary
        if not binary:
            section["skipped"] = f"nvidia-smi not on PATH and {ENV_NVIDIA_SMI} unset"
            return
        for key, args in self.smi_commands():
            if self.left() < SMI_KEEPS_S:
                section["runs"].append({"key": key, "argv": args, "skipped": "time limit"})
                continue
            record = {"key": key, **self.run([binary, *args], timeout=SMI_TIMEOUT_S)}
            record["args"] = args
            section["runs"].append(record)

    # MPS -------------------------------------------------------------------------------------

    def section_mps(self) -> None:
        section: dict[str, Any] = {"steps": []}
        self.doc["mps"] = section
        requested = os.environ.get(ENV_MPS_CONTROL) or MPS_CONTROL_BINARY
        binary = requested if os.sep in requested else shutil.which(requested)
        section["binary"] = binary
        if not binary or not os.path.isfile(binary):
            section["skipped"] = f"{requested} not found"
            return
        if self.left() < 10:  # not enough time to start a daemon and surely stop it
            section["skipped"] = "time limit"
            return
        budget_end = time.monotonic() + min(MPS_BUDGET_S, self.left())
        folder = Path(tempfile.mkdtemp(prefix="gpudesk-mps-probe-"))
        pipe, logs = folder / "pipe", folder / "log"
        pipe.mkdir(mode=0o700)
        self.mps_pipe = pipe
        logs.mkdir()
        section["folder"] = "$TMP"
        mps = MpsSession(self, binary, folder, pipe, logs, budget_end, section)
        try:
            mps.exchange()
        finally:
            mps.stop()
            section["files"] = mps.files()
            section["log_tails"] = mps.log_tails()
            section["ended"] = mps.ended()
            if all(section["ended"].values()):
                shutil.rmtree(folder, ignore_errors=True)
            else:
                section["left_behind"] = str(folder)

    # fakes -----------------------------------------------------------------------------------

    def section_fakes(self) -> None:
        """Under --fakes: what the fakes themselves saw (every NVML function and nvidia-smi
        command line), so a test can check that nothing but getters was called."""
        folder = os.environ.get(ENV_FAKES)
        if not folder:
            return
        section: dict[str, Any] = {}
        with contextlib.suppress(OSError, json.JSONDecodeError):
            section["scenario"] = json.loads((Path(folder) / "nvml.json").read_text())
        fake = getattr(self.nv, "FAKE", None)  # the shim's FakeNvml
        if fake is not None:
            section["nvml_calls"] = dict(sorted(fake.calls.items()))
        log = Path(folder) / "nvidia-smi.log"
        with contextlib.suppress(OSError):
            section["nvidia_smi_argv"] = [json.loads(line) for line in log.read_text().splitlines()]
        self.doc["fakes"] = section


class TorchProcess:
    """A torch subprocess: its JSON event lines read on a thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(json.JSONDecodeError):
                self.events.put(json.loads(line))
        self.events.put(None)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def wait_event(self, timeout: float) -> dict[str, Any] | None:
        try:
            return self.events.get(timeout=max(0.1, timeout))
        except queue.Empty:
            return None

    def stderr_now(self) -> str:
        return capped("".join(self.stderr[-40:]))[0]

    def finish(self, timeout: float) -> dict[str, Any]:
        """Tell the client to stop (its stdin closes) and wait for it."""
        started = time.monotonic()
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            rc: int | None = self.proc.wait(timeout=max(0.5, timeout))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = None
        done = None
        with contextlib.suppress(queue.Empty):
            while True:
                event = self.events.get(timeout=0.5)
                if event is None:
                    break
                done = event
        return {
            "rc": rc,
            "last_event": done,
            "stderr": self.stderr_now(),
            "wait_ms": round((time.monotonic() - started) * 1000, 1),
        }


class MpsSession:
    """One MPS control daemon of the probe's own, talked to as gpudesk's MpsManager does."""

    def __init__(
        self,
        probe: Probe,
        binary: str,
        folder: Path,
        pipe: Path,
        logs: Path,
        budget_end: float,
        section: dict[str, Any],
    ) -> None:
        self.probe = probe
        self.binary = binary
        self.folder = folder
        self.pipe = pipe
        self.logs = logs
        self.budget_end = budget_end
        self.section = section
        self.daemon_pid: int | None = None
        self.server_pids: set[int] = set()
        # gpudesk's _daemon_env: no inherited CUDA_MPS_*, its own pipe and log folders
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
        self.env["CUDA_MPS_PIPE_DIRECTORY"] = str(pipe)
        self.env["CUDA_MPS_LOG_DIRECTORY"] = str(logs)

    def left(self) -> float:
        return min(self.budget_end - time.monotonic(), self.probe.left())

    def masked(self, text: str) -> str:
        return text.replace(str(self.folder), "$TMP")

    def step(self, key: str, record: dict[str, Any]) -> dict[str, Any]:
        for name in ("stdout", "stderr"):
            if isinstance(record.get(name), str):
                record[name] = self.masked(record[name])
        record["argv"] = [self.masked(a) for a in record.get("argv", [])]
        record = {"key": key, **record}
        self.section["steps"].append(record)
        return record

    def command(self, key: str, command: str) -> dict[str, Any]:
        """One command on the control binary's stdin, as MpsManager._command sends it."""
        if self.left() <= 0:
            return self.step(key, {"stdin": command + "\n", "skipped": "time limit"})
        timeout = min(MPS_COMMAND_TIMEOUT_S, max(0.5, self.left()))
        record = self.probe.run([self.binary], timeout, stdin=command + "\n", env=self.env)
        return self.step(key, record)

    def exchange(self) -> None:
        probe = self.probe
        uuid = probe.gpu_uuid
        self.command("get_server_list before the daemon", "get_server_list")

        # start, as MpsManager._start: -d, CUDA_VISIBLE_DEVICES the GPU's UUID, cwd /, own session
        env = dict(self.env)
        if uuid:
            env["CUDA_VISIBLE_DEVICES"] = uuid
        started = time.monotonic()
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            record: dict[str, Any] = {"argv": [self.binary, "-d"], "visible_devices": uuid}
            try:
                proc = subprocess.Popen(
                    [self.binary, "-d"],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    env=env,
                    cwd="/",
                    start_new_session=True,
                )
                probe.children.append(proc)  # type: ignore[arg-type]
                record["rc"] = proc.wait(timeout=min(10.0, max(0.5, self.left())))
            except subprocess.TimeoutExpired:
                record["rc"], record["timed_out"] = None, True
            except OSError as exc:
                record["error"] = exception_record(exc)
            out.seek(0)
            err.seek(0)
            record["stdout"], record["stderr"] = out.read()[:TEXT_CAP], err.read()[:TEXT_CAP]
        record["ms"] = probe.elapsed_ms(started)
        self.step("-d", record)

        # poll as ensure() does until get_server_list answers
        started = time.monotonic()
        attempts, answered = 0, False
        while self.left() > 0 and time.monotonic() - started < 10.0:
            attempts += 1
            reply = self.probe.run([self.binary], 2.0, stdin="get_server_list\n", env=self.env)
            if reply.get("rc") == 0:
                answered = True
                break
            time.sleep(0.1)
        self.step(
            "daemon answers",
            {"answered": answered, "attempts": attempts, "ms": probe.elapsed_ms(started)},
        )
        self.daemon_pid = self.read_pid()
        if self.daemon_pid:
            probe.mps_pids.append(self.daemon_pid)
        self.step(
            "daemon process", {"pid_file": self.pid_file_text(), **self.proc_info(self.daemon_pid)}
        )
        self.step("folders while running", {"files": self.files()})
        self.step("second -d", self.probe.run([self.binary, "-d"], 5.0, env=env))
        self.command("get_server_list without clients", "get_server_list")
        self.command("get_default_active_thread_percentage", "get_default_active_thread_percentage")
        self.command("get_server_status <unknown pid>", "get_server_status 999999")
        self.command("unknown command", "no_such_command")
        self.with_clients(uuid)
        self.command("get_server_list after the clients", "get_server_list")

    def with_clients(self, uuid: str | None) -> None:
        probe = self.probe
        if not probe.cuda:
            self.step("clients", {"skipped": "no CUDA torch"})
            return
        # MpsManager.client_env: the job's device by UUID, the daemon's folders; the second
        # client with the thread percentage and pinned memory limit gpudesk can set
        plain = {**self.env, **({"CUDA_VISIBLE_DEVICES": uuid} if uuid else {})}
        limited = {
            **plain,
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4096M",
        }
        clients = {"plain": probe.start_torch(probe.args.client_seconds, plain)}
        clients["limited"] = probe.start_torch(probe.args.client_seconds, limited)
        ready: dict[str, Any] = {}
        for name, client in clients.items():
            event = client.wait_event(max(1.0, self.left() - 8))  # 8 s: the queries and quit
            ready[name] = event
            if not event or event.get("event") != "ready":
                ready[name + "_stderr"] = self.masked(client.stderr_now())
        self.step("clients ready", {"clients": ready})
        listing = self.command("get_server_list with clients", "get_server_list")
        pids = [int(w) for w in listing.get("stdout", "").split() if w.isdigit()]
        self.server_pids.update(pids)
        probe.mps_pids.extend(pids)
        for pid in pids[:2]:
            self.command("get_server_status <server pid>", f"get_server_status {pid}")
            self.command("get_client_list <server pid>", f"get_client_list {pid}")
            self.step("server process", self.proc_info(pid))
        if probe.handle is not None:
            # as the H200 listed them: the server, then each client through it
            servers = [gpu_process(p, name="nvidia-cuda-mps-server", mps="server") for p in pids]
            listed = [(event or {}).get("pid") for event in ready.values()]
            list_on_fakes([*servers, *(gpu_process(p, mps="client", sm_util=50) for p in listed)])
            self.probe._under_load("mps", pid=(ready.get("plain") or {}).get("pid"))
        ends = {name: client.finish(max(1.0, self.left())) for name, client in clients.items()}
        for end in ends.values():
            end["stderr"] = self.masked(end["stderr"])
        self.step("clients end", {"clients": ends})

    def read_pid(self) -> int | None:
        try:
            return int((self.pipe / MPS_PID_FILE).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def pid_file_text(self) -> str | None:
        with contextlib.suppress(OSError):
            return (self.pipe / MPS_PID_FILE).read_text()[:200]
        return None

    @staticmethod
    def proc_info(pid: int | None) -> dict[str, Any]:
        """What gpudesk's _runs_binary looks at: /proc/<pid>/cmdline (and comm, for the record)."""
        if pid is None:
            return {"pid": None}
        info: dict[str, Any] = {"pid": pid, "alive": alive(pid)}
        for name in ("cmdline", "comm"):
            with contextlib.suppress(OSError):
                raw = Path(f"/proc/{pid}/{name}").read_bytes()
                info[name] = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()[:300]
        return info

    def stop(self) -> None:
        """`quit`, as MpsManager.stop; SIGTERM to what is still running after 5 s."""
        self.budget_end = max(self.budget_end, time.monotonic() + 8)
        self.probe.use_reserve()
        if self.daemon_pid is None and not self.server_pids:
            self.daemon_pid = self.read_pid()
        self.command("quit", "quit")
        started = time.monotonic()
        pids = [p for p in [self.daemon_pid, *self.server_pids] if p]
        wait = min(5.0, max(0.5, self.probe.left() - 1.5))
        while any(alive(p) for p in pids) and time.monotonic() - started < wait:
            time.sleep(0.1)
        lingering = [p for p in pids if alive(p)]
        for pid in lingering:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        self.step(
            "after quit",
            {
                "gone_ms": self.probe.elapsed_ms(started),
                "sigterm": lingering,
                "answers": self.command("get_server_list after quit", "get_server_list").get(
                    "stdout"
                ),
            },
        )

    def files(self) -> dict[str, list[dict[str, Any]]]:
        listing: dict[str, list[dict[str, Any]]] = {}
        for name, folder in (("pipe", self.pipe), ("log", self.logs)):
            entries = []
            with contextlib.suppress(OSError):
                for path in sorted(folder.iterdir()):
                    st = path.lstat()
                    kind = (
                        "socket"
                        if path.is_socket()
                        else "fifo"
                        if path.is_fifo()
                        else "dir"
                        if path.is_dir()
                        else "file"
                    )
                    entries.append(
                        {
                            "name": path.name,
                            "kind": kind,
                            "mode": oct(st.st_mode & 0o7777),
                            "size": st.st_size,
                        }
                    )
            listing[name] = entries
        return listing

    def log_tails(self) -> dict[str, str]:
        tails = {}
        for path in sorted(self.logs.glob("*.log")):
            with contextlib.suppress(OSError):
                data = path.read_bytes()[-4096:]
                tails[path.name] = self.masked(data.decode("utf-8", "replace"))
        return tails

    def ended(self) -> dict[str, bool]:
        pids = {"daemon": self.daemon_pid, **{f"server {p}": p for p in self.server_pids}}
        return {name: not (pid and alive(pid)) for name, pid in pids.items()}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):  # a zombie child of ours has ended
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    return True


def gpu_process(pid: Any, **fields: Any) -> dict[str, Any] | None:
    """A process the fake pynvml lists (FakeProcess's fields), named as NVML names it: its
    command as started."""
    if not isinstance(pid, int):
        return None
    command = proc_cmdline(pid).split(b"\0")[0].decode(errors="replace")
    memory = 66 if fields.get("mps") == "server" else 810
    return {"pid": pid, "used_memory_mib": memory, "name": command or "python3", **fields}


def list_on_fakes(processes: list[dict[str, Any] | None]) -> None:
    """Under --fakes: the fake pynvml lists these as the GPU's processes from now on (the
    scenario is live), as a driver lists the processes that opened the GPU. Elsewhere nothing."""
    folder = os.environ.get(ENV_FAKES)
    if not folder:
        return
    path = Path(folder) / "nvml.json"
    scenario = json.loads(path.read_text())
    scenario["gpus"][0]["processes"] = [p for p in processes if p]
    staged = path.with_suffix(".new")
    staged.write_text(json.dumps(scenario, indent=1))
    staged.replace(path)  # whole, as the shim reads it


def proc_cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def gpm_result(request: Any) -> dict[str, Any]:
    """A GPM request after nvmlGpmMetricsGet: the metrics it asked for, not the whole table."""
    count = int(request.numMetrics)
    return {
        "version": int(request.version),
        "numMetrics": count,
        "metrics": [jsonable(request.metrics[i]) for i in range(count)],
    }


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + "\n")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- the fakes
def recorded_gpu(doc: dict[str, Any]) -> dict[str, Any]:
    """The GPU a record was taken on, as fields of the fakes' scenario (FakeGpu's names), so that
    --fakes --compare asks fakes configured like it: what differs then is behaviour, not the
    GPU. What the record does not show is left out."""
    gpu = doc.get("probe", {}).get("gpu", 0)
    calls = doc.get("nvml", {}).get("calls", [])
    answers = {c["key"]: c.get("value") for c in calls if c.get("ok")}
    failed = {c["key"] for c in calls if not c.get("ok") and not c.get("skipped")}

    def value(what: str) -> Any:
        return answers.get(f"idle/gpu{gpu} {what}")

    facts: dict[str, Any] = {}
    for field, what in (("name", "nvmlDeviceGetName"), ("uuid", "nvmlDeviceGetUUID")):
        if isinstance(value(what), str):
            facts[field] = value(what)
    memory = value("nvmlDeviceGetMemoryInfo(version=nvmlMemory_v2)")
    if isinstance(memory, dict):
        for field, key in (("memory_total_mib", "total"), ("memory_used_mib", "used")):
            facts[field] = memory.get(key, 0) / 2**20
        facts["memory_reserved_mib"] = memory.get("reserved", 0) / 2**20
    scaled = (
        ("power_w", "nvmlDeviceGetPowerUsage", 1000),
        ("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", 1000),
        ("temperature_c", "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)", 1),
        ("sm_clock_mhz", "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)", 1),
        ("memory_clock_mhz", "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)", 1),
    )
    for field, what, divisor in scaled:
        if isinstance(value(what), (int, float)):
            facts[field] = value(what) / divisor if divisor != 1 else value(what)
    mode = value("nvmlDeviceGetMigMode")
    if isinstance(mode, list) and mode:
        facts["mig_enabled"] = mode[0] == 1  # NVML_DEVICE_MIG_ENABLE
    elif f"idle/gpu{gpu} nvmlDeviceGetMigMode" in failed:
        facts["mig_enabled"] = None
    support = value("nvmlGpmQueryDeviceSupport")
    if isinstance(support, dict) and "isSupportedDevice" in support:
        facts["gpm_supported"] = bool(support["isSupportedDevice"])
    for run in doc.get("nvidia_smi", {}).get("runs", []):
        lines = str(run.get("stdout") or "").splitlines()
        if run.get("key") == "query with header" and run.get("rc") == 0 and len(lines) > 1:
            columns = [c.strip() for c in lines[1].split(",")]
            if len(columns) > 3:
                facts["pci_bus_id"] = columns[3]
    return facts


def fake_environment(folder: Path, like: dict[str, Any] | None = None) -> dict[str, str]:
    """The environment the tests give gpudesk's hardware fakes: one GPU (an H200 without MIG,
    or the GPU `like` describes: recorded_gpu's fields), the fake pynvml (tests/fakes/nvml_shim)
    following the fake nvidia-smi's state, both fakes and the fake MPS control binary found on
    PATH and through gpudesk's variables."""
    facts = dict(like or {})
    pci_bus_id = facts.pop("pci_bus_id", "00000000:19:00.0")
    gpu = {
        "name": "NVIDIA H200",
        "uuid": "GPU-9d0f7a5e-3b1c-4f62-8a0e-5c2d6e7f8a91",
        "memory_total_mib": 143771,
        "memory_reserved_mib": 512,
        "power_w": 75,
        "power_limit_w": 700,
        "energy_mj": 5_000_000,
        "temperature_c": 30,
        "sm_clock_mhz": 345,
        "memory_clock_mhz": 3201,
        "mig_enabled": False,
        **facts,
    }
    mig = gpu["mig_enabled"]
    # live: list_on_fakes() names the torch clients it starts as the GPU's processes
    nvml = {"follow_nvidia_smi": True, "live": True, "gpus": [gpu]}
    smi = {
        "root": True,
        "gpus": [
            {
                "name": gpu["name"],
                "uuid": gpu["uuid"],
                "pci_bus_id": pci_bus_id,
                "mig_mode": "unsupported" if mig is None else "enabled" if mig else "disabled",
            }
        ],
    }
    (folder / "nvml.json").write_text(json.dumps(nvml, indent=1))
    (folder / "nvidia-smi.json").write_text(json.dumps(smi, indent=1))
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    for tool in ("nvidia-smi", MPS_CONTROL_BINARY):
        (bin_dir / tool).symlink_to(FAKES_DIR / tool)
    python_path = [str(FAKES_DIR / "nvml_shim"), os.environ.get("PYTHONPATH", "")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
    env.update(
        {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(p for p in python_path if p),
            "GPUDESK_FAKE_NVML": str(folder / "nvml.json"),
            "GPUDESK_FAKE_NVIDIA_SMI_STATE": str(folder / "nvidia-smi.json"),
            "GPUDESK_FAKE_NVIDIA_SMI_LOG": str(folder / "nvidia-smi.log"),
            ENV_NVIDIA_SMI: str(bin_dir / "nvidia-smi"),
            ENV_MPS_CONTROL: str(bin_dir / MPS_CONTROL_BINARY),
            ENV_FAKES: str(folder),
        }
    )
    return env


def rerun_on_fakes(argv: list[str], like: dict[str, Any] | None) -> int:
    if not (FAKES_DIR / "nvml_shim" / "pynvml.py").is_file():
        print(f"--fakes needs gpudesk's test fakes, which are not in {FAKES_DIR}.", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gpudesk-fakes-") as folder:
        env = fake_environment(Path(folder), like)
        rest = [a for a in argv if a != "--fakes"]
        return subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), *rest], env=env
        ).returncode


# --------------------------------------------------------------------------- comparing
UUID_RE = re.compile(r"\b(GPU|MIG)-[0-9a-fA-F-]{8,}")
NUMBER_RE = re.compile(r"\d+")


def text_form(text: str) -> str:
    """Text with UUIDs and numbers masked: what is left is the format."""
    return NUMBER_RE.sub("N", UUID_RE.sub(r"\1-<uuid>", text))


def shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def scalars(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from scalars(v, f"{prefix}.{k}" if prefix else k)
    elif isinstance(value, list):
        for i, v in enumerate(value[:4]):
            yield from scalars(v, f"{prefix}[{i}]")
    else:
        yield prefix or "value", value


def short(value: Any, width: int = 70) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= width else text[: width - 3] + "..."


class Diff:
    def __init__(self, left: str, right: str) -> None:
        self.left, self.right = left, right
        self.lines: list[str] = []
        self.counts = {"same": 0, "numbers": 0, "differs": 0, "only": 0}

    def say(self, status: str, key: str, detail: str = "") -> None:
        self.counts[status if status in self.counts else "only"] += 1
        if status != "same":
            self.lines.append(f"  {status.upper():8} {key}{': ' + detail if detail else ''}")

    def more(self, text: str) -> None:
        self.lines.append(f"           {text}")

    def keyed(
        self,
        title: str,
        a: list[dict[str, Any]],
        b: list[dict[str, Any]],
        compare: Callable[[str, dict[str, Any], dict[str, Any]], None],
    ) -> None:
        self.lines.append(f"== {title}: {self.left} {len(a)}, {self.right} {len(b)}")
        index_a = {r.get("key"): r for r in a}
        index_b = {r.get("key"): r for r in b}
        for key in dict.fromkeys([*index_a, *index_b]):
            if key not in index_b:
                self.say(f"only-{self.left}", str(key), summary(index_a[key]))
            elif key not in index_a:
                self.say(f"only-{self.right}", str(key), summary(index_b[key]))
            else:
                compare(str(key), index_a[key], index_b[key])

    def nvml(self, key: str, a: dict[str, Any], b: dict[str, Any]) -> None:
        if a.get("skipped") or b.get("skipped"):
            self.say(
                "differs" if bool(a.get("skipped")) != bool(b.get("skipped")) else "same",
                key,
                f"skipped {a.get('skipped')!r} / {b.get('skipped')!r}",
            )
            return
        if a.get("ok") != b.get("ok"):
            self.say("differs", key, f"{self.left} {outcome(a)} | {self.right} {outcome(b)}")
            return
        if not a.get("ok"):
            ea, eb = a.get("error", {}), b.get("error", {})
            if (ea.get("class"), ea.get("value")) != (eb.get("class"), eb.get("value")):
                self.say("differs", key, f"{self.left} {outcome(a)} | {self.right} {outcome(b)}")
            elif ea.get("str") != eb.get("str"):
                self.say("differs", key, f"message {ea.get('str')!r} | {eb.get('str')!r}")
            else:
                self.say("same", key)
            return
        if a.get("type") != b.get("type"):
            self.say(
                "differs", key, f"type {self.left} {a.get('type')} | {self.right} {b.get('type')}"
            )
            self.more(f"{self.left}: {short(a.get('value'), 110)}")
            self.more(f"{self.right}: {short(b.get('value'), 110)}")
            return
        sa, sb = shape(a.get("value")), shape(b.get("value"))
        if sa != sb:
            self.say("differs", key, "value shape (fields or types)")
            self.more(f"{self.left}: {short(sa, 110)}")
            self.more(f"{self.right}: {short(sb, 110)}")
            return
        va, vb = dict(scalars(a.get("value"))), dict(scalars(b.get("value")))
        changed = [k for k in va if va[k] != vb.get(k)]
        if not changed:
            self.say("same", key)
            return
        self.say(
            "numbers" if all(isinstance(va[k], (int, float)) for k in changed) else "differs",
            key,
            ", ".join(f"{k} {short(va[k], 30)} | {short(vb.get(k), 30)}" for k in changed[:4]),
        )

    def log(self, key: str, a: str, b: str) -> None:
        forms_a, forms_b = log_forms(a), log_forms(b)
        if forms_a == forms_b:
            self.say("same" if a == b else "numbers", key, "" if a == b else "same kinds of line")
            return
        self.say("differs", key, "kinds of line")
        for form in sorted(forms_a - forms_b)[:20]:
            self.more(f"-{form}")
        for form in sorted(forms_b - forms_a)[:20]:
            self.more(f"+{form}")

    def text(self, key: str, a: dict[str, Any], b: dict[str, Any]) -> None:
        kind = "same"
        notes: list[str] = []
        shown: list[str] = []
        for field in ("rc", "skipped", "timed_out", "answered"):
            if a.get(field) != b.get(field):
                kind = "differs"
                notes.append(f"{field} {a.get(field)!r} | {b.get(field)!r}")
        files_a, files_b = folder_names(a.get("files")), folder_names(b.get("files"))
        if files_a != files_b:
            kind = "differs"
            notes.append(f"files {files_a} | {files_b}")
        for stream in ("stdout", "stderr", "pid_file"):
            ta, tb = a.get(stream), b.get(stream)
            if not isinstance(ta, str) or not isinstance(tb, str) or ta == tb:
                continue
            if text_form(ta) == text_form(tb):
                kind = "numbers" if kind == "same" else kind
                notes.append(f"{stream}: numbers differ")
                continue
            kind = "differs"
            notes.append(f"{stream} differs")
            shown += list(
                difflib.unified_diff(
                    ta.splitlines(), tb.splitlines(), self.left, self.right, n=1, lineterm=""
                )
            )[2:40]
        self.say(kind, key, "; ".join(notes))
        for line in shown:
            self.more(line)


def log_forms(text: str) -> set[str]:
    """The kinds of line a log holds: each line's message (after its `[date time who pid]`
    prefix) with numbers and UUIDs masked. How many of each, and in which order, depends on the
    run's timing; which kinds appear, and how they are worded, is the tool's."""
    return {text_form(line.split("]", 1)[-1].strip()) for line in text.splitlines() if line.strip()}


def folder_names(files: Any) -> dict[str, dict[str, str]]:
    """{folder: {name: kind}} of a recorded folder listing."""
    if not isinstance(files, dict):
        return {}
    return {
        folder: {e["name"]: e["kind"] for e in entries if isinstance(e, dict)}
        for folder, entries in files.items()
        if isinstance(entries, list)
    }


def outcome(record: dict[str, Any]) -> str:
    if record.get("ok"):
        return f"ok {record.get('type')}"
    error = record.get("error", {})
    return f"{error.get('class')}({error.get('value')!r})"


def summary(record: dict[str, Any]) -> str:
    if "fn" in record:
        return outcome(record)
    return f"rc {record.get('rc')!r}"


def compare(a: dict[str, Any], b: dict[str, Any], left: str, right: str) -> tuple[str, bool]:
    diff = Diff(left, right)
    for doc, name in ((a, left), (b, right)):
        info = doc.get("probe", {})
        module = doc.get("nvml", {}).get("module", {})
        diff.lines.append(
            f"{name}: {'fakes' if info.get('fakes') else 'real'} run of {info.get('date_utc')}, "
            f"python {info.get('python')}, nvidia-ml-py {module.get('nvidia_ml_py')}, "
            f"finished {info.get('finished')}"
        )
    diff.keyed(
        "nvml", a.get("nvml", {}).get("calls", []), b.get("nvml", {}).get("calls", []), diff.nvml
    )
    diff.keyed(
        "nvidia-smi",
        a.get("nvidia_smi", {}).get("runs", []),
        b.get("nvidia_smi", {}).get("runs", []),
        diff.text,
    )
    diff.keyed(
        "mps", a.get("mps", {}).get("steps", []), b.get("mps", {}).get("steps", []), diff.text
    )
    fa, fb = (
        folder_names(a.get("mps", {}).get("files")),
        folder_names(b.get("mps", {}).get("files")),
    )
    for folder in sorted(set(fa) | set(fb)):
        na, nb = fa.get(folder), fb.get(folder)
        diff.say(
            "same" if na == nb else "differs",
            f"mps {folder} folder",
            "" if na == nb else f"{na} | {nb}",
        )
    la, lb = a.get("mps", {}).get("log_tails", {}), b.get("mps", {}).get("log_tails", {})
    for name in sorted(set(la) | set(lb)):
        if name not in la or name not in lb:
            diff.say(f"only-{left if name in la else right}", f"mps log {name}")
        else:
            diff.log(f"mps log {name}", la[name], lb[name])
    c = diff.counts
    diff.lines.append(
        f"{c['same']} same, {c['numbers']} differ in numbers only, {c['differs']} differ, "
        f"{c['only']} recorded on one side only"
    )
    return "\n".join(diff.lines), bool(c["differs"] or c["only"])


def load(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as file:
            doc = json.load(file)
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"cannot read {path} as a probe record: {exc}") from None
    if not isinstance(doc, dict) or "probe" not in doc:
        raise SystemExit(f"{path} is not a record written by {Path(__file__).name}.")
    return doc


# --------------------------------------------------------------------------- main
def watchdog(probe: Probe, limit: float) -> None:
    """At the time limit (plus grace for cleanup): write what was recorded and exit."""

    def fire() -> None:
        with contextlib.suppress(Exception):
            probe.doc["probe"]["timed_out"] = True
            text = probe.dump()
            if probe.args.out:
                write_atomically(Path(probe.args.out), text)
            elif not probe.args.compare:
                print(text, flush=True)
        probe.cleanup()
        os._exit(3)

    timer = threading.Timer(limit, fire)
    timer.daemon = True
    timer.start()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the JSON record here (default: stdout)")
    parser.add_argument("--time-limit", type=float, default=150.0, help="seconds, all in")
    parser.add_argument("--gpu", type=int, default=0, help="NVML / nvidia-smi index")
    parser.add_argument(
        "--python",
        help="the python of the torch clients (default: this one; on the fakes, "
        "tests/fakes/cuda-python)",
    )
    parser.add_argument(
        "--client-seconds",
        type=float,
        default=30.0,
        help="the longest a torch client works (the probe stops it once it has read the GPU)",
    )
    parser.add_argument("--fakes", action="store_true", help="run on gpudesk's hardware fakes")
    parser.add_argument(
        "--compare", metavar="REAL.json", help="diff a recorded run against this one"
    )
    parser.add_argument("--against", metavar="OTHER.json", help="with --compare: diff two records")
    args = parser.parse_args(argv)
    if args.time_limit <= 0 or args.gpu < 0 or args.client_seconds <= 0:
        parser.error("--time-limit and --client-seconds must be positive, --gpu at least 0")
    if args.against and not args.compare:
        parser.error("--against goes with --compare")
    if args.compare:
        real = load(args.compare)
        if args.against:
            text, differs = compare(real, load(args.against), "real", "other")
            print(text)
            return 1 if differs else 0
    if args.fakes and not os.environ.get(ENV_FAKES):
        return rerun_on_fakes(argv, recorded_gpu(real) if args.compare else None)

    if not args.python:
        fake_client = FAKES_DIR / "cuda-python"
        args.python = str(fake_client) if os.environ.get(ENV_FAKES) else sys.executable
    probe = Probe(args)
    watchdog(probe, args.time_limit)
    try:
        probe.probe()
    except KeyboardInterrupt:
        probe.cleanup()
        return 130
    if args.compare:
        if args.out:
            write_atomically(Path(args.out), probe.dump())
        text, differs = compare(real, probe.doc, "real", "fakes" if args.fakes else "here")
        print(text)
        return 1 if differs else 0
    if not args.out:
        print(probe.dump())
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
