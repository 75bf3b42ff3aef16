"""Engine kills with Slurm submissions in flight (issue 36): nothing lost, nothing run twice,
nothing run in the wrong place.

    python bench/engine_kills.py [--jobs 200] [--kills 30] [--seed 1] [--json]

Starts the real single-node test Slurm (tests/slurm_cluster.py) and a personal engine on a
fresh GPUDESK_HOME, then submits --jobs short jobs in requests of 1 to 4, about half to the
station and half with a `[cluster]` (Slurm), while a killer SIGKILLs the engine at random
moments (--kills times, 0.3 to 2.5 s apart) and starts it again each time. Every job's command
appends one line to runs/NAME saying where it ran (its SLURM_JOB_ID, empty on the station).
A request whose reply was lost to a kill is not sent again: its jobs are found by name.

At the end every job must be ended and:
- run twice: more than one line in runs/NAME (must be 0);
- wrong place: a `[cluster]` job that ran on the station, or a station job in Slurm (0);
- lost: a job whose id was answered but is missing, still unended past the deadline, or
  "succeeded" without having run (0).
A `[cluster]` job whose sbatch never reached Slurm (the engine was killed before it) fails
"never reached Slurm" and has not run anywhere: counted as such, not as lost.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the test cluster (a bench, not the product)

from slurm_cluster import PARTITION, missing_reason, running_cluster  # noqa: E402

from gpudesk.api.client import Client  # noqa: E402
from gpudesk.api.connection import (  # noqa: E402
    Connection,
    EngineNotListening,
    engine_pid,
    start_engine,
)
from gpudesk.api.errors import EngineError  # noqa: E402
from gpudesk.api.models import JobView  # noqa: E402
from gpudesk.core.jobs import TERMINAL_STATE_NAMES  # noqa: E402
from gpudesk.core.station import StationConfig  # noqa: E402
from gpudesk.paths import Home  # noqa: E402

END_WAIT_S = 300.0  # assumption: 200 short jobs end within 5 min of the last kill (2-core VM)


@dataclass
class Run:
    home: Home
    runs: Path
    lock: threading.Lock = field(default_factory=threading.Lock)
    answered: dict[str, int] = field(default_factory=dict)  # name -> id the engine answered
    unanswered: list[str] = field(default_factory=list)  # names whose request's reply was lost
    refused: list[str] = field(default_factory=list)  # names of requests the engine refused
    cluster: set[str] = field(default_factory=set)
    kills: int = 0
    done_submitting: bool = False


def _job(run: Run, name: str, on_slurm: bool) -> dict:
    job: dict = {
        "name": name,
        "command": ["sh", "-c", f'echo "slurm=$SLURM_JOB_ID" >> {run.runs}/{name}'],
        "workdir": str(run.runs),
    }
    if on_slurm:
        # a small --mem: the test cluster sets no DefMemPerCPU, so a job without one is given
        # the node's whole memory and the others wait for it
        job["cluster"] = {"kind": "slurm", "partition": PARTITION, "mem_gb": 0.1}
    return job


def _client(run: Run) -> Connection:
    return Connection(run.home, timeout=120.0)


def submitter(run: Run, total: int, rng: random.Random) -> None:
    made = 0
    while made < total:
        size = min(rng.randint(1, 4), total - made)
        on_slurm = rng.random() < 0.5
        names = [f"j{made + i:04d}-{'slurm' if on_slurm else 'station'}" for i in range(size)]
        made += size
        if on_slurm:
            run.cluster.update(names)
        jobs = [_job(run, n, on_slurm) for n in names]
        while True:
            try:
                ids = _client(run).request("submit", jobs=jobs, env=dict(os.environ))["ids"]
            except EngineNotListening:
                time.sleep(0.1)  # not sent: the engine was down; send it once it is back
                continue
            except EngineError as exc:
                if exc.code == "refused":
                    run.refused += names
                else:
                    run.unanswered += names  # it may have been taken: never sent twice
                break
            except OSError:
                run.unanswered += names
                break
            run.answered.update(zip(names, ids, strict=True))
            break
        time.sleep(rng.uniform(0.0, 0.6))  # spread the requests over the kills
    run.done_submitting = True


def killer(run: Run, kills: int, rng: random.Random) -> None:
    while run.kills < kills:  # kills after the last submit hit adoptions and polls
        time.sleep(rng.uniform(0.3, 2.5))
        pid = engine_pid(run.home)
        if pid is None:
            continue
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while engine_pid(run.home) is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        run.kills += 1
        start_engine(run.home, StationConfig(backend="none", slots=2))


def check(run: Run) -> dict:
    names = sorted(set(run.answered) | set(run.unanswered))
    deadline = time.monotonic() + END_WAIT_S
    while True:
        jobs = Client(_client(run)).jobs()  # every job, page after page
        by_name: dict[str, list[JobView]] = {}
        for job in jobs:
            by_name.setdefault(job.name, []).append(job)
        unended = [
            j for n in names for j in by_name.get(n, []) if j.state not in TERMINAL_STATE_NAMES
        ]
        if not unended or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    counts = {"exactly_once": 0, "never_reached_slurm": 0, "not_run_other": 0}
    twice, wrong, lost, duplicates = [], [], [], []
    for name in names:
        found = by_name.get(name, [])
        if len(found) > 1:
            duplicates.append(name)
        if not found:
            if name in run.answered:
                lost.append(f"{name}: answered id {run.answered[name]}, not in the store")
            continue  # a request whose reply was lost and that was never taken
        job = found[0]
        lines = (run.runs / name).read_text().splitlines() if (run.runs / name).exists() else []
        if job.state not in TERMINAL_STATE_NAMES:
            lost.append(f"{name}: still {job.state}")
        if len(lines) > 1:
            twice.append(f"{name}: {lines}")
        in_slurm = [line for line in lines if line != "slurm="]
        if (name in run.cluster) != bool(in_slurm) and lines:
            wrong.append(f"{name}: {lines}")
        if job.state == "succeeded" and not lines:
            lost.append(f"{name}: succeeded without running")
        if len(lines) == 1:
            counts["exactly_once"] += 1
        elif "never reached Slurm" in (job.reason or ""):
            counts["never_reached_slurm"] += 1
        elif not lines:
            counts["not_run_other"] += 1
    return {
        "jobs": len(names),
        "answered": len(run.answered),
        "reply_lost": len(run.unanswered),
        "refused": len(run.refused),
        "slurm_jobs": len(run.cluster & set(names)),
        "kills": run.kills,
        **counts,
        "run_twice": len(twice),
        "wrong_place": len(wrong),
        "lost": len(lost),
        "duplicate_records": len(duplicates),
        "examples": (twice + wrong + lost + duplicates)[:10],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    if missing_reason() is not None:
        print(f"cannot run: {missing_reason()}", file=sys.stderr)
        return 2
    rng = random.Random(options.seed)
    top = Path(tempfile.mkdtemp(prefix="gdkills-", dir="/tmp"))
    with running_cluster(top / "cluster") as cluster:
        os.environ.update(
            {
                "GPUDESK_HOME": str(top / "home"),
                "SLURM_CONF": str(cluster.conf),
                "GPUDESK_SLURM_POLL_S": "0.3",
                # assumption: the sbatch a killed engine left runs ends within 5 s on this VM
                "GPUDESK_SLURM_INTENT_GRACE_S": "5",
            }
        )
        os.environ.pop("GPUDESK_BACKEND", None)
        run = Run(Home(top / "home"), top / "runs")
        run.runs.mkdir()
        start_engine(run.home, StationConfig(backend="none", slots=2))
        started = time.monotonic()
        threads = [
            threading.Thread(
                target=submitter, args=(run, options.jobs, random.Random(rng.random()))
            ),
            threading.Thread(target=killer, args=(run, options.kills, random.Random(rng.random()))),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        result = check(run)
        result["wall_s"] = round(time.monotonic() - started, 1)
        result["machine"] = f"{platform.machine()}, {os.cpu_count()} cores"
        pid = engine_pid(run.home)
        if pid is not None:
            _client(run).request("shutdown")
        cluster.cancel_all()
    if options.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:>22}: {value}")
    bad = result["run_twice"] or result["wrong_place"] or result["lost"]
    return 1 if bad else 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
