"""Record the desk's replay data from a real engine.

    python tests/desk/record_replay.py                # both recordings
    python tests/desk/record_replay.py station        # or only one: station, mps-fault

Writes `tests/desk/data/station.json` and `tests/desk/data/mps-fault.json`, which `ReplayFeed`
plays back for the desk's snapshot tests. Re-run it after the engine's replies change (then
`python -m pytest tests/desk --snapshot-update`, and look at the snapshots before committing).

- `station`: a real engine on the SIMULATED DGX Station A100 of tests/contract/scenario.py
  (GPU 2 and 3 in MIG mode): jobs under MPS, on MIG slices and alone, a shared loader with a
  consumer, a succeeded, a failed and a cancelled job, a held and waiting jobs. The stand-in
  trainings print `progress DONE/TOTAL` (all but `vit-large`), so running jobs carry a
  remaining time (the LEFT column).
- `mps-fault`: a real engine on the faithful NVML fake (tests/fakes/nvml_shim) with the faithful
  `nvidia-cuda-mps-control` fake: two jobs under MPS, then GPU 0's MPS server reports FAULT (the
  fake's `fake-fault` file), the engine's periodic check notices, and a job submitted after that
  goes to GPU 1's server (on GPU 0 it could only be time-sliced).

Every file holds the engine's replies and telemetry events exactly as sent, except for volatile
values normalised so a recording reads the same wherever it was made: times shifted so the
recording starts at a fixed moment, pids renumbered, temporary paths and the Python executable
replaced by fixed names, durations rounded. Nothing is added: loading decodes every reply
strictly through `gpudesk.api`'s models (`gpudesk.screens.feed.ReplayFeed.load`).

The file: {"recorded_by", "source", "frames": [FRAME...], "details": {"show:ID": JobDetail,
"mig_plan": MigPlanResult}}, where a FRAME is what the desk's feed reads at one refresh:
"status" (StationStatus) and "jobs" (JobList) when they were read, "telemetry"
(TelemetryResult, the first frame: the snapshot, the history and today's energy) or "event"
(the TelemetryEvent that arrived), "progress" (job id -> [epoch, of], read from the jobs' logs
as the desk does) and "taken_at".
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
FAKES = ROOT / "tests" / "fakes"
sys.path.insert(0, str(ROOT))

from gpudesk.api import Client, EngineError, models  # noqa: E402
from gpudesk.api.client import decode_event, decode_reply  # noqa: E402
from gpudesk.api.connection import Connection, engine_pid, start_engine  # noqa: E402
from gpudesk.core.station import StationConfig  # noqa: E402
from gpudesk.hw.mps import MpsManager  # noqa: E402
from gpudesk.paths import Home  # noqa: E402
from gpudesk.screens.feed import (  # noqa: E402
    JOBS_REFRESH_INTERVALS,
    TELEMETRY_HISTORY_POINTS,
    read_progress,
)


def _load_scenario() -> ModuleType:
    """tests/contract/scenario.py, by path (tests/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "contract_scenario", ROOT / "tests" / "contract" / "scenario.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


scenario = _load_scenario()

EPOCH = 1_790_000_000.0  # the recording starts here (2026-09-21 14:13 UTC) whenever it was made
FIXED_HOME = "/home/demo/.local/state/gpudesk"
FIXED_WORKDIR = "/home/demo/sweep"
FIXED_PYTHON = "python3"
FIRST_PID = 4001
FRAMES = 10  # the first carries 120 samples of history: enough for every sparkline
FRAME_GAP_S = 0.5
TIME_KEYS = {"submitted_at", "started_at", "ended_at", "ts", "taken_at", "sampling_since", "t"}
PID_KEYS = {"pid", "pgid"}
DURATION_KEYS = {
    *("runtime_s", "uptime_s", "cpu_s", "prepass_wall_s", "select_s"),
    *("seconds", "typical_s", "elapsed_s"),  # a running job's remaining time (RemainingView)
}


def training(
    name: str, epochs: int, seconds_per_epoch: float, progress: bool = True
) -> tuple[str, ...]:
    """A stand-in training script that prints `epoch E/N` (the desk shows it as progress) and,
    where `progress`, a `progress DONE/TOTAL` line for each tenth of an epoch (docs/interference.md:
    what the engine reads a running job's remaining time from; the desk's LEFT column)."""
    report = (
        f"    for s in range(10):\n"
        f"        print(f'progress {{(e - 1) * 10 + s}}/{epochs * 10}', flush=True)\n"
        f"        time.sleep({seconds_per_epoch / 10})\n"
        if progress
        else f"    time.sleep({seconds_per_epoch})\n"
    )
    code = (
        f"import time\nfor e in range(1, {epochs + 1}):\n"
        f"    print(f'{name}: epoch {{e}}/{epochs}', flush=True)\n" + report
    )
    return (sys.executable, "-c", code)


# ------------------------------------------------------------------------- normalising
class Normaliser:
    """Makes one recording's volatile values fixed: times, pids, paths, rounding."""

    def __init__(self, start: float, paths: dict[str, str]) -> None:
        self.shift = EPOCH - start
        # longest first, so a path inside another is replaced whole
        self.paths = sorted(paths.items(), key=lambda item: -len(item[0]))
        self.pids: dict[int, int] = {}

    def pid(self, value: int) -> int:
        if value not in self.pids:
            self.pids[value] = FIRST_PID + len(self.pids)
        return self.pids[value]

    def text(self, value: str) -> str:
        for real, fixed in self.paths:
            value = value.replace(real, fixed)
        # a pid the engine mentions in a message ("pid 12345") is renumbered like the field
        return re.sub(
            r"\b(pid|pgid|process|server|PID) (\d+)\b",
            lambda m: f"{m.group(1)} {self.pid(int(m.group(2)))}",
            value,
        )

    def __call__(self, value: Any, key: str | None = None) -> Any:
        if isinstance(value, dict):
            return {k: self(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v, key) for v in value]
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, bool) or value is None:
            return value
        if key in TIME_KEYS and isinstance(value, (int, float)):
            return round(value + self.shift, 2)
        if key in PID_KEYS and isinstance(value, int):
            return self.pid(value)
        if key in DURATION_KEYS and isinstance(value, float):
            return round(value, 1)
        return value


# ----------------------------------------------------------------------------- recording
class Recorder:
    """Reads what the desk's `EngineFeed` reads, keeping each reply's result as sent."""

    def __init__(self, home: Home, workdir: Path) -> None:
        self.home = home
        self.transport = Connection(home, timeout=15.0)
        self.client = Client(self.transport)
        self.frames: list[dict[str, Any]] = []
        self.details: dict[str, Any] = {}

    def raw(self, op: str, **args: Any) -> Any:
        """One request's result as the engine sent it (decoded strictly once, to check it)."""
        reply = self.transport.exchange(op, args)
        decode_reply(models.REPLY_MODELS[op], reply, op)
        return json.loads(reply)["result"]

    def progress(self, jobs: dict[str, Any]) -> dict[str, list[int]]:
        found = {}
        for job in jobs["jobs"]:
            if job["state"] == "running" and (epoch := read_progress(job["log"])):
                found[str(job["id"])] = list(epoch)
        return found

    def record_frames(self, events: Any, count: int = FRAMES) -> None:
        """`count` frames: the first as the feed's first (telemetry with history), then one per
        FRAME_GAP_S with the latest telemetry event, the status and the jobs."""
        jobs = self.raw("jobs", usage=True)
        self.frames.append(
            {
                "status": self.raw("status"),
                "jobs": jobs,
                "telemetry": self.raw("telemetry", history=TELEMETRY_HISTORY_POINTS),
                "progress": self.progress(jobs),
                "taken_at": time.time(),
            }
        )
        for _ in range(count - 1):
            latest: bytes | None = None
            deadline = time.monotonic() + FRAME_GAP_S
            while (wait := deadline - time.monotonic()) > 0:
                frames = events.next_raw(wait)
                if frames is not None and isinstance(decode_event(*frames), models.TelemetryEvent):
                    latest = frames[1]
            assert latest is not None, "no telemetry event within a frame"
            frame: dict[str, Any] = {"status": self.raw("status"), "event": json.loads(latest)}
            if len(self.frames) % JOBS_REFRESH_INTERVALS == 0:  # as often as the feed reads them
                jobs = frame["jobs"] = self.raw("jobs", usage=True)
                frame["progress"] = self.progress(jobs)
            frame["taken_at"] = time.time()
            self.frames.append(frame)

    def record_details(self, job_ids: list[int], mig: bool) -> None:
        for job_id in job_ids:
            self.details[f"show:{job_id}"] = self.raw("show", job=job_id)
        if mig:
            self.details["mig_plan"] = self.raw("mig_plan", gpu=None)

    def write(self, path: Path, source: str, normalise: Normaliser) -> None:
        data = {
            "recorded_by": "python tests/desk/record_replay.py",
            "source": source,
            "frames": normalise(self.frames),
            "details": normalise(self.details),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size // 1024} KiB)")

    def close(self) -> None:
        self.transport.close()


def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> Any:
    return scenario.wait_until(predicate, timeout, what)


def normaliser_for(recorder: Recorder, home: Home, workdir: Path, tmp: Path) -> Normaliser:
    first = recorder.frames[0]
    jobs = first["jobs"]["jobs"]
    start = min([j["submitted_at"] for j in jobs] + [first["status"]["started_at"]])
    return Normaliser(
        start,
        {
            str(home.root): FIXED_HOME,
            str(workdir): FIXED_WORKDIR,
            sys.executable: FIXED_PYTHON,
            str(tmp): "/tmp/gpudesk-record",
            f"{tempfile.gettempdir()}/gpudesk-{os.getuid()}": "/tmp/gpudesk-1000",
        },
    )


# -------------------------------------------------------------------- the SIMULATED station
def record_station(tmp: Path) -> None:
    home, workdir = Home(tmp / "home"), tmp / "work"
    workdir.mkdir()
    with scenario.sim_engine(home):
        recorder = Recorder(home, workdir)
        driver = scenario.StationDriver(home, scenario.Recording(), workdir)
        try:
            with recorder.client.events() as events:
                ids = station_jobs(driver)
                recorder.record_frames(events)
            recorder.record_details(ids, mig=True)
            normalise = normaliser_for(recorder, home, workdir, tmp)
            recorder.write(DATA / "station.json", "SIMULATED sim:dgx-station-a100", normalise)
        finally:
            stop_jobs(driver)
            recorder.close()


def station_jobs(driver: Any) -> list[int]:
    """The sweep the desk shows: placed by the engine's `auto` policy, not by this script."""
    client: Client = driver.client
    client.register_datasets([scenario.DATASET])
    (script := driver.workdir / "consumer.py").write_text(scenario.CONSUMER)
    job = driver.job
    done, failed = driver.submit(
        job("prepare-data", training("prepare-data", 1, 0.1)),
        job("resnet-lr0.5", (sys.executable, "-c", "print('epoch 1/5: loss nan'); exit(1)")),
    )
    driver.wait_done([done, failed])
    # Two MIG-sized jobs, light ones that share GPUs under MPS, a heavy one.
    running = driver.submit(
        job("dlrm-small", training("dlrm-small", 8, 40), gpus=1, memory_gb=8, sm_pct=30),
        job("mlp-sweep-3", training("mlp-sweep-3", 6, 40), gpus=1, memory_gb=8, sm_pct=30),
        job("resnet-lr0.01", training("resnet-lr0.01", 5, 30), gpus=1, memory_gb=4, sm_pct=20),
        job("vit-small-a", training("vit-small-a", 5, 45), gpus=1, memory_gb=4, sm_pct=20),
        job(
            "vit-large",
            training("vit-large", 10, 20, progress=False),
            gpus=1,
            memory_gb=30,
            sm_pct=85,
        ),
        job("vit-small-b", training("vit-small-b", 5, 45), gpus=1, memory_gb=4, sm_pct=20),
    )
    (reader,) = driver.submit(
        job("reader", (sys.executable, str(script), "syn", "400"), dataset="syn")
    )
    for job_id in (*running, reader):
        driver.wait_state(job_id, "running")
    (victim,) = driver.submit(job("victim", scenario.sleeper(60)))
    driver.wait_state(victim, "running")
    client.cancel([victim], grace=1.0)
    driver.wait_done([victim])
    # Waiting: one that wants a whole GPU (held, too), one that wants two, CPU jobs behind the
    # busy CPU slots. The first's hint stays under 90 % of the 40 GB: at or above it the engine
    # takes its memory as unknown and starts it where the room is largest (issue 39).
    held, ddp, cpu, cpu_queued = driver.submit(
        job("ablation-x", scenario.sleeper(60), gpus=1, memory_gb=34, sm_pct=90),
        job("two-gpu-ddp", scenario.sleeper(60), gpus=2, memory_gb=30, sm_pct=90),
        job("cpu-eval", scenario.sleeper(60), priority=1),
        job("cpu-eval-2", scenario.sleeper(60)),
    )
    client.hold([held])
    wait_until(
        lambda: any(
            loader.status is not None and loader.status.consumers
            for loader in client.status().loaders
        ),
        30.0,
        "the shared loader to report its consumer",
    )
    # 24 s of samples (the history the first frame carries: 120 at 0.2 s) fill even the wide
    # cards' sparklines; the jobs run far longer.
    time.sleep(20.0)
    return [done, failed, *running, reader, victim, held, ddp, cpu, cpu_queued]


def stop_jobs(driver: Any) -> None:
    with suppress(EngineError):
        live = [j.id for j in driver.client.jobs(states=["queued", "running"])]
        if live:
            driver.client.cancel(live, grace=0.5)


# ----------------------------------------------------------------------------- MPS fault
NVML_GPUS = {
    "gpus": [
        {"name": "NVIDIA A100-SXM4-40GB", "uuid": f"GPU-{i}-mps-fault", "memory_total_mib": 40960}
        for i in range(2)
    ]
}
# A CUDA client's first call makes the MPS control daemon start a server for its user; the fake
# daemon has no CUDA clients, so the job asks for the server the way tests/hw/test_mps.py does.
MPS_CLIENT = (
    "import os, subprocess\n"
    "print('pipe', os.environ['CUDA_MPS_PIPE_DIRECTORY'], flush=True)\n"
    "subprocess.run([os.environ['GPUDESK_MPS_CONTROL']], "
    "input=f'start_server -uid {os.getuid()}\\n', text=True, check=True)\n"
)


@contextmanager
def nvml_engine(home: Home, tmp: Path) -> Iterator[None]:
    """A real engine on the faithful NVML fake, with the faithful MPS control fake."""
    scenario_file = tmp / "nvml.json"
    scenario_file.write_text(json.dumps(NVML_GPUS))
    saved = dict(os.environ)
    os.environ.update(
        PYTHONPATH=str(FAKES / "nvml_shim"),
        GPUDESK_FAKE_NVML=str(scenario_file),
        GPUDESK_MPS_CONTROL=str(FAKES / "nvidia-cuda-mps-control"),
    )
    try:
        start_engine(home, StationConfig(backend="nvml", policy="auto", sample_interval=0.2))
        try:
            yield
        finally:
            with Connection(home, timeout=5.0) as client, suppress(EngineError):
                client.request("shutdown")
            wait_until(lambda: engine_pid(home) is None, 15.0, "the engine to stop")
            # The engine leaves MPS control daemons to the next engine of this home; there is
            # none, so they go (with GPUDESK_MPS_CONTROL still naming the fake).
            MpsManager(home.root).stop_all()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def mps_training(name: str) -> tuple[str, ...]:
    """An MPS client: says which pipe it was given, has its server started, then trains (for a
    minute at most)."""
    code = MPS_CLIENT + training(name, 6, 10)[2]
    return (sys.executable, "-c", code)


def record_mps_fault(tmp: Path) -> None:
    home, workdir = Home(tmp / "home"), tmp / "work"
    workdir.mkdir()
    with nvml_engine(home, tmp):
        recorder = Recorder(home, workdir)
        driver = scenario.StationDriver(home, scenario.Recording(), workdir)
        client: Client = driver.client
        try:
            with recorder.client.events() as events:
                light = {"gpus": 1, "memory_gb": 4, "sm_pct": 20}
                first = driver.submit(
                    driver.job(
                        "llama-ft", mps_training("llama-ft"), gpus=1, memory_gb=30, sm_pct=85
                    ),
                    driver.job("bert-ft-1", mps_training("bert-ft-1"), **light),
                    driver.job("bert-ft-2", mps_training("bert-ft-2"), **light),
                )
                placed = [driver.wait_state(i, "running") for i in first]
                # GPU 0's server faults (the desk's tests look for it on the first card)
                faulted = next(j for j in placed if j.gpus == [0])
                assert faulted.mode == "mps", faulted.slot
                pipe = wait_until(
                    lambda: re.search(r"^pipe (\S+)$", Path(faulted.log or "").read_text(), re.M),
                    15.0,
                    "the job to name its MPS pipe",
                ).group(1)
                (Path(pipe) / "fake-fault").touch()  # the server now reports FAULT
                wait_until(
                    lambda: client.status().station.mps.faults, 30.0, "the engine's MPS check"
                )
                (after,) = driver.submit(
                    driver.job("bert-ft-3", mps_training("bert-ft-3"), **light)
                )
                driver.wait_state(after, "running")
                time.sleep(2.0)
                recorder.record_frames(events)
            recorder.record_details([*first, after], mig=False)
            normalise = normaliser_for(recorder, home, workdir, tmp)
            recorder.write(DATA / "mps-fault.json", "nvml (tests/fakes) + MPS fake", normalise)
        finally:
            stop_jobs(driver)
            recorder.close()


RECORDINGS = {"station": record_station, "mps-fault": record_mps_fault}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="*", help=f"any of {', '.join(RECORDINGS)} (default: all)")
    args = parser.parse_args()
    unknown = set(args.which) - set(RECORDINGS)
    if unknown:
        parser.error(f"no recording named {', '.join(sorted(unknown))}")
    for name in args.which or RECORDINGS:
        # a short path: unix socket names have a length limit
        with tempfile.TemporaryDirectory(prefix="gd-rec-") as tmp:
            RECORDINGS[name](Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
