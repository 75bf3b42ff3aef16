"""Hardware truth: every real-GPU check of gpudesk in one run, each with its own time limit.

    python bench/hardware_truth.py --out DIR [--fakes] [--budget-s 420] [--only a,b]

Runs, in order, each check in processes of its own and with its own time limit; a check that
fails, times out or finds no GPU is recorded as such and the next one runs. After every check
the results so far are written to DIR/hardware_truth.json, so a run cut short still leaves
what it saw. Read-only: nothing here changes MIG mode, clocks, power limits, the compute mode or
persistence, or resets a GPU (calibrate and the MPS daemon only read them; the MPS daemons are
gpudesk's own, in temporary folders, and are quit).

- `environment`: the GPU's name and driver as nvidia-smi prints them, torch and CUDA, nvidia-ml-py.
- `raw_probe`: bench/hw_raw_probe.py: the driver's raw answers to every NVML call, read-only
  nvidia-smi command and MPS control command gpudesk makes (DIR/raw_probe.json), to diff
  against the fakes (`python bench/hw_raw_probe.py --fakes --compare DIR/raw_probe.json`).
- `nvml`: bench/nvml_validation.py under a real training load: the metrics the GPU answers,
  GPM SM activity beside kernel-active time, energy counter against integrated power,
  per-process samples, `gpudesk top --once --json`.
- `mps_engine`: two real torch training jobs (the digits MLP, widened so the GPU has work)
  through `gpudesk run` on an engine of their own with `policy = "mps"`, then `"naive"`, then
  `"exclusive"`: each job's throughput, SM activity and energy as the engine reports them,
  NVML's SM activity and DRAM bandwidth over the run (1-s windows), the MPS daemons seen
  (their pipe folder, whether it lies under the run's GPUDESK_HOME) and how long after the
  jobs ended they were gone. The jobs are sized first (a short run alone) to ~`--job-s` each.
- `calibrate`: `gpudesk calibrate --json --mechanisms naive,mps` with short probes, and the
  placement model's prediction for the pair of `mps_engine` (workloads measured in the
  exclusive run) with the published defaults and with the fit, beside the measured rates.
- `loader`: bench/loader.py with N = 1, 2, 4 consumers on one GPU (`--device cuda`), the
  independent DataLoader baseline and gpudesk's shared loader: throughput, host CPU-s per batch,
  host-to-device bytes per batch, GPU memory per consumer.
- `metrics`: an engine of its own with `metrics_listen` set and one training job submitted
  through it; once the GPU is at work, its Prometheus endpoint scraped and `nvidia-smi
  --query-gpu` read at the same moment, once a second: each DCGM-named series beside the
  figure nvidia-smi prints for it, the series' labels (the job's among them), and
  `gpudesk top --once --json` taken during the load.

`--fakes` runs the same plan on a machine without a GPU against the faithful fakes
(tests/fakes: NVML through the shim, nvidia-smi, the MPS control binary), the jobs and loads on
the CPU and calibrate on a SIMULATED H200: how this script is checked before it meets a GPU.
Results go into docs/hardware-validation.md by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))  # its sibling fake_h200, when loaded by path too
from fake_h200 import reexec_on_fakes  # noqa: E402

PYTHON = sys.executable
TAIL = 4000  # characters of a command's output kept in the JSON

CHECKS: dict[str, float] = {  # name -> its time limit in seconds
    "environment": 40,
    "raw_probe": 100,
    "nvml": 75,
    "mps_engine": 200,
    "calibrate": 170,
    "loader": 150,
    "metrics": 90,
}


class Run:
    """The results so far, written after every check, and a log of every command."""

    def __init__(self, out: Path, fakes: bool, budget_s: float) -> None:
        self.out = out
        self.fakes = fakes
        self.deadline = time.monotonic() + budget_s
        self.results: dict[str, Any] = {
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "fakes": fakes,
            "host": os.uname().nodename,
            "checks": {},
        }
        self.log = (out / "log.txt").open("a", encoding="utf-8", errors="replace")
        self.env = dict(os.environ)
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env.pop("GPUDESK_BACKEND", None)
        self.tmp = Path(tempfile.mkdtemp(prefix="gpudesk-hwtruth-"))

    def say(self, line: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"[{stamp}] {line}", flush=True)
        self.log.write(f"[{stamp}] {line}\n")
        self.log.flush()

    def left(self, limit: float) -> float:
        return max(1.0, min(limit, self.deadline - time.monotonic()))

    def save(self) -> None:
        path = self.out / "hardware_truth.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.results, indent=1, default=str))
        tmp.replace(path)

    def cmd(
        self,
        argv: list[str],
        timeout: float,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
    ) -> dict[str, Any]:
        """Run a command to its end or its time limit (its whole process group is killed then);
        its output goes to the log and its tail to the result."""
        self.say("$ " + " ".join(argv))
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                env=env or self.env,
                start_new_session=True,
            )
        except OSError as exc:
            return {"argv": argv, "rc": None, "error": f"{type(exc).__name__}: {exc}"}
        timed_out = False
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        wall = time.monotonic() - start
        self.log.write(out + ("\n--- stderr ---\n" + err if err.strip() else "") + "\n")
        self.log.flush()
        return {
            "argv": argv,
            "rc": proc.returncode,
            "timed_out": timed_out,
            "wall_s": round(wall, 2),
            "stdout": out,
            "stderr_tail": err[-TAIL:],
        }


def tail(result: dict[str, Any]) -> dict[str, Any]:
    """A command's result for the JSON: stdout trimmed to its tail."""
    kept = dict(result)
    kept["stdout_tail"] = kept.pop("stdout", "")[-TAIL:]
    return kept


def parse_json(text: str) -> Any:
    """The last JSON document a command printed (a whole-output document first)."""
    text = text.strip()
    with contextlib.suppress(ValueError):
        return json.loads(text)
    for line in reversed(text.splitlines()):
        with contextlib.suppress(ValueError):
            return json.loads(line)
    return None


def gpudesk(*args: str) -> list[str]:
    return [PYTHON, "-m", "gpudesk", *args]


# ================================================================================ environment
def check_environment(run: Run) -> dict[str, Any]:
    query = (
        "name,driver_version,memory.total,mig.mode.current,compute_mode,persistence_mode,"
        "power.limit,clocks.max.sm,pci.bus_id"
    )
    torch_probe = (
        "import json, torch\n"
        "ok = torch.cuda.is_available()\n"
        "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda,"
        " 'available': ok, 'device': torch.cuda.get_device_name(0) if ok else None,"
        " 'capability': list(torch.cuda.get_device_capability(0)) if ok else None}))"
    )
    nvml_probe = (
        "import json, pynvml\nfrom importlib import metadata\n"
        "pynvml.nvmlInit()\n"
        "print(json.dumps({'nvidia_ml_py': metadata.version('nvidia-ml-py'),"
        " 'driver': pynvml.nvmlSystemGetDriverVersion(),"
        " 'cuda_driver': pynvml.nvmlSystemGetCudaDriverVersion()}))"
    )
    smi_l = run.cmd(["nvidia-smi", "-L"], 15)
    smi_q = run.cmd(["nvidia-smi", f"--query-gpu={query}", "--format=csv"], 15)
    return {
        "nvidia_smi_L": smi_l.get("stdout", "").strip() or smi_l.get("error"),
        "nvidia_smi_query": smi_q.get("stdout", "").strip() or smi_q.get("error"),
        "python": sys.version.split()[0],
        "torch": parse_json(run.cmd([PYTHON, "-c", torch_probe], 30).get("stdout", "")),
        "nvml": parse_json(run.cmd([PYTHON, "-c", nvml_probe], 15).get("stdout", "")),
        "mps_control": shutil.which("nvidia-cuda-mps-control", path=run.env.get("PATH"))
        or run.env.get("GPUDESK_MPS_CONTROL"),
        "cpus": os.cpu_count(),
        "gpudesk": run.cmd(gpudesk("--version"), 15).get("stdout", "").strip(),
    }


# ================================================================================ raw probe
def check_raw_probe(run: Run) -> dict[str, Any]:
    script = REPO / "bench" / "hw_raw_probe.py"
    if not script.exists():
        return {"skipped": "bench/hw_raw_probe.py is not in this tree"}
    out = run.out / "raw_probe.json"
    argv = [PYTHON, str(script), "--out", str(out), "--time-limit", "90"]
    done = run.cmd(argv, run.left(CHECKS["raw_probe"]))
    return {"command": tail(done), "file": out.name if out.exists() else None}


# ================================================================================ nvml
def check_nvml(run: Run) -> dict[str, Any]:
    argv = [PYTHON, str(REPO / "bench" / "nvml_validation.py"), "--seconds", "20", "--json"]
    if run.fakes:
        argv += ["--load-device", "cpu"]
    done = run.cmd(argv, run.left(CHECKS["nvml"]))
    result = parse_json(done.get("stdout", ""))
    return {"command": tail(done), "result": result}


# ================================================================ metrics against nvidia-smi
# Each DCGM series the engine exports, and the nvidia-smi query field printing the same reading
# (dcgm-exporter's default-counters.csv names; nvidia-smi --help-query-gpu's fields and units).
SMI_FOR_DCGM = {
    "DCGM_FI_DEV_GPU_UTIL": "utilization.gpu",
    "DCGM_FI_DEV_FB_USED": "memory.used",
    "DCGM_FI_DEV_FB_FREE": "memory.free",
    "DCGM_FI_DEV_POWER_USAGE": "power.draw",
    "DCGM_FI_DEV_GPU_TEMP": "temperature.gpu",
    "DCGM_FI_DEV_SM_CLOCK": "clocks.sm",
}
# nvidia-smi 580.159.04 has no energy field ('Field "total_energy_consumption" is not a valid
# field to query', H200, 2026-11-30): the energy counter is read from NVML itself, in mJ.
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
METRICS_SAMPLES = 10


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape_dcgm(url: str) -> dict[str, Any]:
    """GPU 0's whole-GPU sample of every DCGM_* family, with its labels, as Prometheus's own
    parser reads the page; the names of every family besides."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=5.0) as reply:
        text = reply.read().decode()
    seen: dict[str, Any] = {"families": []}
    for family in text_string_to_metric_families(text):
        seen["families"].append(family.name)
        for sample in family.samples:
            labels = dict(sample.labels)
            if sample.name == "gpudesk_telemetry_sample_timestamp_seconds":
                seen["sampled_at"] = sample.value  # when the engine read what the page shows
            whole_gpu_0 = labels.get("gpu") == "0" and "GPU_I_ID" not in labels
            if sample.name.startswith("DCGM_") and whole_gpu_0:
                seen[sample.name] = {"value": sample.value, "labels": labels}
    return seen


def smi_now(run: Run, env: dict[str, str]) -> dict[str, Any]:
    fields = list(SMI_FOR_DCGM.values())
    done = run.cmd(
        [
            "nvidia-smi",
            "-i",
            "0",
            f"--query-gpu={','.join(fields)}",
            "--format=csv,noheader,nounits",
        ],
        10,
        env=env,
    )
    values = [v.strip() for v in done.get("stdout", "").strip().split(",")]
    if done.get("rc") != 0 or len(values) != len(fields):
        return {"error": done.get("stdout", "")[-300:] + done.get("stderr_tail", "")[-300:]}
    parsed: dict[str, Any] = {}
    with contextlib.suppress(Exception):  # the energy counter, beside the query, in mJ
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        parsed["nvml_total_energy_mj"] = float(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        parsed["nvml_read_at"] = time.time()
    for field, value in zip(fields, values, strict=True):
        try:
            parsed[field] = float(value)
        except ValueError:
            parsed[field] = value  # "[N/A]", "[Not Supported]": as printed
    return parsed


def compare_metrics(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Per DCGM name: the median of (exported - nvidia-smi) over the samples, and of each."""
    out: dict[str, Any] = {}
    for name, field in {**SMI_FOR_DCGM, ENERGY: "nvml_total_energy_mj"}.items():
        pairs = [
            (s["dcgm"][name]["value"], s["smi"][field])
            for s in samples
            if isinstance(s.get("dcgm", {}).get(name), dict)
            and isinstance(s.get("smi", {}).get(field), float)
        ]
        if not pairs:
            out[name] = {"pairs": 0}
            continue
        out[name] = {
            "pairs": len(pairs),
            "exported_median": round(statistics.median(p[0] for p in pairs), 3),
            "smi_median": round(statistics.median(p[1] for p in pairs), 3),
            "median_difference": round(statistics.median(p[0] - p[1] for p in pairs), 3),
        }
    return out


def metrics_load(run: Run, device: str) -> list[str]:
    """The job the metrics check samples beside: a training job on the GPU. The fakes' GPU reads
    the same whatever runs on it (tests/fakes: 60 % busy), so there a job that sleeps until it
    is cancelled is the same load to the check; a training job only kept a core busy for the
    check's ~15 s (~11 CPU-s of a CI run on 2 cores)."""
    if run.fakes:
        return [PYTHON, "-c", "import time; time.sleep(600)"]
    return job_command(device, 5000, 0)


def check_metrics(run: Run) -> dict[str, Any]:
    device = "cpu" if run.fakes else "cuda"
    home = run.tmp / "home-metrics"
    home.mkdir()
    env = dict(run.env, GPUDESK_HOME=str(home))
    url = f"http://127.0.0.1:{free_port()}/metrics"
    listen = url.removeprefix("http://").removesuffix("/metrics")
    result: dict[str, Any] = {"url": url, "samples": []}
    limit = time.monotonic() + run.left(CHECKS["metrics"]) - 15
    result["start"] = tail(run.cmd(gpudesk("engine", "start"), 30, env=env))
    try:
        result["set"] = tail(
            run.cmd(gpudesk("engine", "set", f"metrics_listen={listen}"), 20, env=env)
        )
        submit = gpudesk("submit", "--gpus", "1", "--name", "metrics-load", "--json", "--")
        result["submit"] = tail(run.cmd(submit + metrics_load(run, device), 20, env=env))
        # Wait for the job at work: the endpoint's GPU_UTIL above zero (or 30 s).
        waited = time.monotonic()
        while time.monotonic() < limit and time.monotonic() - waited < 30:
            with contextlib.suppress(Exception):
                util = scrape_dcgm(url).get("DCGM_FI_DEV_GPU_UTIL", {}).get("value") or 0
                if util > 0:
                    break
            time.sleep(1.0)
        result["at_work_after_s"] = round(time.monotonic() - waited, 1)
        for index in range(METRICS_SAMPLES):
            if time.monotonic() > limit:
                break
            began = time.time()
            sample: dict[str, Any] = {"t": round(began, 2)}
            try:
                sample["dcgm"] = scrape_dcgm(url)
            except Exception as exc:
                sample["dcgm"] = {"error": f"{type(exc).__name__}: {exc}"}
            sample["smi"] = smi_now(run, env)
            if index:  # the family list once is enough
                sample["dcgm"].pop("families", None)
            result["samples"].append(sample)
            if index == METRICS_SAMPLES // 2:
                top = run.cmd(gpudesk("top", "--once", "--json"), 20, env=env)
                result["top"] = parse_json(top.get("stdout", ""))
            time.sleep(max(0.0, 1.0 - (time.time() - began)))
        result["compare"] = compare_metrics(result["samples"])
        first = next((s["dcgm"] for s in result["samples"] if "families" in s["dcgm"]), {})
        result["families"] = first.get("families")
        result["labels"] = {
            name: value["labels"]
            for name, value in first.items()
            if isinstance(value, dict) and "labels" in value
        }
    finally:
        run.cmd(gpudesk("cancel", "--grace", "2", "metrics-load"), 20, env=env)
        # stopped only once the job has ended and the engine has quit its MPS daemon: an
        # engine stopped first leaves the daemon running for good
        run.cmd(gpudesk("wait", "metrics-load", "--timeout", "20"), 30, env=env)
        result["mps_retired"] = mps_retired(home)
        result["stop"] = tail(run.cmd(gpudesk("engine", "stop"), 30, env=env))
    return result


# ================================================================ MPS through the engine
POLICIES = ("mps", "naive", "exclusive")
ACTIVE_KERNEL = 0.05  # a window counts as the job at work from this kernel-active share
# top and nvidia-smi are read in a run once NVML shows kernels running, else this late: the
# jobs' start-up (python, torch, CUDA, their data) kept the H200 idle for 6-11 s
MID_RUN_S = 20.0
DIGITS_TRAIN_SAMPLES = 1437  # 80 % of scikit-learn's 1,797 digits (gpudesk/workloads/data.py)
# On the GPU: wide enough that the pair has kernels to share (4 x 4096² layers, 512 per batch).
# On the CPU (--fakes) small, so the plan's plumbing is checked in seconds.
JOB_SHAPE = {
    "cuda": ["--hidden", "4096", "--layers", "4", "--batch-size", "512"],
    "cpu": ["--hidden", "128", "--layers", "2", "--batch-size", "64"],
}
JOB_NEEDS = {"gpus": 1, "memory_gb": 8, "sm_pct": 50}


def job_command(device: str, epochs: int, seed: int) -> list[str]:
    return [
        PYTHON,
        "-m",
        "gpudesk.workloads.digits",
        *JOB_SHAPE[device],
        "--epochs",
        str(epochs),
        "--seed",
        str(seed),
        "--device",
        device,
    ]


def profile_text(policy: str, device: str, epochs: int) -> str:
    lines = [
        f'name = "hw-{policy}"',
        "[station]",
        'backend = "nvml"',
        f'policy = "{policy}"',
        "[defaults]",
        "max_attempts = 1",
    ]
    for index, name in enumerate(("pair-a", "pair-b")):
        command = job_command(device, epochs, seed=index)
        lines += [
            "[[jobs]]",
            f'name = "{name}"',
            "command = [" + ", ".join(json.dumps(c) for c in command) + "]",
            *(f"{key} = {value}" for key, value in JOB_NEEDS.items()),
        ]
    return "\n".join(lines) + "\n"


class Meter:
    """NVML's SM activity, DRAM bandwidth and kernel-active time in 1-s windows, in a thread
    (the calibration runner's meter, so the engine check reads the GPU as calibrate does)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.windows: list[dict[str, Any]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._env = env

    def __enter__(self) -> Meter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        try:
            from gpudesk.hw.probe_runner import NvmlMeter

            with NvmlMeter(0) as meter:
                while not self._stop.is_set():
                    began = time.time()
                    meter.start()
                    self._stop.wait(1.0)
                    reading = meter.stop()
                    self.windows.append(
                        {
                            "t0": round(began, 2),
                            "t1": round(time.time(), 2),
                            "sm": reading.sm,
                            "membw": reading.membw,
                            "kernel_active": reading.kernel_active,
                            "membw_source": reading.membw_source,
                            **self._processes(),
                        }
                    )
        except Exception as exc:  # the meter is a witness: the check goes on without it
            self.error = f"{type(exc).__name__}: {exc}"

    def _processes(self) -> dict[str, Any]:
        """What NVML lists per process right now, raw: the compute processes, the MPS compute
        processes (where the binding has the call), and the utilization samples of the last
        window, so a run shows which pids NVML names under MPS and naive time-slicing."""
        import pynvml as nv

        seen: dict[str, Any] = {}
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(0)
        except Exception as exc:
            return {"processes_error": f"{type(exc).__name__}: {exc}"}
        calls = {
            "compute": "nvmlDeviceGetComputeRunningProcesses",
            "mps_compute": "nvmlDeviceGetMPSComputeRunningProcesses",
        }
        for key, name in calls.items():
            try:
                listed = getattr(nv, name)(handle)
                seen[key] = [[p.pid, p.usedGpuMemory] for p in listed]
            except Exception as exc:
                seen[key] = f"{type(exc).__name__}: {exc}"
        since = int((time.time() - 1.5) * 1e6)
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(handle, since)
            seen["utilization"] = [[u.pid, u.smUtil, u.memUtil, u.timeStamp] for u in samples]
        except Exception as exc:
            seen["utilization"] = f"{type(exc).__name__}: {exc}"
        return seen

    def between(self, t0: float, t1: float) -> dict[str, Any]:
        """Medians over the windows inside [t0, t1]: over all of them, and over the *active*
        ones (kernel-active at least ACTIVE_KERNEL): a job's start-up (python, torch, the CUDA
        context, its data) keeps the GPU idle for seconds, and the model's workload is the job
        at work, not its start-up."""
        inside = [w for w in self.windows if w["t0"] >= t0 and w["t1"] <= t1]
        active = [w for w in inside if (w["kernel_active"] or 0.0) >= ACTIVE_KERNEL]

        def median(windows: list[dict[str, Any]], key: str) -> float | None:
            values = [w[key] for w in windows if w[key] is not None]
            return round(statistics.median(values), 4) if values else None

        return {
            "windows": len(inside),
            "sm": median(inside, "sm"),
            "membw": median(inside, "membw"),
            "kernel_active": median(inside, "kernel_active"),
            "active_windows": len(active),
            "active_sm": median(active, "sm"),
            "active_membw": median(active, "membw"),
            "active_kernel_active": median(active, "kernel_active"),
            "membw_source": inside[0]["membw_source"] if inside else None,
        }


def running_job_env() -> list[dict[str, str]]:
    """The CUDA and MPS variables of the pair's training processes, read from /proc while they
    run: what the engine really gave them."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if "gpudesk.workloads.digits" not in (proc.info["cmdline"] or []):
            continue
        with contextlib.suppress(psutil.Error):
            env = proc.environ()
            found.append({k: v for k, v in env.items() if k.startswith(("CUDA_", "GPUDESK_GPUS"))})
    return found


def mps_processes() -> list[dict[str, Any]]:
    """The MPS control daemons and servers running now, with the pipe folder each was given."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        name = proc.info["name"] or ""
        if "nvidia-cuda-mps" not in name and not any(
            "nvidia-cuda-mps" in part for part in (proc.info["cmdline"] or [])[:2]
        ):
            continue
        pipe = None
        with contextlib.suppress(psutil.Error):
            pipe = proc.environ().get("CUDA_MPS_PIPE_DIRECTORY")
        found.append({"pid": proc.info["pid"], "name": name, "pipe_dir": pipe})
    return found


def size_job(run: Run, device: str, target_s: float) -> dict[str, Any]:
    """Epochs for ~target_s of training alone, from a short run of the job alone."""
    trial_epochs = 3 if run.fakes else 20
    env = dict(run.env)
    done = run.cmd(job_command(device, trial_epochs, 0), 90, env=env)
    result = None
    for line in done.get("stdout", "").splitlines():
        if line.startswith("result "):
            result = json.loads(line[len("result ") :])
    if not result or not result.get("samples_per_s"):
        return {"trial": tail(done), "epochs": None}
    # samples_per_s counts training time alone (gpudesk/workloads/training.py); validation and
    # start-up come on top, so a job runs somewhat longer than target_s.
    per_epoch = DIGITS_TRAIN_SAMPLES / float(result["samples_per_s"])
    epochs = max(3, min(5000, round(target_s / per_epoch)))
    return {
        "trial_epochs": trial_epochs,
        "trial_wall_s": result["wall_s"],
        "trial_samples_per_s": result.get("samples_per_s"),
        "epochs": epochs,
    }


def job_detail(run: Run, env: dict[str, str], job_id: int) -> dict[str, Any]:
    shown = parse_json(run.cmd(gpudesk("show", str(job_id), "--json"), 30, env=env)["stdout"])
    if not isinstance(shown, dict):
        return {}
    job = shown.get("job", shown)
    attempts = shown.get("attempts") or [{}]
    placement = attempts[-1].get("placement") or {}
    events = shown.get("events") or []
    return {
        "started_at": job.get("started_at"),
        "ended_at": job.get("ended_at"),
        "mode": placement.get("mode"),
        "slot": placement.get("slot"),
        "placement_reason": placement.get("reason"),
        # what the engine added to the job's environment (the MPS pipe, thread share, limits)
        "env": placement.get("env") or {},
        "env_defaults": placement.get("env_defaults") or {},
        "events": [e.get("message") if isinstance(e, dict) else e for e in events][-12:],
    }


def run_policy(run: Run, policy: str, device: str, epochs: int, meter: Meter) -> dict[str, Any]:
    home = run.tmp / f"home-{policy}"
    home.mkdir()
    profile = run.tmp / f"hw-{policy}.toml"
    profile.write_text(profile_text(policy, device, epochs))
    env = dict(run.env, GPUDESK_HOME=str(home))
    seen: dict[int, dict[str, Any]] = {}
    top: Any = None
    smi = ""
    job_env: list[dict[str, str]] = []
    argv = gpudesk("run", str(profile), "--apply-station", "--json")
    run.say("$ " + " ".join(argv) + f"  (GPUDESK_HOME={home})")
    began = time.time()
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    limit = run.left(CHECKS["mps_engine"] / 3 + 20)
    output: dict[str, str] = {}
    reader = threading.Thread(
        target=lambda: output.update(zip(("out", "err"), proc.communicate(), strict=True)),
        daemon=True,
    )
    reader.start()
    while reader.is_alive() and time.time() - began < limit:
        for found in mps_processes():
            seen.setdefault(found["pid"], found)
        if not job_env:
            job_env = running_job_env()
        at_work = bool(meter.windows) and (meter.windows[-1]["kernel_active"] or 0.0) >= 0.5
        late = time.time() - began > MID_RUN_S
        if top is None and job_env and (at_work or late):
            top = parse_json(run.cmd(gpudesk("top", "--once", "--json"), 20, env=env)["stdout"])
            smi = run.cmd(["nvidia-smi"], 15, env=env).get("stdout", "")[-TAIL:]
        reader.join(0.5)
    if reader.is_alive():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        reader.join(10)
    ended = time.time()
    run.log.write(output.get("err", "") + "\n")
    report = parse_json(output.get("out", ""))
    jobs = []
    for job in (report or {}).get("jobs", []):
        detail = job_detail(run, env, job["id"])
        usage = job.get("usage") or {}
        attempt = (usage.get("per_attempt") or [{}])[-1]
        jobs.append(
            {
                "name": job.get("name"),
                "state": job.get("state"),
                "wall_s": job.get("wall_s"),
                "samples_per_s": (job.get("metrics") or {}).get("samples_per_s"),
                "train_wall_s": (job.get("metrics") or {}).get("wall_s"),
                "gpu_j": usage.get("gpu_j"),
                "gpu_above_idle_j": usage.get("gpu_above_idle_j"),
                "gpu_source": usage.get("gpu_source"),
                "energy_split": usage.get("split"),
                "energy_estimate": usage.get("estimate"),
                "gpu_sm_mean_pct": attempt.get("gpu_sm_mean_pct"),
                "gpu_memory_peak_mib": attempt.get("gpu_memory_peak_mib"),
                **detail,
                "nvml": meter.between(detail.get("started_at") or 0, detail.get("ended_at") or 0),
            }
        )
    starts = [j["started_at"] for j in jobs if j.get("started_at")]
    ends = [j["ended_at"] for j in jobs if j.get("ended_at")]
    overlap = max(0.0, min(ends) - max(starts)) if len(starts) == 2 and len(ends) == 2 else None
    roots = tuple(mps_roots(home))
    ours = [p for p in seen.values() if str(p.get("pipe_dir")).startswith(roots)]
    quit_after = None
    # the engine quits a drained GPU's daemon: how long after the jobs ended
    if ours and mps_retired(home):
        quit_after = round(time.time() - (max(ends) if ends else ended), 2)
    stop = run.cmd(gpudesk("engine", "stop"), 30, env=env)
    return {
        "profile": profile.read_text(),
        "rc": proc.returncode,
        "wall_s": round(ended - began, 2),
        "stderr_tail": output.get("err", "")[-TAIL:],
        "jobs": jobs,
        "overlap_s": None if overlap is None else round(overlap, 2),
        "both": meter.between(max(starts), min(ends)) if overlap else None,
        "top_during": top,
        "nvidia_smi_during": smi,
        "job_process_env": job_env,
        "mps_seen": ours,  # MPS daemons and servers whose pipe folder is this home's
        "mps_under_home": bool(ours)
        and all(str(p["pipe_dir"]).startswith(str(home)) for p in ours),
        "mps_other_processes": len(seen) - len(ours),
        "mps_gone_after_s": quit_after,
        "engine_stop": stop.get("stdout", "").strip() or stop.get("stderr_tail"),
    }


def mps_retired(home: Path, seconds: float = 30.0) -> bool:
    """Wait (at most `seconds`) for the engine to quit this home's MPS daemons, which it does
    once their GPU has no job left; whether they are gone."""
    roots = tuple(mps_roots(home))
    waited = time.time()
    while time.time() - waited < seconds:
        if not any(str(p.get("pipe_dir")).startswith(roots) for p in mps_processes()):
            return True
        time.sleep(0.25)
    return False


def mps_roots(home: Path) -> list[str]:
    """Where gpudesk puts a home's MPS pipe folders: under the home, or (a long home path)
    under a folder of its own in /tmp/gpudesk-<uid>/ (gpudesk/hw/mps.py). That folder, not
    all of /tmp/gpudesk-<uid>/: another home's daemons (another test's, run beside this one)
    are not this run's."""
    from gpudesk.hw.mps import short_pipe_root

    return [str(home), str(short_pipe_root(home))]


def check_mps_engine(run: Run, job_s: float, policies: tuple[str, ...]) -> dict[str, Any]:
    device = "cpu" if run.fakes else "cuda"
    sizing = size_job(run, device, job_s)
    result: dict[str, Any] = {"device": device, "sizing": sizing, "policies": {}}
    run.results["checks"]["mps_engine"] = result
    if not sizing.get("epochs"):
        result["error"] = "the sizing run did not finish"
        return result
    with Meter(run.env) as meter:
        for policy in policies:
            try:
                result["policies"][policy] = run_policy(
                    run, policy, device, sizing["epochs"], meter
                )
            except Exception:
                result["policies"][policy] = {"error": traceback.format_exc()[-TAIL:]}
            run.save()
    result["meter_error"] = meter.error
    result["meter_windows"] = meter.windows
    result["rates"] = measured_rates(result["policies"])
    return result


def measured_rates(policies: dict[str, Any]) -> dict[str, Any]:
    """Each job's throughput shared over its throughput in the exclusive run."""
    alone = {
        j["name"]: j["samples_per_s"]
        for j in policies.get("exclusive", {}).get("jobs", [])
        if j.get("samples_per_s")
    }
    rates: dict[str, Any] = {}
    for policy in ("mps", "naive"):
        for job in policies.get(policy, {}).get("jobs", []):
            if job.get("samples_per_s") and alone.get(job["name"]):
                rates.setdefault(policy, {})[job["name"]] = round(
                    job["samples_per_s"] / alone[job["name"]], 4
                )
    return rates


# ================================================================================ calibrate
def check_calibrate(run: Run) -> dict[str, Any]:
    env = dict(run.env, GPUDESK_HOME=str(run.tmp / "home-calibrate"))
    seconds = "1.5"
    argv = gpudesk("calibrate", "--json", "--seconds", seconds, "--mechanisms", "naive,mps")
    if run.fakes:
        argv += ["--station", "sim:h200"]
    argv.append("--no-save")
    done = run.cmd(argv, run.left(CHECKS["calibrate"]), env=env)
    report = parse_json(done.get("stdout", ""))
    if isinstance(report, dict):
        (run.out / "calibrate.json").write_text(json.dumps(report, indent=1))
    result: dict[str, Any] = {"command": tail(done), "file": "calibrate.json" if report else None}
    if isinstance(report, dict):
        result["summary"] = {
            k: report.get(k)
            for k in ("gpu_model", "wall_s", "rms_residual_default", "rms_residual_fit", "fitted")
        }
    result["prediction"] = predict_pair(run, report if isinstance(report, dict) else None)
    return result


def predict_pair(run: Run, calibration: dict[str, Any] | None) -> dict[str, Any]:
    """The placement model's rates for the engine check's pair, from the workloads measured
    while each job ran alone (exclusive run), with the published defaults and with the fit."""
    from gpudesk.policy.interference import (
        DEFAULT_PARAMS,
        Workload,
        params_from_json,
        shared_rates,
    )

    engine = run.results["checks"].get("mps_engine", {})
    policies = engine.get("policies", {}) if isinstance(engine, dict) else {}
    alone = {j["name"]: j for j in policies.get("exclusive", {}).get("jobs", [])}
    workloads = {}
    for name, job in alone.items():
        nvml = job.get("nvml") or {}
        sm = nvml.get("active_sm", nvml.get("sm"))
        if sm is None:
            return {"error": f"no NVML SM activity measured while {name} ran alone"}
        membw = nvml.get("active_membw", nvml.get("membw"))
        workloads[name] = Workload(float(sm), float(membw if membw is not None else 0.0))
    if len(workloads) != 2:
        return {"error": "the exclusive run did not measure both jobs"}
    sets = {"defaults": DEFAULT_PARAMS}
    if calibration and isinstance(calibration.get("fitted"), dict):
        sets["fit"] = params_from_json(calibration, "calibrate --json")
    names = sorted(workloads)
    out: dict[str, Any] = {
        "workloads": {n: {"sm": w.sm, "membw": w.membw} for n, w in workloads.items()},
        "measured": engine.get("rates", {}),
    }
    for policy in ("mps", "naive"):
        for label, params in sets.items():
            tenants = []
            for name in names:
                cap = None
                pct = (
                    next(
                        (
                            {**j.get("env_defaults", {}), **j.get("env", {})}.get(
                                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
                            )
                            for j in policies.get(policy, {}).get("jobs", [])
                            if j["name"] == name
                        ),
                        None,
                    )
                    if policy == "mps"
                    else None
                )
                if pct:
                    cap = float(pct) / 100.0
                tenants.append(Workload(workloads[name].sm, workloads[name].membw, cap))
            rates = shared_rates(params, policy, tenants)
            out.setdefault(policy, {})[label] = {
                n: round(r, 4) for n, r in zip(names, rates, strict=True)
            }
    return out


# ================================================================================ loader
def check_loader(run: Run) -> dict[str, Any]:
    out = run.out / "loader.json"
    argv = [
        PYTHON,
        str(REPO / "bench" / "loader.py"),
        "--consumers",
        "1,2,4",
        "--configs",
        "independent,gpudesk",
        "--device",
        "cpu" if run.fakes else "cuda",
        "--json-out",
        str(out),
        "--no-join",  # the join scenarios are the CPU benchmark's business
        "--timeout",
        "60",  # one hung configuration does not spend the others' time
    ]
    argv += ["--batches", "40", "--size", "256"] if run.fakes else ["--batches", "160"]
    done = run.cmd(argv, run.left(CHECKS["loader"]))
    return {
        "command": tail(done),
        "file": out.name if out.exists() else None,
        "cuda_ipc_handoff": "not built (docs/loader.md): consumers copy from host shared memory",
        "gpu_decode": "not built: decoding runs in the producer's CPU workers",
    }


def run_checks(
    run: Run,
    chosen: list[str],
    steps: dict[str, Callable[[], dict[str, Any]]],
    limits: dict[str, float],
    after: Callable[[], None] | None = None,
) -> None:
    """Each chosen check in order, within the run's budget: a check that raises is recorded
    with its traceback (beside what it had recorded) and the next runs; the results are saved
    after each, `after` runs and the run's folder is removed at the end, whatever happened; a
    one-line summary is printed."""
    try:
        for name in chosen:
            if time.monotonic() > run.deadline - 5:
                run.results["checks"][name] = {"skipped": "the run's budget was spent"}
                continue
            run.say(f"== {name} (limit {limits[name]:.0f} s)")
            began = time.monotonic()
            try:
                result = steps[name]()
            except Exception:
                result = dict(run.results["checks"].get(name) or {})
                result["error"] = traceback.format_exc()[-TAIL:]
            result["check_wall_s"] = round(time.monotonic() - began, 1)
            run.results["checks"][name] = result
            run.save()
            run.say(f"   {name} done in {result['check_wall_s']} s")
    finally:
        if after is not None:
            after()
        run.save()
        shutil.rmtree(run.tmp, ignore_errors=True)
    summary = {
        name: ("error" if "error" in r else "skipped" if "skipped" in r else "ran")
        for name, r in run.results["checks"].items()
    }
    print(json.dumps(summary))


# ================================================================================ main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the results")
    parser.add_argument("--fakes", action="store_true", help="run against tests/fakes, no GPU")
    parser.add_argument("--budget-s", type=float, default=420.0, help="the whole run's limit")
    parser.add_argument("--job-s", type=float, default=10.0, help="each engine job alone, s")
    parser.add_argument("--only", help="comma-separated checks (default: all, in order)")
    parser.add_argument(
        "--policies", default=",".join(POLICIES), help="the engine check's policies, in order"
    )
    args = parser.parse_args()
    policies = tuple(p for p in args.policies.split(",") if p)
    if not set(policies) <= set(POLICIES):
        print(f"--policies: choose from {', '.join(POLICIES)}")
        return 2
    chosen = args.only.split(",") if args.only else list(CHECKS)
    unknown = [c for c in chosen if c not in CHECKS]
    if unknown:
        print(f"unknown check(s): {', '.join(unknown)}; known: {', '.join(CHECKS)}")
        return 2
    if args.fakes:  # this process reads NVML too (the meter): the fakes in its own env first
        reexec_on_fakes()
    args.out.mkdir(parents=True, exist_ok=True)
    run = Run(args.out, args.fakes, args.budget_s)
    steps: dict[str, Callable[[], dict[str, Any]]] = {
        "environment": lambda: check_environment(run),
        "raw_probe": lambda: check_raw_probe(run),
        "nvml": lambda: check_nvml(run),
        "mps_engine": lambda: check_mps_engine(run, args.job_s, policies),
        "calibrate": lambda: check_calibrate(run),
        "loader": lambda: check_loader(run),
        "metrics": lambda: check_metrics(run),
    }
    run_checks(run, chosen, steps, CHECKS)
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
