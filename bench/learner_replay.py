"""What the engine's learner learns from a real GPU day's shared intervals, fed the jobs' hints
against fed their steady SM shares: whether the learner blames the sharing mechanism for the
hints' error.

    python bench/learner_replay.py bench/results/h200-2026-12-04b/run2/hardware_truth.json

The day is a `bench/gpu_day.py --day probes --shared-home` run. Each of its `auto`/`mps` runs'
jobs said, in a `model` event, what each shared interval showed ("learned from progress: 0.39x
its speed alone under mps beside job 10, job 11 over 21 s"). Those intervals (the measured rate,
the mechanism, who shared the GPU) are replayed here into a fresh `Learner` at the published
prior, in the order they came, twice:

- `hints`: each job's SM share as the engine had it, its `sm_pct` hint (the life average,
  start-up included);
- `steady`: the share of each step its kernels ran, measured alone by the sizing trial (what
  the job demands while its steps overlap another's, the phase its rate is measured in).

It prints the parameters each replay ends with, and, per interval, the rate the published
model and each learned model predict against the rate measured. Pure replay, no GPU.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from gpudesk.policy.interference import DEFAULT_PARAMS, ModelParams, Workload, workload
from gpudesk.policy.learner import Learner, Observation, predicted_rate

LESSON = re.compile(
    r"learned from progress: (?P<rate>[\d.]+)x its speed alone under (?P<mode>\w+) beside "
    r"(?P<beside>.+?) over (?P<seconds>\d+) s;"
)
GPU_MODEL = "NVIDIA H200"


def intervals(result: dict[str, Any]) -> list[tuple[str, str, float, str, list[str], int]]:
    """(run, job name, rate, mechanism, co-tenants' names, seconds) of every lesson, in order."""
    day = result["checks"]["day"]
    found = []
    for run, ran in day["policies"].items():
        names = {job["id"]: job["name"] for job in ran.get("jobs", [])}
        for job in ran.get("jobs", []):
            for event in job.get("events") or []:
                said = LESSON.search(event)
                if not said or said["mode"] not in ("mps", "naive"):
                    continue
                ids = [int(i) for i in re.findall(r"job (\d+)", said["beside"])]
                others = [names.get(i, f"job {i}") for i in ids]
                found.append(
                    (
                        run,
                        job["name"],
                        float(said["rate"]),
                        said["mode"],
                        others,
                        int(said["seconds"]),
                    )
                )
    return found


def shares(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per job name: its SM share as hinted, and as its kernels' share of a step alone."""
    sizing = result["checks"]["day"]["sizing"]
    kinds = sizing["kinds"]
    return {
        job["name"]: {
            "hints": float(job["sm_pct"]),
            "steady": 100.0 * float(kinds[job["kind"]]["busy_share"]),
        }
        for job in sizing["probe_jobs"]
    }


def observation(
    name: str, rate: float, mode: str, others: list[str], sm: dict[str, float]
) -> Observation:
    def work(of: str) -> Workload:
        return workload(sm[of], None, DEFAULT_PARAMS)

    return Observation(mode, work(name), tuple(work(o) for o in others), rate)


def replay(
    found: list[tuple[str, str, float, str, list[str], int]],
    per_job: dict[str, dict[str, float]],
    which: str,
) -> tuple[ModelParams, list[Observation]]:
    learner = Learner()
    observations = []
    for _, name, rate, mode, others, _ in found:
        sm = {job: figures[which] for job, figures in per_job.items()}
        obs = observation(name, rate, mode, others, sm)
        observations.append(obs)
        learner.observe(GPU_MODEL, obs)
    return learner.params(GPU_MODEL), observations


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("result", type=Path, help="a gpu_day --day probes hardware_truth.json")
    args = parser.parse_args()
    result = json.loads(args.result.read_text())
    found = intervals(result)
    per_job = shares(result)
    if not found:
        print("no shared intervals were learned from in this day's runs")
        return 1
    learned = {which: replay(found, per_job, which) for which in ("hints", "steady")}
    names = ("contention", "mps_tenant_cost", "naive_switch_cost")
    print(f"{len(found)} shared intervals replayed into a fresh learner at the published prior")
    print(f"{'parameter':20} {'published':>10} {'fed hints':>10} {'fed steady':>11}")
    for name in names:
        cells = [getattr(DEFAULT_PARAMS, name)] + [
            getattr(learned[w][0], name) for w in ("hints", "steady")
        ]
        print(f"{name:20} " + " ".join(f"{c:10.3f}" for c in cells))
    print()
    print("per interval: measured rate; predicted by the published model and by what each replay")
    print("learned, each fed its own SM figures (hints | steady)")
    errors: dict[str, list[float]] = {}
    for index, (run, name, rate, mode, others, seconds) in enumerate(found):
        cells = []
        for which in ("hints", "steady"):
            obs = learned[which][1][index]
            for label, params in (("published", DEFAULT_PARAMS), ("learned", learned[which][0])):
                predicted = predicted_rate(params, obs)
                errors.setdefault(f"{label}, fed {which}", []).append(predicted - rate)
                cells.append(f"{predicted:5.2f}")
        print(
            f"{run:7} {name:9} {mode:5} +{len(others)} {seconds:3d}s measured {rate:4.2f} | "
            f"hints {cells[0]} {cells[1]} | steady {cells[2]} {cells[3]}"
        )
    print()
    for label, diffs in errors.items():
        rms = (sum(d * d for d in diffs) / len(diffs)) ** 0.5
        mean = sum(diffs) / len(diffs)
        print(f"{label:28} RMS error {rms:.3f} (mean signed {mean:+.3f})")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from quiet_pipe import run_main

    run_main(main)
