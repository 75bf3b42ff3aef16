"""How much one replay of a trace says: every bundled trace replayed with its arrivals jittered.

    python bench/trace_jitter.py [--replays N] [--minutes M] [--json]

A trace's makespan can turn on one job: t1's is its last long arrival's end, and a small change
of placement moves it by ±5 % in either direction. One replay is then one draw. Here each
bundled trace is replayed `--replays` times (default 20): replay 0 as published, each other with
every arrival moved by a uniform draw in ±`--minutes` (default 5; seeded by the replay's number,
so the same draws each run; an arrival never goes below 0). Each replay runs carma and auto on
the trace's own station, whole and with one GPU in MIG mode (simulator_judge.MIG_LAYOUTS), with
the model's defaults as the truth, and whole with the H100 calibration as the truth (prior:
the defaults, learning on), each twice: with no job printing progress lines and with every job
printing them (`gpudesk simulate --progress-lines`: the engine then knows each running job's
remaining time, which placement uses to choose the GPU to hold for a waiting job).

Per row: auto ÷ LB (the lower bound under that truth, gpudesk/policy/sim_bounds.py), auto ÷
carma (makespan), in how many replays auto is slower than carma (a replay where either lost a
job is not compared: on the one-H100 trace in MIG mode carma places nothing), and auto's mean
JCT ÷ its bound: min / median / max over the replays. SIMULATED throughout; nothing is tuned.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from simulator_judge import last_gpu_in_mig  # noqa: E402

from gpudesk.examples import folder, names  # noqa: E402
from gpudesk.policy.interference import DEFAULT_PARAMS, ModelParams  # noqa: E402
from gpudesk.policy.sim_bounds import bound_of  # noqa: E402
from gpudesk.policy.simulator import (  # noqa: E402
    Simulation,
    Trace,
    load_trace,
    load_truth,
    with_progress_lines,
)

H100_TRUTH = ROOT / "results" / "calibrate-h100-8s.json"


def jittered(trace: Trace, replay: int, minutes: float) -> Trace:
    """Replay 0 as published; any other with each arrival moved by a seeded uniform draw."""
    if replay == 0:
        return trace
    draw = random.Random(replay)
    jobs = tuple(
        replace(j, arrival_s=max(0.0, j.arrival_s + draw.uniform(-minutes, minutes) * 60.0))
        for j in trace.jobs
    )
    return replace(trace, jobs=jobs)


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 3),
        "median": round(statistics.median(values), 3),
        "max": round(max(values), 3),
    }


def row(
    trace: Trace,
    mig: str | None,
    truth: ModelParams,
    progress: bool,
    replays: int,
    minutes: float,
) -> dict[str, Any]:
    """One station, truth and progress setting over every replay."""
    station = trace.sim_station
    lb: list[float] = []
    vs_carma: list[float] = []
    jct: list[float] = []
    jct_queue: list[float] = []
    lost = 0
    for replay in range(replays):
        this = jittered(trace, replay, minutes)
        if progress:
            this = with_progress_lines(this)
        auto, carma = (
            Simulation(this, policy=p, station=station, truth=truth, mig=mig)
            for p in ("auto", "carma")
        )
        ra, rc = auto.run(), carma.run()
        lost += ra.lost
        if ra.lost:
            continue
        bound = bound_of(auto)
        lb.append(ra.makespan_s / bound.makespan_s)
        jct.append(ra.mean_jct_s / bound.mean_jct_s)
        jct_queue.append(ra.mean_jct_s / bound.mean_jct_queue_s)
        if not rc.lost:
            vs_carma.append(ra.makespan_s / rc.makespan_s)
    return {
        "auto_vs_lb": _spread(lb) if lb else None,
        "auto_vs_carma": _spread(vs_carma) if vs_carma else None,
        "slower_than_carma": sum(v > 1.0 for v in vs_carma),
        "compared": len(vs_carma),
        "auto_jct_vs_bound": _spread(jct) if jct else None,
        "auto_jct_vs_queue_bound": _spread(jct_queue) if jct_queue else None,
        "auto_lost": lost,
    }


def _cell(spread: dict[str, float] | None) -> str:
    if spread is None:
        return "-"
    return f"{spread['min']:.3f} / {spread['median']:.3f} / {spread['max']:.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.replays < 1 or args.minutes < 0:
        parser.error("--replays must be at least 1 and --minutes not negative")
    truths = (("defaults", DEFAULT_PARAMS), ("H100 calibration", load_truth(H100_TRUTH)))
    rows: list[dict[str, Any]] = []
    for name in names("traces"):
        trace = load_trace(folder("traces") / name)
        layout = last_gpu_in_mig(trace.sim_station)
        settings = [(None, truths[0]), (layout, truths[0]), (None, truths[1])]
        for mig, (truth_name, truth) in settings:
            for progress in (False, True):
                found = row(trace, mig, truth, progress, args.replays, args.minutes)
                rows.append(
                    {
                        "trace": trace.name,
                        "mig": mig,
                        "truth": truth_name,
                        "progress_lines": progress,
                        **found,
                    }
                )
    if args.json:
        json.dump(
            {"replays": args.replays, "minutes": args.minutes, "rows": rows}, sys.stdout, indent=2
        )
        print()
        return 0
    print(
        f"SIMULATED; {args.replays} replays, arrivals jittered by ±{args.minutes:g} min "
        "(replay 0 as published); min / median / max over the replays"
    )
    print()
    print(
        "| trace | station | truth | progress lines | auto ÷ LB | auto ÷ carma | slower than "
        "carma | auto mean JCT ÷ bound alone | ÷ queueing bound |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        where = "whole" if r["mig"] is None else f"--mig {r['mig']}"
        print(
            f"| {r['trace']} | {where} | {r['truth']} | "
            f"{'every job' if r['progress_lines'] else 'none'} | {_cell(r['auto_vs_lb'])} | "
            f"{_cell(r['auto_vs_carma'])} | "
            f"{r['slower_than_carma']} of {r['compared']} | {_cell(r['auto_jct_vs_bound'])} | "
            f"{_cell(r['auto_jct_vs_queue_bound'])} |"
        )
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
