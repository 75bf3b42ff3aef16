"""Real jobs sharing one GPU: each alone, then in pairs (and a few larger groups), time-sliced and
under MPS, with what NVML's GPM says about each job alone.

    python bench/gpu_pairs.py --out DIR [--device cuda|cpu] [--fakes] [--window 3]
                              [--mechanisms naive,mps] [--jobs a,b,...] [--budget-s 240]

Why: the placement model predicts how much a job slows beside others from the SM activity and
DRAM bandwidth each shows alone. On an H200 two training jobs at 86 % SM activity each ran at
0.89-0.93 of their speed alone under MPS where the model said 0.48 (docs/hardware-validation.md,
section 3), and on an H100 the probes of an unequal pair slowed each other unequally (light 0.82
beside heavy 0.95) where the model gives both one rate (docs/calibration.md). A model that is to be
robust to being wrong needs more real pairs than one: jobs of different shapes (wide and narrow
MLPs, a CNN, a transformer, a memory-bound stream, a bf16 matmul), each pair measured both ways,
and per job alone the GPM metrics that might predict sharing better than SM activity does -- SM
*occupancy* (how full the active SMs are), tensor-pipe and DRAM use.

How: one worker process per job instance, each started once per mechanism, which builds its
job, warms it up (cuDNN autotuning included) and then waits for windows. A window names a
start and an end on the shared monotonic clock; the workers in it step their jobs between the
two and report steps per second over the part after a settle time, synchronising the GPU every
~50 ms of work (not every step, so a job's queue of kernels stays as deep as a training loop's).
Idle workers hold a CUDA context and launch nothing. `naive`: plain CUDA contexts, time-sliced by
the driver; `mps`: the workers are clients of an MPS control daemon of this script's own (in a
temporary folder, quit at the end). A rate is steps/s in the window over steps/s alone in the
same mechanism; `rate_vs_exclusive` divides by the naive phase's alone figure, which is the job
with the GPU to itself. The first job is measured alone again at the end of each phase: its drift
says how far the GPU's clocks moved during the run.

Read-only: nothing here changes MIG mode, clocks, power limits, the compute mode or persistence,
or resets a GPU. `--fakes` runs the plan on the CPU against tests/fakes (NVML through the shim,
the MPS control fake), jobs shrunk to CPU sizes: how this script is checked before it meets a
GPU. Results go into DIR/gpu_pairs.json, rewritten after every window; docs by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import select
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))  # its sibling fake_h200, when loaded by path too
from fake_h200 import reexec_on_fakes  # noqa: E402

PYTHON = sys.executable
SETTLE_S = 0.6  # of each window, not counted: the jobs' first steps and the other's start
SYNC_EVERY_S = 0.05  # of GPU work between synchronisations in a worker
READY_TIMEOUT_S = 180.0

# Each job: its shape on the GPU, and on the CPU (for --fakes: seconds, not minutes).
JOBS = {
    "mlp-wide": "4-layer MLP, 4096 wide, batch 512, fp32 (the H200 pair's job)",
    "mlp-narrow": "3-layer MLP, 512 wide, batch 64, fp32 (launch-bound, light)",
    "resnet18": "torchvision ResNet-18, batch 64, 3x112x112, fp32",
    "transformer": "4-layer transformer encoder, d 512, 8 heads, 32 x 256 tokens, bf16 autocast",
    "membw": "elementwise a = a * 0.999 + b over 2 x 1 GiB fp32 (memory-bound stream)",
    "matmul": "bf16 8192 x 8192 matmuls (compute-bound, fills the SMs)",
}
DEFAULT_GROUPS = [
    ["mlp-wide", "mlp-wide#2"],  # the H200 pair measured through the engine
    ["mlp-narrow", "mlp-narrow#2", "resnet18", "transformer"],  # four tenants
    ["mlp-wide", "resnet18", "transformer"],
]

# GPM metrics read over every window (pynvml's names; ids differ between bindings' versions).
GPM_METRICS = [
    "NVML_GPM_METRIC_GRAPHICS_UTIL",
    "NVML_GPM_METRIC_SM_UTIL",
    "NVML_GPM_METRIC_SM_OCCUPANCY",
    "NVML_GPM_METRIC_INTEGER_UTIL",
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "NVML_GPM_METRIC_HMMA_TENSOR_UTIL",
    "NVML_GPM_METRIC_DRAM_BW_UTIL",
    "NVML_GPM_METRIC_FP32_UTIL",
    "NVML_GPM_METRIC_FP16_UTIL",
    "NVML_GPM_METRIC_PCIE_TX_PER_SEC",
    "NVML_GPM_METRIC_PCIE_RX_PER_SEC",
]


# --- the worker: one job, stepped in windows ---------------------------------------------------
def build_job(name: str, device: str) -> Any:
    """A function doing one training step of `name` (the instance suffix `#N` ignored)."""
    import torch
    from torch import nn

    kind = name.split("#")[0]
    gpu = device.startswith("cuda")
    torch.manual_seed(0)
    if kind in ("mlp-wide", "mlp-narrow"):
        width, layers, batch = (4096, 4, 512) if kind == "mlp-wide" else (512, 3, 64)
        if not gpu:
            width, layers, batch = (256, 4, 64) if kind == "mlp-wide" else (64, 3, 16)
        blocks: list[nn.Module] = []
        for _ in range(layers):
            blocks += [nn.Linear(width, width), nn.ReLU()]
        model = nn.Sequential(*blocks, nn.Linear(width, 10)).to(device)
        x = torch.randn(batch, width, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        return _trainer(model, lambda: (x, y), nn.functional.cross_entropy)
    if kind == "resnet18":
        side, batch = (112, 64) if gpu else (32, 4)
        try:
            import torchvision

            model = torchvision.models.resnet18(num_classes=100).to(device)
        except ImportError:
            if gpu:
                raise
            # The CPU rehearsal without torchvision: a small conv stack in its place.
            model = nn.Sequential(
                nn.Conv2d(3, 16, 3, padding=1),
                nn.ReLU(),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(16, 100),
            ).to(device)
        x = torch.randn(batch, 3, side, side, device=device)
        y = torch.randint(0, 100, (batch,), device=device)
        if gpu:
            torch.backends.cudnn.benchmark = True
        return _trainer(model, lambda: (x, y), nn.functional.cross_entropy)
    if kind == "transformer":
        d, layers, batch, tokens = (512, 4, 32, 256) if gpu else (64, 2, 4, 32)
        layer = nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True)
        model = nn.Sequential(nn.TransformerEncoder(layer, layers), nn.Linear(d, 10)).to(device)
        x = torch.randn(batch, tokens, d, device=device)
        y = torch.randint(0, 10, (batch * tokens,), device=device)

        def loss(out: Any, target: Any) -> Any:
            return nn.functional.cross_entropy(out.reshape(-1, 10).float(), target)

        return _trainer(model, lambda: (x, y), loss, autocast=gpu)
    if kind == "membw":
        count = (1 << 28) if gpu else (1 << 20)  # 2^28 fp32 = 1 GiB
        a = torch.ones(count, device=device)
        b = torch.full((count,), 1e-3, device=device)

        def stream() -> None:
            a.mul_(0.999).add_(b)

        return stream
    if kind == "matmul":
        side = 8192 if gpu else 256
        dtype = torch.bfloat16 if gpu else torch.float32
        m = torch.randn(side, side, device=device, dtype=dtype)
        n = torch.randn(side, side, device=device, dtype=dtype)
        out = torch.empty(side, side, device=device, dtype=dtype)

        def product() -> None:
            torch.matmul(m, n, out=out)

        return product
    raise ValueError(f"unknown job {name!r}; known: {', '.join(JOBS)}")


def _trainer(model: Any, batch: Any, loss_fn: Any, autocast: bool = False) -> Any:
    import torch

    from gpudesk.optimizers import SGD  # torch.optim.SGD's steps, without torch._dynamo's import

    optimizer = SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        x, y = batch()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            out = model(x)
        loss = loss_fn(out, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def worker(name: str, device: str, warmup_s: float) -> int:
    """Build, warm up, say ready; then run each window it is told, until `quit`."""
    import torch

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def say(message: dict[str, Any]) -> None:
        print(json.dumps(message), flush=True)

    try:
        began = time.monotonic()
        step = build_job(name, device)
        # Warm up, then size the steps between synchronisations.
        steps, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < warmup_s:
            step()
            steps += 1
            if steps % 5 == 0:
                sync()
        sync()
        per_step = (time.monotonic() - t0) / max(steps, 1)
        every = max(1, round(SYNC_EVERY_S / max(per_step, 1e-6)))
        memory = torch.cuda.memory_allocated() if device.startswith("cuda") else 0
        say(
            {
                "ready": name,
                "pid": os.getpid(),
                "startup_s": round(time.monotonic() - began, 2),
                "warm_step_ms": round(per_step * 1e3, 3),
                "sync_every": every,
                "torch_allocated_mib": round(memory / 2**20, 1),
                "mps_pipe": os.environ.get("CUDA_MPS_PIPE_DIRECTORY"),
                "thread_pct": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
            }
        )
        for line in sys.stdin:
            order = json.loads(line)
            if order.get("cmd") == "quit":
                return 0
            start, end = float(order["start"]), float(order["end"])
            while time.monotonic() < start:
                time.sleep(min(0.005, max(0.0, start - time.monotonic())))
            counted_from = start + SETTLE_S
            # (time, steps done) at each synchronisation inside the counted part of the window;
            # a batch of steps ends early at the window's end or after SYNC_EVERY_S of wall time,
            # so a job slowed by its neighbour still reports more than one point.
            points: list[tuple[float, int]] = []
            total = 0
            while True:
                batch_began = time.monotonic()
                for _ in range(every):
                    step()
                    total += 1
                    now = time.monotonic()
                    if now >= end or now - batch_began >= SYNC_EVERY_S:
                        break
                sync()
                now = time.monotonic()
                if now >= counted_from:
                    points.append((now, total))
                if now >= end:
                    break
            if len(points) < 2:
                say({"window": order["id"], "name": name, "error": "no steps in the window"})
                continue
            (t0, n0), (t1, n1) = points[0], points[-1]
            say(
                {
                    "window": order["id"],
                    "name": name,
                    "steps_per_s": (n1 - n0) / (t1 - t0),
                    "counted_s": round(t1 - t0, 3),
                    "steps": n1 - n0,
                }
            )
    except Exception:
        say({"fatal": name, "error": traceback.format_exc()[-3000:]})
        return 1
    return 0


# --- the controller -------------------------------------------------------------------------
class Gpm:
    """GPM metrics over a window (None and the reason where the GPU or binding has none)."""

    def __init__(self) -> None:
        self.nv: Any = None
        self.handle: Any = None
        self.samples: tuple[Any, Any] | None = None
        self.reason = ""
        self.ids: dict[str, int] = {}
        try:
            import pynvml as nv

            nv.nvmlInit()
            self.nv = nv
            self.handle = nv.nvmlDeviceGetHandleByIndex(0)
            if not nv.nvmlGpmQueryDeviceSupport(self.handle).isSupportedDevice:
                self.reason = "GPM not supported on this GPU"
                return
            self.samples = (nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc())
            self.ids = {m: getattr(nv, m) for m in GPM_METRICS if hasattr(nv, m)}
        except Exception as exc:
            self.reason = f"{type(exc).__name__}: {exc}"

    def describe(self) -> dict[str, Any]:
        if self.nv is None:
            return {"nvml": None, "reason": self.reason}
        nv = self.nv
        seen: dict[str, Any] = {"gpm": bool(self.samples), "reason": self.reason}
        for key, call in (
            ("name", nv.nvmlDeviceGetName),
            ("uuid", nv.nvmlDeviceGetUUID),
            ("driver", lambda _h: nv.nvmlSystemGetDriverVersion()),
            ("sm_clock_mhz", lambda h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            ("compute_mode", nv.nvmlDeviceGetComputeMode),
            ("mig_mode", lambda h: nv.nvmlDeviceGetMigMode(h)[0]),
        ):
            try:
                value = call(self.handle)
                seen[key] = value.decode() if isinstance(value, bytes) else value
            except Exception as exc:
                seen[key] = f"{type(exc).__name__}: {exc}"
        return seen

    def begin(self) -> None:
        if self.samples:
            try:
                self.nv.nvmlGpmSampleGet(self.handle, self.samples[0])
            except Exception as exc:
                self.reason = f"GPM sample: {type(exc).__name__}: {exc}"
                self.samples = None

    def end(self) -> dict[str, Any]:
        if not self.samples:
            return {"gpm": None, "reason": self.reason}
        nv = self.nv
        values: dict[str, Any] = {}
        try:
            nv.nvmlGpmSampleGet(self.handle, self.samples[1])
            names = list(self.ids)
            request = nv.c_nvmlGpmMetricsGet_t()
            request.version = nv.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(names)
            request.sample1 = self.samples[0]
            request.sample2 = self.samples[1]
            for i, name in enumerate(names):
                request.metrics[i].metricId = self.ids[name]
            result = nv.nvmlGpmMetricsGet(request)
            for i, name in enumerate(names):
                metric = result.metrics[i]
                short = name.removeprefix("NVML_GPM_METRIC_").lower()
                if metric.nvmlReturn == nv.NVML_SUCCESS:
                    values[short] = round(float(metric.value), 3)
                else:
                    values[short] = f"nvmlReturn {metric.nvmlReturn}"
        except Exception as exc:
            values["error"] = f"{type(exc).__name__}: {exc}"
        try:
            util = nv.nvmlDeviceGetUtilizationRates(self.handle)
            values["utilization_gpu_pct"] = util.gpu
        except Exception as exc:
            values["utilization_gpu_pct"] = f"{type(exc).__name__}: {exc}"
        return values


class Worker:
    def __init__(
        self, name: str, device: str, warmup_s: float, env: dict[str, str], log: Path
    ) -> None:
        self.name = name
        self.log = log.open("a")
        self.proc = subprocess.Popen(
            [PYTHON, __file__, "--worker", name, "--device", device, "--warmup-s", str(warmup_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
        )
        self.ready: dict[str, Any] | None = None

    def read(self, deadline: float) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                line = self.proc.stdout.readline()
                if not line:
                    return {"fatal": self.name, "error": f"exited {self.proc.poll()}"}
                try:
                    return json.loads(line)
                except json.JSONDecodeError:
                    continue  # a library's own print
        return None

    def send(self, order: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(order) + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.send({"cmd": "quit"})
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class Plan:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.out
        self.deadline = time.monotonic() + args.budget_s
        self.results: dict[str, Any] = {
            "script": "bench/gpu_pairs.py",
            "argv": sys.argv[1:],
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "host": platform.node(),
            "device": args.device,
            "fakes": args.fakes,
            "window_s": args.window,
            "thread_pct": args.thread_pct,
            "settle_s": SETTLE_S,
            "jobs": {name: JOBS[name] for name in args.jobs},
            "phases": {},
        }

    def save(self) -> None:
        tmp = self.out / "gpu_pairs.json.tmp"
        tmp.write_text(json.dumps(self.results, indent=1))
        tmp.replace(self.out / "gpu_pairs.json")

    def say(self, text: str) -> None:
        print(text, flush=True)


def parse_groups(spec: str) -> list[list[str]]:
    """`--groups`: groups split by `;`, members by `+`, `JOB*N` for N copies of JOB.

    >>> parse_groups("mlp-narrow*3;resnet18+mlp-wide*2")
    [['mlp-narrow', 'mlp-narrow#2', 'mlp-narrow#3'], ['resnet18', 'mlp-wide', 'mlp-wide#2']]
    """
    groups: list[list[str]] = []
    for text in filter(None, (g.strip() for g in spec.split(";"))):
        group: list[str] = []
        for member in filter(None, (m.strip() for m in text.split("+"))):
            job, _, count = member.partition("*")
            if job not in JOBS or (count and not (count.isdigit() and 1 <= int(count) <= 32)):
                raise ValueError(f"{member!r}: a known job, or JOB*N with N 1-32")
            taken = sum(1 for n in group if n.split("#")[0] == job)
            for index in range(taken, taken + int(count or 1)):
                group.append(job if index == 0 else f"{job}#{index + 1}")
        if len(group) < 2:
            raise ValueError(f"{text!r}: a group has two members or more")
        groups.append(group)
    return groups


def groups_for(jobs: list[str], chosen: list[list[str]] | None = None) -> list[list[str]]:
    """Every pair of distinct jobs, then the larger groups: `chosen` (--groups, which replaces
    the pairs too), else the default ones whose jobs are all chosen."""
    if chosen is not None:
        return chosen
    pairs = [list(p) for p in itertools.combinations(jobs, 2)]
    extra = [g for g in DEFAULT_GROUPS if all(n.split("#")[0] in jobs for n in g)]
    return pairs + extra


def run_phase(plan: Plan, mechanism: str, env: dict[str, str], gpm: Gpm) -> dict[str, Any]:
    args = plan.args
    groups = groups_for(args.jobs, args.groups)
    instances = sorted({n for g in groups for n in g} | set(args.jobs))
    alone: dict[str, float] = {}  # steps/s of each job alone, in this mechanism
    phase: dict[str, Any] = {"mechanism": mechanism, "workers": {}, "windows": [], "alone": alone}
    plan.results["phases"][mechanism] = phase
    log = plan.out / f"workers-{mechanism}.log"

    def worker_env(name: str) -> dict[str, str]:
        pct = args.thread_pct.get(name.split("#")[0]) if mechanism == "mps" else None
        return {**env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(pct)} if pct else env

    phase["thread_pct"] = dict(args.thread_pct) if mechanism == "mps" else {}
    workers = {n: Worker(n, args.device, args.warmup_s, worker_env(n), log) for n in instances}
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        for name, w in workers.items():
            message = w.read(deadline)
            if not message or "ready" not in message:
                phase["workers"][name] = message or {"error": "not ready in time"}
            else:
                w.ready = message
                phase["workers"][name] = message
        plan.save()
        alive = {n for n, w in workers.items() if w.ready}
        windows = [[n] for n in args.jobs] + groups + [[args.jobs[0]]]
        for number, group in enumerate(windows):
            if time.monotonic() + args.window + 5 > plan.deadline:
                phase["cut_short"] = f"budget spent before window {number}"
                break
            if not set(group) <= alive:
                phase["windows"].append({"group": group, "skipped": "a worker is not ready"})
                continue
            start = time.monotonic() + 0.3
            end = start + args.window
            for name in group:
                workers[name].send({"id": number, "start": start, "end": end})
            # GPM over the counted part of the window.
            while time.monotonic() < start + SETTLE_S:
                time.sleep(0.01)
            gpm.begin()
            while time.monotonic() < end:
                time.sleep(0.01)
            metrics = gpm.end()
            reports: dict[str, Any] = {}
            for name in group:
                message = workers[name].read(time.monotonic() + args.window + 30)
                reports[name] = message or {"error": "no report"}
                if not message or "fatal" in message:
                    alive.discard(name)
            entry: dict[str, Any] = {"group": group, "gpm": metrics, "jobs": {}}
            for name in group:
                report = reports[name]
                rate = report.get("steps_per_s")
                job: dict[str, Any] = {
                    "steps_per_s": rate,
                    **{k: v for k, v in report.items() if k in ("error", "counted_s", "steps")},
                }
                base = alone.get(name.split("#")[0])
                if len(group) > 1 and rate and base:
                    job["rate"] = round(rate / base, 4)
                    exclusive = plan.results["phases"].get("naive", {}).get("alone", {})
                    if exclusive.get(name.split("#")[0]):
                        job["rate_vs_exclusive"] = round(rate / exclusive[name.split("#")[0]], 4)
                entry["jobs"][name] = job
            if len(group) == 1 and number < len(args.jobs):
                if reports[group[0]].get("steps_per_s"):
                    alone[group[0]] = reports[group[0]]["steps_per_s"]
            elif len(group) == 1:  # the drift check: the first job alone again
                rate = reports[group[0]].get("steps_per_s")
                if rate and alone.get(group[0]):
                    entry["drift"] = round(rate / alone[group[0]], 4)
            phase["windows"].append(entry)
            plan.save()
            shown = ", ".join(
                f"{n} {j.get('rate', j.get('steps_per_s'))}" for n, j in entry["jobs"].items()
            )
            plan.say(f"   {mechanism} {'+'.join(group)}: {shown}")
    finally:
        for w in workers.values():
            w.stop()
    return phase


@contextlib.contextmanager
def mps_daemon(root: Path, uuid: str) -> Any:
    sys.path.insert(0, str(REPO))
    from gpudesk.hw.mps import MpsError, MpsManager

    manager = MpsManager(root / "home")
    manager.ensure(uuid)
    try:
        yield manager.client_env(uuid)
    finally:
        with contextlib.suppress(MpsError):
            manager.stop(uuid, force=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="folder for the results")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--fakes", action="store_true", help="the CPU and tests/fakes, no GPU")
    parser.add_argument("--window", type=float, default=3.0, help="seconds per window")
    parser.add_argument("--mechanisms", default="naive,mps")
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--budget-s", type=float, default=240.0)
    parser.add_argument(
        "--groups",
        help="the groups to run instead of every pair and the default groups: `;` between "
        "groups, `+` between members, JOB*N for N copies (e.g. 'resnet18*4;mlp-wide+resnet18')",
    )
    parser.add_argument(
        "--warmup-s", type=float, default=1.5, help="each worker, before its windows"
    )
    parser.add_argument(
        "--thread-pct",
        action="append",
        default=[],
        metavar="JOB=PCT",
        help="under MPS, cap JOB's clients at PCT %% of the GPU's threads "
        "(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE); repeatable",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.device, args.warmup_s)
    if args.out is None:
        parser.error("--out is required")
    args.jobs = [j for j in args.jobs.split(",") if j]
    unknown = [j for j in args.jobs if j not in JOBS]
    if unknown:
        parser.error(f"unknown job(s) {', '.join(unknown)}; known: {', '.join(JOBS)}")
    try:
        args.groups = parse_groups(args.groups) if args.groups else None
    except ValueError as error:
        parser.error(f"--groups: {error}")
    if args.groups:
        missing = sorted({n.split("#")[0] for g in args.groups for n in g} - set(args.jobs))
        if missing:
            parser.error(f"--groups: {', '.join(missing)} not in --jobs (each is timed alone)")
    caps: dict[str, int] = {}
    for item in args.thread_pct:
        job, _, pct = item.partition("=")
        if job not in JOBS or not pct.isdigit() or not 1 <= int(pct) <= 100:
            parser.error(f"--thread-pct {item!r}: JOB=PCT, a known job and 1-100")
        caps[job] = int(pct)
    args.thread_pct = caps
    mechanisms = [m for m in args.mechanisms.split(",") if m]
    if not set(mechanisms) <= {"naive", "mps"}:
        parser.error("--mechanisms: naive, mps")
    if args.fakes:
        args.device = "cpu"
        reexec_on_fakes()
    args.out.mkdir(parents=True, exist_ok=True)
    plan = Plan(args)
    gpm = Gpm()
    plan.results["gpu"] = gpm.describe()
    uuid = str(plan.results["gpu"].get("uuid") or "")
    plan.save()
    with tempfile.TemporaryDirectory(prefix="gpu-pairs-") as tmp:
        root = Path(tmp)
        base = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
        (root / "no-mps").mkdir()
        base["CUDA_MPS_PIPE_DIRECTORY"] = str(root / "no-mps")  # join no one's MPS daemon
        base["PYTHONUNBUFFERED"] = "1"
        for mechanism in mechanisms:
            plan.say(f"== {mechanism}")
            began = time.monotonic()
            try:
                if mechanism == "mps":
                    with mps_daemon(root, uuid) as mps_env:
                        phase = run_phase(plan, mechanism, {**base, **mps_env}, gpm)
                else:
                    phase = run_phase(plan, mechanism, base, gpm)
                phase["wall_s"] = round(time.monotonic() - began, 1)
            except Exception:
                plan.results["phases"].setdefault(mechanism, {})["error"] = traceback.format_exc()[
                    -3000:
                ]
            plan.save()
    plan.say(f"wrote {plan.out / 'gpu_pairs.json'}")
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
