"""Issue 39 on a real GPU: `auto` against the forced modes on a real queue, the memory rules and
preemption, through the real engine (NVML backend, MPS daemons of its own).

    python bench/gpu_day.py --out DIR [--fakes] [--budget-s 330] [--only day,memory,preempt]

- `day`: one mixed queue of real torch jobs (the digits MLP in three sizes: heavy, medium and
  light, as `gpudesk.workloads.digits` with its `progress DONE/TOTAL` lines), submitted at once
  with `gpudesk run --apply-station` to an engine of its own under each of `--policies` in turn
  (default exclusive, mps, auto). Per policy: makespan (first submit to last end), mean job
  completion time (end - submit), the GPU's energy over the run (NVML's counter), and per job
  its placement (mode, reason) and throughput. During the `auto` run, every running job's
  remaining-time estimate (`gpudesk queue --json`, item 1 of the issue) is sampled, to be set
  against when the job really ended, and each waiting job's reason (`gpudesk show`'s
  `waiting`) kept once (on a policy's first run; a repeat runs unsampled); NVML's SM activity,
  DRAM bandwidth and kernel-active time in 1-s windows over each run, to set the hints
  against. Each size is timed alone first (a short run, its later epochs' steady rate) so a
  heavy job *trains* about `--job-s` seconds (start-up and per-epoch validation come on top);
  `bench/gpu_day_sim.py` turns the exclusive run into a trace and sets the simulator's
  prediction beside the GPU's.
- `memory`: (a) a job whose hint (`--mem`) is above the whole GPU's memory runs instead of
  failing on its hint; (b) a job that allocates far more than its hint, started beside a job
  that really holds most of the GPU, runs out of memory (under MPS: at its
  CUDA_MPS_PINNED_DEVICE_MEM_LIMIT), is seen as out of memory and is rerun once there is room,
  and succeeds. The real error text each attempt printed is kept.
- `preempt`: a long low-priority preemptible job (`--checkpoint`) fills the GPU, a
  high-priority one arrives; the low one gets SIGUSR1, checkpoints, is requeued, resumes, and
  its final weights, loss and accuracy are set beside an uninterrupted run of the same job.

Read-only for the card: nothing here changes MIG mode, clocks, power limits, the compute mode
or persistence, or resets the GPU; the MPS daemons are the engines' own, in temporary folders.
`--fakes` runs the same plan on the CPU against tests/fakes (NVML shim, MPS control fake), the
jobs on the CPU: how the script is checked before it meets a GPU (there the out-of-memory job
prints CUDA's out-of-memory error itself, since a CPU process has no MPS limit to run into).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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
sys.path.insert(0, str(REPO / "bench"))
from fake_h200 import reexec_on_fakes  # noqa: E402
from hardware_truth import (  # noqa: E402
    DIGITS_TRAIN_SAMPLES,
    PYTHON,
    TAIL,
    Meter,
    Run,
    gpudesk,
    parse_json,
    run_checks,
    tail,
)

CHECKS: dict[str, float] = {"day": 230, "memory": 90, "preempt": 120}  # time limits, s
POLICIES = ("exclusive", "mps", "auto")

# The day's jobs: (count, digits shape on the GPU, on the CPU, SM hint %, memory hint GB, share
# of --job-s). The hints are what a user would write knowing the shapes: the wide MLP keeps
# ~90 % of the SMs active alone on an H200 (docs/hardware-validation.md, gpu_pairs), the narrow
# one a few % (it is bound by Python between its small kernels).
KINDS: dict[str, tuple[int, list[str], list[str], int, int, float]] = {
    "heavy": (2, ["4096", "4", "512"], ["256", "3", "128"], 90, 4, 1.0),
    "medium": (2, ["1536", "3", "256"], ["128", "2", "64"], 40, 2, 0.75),
    "light": (4, ["256", "2", "64"], ["64", "2", "32"], 10, 1, 0.5),
}

# `--day probes`: the calibration probe as jobs of fixed work (`--steps`), each a matmul or copy
# burst and a host gap, so its share of the GPU is known and held whatever shares the GPU (the
# digits day's jobs were mostly start-up and validation; these kernels fill the SMs while they
# run, the kind of neighbour that starves others under MPS, docs/hardware-validation.md of
# 2026-11-30). (count, probe intensity, memory hint GB, share of --job-s.)
PROBE_KINDS: dict[str, tuple[int, str, int, float]] = {
    "heavy": (2, "heavy", 1, 1.0),
    "medium": (2, "medium", 1, 0.75),
    "membw": (1, "membw", 4, 0.75),
    "light": (3, "light", 1, 0.5),
}
PROBE_TRIAL_S = 3.0  # each intensity alone: calibrates its burst and gap, and its rate
PROBE_WARMUP_S = 0.5


def digits(shape: list[str], epochs: int, seed: int, device: str, *extra: str) -> list[str]:
    hidden, layers, batch = shape
    return [
        PYTHON,
        "-m",
        "gpudesk.workloads.digits",
        *("--hidden", hidden, "--layers", layers, "--batch-size", batch),
        *("--epochs", str(epochs), "--seed", str(seed), "--device", device, *extra),
    ]


def result_line(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        if line.startswith("result "):
            with contextlib.suppress(ValueError):
                return json.loads(line[len("result ") :])  # type: ignore[no-any-return]
    return None


def gpu_energy_mj() -> int | None:
    """NVML's energy counter of GPU 0 (mJ since the driver loaded), or None."""
    try:
        import pynvml as nv

        nv.nvmlInit()
        try:
            return int(nv.nvmlDeviceGetTotalEnergyConsumption(nv.nvmlDeviceGetHandleByIndex(0)))
        finally:
            nv.nvmlShutdown()
    except Exception:
        return None


class Engine:
    """An engine of its own (GPUDESK_HOME in the run's folder), started and stopped by us."""

    def __init__(self, run: Run, home: Path, policy: str) -> None:
        self.run = run
        self.home = home
        self.env = dict(run.env, GPUDESK_HOME=str(home))
        self.policy = policy

    @classmethod
    def fresh(cls, run: Run, name: str, policy: str) -> Engine:
        """One with a home of its own, new under the run's folder."""
        home = run.tmp / f"home-{name}"
        home.mkdir()
        return cls(run, home, policy)

    def __enter__(self) -> Engine:
        started = self.cli("engine", "start", "--backend", "nvml", "--policy", self.policy)
        if started["rc"] != 0:
            raise RuntimeError(f"engine start failed: {started.get('stderr_tail')}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.cli("engine", "stop", timeout=40)

    def cli(self, *args: str, timeout: float = 30) -> dict[str, Any]:
        return self.run.cmd(gpudesk(*args), timeout, env=self.env)

    def submit(self, *args: str) -> int:
        done = self.cli("submit", "--json", *args)
        answer = parse_json(done.get("stdout", ""))
        if done["rc"] != 0 or not isinstance(answer, dict) or "id" not in answer:
            raise RuntimeError(f"submit failed: {done.get('stdout')} {done.get('stderr_tail')}")
        return int(answer["id"])

    def show(self, job_id: int) -> dict[str, Any]:
        shown = parse_json(self.cli("show", str(job_id), "--json").get("stdout", ""))
        return shown if isinstance(shown, dict) else {}

    def wait_done(self, ids: list[int], limit_s: float) -> bool:
        until = time.monotonic() + self.run.left(limit_s)
        while time.monotonic() < until:
            states = [self.show(i).get("job", {}).get("state") for i in ids]
            if all(s in ("succeeded", "failed", "cancelled") for s in states):
                return True
            time.sleep(1.0)
        return False


def attempts_of(shown: dict[str, Any]) -> list[dict[str, Any]]:
    kept = []
    for attempt in shown.get("attempts") or []:
        placement = attempt.get("placement") or {}
        log_tail = ""
        with contextlib.suppress(OSError, TypeError):
            log_tail = Path(attempt.get("log") or "").read_text(errors="replace")[-1500:]
        kept.append(
            {
                "state": attempt.get("state"),
                "exit_code": attempt.get("exit_code"),
                "reason": attempt.get("reason"),
                "started_at": attempt.get("started_at"),
                "ended_at": attempt.get("ended_at"),
                "mode": placement.get("mode"),
                "slot": placement.get("slot"),
                "placement_reason": placement.get("reason"),
                "mps_memory_limit_mib": placement.get("mps_memory_limit_mib"),
                "alternatives": placement.get("alternatives"),
                "env": placement.get("env"),
                "log_tail": log_tail,
            }
        )
    return kept


def job_summary(shown: dict[str, Any]) -> dict[str, Any]:
    job = shown.get("job") or {}
    return {
        "id": job.get("id"),
        "name": job.get("name"),
        "state": job.get("state"),
        "submitted_at": job.get("submitted_at"),
        "started_at": job.get("started_at"),
        "ended_at": job.get("ended_at"),
        "reason": job.get("reason"),
        "preemptions": job.get("preemptions"),
        "attempts": attempts_of(shown),
        "events": [e.get("message") for e in shown.get("events") or []][-15:],
    }


# ================================================================================ day
def size_kinds(run: Run, device: str, job_s: float) -> dict[str, Any]:
    """Epochs per kind for its share of job_s, from a short run of each alone."""
    sizing: dict[str, Any] = {}
    for kind, (_, gpu_shape, cpu_shape, _, _, share) in KINDS.items():
        shape = gpu_shape if device == "cuda" else cpu_shape
        trial = 30 if device == "cuda" else 3
        done = run.cmd(digits(shape, trial, 0, device), 90)
        result = result_line(done.get("stdout", ""))
        if not result or not result.get("samples_per_s"):
            sizing[kind] = {"trial": tail(done), "epochs": None}
            continue
        # the steady rate: the later half of the trial's epochs (its first ones pay cuBLAS's
        # and the allocator's warm-up; sized on the whole trial, the first H200 day's jobs
        # trained a third of what was meant)
        steady = steady_samples_per_s(done.get("stdout", "")) or float(result["samples_per_s"])
        per_epoch = DIGITS_TRAIN_SAMPLES / steady
        sizing[kind] = {
            "trial_epochs": trial,
            "trial_wall_s": result.get("wall_s"),
            "trial_samples_per_s": result["samples_per_s"],
            "steady_samples_per_s": round(steady, 1),
            "epochs": max(3, min(20000, round(job_s * share / per_epoch))),
        }
    return sizing


def steady_samples_per_s(text: str) -> float | None:
    """The median samples/s of the later half of a digits run's `epoch E/N ... samples/s X`
    lines, or None where it printed too few."""
    rates = []
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["epoch"] and "samples/s" in words:
            with contextlib.suppress(ValueError, IndexError):
                rates.append(float(words[words.index("samples/s") + 1]))
    later = rates[len(rates) // 2 :]
    return statistics.median(later) if len(later) >= 3 else None


def day_profile(policy: str, device: str, sizing: dict[str, Any]) -> str:
    """The day's profile under `policy`: `sizing` from `size_kinds` (the digits day) or
    `size_probes` (the probes day: it carries its jobs)."""
    lines = [
        f'name = "day-{policy}"',
        "[station]",
        'backend = "nvml"',
        f'policy = "{policy}"',
        "[defaults]",
        "max_attempts = 1",
    ]
    for name, command, mem, sm in day_jobs(device, sizing):
        lines += [
            "[[jobs]]",
            f'name = "{name}"',
            "command = [" + ", ".join(json.dumps(c) for c in command) + "]",
            f"gpus = 1\nmemory_gb = {mem}\nsm_pct = {sm}",
        ]
    return "\n".join(lines) + "\n"


def day_jobs(device: str, sizing: dict[str, Any]) -> list[tuple[str, list[str], float, float]]:
    """(name, command, memory hint GB, SM hint %) of each of the day's jobs."""
    if "probe_jobs" in sizing:
        return [
            (j["name"], j["command"], j["memory_gb"], j["sm_pct"]) for j in sizing["probe_jobs"]
        ]
    jobs = []
    seed = 0
    for kind, (count, gpu_shape, cpu_shape, sm, mem, _) in KINDS.items():
        for index in range(count):
            seed += 1
            shape = gpu_shape if device == "cuda" else cpu_shape
            command = digits(shape, sizing[kind]["epochs"], seed, device)
            jobs.append((f"{kind}-{index}", command, float(mem), float(sm)))
    return jobs


def probe_command(device: str, intensity: str, *extra: str) -> list[str]:
    probe = [PYTHON, "-m", "gpudesk.workloads.probe", "--intensity", intensity]
    return [*probe, "--device", device, "--warmup", str(PROBE_WARMUP_S), *extra]


def size_probes(run: Run, device: str, job_s: float) -> dict[str, Any]:
    """Each probe intensity alone for PROBE_TRIAL_S (its burst and gap calibrated, its steps/s
    and its start-up measured); then the day's jobs: steps for its share of `job_s`, the trial's
    burst and gap (the same work whoever shares the GPU), and an SM hint that is its average
    over its run alone (kernels' share x the share of the run past start-up), as
    docs/interference.md asks of a user."""
    kinds: dict[str, Any] = {}
    for kind, (_, intensity, _, share) in PROBE_KINDS.items():
        began = time.monotonic()
        done = run.cmd(probe_command(device, intensity, "--seconds", str(PROBE_TRIAL_S)), 90)
        wall_s = time.monotonic() - began
        summary = parse_json(done.get("stdout") or "")
        if not isinstance(summary, dict) or not summary.get("steps_per_s"):
            kinds[kind] = {"trial": tail(done), "steps": None}
            continue
        rate = float(summary["steps_per_s"])
        steps = max(5, round(job_s * share * rate))
        start_up_s = max(0.0, wall_s - float(summary["seconds"]))
        run_s = steps / rate + start_up_s
        kinds[kind] = {
            "intensity": intensity,
            "trial_wall_s": round(wall_s, 2),
            "steps_per_s": round(rate, 2),
            "burst": int(summary["burst"]),
            "gap_ms": float(summary["gap_ms"]),
            "busy_share": float(summary["busy_share"]),
            "start_up_s": round(start_up_s, 2),
            "steps": steps,
            "alone_s": round(run_s, 2),
            "sm_pct": round(100.0 * float(summary["busy_share"]) * (steps / rate) / run_s, 1),
        }
    sizing: dict[str, Any] = {"kinds": kinds}
    if any(not k.get("steps") for k in kinds.values()):
        return sizing
    jobs = []
    for kind, (count, intensity, mem, _) in PROBE_KINDS.items():
        k = kinds[kind]
        for index in range(count):
            extra = ("--steps", str(k["steps"]), "--burst", str(k["burst"]))
            command = probe_command(device, intensity, *extra, "--gap-ms", str(k["gap_ms"]))
            jobs.append(
                {
                    "name": f"{kind}-{index}",
                    "kind": kind,
                    "command": command,
                    "memory_gb": float(mem),
                    "sm_pct": k["sm_pct"],
                    "alone_s": k["alone_s"],
                }
            )
    sizing["probe_jobs"] = jobs
    return sizing


def sample_queue(
    env: dict[str, str], stop: threading.Event, into: list[Any], waits: dict[int, Any]
) -> None:
    """Every ~2 s, each running job's remaining-time estimate as `gpudesk queue --json` gives
    it; and once for each job seen waiting, why, as `gpudesk show` says it (its `waiting`)."""

    def cli(*args: str) -> Any:
        done = subprocess.run(gpudesk(*args), env=env, capture_output=True, text=True, timeout=20)
        return parse_json(done.stdout)

    while not stop.is_set():
        began = time.time()
        with contextlib.suppress(Exception):
            listed = cli("queue", "--json")
            jobs = listed.get("jobs", listed) if isinstance(listed, dict) else listed
            for job in jobs or []:
                if job.get("state") == "running" and job.get("remaining"):
                    into.append({"t": round(began, 2), "id": job["id"], **job["remaining"]})
                elif job.get("state") == "queued" and job["id"] not in waits:
                    shown = cli("show", str(job["id"]), "--json") or {}
                    waits[job["id"]] = {
                        "t": round(began, 2),
                        "name": job.get("name"),
                        "code": job.get("wait_reason"),
                        "waiting": shown.get("waiting"),
                    }
        stop.wait(max(0.2, 2.0 - (time.time() - began)))


def day_policy(
    run: Run,
    policy: str,
    device: str,
    sizing: dict[str, Any],
    sample: bool,
    meter: Meter,
    shared_home: Path | None = None,
) -> dict[str, Any]:
    """One run of the day under `policy`; with `sample`, the queue sampled (`sample_queue`);
    with `shared_home`, in that engine home (what the runs before it taught the engine kept:
    run times, rates alone, the learned model), else in a new one."""
    if shared_home is None:
        home = Path(tempfile.mkdtemp(prefix=f"home-day-{policy}-", dir=run.tmp))
        profile = home.with_suffix(".toml")
    else:
        home = shared_home
        home.mkdir(exist_ok=True)
        handle, name = tempfile.mkstemp(prefix=f"day-{policy}-", suffix=".toml", dir=run.tmp)
        os.close(handle)
        profile = Path(name)
    profile.write_text(day_profile(policy, device, sizing))
    env = dict(run.env, GPUDESK_HOME=str(home))
    remaining: list[Any] = []
    waits: dict[int, Any] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=sample_queue, args=(env, stop, remaining, waits), daemon=True)
    energy0 = gpu_energy_mj()
    began = time.time()
    if sample:
        sampler.start()
    try:
        done = run.cmd(
            gpudesk("run", str(profile), "--apply-station", "--json"),
            run.left(CHECKS["day"]),
            env=env,
        )
    finally:
        stop.set()
    ended = time.time()
    energy1 = gpu_energy_mj()
    report = parse_json(done.get("stdout", "")) or {}
    engine = Engine(run, home, policy)  # the run's own, which `gpudesk run` started
    jobs = []
    for listed in report.get("jobs", []):
        summary = job_summary(engine.show(int(listed["id"])))
        summary["samples_per_s"] = (listed.get("metrics") or {}).get("samples_per_s")
        summary["engine_gpu_j"] = (listed.get("usage") or {}).get("gpu_j")
        for attempt in summary["attempts"]:
            attempt.pop("log_tail", None)
        jobs.append(summary)
    model = parse_json(engine.cli("model", "show", "--json").get("stdout", ""))
    engine.cli("engine", "stop", timeout=40)
    ends = [j["ended_at"] for j in jobs if j.get("ended_at")]
    subs = [j["submitted_at"] for j in jobs if j.get("submitted_at")]
    ok = len(ends) == len(jobs) and all(j["state"] == "succeeded" for j in jobs) and jobs
    return {
        "profile": profile.read_text(),
        "rc": done.get("rc"),
        "stderr_tail": done.get("stderr_tail"),
        "wall_s": round(ended - began, 2),
        "all_succeeded": bool(ok),
        "makespan_s": round(max(ends) - min(subs), 2) if ok else None,
        "mean_jct_s": round(statistics.mean(j["ended_at"] - j["submitted_at"] for j in jobs), 2)
        if ok
        else None,
        "gpu_energy_j": None
        if energy0 is None or energy1 is None
        else round((energy1 - energy0) / 1000.0, 1),
        "modes": {j["name"]: [a["mode"] for a in j["attempts"]] for j in jobs},
        "jobs": jobs,
        "model": model,  # what the engine's model was at the run's end (`model show`)
        "remaining_samples": remaining,
        "waiting": list(waits.values()),
        # the GPU over the run (NVML, 1-s windows): medians over all windows and over those
        # with kernels running, to set the jobs' hints against
        "gpu": meter.between(began, ended),
    }


def check_day(
    run: Run, job_s: float, policies: tuple[str, ...], day: str, shared_home: bool = False
) -> dict[str, Any]:
    device = "cpu" if run.fakes else "cuda"
    if day == "probes":
        sizing = size_probes(run, device, job_s)
        sized = "probe_jobs" in sizing
    else:
        sizing = size_kinds(run, device, job_s)
        sized = all(s.get("epochs") for s in sizing.values())
    result: dict[str, Any] = {
        "device": device,
        "day": day,
        "shared_home": shared_home,
        "observe_min_s": run.env.get("GPUDESK_OBSERVE_MIN_S"),
        "sizing": sizing,
        "policies": {},
    }
    run.results["checks"]["day"] = result
    if not sized:
        result["error"] = "a sizing run did not finish"
        return result
    with Meter(run.env) as meter:
        for index in range(len(policies)):
            home = run.tmp / "home-day-shared" if shared_home else None
            day_run(run, result, policies, index, device, sizing, meter, home)
    result["meter_error"] = meter.error
    return result


def day_run(
    run: Run,
    result: dict[str, Any],
    policies: tuple[str, ...],
    index: int,
    device: str,
    sizing: dict[str, Any],
    meter: Meter,
    shared_home: Path | None = None,
) -> None:
    """The day's `index`-th run, under `policies[index]`, into result["policies"]."""
    policy = policies[index]
    # a policy named twice is run twice (run-to-run noise): the second as POLICY#2
    key = (
        policy
        if policy not in policies[:index]
        else f"{policy}#{policies[:index].count(policy) + 1}"
    )
    try:
        # a policy's first run only: a repeat shows whether sampling (CLI calls every 2 s)
        # moves the figures
        sample = policy not in policies[:index]
        result["policies"][key] = day_policy(
            run, policy, device, sizing, sample, meter, shared_home
        )
    except Exception:
        result["policies"][key] = {"error": traceback.format_exc()[-TAIL:]}
    run.save()
    shown = result["policies"][key]
    run.say(
        f"   {key}: makespan {shown.get('makespan_s')} s, mean JCT {shown.get('mean_jct_s')}"
        f" s, energy {shown.get('gpu_energy_j')} J, modes {shown.get('modes')}"
    )


# ================================================================================ memory
# Takes GB of device memory (touching every byte, so the driver really backs it), says so, holds
# it for S seconds doing a little work on it, and prints a `result` line.
HOLD = r"""
import sys, time, torch
gb, seconds, device = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
if device == "cpu" and gb > 4:  # the CPU rehearsal: CUDA's own words, as torch prints them
    sys.exit("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %.2f GiB." % gb)
x = torch.ones(int(gb * 2**30) // 4, dtype=torch.float32, device=device)
print("holding", round(x.numel() * 4 / 2**30, 2), "GiB", flush=True)
until = time.time() + seconds
while time.time() < until:
    x.mul_(1.0)
    if device == "cuda":
        torch.cuda.synchronize()
    time.sleep(0.05)
print('result {"held_gib": %.2f}' % (x.numel() * 4 / 2**30), flush=True)
"""


def check_memory(run: Run) -> dict[str, Any]:
    device = "cpu" if run.fakes else "cuda"
    # On the H200 (140 GiB): the holder says it needs 95 GiB and really takes 40, so ~99 GiB
    # stay free on the card; the liar says 8 and takes 60, more than the ~45 GiB its MPS limit
    # gives it (the GPU less the holder's hint) but less than the card has free, so only the
    # limit can stop it. (The first run, holder at 90 GiB, could not tell the two apart.) On the
    # CPU, token sizes (the liar "fails" itself).
    hold_gb, liar_gb = (40, 60) if device == "cuda" else (0.2, 60)
    result: dict[str, Any] = {"device": device}
    run.results["checks"]["memory"] = result
    with Engine.fresh(run, "memory", "auto") as engine:
        holder = engine.submit(
            *("--name", "holder", "--gpus", "1", "--mem", "95", "--sm", "20"),
            *("--", PYTHON, "-c", HOLD, str(hold_gb), "25", device),
        )
        until = time.monotonic() + 60
        while time.monotonic() < until:
            log = engine.show(holder).get("job", {}).get("log")
            with contextlib.suppress(OSError, TypeError):
                if "holding" in Path(log).read_text(errors="replace"):
                    break
            time.sleep(0.5)
        liar = engine.submit(
            *("--name", "liar", "--gpus", "1", "--mem", "8", "--sm", "10", "--max-attempts", "3"),
            *("--", PYTHON, "-c", HOLD, str(liar_gb), "3", device),
        )
        shape = KINDS["light"][1] if device == "cuda" else KINDS["light"][2]
        big = engine.submit(
            *("--name", "above-the-gpu", "--gpus", "1", "--mem", "200"),
            *("--", *digits(shape, 40, 7, device)),
        )
        finished = engine.wait_done([holder, liar, big], CHECKS["memory"] - 10)
        result["finished"] = finished
        result["jobs"] = {
            name: job_summary(engine.show(i))
            for name, i in (("holder", holder), ("liar", liar), ("above-the-gpu", big))
        }
    return result


# ================================================================================ preempt
def check_preempt(run: Run) -> dict[str, Any]:
    device = "cpu" if run.fakes else "cuda"
    shape = KINDS["heavy"][1] if device == "cuda" else ["64", "2", "64"]
    # long enough to outlast its protection (2 x (grace + restart), docs/preemption.md) with
    # most of its work still ahead: ~50 epochs/s alone on an H200 for the wide MLP
    epochs = 2000 if device == "cuda" else 1500
    grace = "3"
    result: dict[str, Any] = {"device": device, "epochs": epochs, "grace_s": float(grace)}
    run.results["checks"]["preempt"] = result
    alone_ckpt = run.tmp / "alone.pt"
    alone = subprocess.Popen(
        digits(shape, epochs, 3, device, "--checkpoint", str(alone_ckpt)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=run.env,
    )
    try:
        with Engine.fresh(run, "preempt", "auto") as engine:
            ckpt = run.tmp / "low.pt"
            low = engine.submit(
                *("--name", "low", "--gpus", "1", "--mem", "100", "--sm", "95"),
                *("--priority", "-10", "--preemptible", "--preempt-grace", grace),
                *("--", *digits(shape, epochs, 3, device, "--checkpoint", str(ckpt))),
            )
            until = time.monotonic() + 60
            while time.monotonic() < until:
                log = engine.show(low).get("job", {}).get("log")
                with contextlib.suppress(OSError, TypeError):
                    if "epoch 2/" in Path(log).read_text(errors="replace"):
                        break
                time.sleep(0.5)
            high_at = time.time()
            high = engine.submit(
                *("--name", "high", "--gpus", "1", "--mem", "100", "--sm", "95"),
                *("--priority", "10", "--", *digits(shape, 100, 4, device)),
            )
            result["finished"] = engine.wait_done([low, high], CHECKS["preempt"] - 15)
            shown_low, shown_high = engine.show(low), engine.show(high)
            result["low"] = job_summary(shown_low)
            result["high"] = job_summary(shown_high)
            started = (shown_high.get("job") or {}).get("started_at")
            result["high_submitted_at"] = round(high_at, 2)
            result["high_start_delay_s"] = None if not started else round(started - high_at, 2)
            attempts = result["low"]["attempts"]
            resumed = result_line(attempts[-1]["log_tail"]) if attempts else None
    finally:
        try:
            out, _ = alone.communicate(timeout=run.left(60))
        except subprocess.TimeoutExpired:
            alone.kill()
            out, _ = alone.communicate()
    uninterrupted = result_line(out)
    result["resumed_result"] = resumed
    result["uninterrupted_result"] = uninterrupted
    keys = ("weights", "final_loss", "val_acc", "best_val_acc", "epochs")
    if resumed and uninterrupted:
        result["same"] = {k: resumed.get(k) == uninterrupted.get(k) for k in keys}
    return result


# ================================================================================ main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the results")
    parser.add_argument("--fakes", action="store_true", help="run against tests/fakes, no GPU")
    parser.add_argument("--budget-s", type=float, default=330.0, help="the whole run's limit")
    parser.add_argument("--job-s", type=float, default=10.0, help="a heavy job's training alone, s")
    parser.add_argument("--only", help="comma-separated checks (default: all, in order)")
    parser.add_argument("--policies", default=",".join(POLICIES), help="the day's policies")
    parser.add_argument(
        "--shared-home",
        action="store_true",
        help="the day's runs one after the other in one engine home, so each starts with what "
        "the runs before taught the engine (run times, rates alone, the learned model)",
    )
    parser.add_argument(
        "--observe-min-s",
        type=float,
        help="the learner's shortest interval (GPUDESK_OBSERVE_MIN_S; the product's is 60 s, "
        "longer than a lent GPU's day of minutes can give)",
    )
    parser.add_argument(
        "--day",
        choices=("digits", "probes"),
        default="digits",
        help="the day's jobs: digits MLPs of three sizes, or probes of fixed work (PROBE_KINDS)",
    )
    args = parser.parse_args()
    policies = tuple(p for p in args.policies.split(",") if p)
    chosen = args.only.split(",") if args.only else list(CHECKS)
    unknown = [c for c in chosen if c not in CHECKS]
    if unknown:
        print(f"unknown check(s): {', '.join(unknown)}; known: {', '.join(CHECKS)}")
        return 2
    if args.fakes:
        reexec_on_fakes()
    args.out.mkdir(parents=True, exist_ok=True)
    run = Run(args.out, args.fakes, args.budget_s)
    if args.observe_min_s is not None:
        run.env["GPUDESK_OBSERVE_MIN_S"] = f"{args.observe_min_s:g}"
    steps: dict[str, Callable[[], dict[str, Any]]] = {
        "day": lambda: check_day(run, args.job_s, policies, args.day, args.shared_home),
        "memory": lambda: check_memory(run),
        "preempt": lambda: check_preempt(run),
    }
    run.results["card_before"] = card_settings(run)

    def card_after() -> None:
        run.results["card_after"] = card_settings(run)

    run_checks(run, chosen, steps, CHECKS, after=card_after)
    return 0


def card_settings(run: Run) -> str:
    """The card's settings as nvidia-smi prints them (read before and after: unchanged)."""
    fields = "name,driver_version,memory.total,mig.mode.current,compute_mode,persistence_mode"
    done = run.cmd(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], 20)
    return str(done.get("stdout", "")).strip() or str(done.get("error") or done.get("stderr_tail"))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    from quiet_pipe import run_main

    run_main(main)
