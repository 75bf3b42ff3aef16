"""`job_placements` finds each attempt's overlapping attempts through an index (sim_records.
_overlapping), not by scanning its GPU's whole history: the classes must be those of the scan,
zero-length attempts and shared ends included."""

from __future__ import annotations

import random

from gpudesk.policy.sim_records import Occupancy, job_placements, new_run, placement_class
from gpudesk.policy.simulator import TraceJob


def _occupancies(draw: random.Random, jobs: int) -> list[Occupancy]:
    out = []
    for job_id in range(1, jobs + 1):
        start = float(draw.randint(0, 40))
        end = start + float(draw.choice((0, 0, 1, 2, 5, 10, 30)))
        gpus = (draw.randint(0, 2),) if draw.random() < 0.85 else (0, 1)
        mode = draw.choice(("exclusive", "mps", "mps", "naive", "mig"))
        ended = draw.choice(("finished",) * 8 + ("oom", "preempted"))
        out.append(Occupancy(job_id % (jobs // 2 + 1) + 1, gpus, mode, start, end, ended))
    out.sort(key=lambda o: o.end_s)  # the simulator records them as they end
    return out


def _by_scan(occupancies: list[Occupancy]) -> dict[int, str]:
    last = {o.job_id: o for o in occupancies}
    preempted = {o.job_id for o in occupancies if o.ended == "preempted"}
    return {
        job_id: "preempted" if job_id in preempted else placement_class(a, occupancies)
        for job_id, a in last.items()
    }


def test_the_indexed_classes_are_the_scans() -> None:
    for seed in range(200):
        draw = random.Random(seed)
        occupancies = _occupancies(draw, draw.randint(2, 40))
        ids = sorted({o.job_id for o in occupancies})
        runs = [
            new_run(TraceJob(i, f"j{i}", 0.0, 1, 60.0, 1000.0, 10.0, "light", {}), "measured")
            for i in ids
        ]
        got = {p.job_id: p.placement_class for p in job_placements(runs, occupancies)}
        assert got == _by_scan(occupancies), seed
