"""What each of `auto`'s rules earns, and three other ways to score sharing: every bundled trace
replayed with arrivals jittered, `auto` as built beside `auto` with one rule taken out or the
score changed (issue 39 items 3 and 4), SIMULATED.

    python bench/policy_ablation.py [--replays N] [--variants A,B,...] [--progress-lines] [--json]

Rows: each bundled trace on its own station, whole and (t1, the H100 day, the sweep day) with one
GPU in MIG mode (simulator_judge.MIG_LAYOUTS), with the model's defaults as the truth, and whole
with the H100 calibration as the truth (prior: the defaults, learning on). Each row is replayed
`--replays` times (default 20; replay 0 as published, the others with every arrival moved by a
seeded uniform draw in ±5 minutes, as bench/trace_jitter.py does).

Variants (each a patch of the policy for its runs only; the product is unchanged):

- `built`: `auto` as shipped;
- `nominal`: sharing scored at the model's values, not with its costs at the top of their range
  (without the robust rule; tail joins and multi-first go with it, as they are part of it);
- `no-tail`: without tail joins (gpudesk/policy/tail_join.py);
- `no-multi-first`: without multi_first (a one-GPU job leaves a multi-GPU job behind it the idle
  GPUs it could start on);
- `no-keep-idle`: without keeping idle GPUs for the heavier jobs queued behind;
- `no-learn`: the learner fed nothing (its widths stay 1.5 x, its values the prior);
- `regret`: sharing scored at the middle of the cost range (minimax regret, Savage 1951, for a
  gain linear in the costs) rather than at its top;
- `sm-weighted`: the station's gain counted in SM-work (each rate times its SM share), not in
  jobs' rates: packing stops where the SMs are full ("pack complementary jobs rather than
  admitting greedily up to 120 % SM", issue 39 item 3);
- `sm-weighted-past-full`: the rates' gain up to a full GPU, and past it (SM or bandwidth
  pressure above 1) the SM-work gain must be positive as well.

Per row and variant: `auto` ÷ LB (replay 0, median), ÷ carma (replay 0, max and how many replays
slower), ÷ forced `mps` (replay 0, median, how many replays slower by more than 0.1 %), and mean
JCT ÷ its bound (replay 0, median). carma and forced `mps` are run once, unpatched. Nothing here
is tuned; docs/benchmarks.md has what it showed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, contextmanager
from datetime import date
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from simulator_judge import last_gpu_in_mig  # noqa: E402
from trace_jitter import H100_TRUTH, jittered  # noqa: E402

import gpudesk.policy.collocation as collocation  # noqa: E402
from gpudesk.examples import folder  # noqa: E402
from gpudesk.policy.filled_station import FilledStation, Host, Scored  # noqa: E402
from gpudesk.policy.interference import DEFAULT_PARAMS, Workload  # noqa: E402
from gpudesk.policy.rates import Joining, Prediction  # noqa: E402
from gpudesk.policy.sim_bounds import bound_of  # noqa: E402
from gpudesk.policy.simulator import (  # noqa: E402
    Simulation,
    load_trace,
    load_truth,
    with_progress_lines,
)

ROWS = (  # (trace, one GPU in MIG mode, truth)
    ("carma-philly-t1", False, "defaults"),
    ("carma-philly-t1", True, "defaults"),
    ("carma-philly-t1", False, "h100"),
    ("h100-mixed-day", False, "defaults"),
    ("h100-mixed-day", True, "defaults"),
    ("h100-mixed-day", False, "h100"),
    ("sweep-day-a100x4", False, "defaults"),
    ("sweep-day-a100x4", True, "defaults"),
    ("sweep-day-a100x4", False, "h100"),
    ("mig-heavy-t1", False, "defaults"),
)
MINUTES = 5.0  # the jitter, as bench/trace_jitter.py's default
SHIPPED_SCORE = FilledStation.score
SHIPPED_IDLE = collocation.SharingPolicy._idle_option


# ------------------------------------------------------------------ the other ways to score
def sm_work_gain(prediction: Prediction, job: Workload, tenants: Any) -> float:
    """The gain in SM-work, per unit of the joining job's SM share: its rate, less each
    tenant's loss weighted by the tenant's SM share against the job's."""
    share = max(job.sm, 1e-6)
    lost = sum(
        (before - after) * (tenant.sm / share)
        for before, after, tenant in zip(
            prediction.tenants_before, prediction.tenants_after, tenants, strict=False
        )
    )
    return prediction.rate - lost


def past_full(joining: Joining, job: Workload) -> bool:
    pressure = max(
        sum(t.sm for t in joining.tenants) + job.sm,
        sum(t.membw for t in joining.tenants) + job.membw,
    )
    return pressure > 1.0 + 1e-9


def scorer(value_of: Callable[[Joining, Joining, Workload], float]) -> Callable[..., Scored]:
    """FilledStation.score under the robust rule with a placement's value from `value_of(nominal,
    worst, job)`: the predictions at the model's values and with the costs at the top of their
    range, for MPS and for time-slicing beside the MPS clients alike."""

    def score(self: FilledStation, host: Host, load: Workload, robust: bool) -> Scored:
        if not robust:
            return SHIPPED_SCORE(self, host, load, robust)
        share, under_mps = host.share, None
        predicted: Prediction | None = None
        value = value_of(self.joining(host), self.worst(host), load)
        if share == "mps" and host.mps_user is None:
            # time-slicing beside the MPS clients, valued the same way (the shipped score's
            # `ceiling` shortcut holds for its own value only)
            slicing = self.slicing(host)
            sliced = value_of(slicing.nominal, slicing.worst, load)
            if sliced > value:
                under_mps, predicted = self.joining(host)(load), slicing.nominal(load)
                share, value = "naive", sliced
        if value <= 0.0:
            return Scored(share, value)
        if predicted is None:
            predicted = self.joining(host)(load)
        return Scored(share, value, predicted, under_mps)

    return score


def _regret(nominal: Joining, worst: Joining, load: Workload) -> float:
    return 0.5 * (nominal(load).gain + worst(load).gain)


def _sm_weighted(nominal: Joining, worst: Joining, load: Workload) -> float:
    return sm_work_gain(worst(load), load, worst.tenants)


def _sm_weighted_past_full(nominal: Joining, worst: Joining, load: Workload) -> float:
    prediction = worst(load)
    if not past_full(worst, load):
        return prediction.gain
    return min(prediction.gain, sm_work_gain(prediction, load, worst.tenants))


@contextmanager
def variant(name: str) -> Iterator[None]:
    """The policy as `name` has it, for the runs inside."""
    with ExitStack() as stack:
        patch = stack.enter_context
        if name == "nominal":
            patch(mock.patch.object(collocation.SharingPolicy, "robust", False))
        elif name == "no-tail":
            patch(mock.patch.object(collocation, "tail_join", lambda *a, **k: None))
        elif name == "no-multi-first":
            patch(mock.patch.object(collocation, "held_behind", lambda *a, **k: frozenset()))
        elif name == "no-keep-idle":
            patch(
                mock.patch.object(
                    collocation.SharingPolicy,
                    "_idle_option",
                    lambda self, host, keep, demand: SHIPPED_IDLE(self, host, False, demand),
                )
            )
        elif name in ("regret", "sm-weighted", "sm-weighted-past-full"):
            rule = {
                "regret": _regret,
                "sm-weighted": _sm_weighted,
                "sm-weighted-past-full": _sm_weighted_past_full,
            }[name]
            patch(mock.patch.object(FilledStation, "score", scorer(rule)))
            # the pass skips a job at least as SM-heavy as one that gained nothing on a host
            # (scores fall with the job's SM share); the SM-weighted ones need not fall so
            patch(
                mock.patch.object(
                    Host, "gainless_sm", property(lambda s: float("inf"), lambda s, v: None)
                )
            )
        elif name not in ("built", "no-learn"):
            raise SystemExit(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}")
        yield


VARIANTS = (
    "built",
    "nominal",
    "no-tail",
    "no-multi-first",
    "no-keep-idle",
    "no-learn",
    "regret",
    "sm-weighted",
    "sm-weighted-past-full",
)


# ------------------------------------------------------------------------------ the replays
def replays(
    row: tuple[str, bool, str], policy: str, name: str, count: int, progress: bool
) -> list[dict[str, float]]:
    """Each replay's makespan, mean JCT and lost jobs (and, for carma, the bounds)."""
    trace_name, mig, truth_name = row
    trace = load_trace(str(folder("traces") / f"{trace_name}.json"))
    truth = load_truth(str(H100_TRUTH)) if truth_name == "h100" else DEFAULT_PARAMS
    station = trace.sim_station
    layout = last_gpu_in_mig(station) if mig else None
    out = []
    with variant(name if policy == "auto" else "built"):
        for replay in range(count):
            this = jittered(trace, replay, MINUTES)
            if progress:
                this = with_progress_lines(this)
            sim = Simulation(
                this,
                policy=policy,
                station=station,
                truth=truth,
                mig=layout,
                learn=not (policy == "auto" and name == "no-learn"),
            )
            result = sim.run()
            one = {"makespan_s": result.makespan_s, "jct_s": result.mean_jct_s}
            one["lost"] = float(result.lost)
            if policy == "carma":
                bound = bound_of(sim)
                one["lb_s"], one["jct_bound_s"] = bound.makespan_s, bound.mean_jct_s
            out.append(one)
    return out


def summary(
    auto: list[dict[str, float]], carma: list[dict[str, float]], mps: list[dict[str, float]]
) -> dict[str, Any]:
    lb, vs_carma, vs_mps, jct = [], [], [], []
    published: dict[str, float | None] = {"lb": None, "carma": None, "mps": None, "jct": None}
    for i, (a, c, m) in enumerate(zip(auto, carma, mps, strict=True)):
        if a["lost"]:
            continue
        lb.append(a["makespan_s"] / c["lb_s"])
        jct.append(a["jct_s"] / c["jct_bound_s"])
        vs_mps.append(a["makespan_s"] / m["makespan_s"])
        if not c["lost"]:
            vs_carma.append(a["makespan_s"] / c["makespan_s"])
        if i == 0:
            published = {
                "lb": lb[-1],
                "carma": None if c["lost"] else vs_carma[-1],
                "mps": vs_mps[-1],
                "jct": jct[-1],
            }
    return {
        "published": published,
        "vs_lb_median": statistics.median(lb) if lb else None,
        "vs_carma_max": max(vs_carma) if vs_carma else None,
        "slower_than_carma": sum(v > 1.0 for v in vs_carma),
        "vs_mps_median": statistics.median(vs_mps) if vs_mps else None,
        "slower_than_mps": sum(v > 1.001 for v in vs_mps),
        "jct_median": statistics.median(jct) if jct else None,
        "auto_lost": sum(a["lost"] for a in auto),
    }


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replays", type=int, default=20, metavar="N")
    parser.add_argument("--variants", default=",".join(VARIANTS), metavar="A,B,...")
    parser.add_argument("--progress-lines", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.replays < 1:
        parser.error("--replays must be at least 1")
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    tasks = [(row, p, "built") for row in ROWS for p in ("carma", "mps")]
    tasks += [(row, "auto", name) for row in ROWS for name in names]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        futures = {
            task: pool.submit(replays, *task, args.replays, args.progress_lines) for task in tasks
        }
        runs = {task: future.result() for task, future in futures.items()}
    table = []
    for row in ROWS:
        carma, mps = runs[(row, "carma", "built")], runs[(row, "mps", "built")]
        for name in names:
            table.append(
                {
                    "trace": row[0],
                    "station": "one GPU in MIG mode" if row[1] else "whole",
                    "truth": row[2],
                    "variant": name,
                    **summary(runs[(row, "auto", name)], carma, mps),
                }
            )
    if args.json:
        meta = {
            "date": date.today().isoformat(),
            "machine": platform.machine(),
            "replays": args.replays,
            "progress_lines": args.progress_lines,
            "rows": table,
        }
        print(json.dumps(meta, indent=2))
        return
    lines = "every job printing progress lines" if args.progress_lines else "no progress lines"
    print(f"SIMULATED, {date.today().isoformat()}, {args.replays} replays a row, {lines}")
    print(
        "| trace | station | truth | variant | ÷ LB: published, median | ÷ carma: published, "
        "max (slower) | ÷ mps: published, median (slower) | JCT ÷ bound: published, median |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in table:
        p = r["published"]
        print(
            f"| {r['trace']} | {r['station']} | {r['truth']} | {r['variant']} | "
            f"{_f(p['lb'])}, {_f(r['vs_lb_median'])} | {_f(p['carma'])}, "
            f"{_f(r['vs_carma_max'])} ({r['slower_than_carma']}) | {_f(p['mps'])}, "
            f"{_f(r['vs_mps_median'])} ({r['slower_than_mps']}) | {_f(p['jct'], 2)}, "
            f"{_f(r['jct_median'], 2)} |"
        )


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
