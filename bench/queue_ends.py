"""Jobs ended while still queued, `--jobs` of them: what the engine's loop spends ending them
(placement failures and dependency cancels, SLICE_JOBS a turn), and within that what telling
subscribers of each costs (its record as the store has it now, for the job event).

    python bench/queue_ends.py [--jobs 10000] [--repeat 3] [--json]

An engine built in this process (its loop's turns run here, as tests/conftest.EngineInProcess
does) on a fresh store with no GPUs (backend none, 1 slot):

- failures: `--jobs` GPU jobs queued; each turn's placement pass fails SLICE_JOBS of them
  ("asks for 1 GPU but this station has none");
- cancels: a held job, `--jobs` jobs queued to run after it, then the held one cancelled; each
  turn cancels SLICE_JOBS of them ("which it runs after, cancelled").

Measured in the process's CPU time (a loaded machine moves wall time more), the best of
`--repeat` runs: the turns' total time until every job has ended, per job,
and the SELECTs on `jobs` the turns ran (a statement trace): a read-back of each ended job is
one each. Beside it, the read-back alone for `--jobs` ended jobs: one `Store.job` each against
`dependencies.jobs_by_id` (500 ids a query), the best of 5 interleaved.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.station import StationConfig
from gpudesk.engine.daemon import Engine
from gpudesk.engine.dependencies import jobs_by_id
from gpudesk.engine.store.database import Store
from gpudesk.home_lock import EngineLock
from gpudesk.paths import Home


def _run(kind: str, jobs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpudesk-bench-") as tmp:
        home = Home(Path(tmp) / "home")
        home.ensure()
        store = Store.open(home.db)
        engine = Engine(
            home, store, StationConfig(backend="none", slots=1), lock=EngineLock.take(home.lock)
        )
        try:
            ids = _queue(store, kind, jobs, tmp)
            engine.recover()
            selects: list[str] = []
            store._conn.set_trace_callback(
                lambda sql: selects.append(sql) if sql.startswith("SELECT * FROM jobs") else None
            )
            started, turns = time.process_time(), 0
            while any(job_id in engine.queue for job_id in (ids[0], ids[-1])) and turns < 10_000:
                engine.due.mark()
                engine._steps()
                turns += 1
            took = time.process_time() - started
            store._conn.set_trace_callback(None)
            ended = store.jobs(ids=ids)
            assert all(j.state.terminal for j in ended), "not every job ended"
            each, batched = [], []
            for _ in range(5):  # interleaved, the best of each: the machine's load moves
                each.append(_timed(lambda: [store.job(i) for i in ids]))
                batched.append(_timed(lambda: jobs_by_id(store, ids)))
            read_each, read_batched = min(each), min(batched)
        finally:
            engine.close()
            store.close()
            engine.keeper.lock.close()  # last, as the daemon does
    return {
        "kind": kind,
        "jobs": jobs,
        "turns": turns,
        "turns_s": round(took, 4),
        "per_job_us": round(took / jobs * 1e6, 1),
        "job_selects": len(selects),
        "read_back_each_s": round(read_each, 4),
        "read_back_batched_s": round(read_batched, 4),
    }


def _queue(store: Store, kind: str, jobs: int, workdir: str) -> list[int]:
    if kind == "failures":
        specs = [
            JobSpec(name=f"g{k}", command=("true",), workdir=workdir, gpus=1) for k in range(jobs)
        ]
        return [job.id for job in store.submit(specs)]
    (first,) = store.submit([JobSpec(name="dep", command=("true",), workdir=workdir)])
    specs = [
        JobSpec(name=f"a{k}", command=("true",), workdir=workdir, after=(first.id,))
        for k in range(jobs)
    ]
    ids = [job.id for job in store.submit(specs)]
    store.finish_queued([(first.id, "cancelled by its owner")], JobState.CANCELLED)
    return ids


def _timed(read: Any) -> float:
    started = time.process_time()
    read()
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = []
    for kind in ("failures", "cancels"):
        runs = [_run(kind, args.jobs) for _ in range(args.repeat)]
        results.append(min(runs, key=lambda r: r["turns_s"]))
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
        return
    for r in results:
        print(
            f"{r['kind']:>8}: {r['jobs']} jobs in {r['turns']} turns, {r['turns_s']:.3f} s "
            f"({r['per_job_us']:.0f} us a job), {r['job_selects']} SELECTs on jobs; "
            f"read-back alone: {r['read_back_each_s'] * 1000:.0f} ms one each, "
            f"{r['read_back_batched_s'] * 1000:.0f} ms batched"
        )


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
