"""The robust rule and the per-job choice of MPS or time-slicing (issue 39 items 3 and 4): what
they do on the bundled traces, SIMULATED.

    python bench/robust_rule.py [--json]

For each bundled trace on its own station, with the model's defaults and with the H100
calibration (bench/results/calibrate-h100-8s.json) as the simulated truth (the policy starts from
the defaults and learns), side by side in one run:

- `carma`: the published baseline;
- `auto, nominal`: sharing scored at the model's own values (as before the robust rule), with
  the per-job choice of time-slicing;
- `auto, 1.5 x`: scored with each mechanism's costs at 1.5 x, never narrowing;
- `auto`: as shipped: at 1.5 x narrowing as the learner measures each parameter
  (`Learner.widths`).

Prints makespan (and ÷ carma), mean and p95 JCT, and how many jobs ran time-sliced.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpudesk.policy.interference import (  # noqa: E402
    DEFAULT_PARAMS,
    InterferenceModel,
    ModelParams,
    pessimistic,
)
from gpudesk.policy.simulator import Simulation, load_trace, load_truth  # noqa: E402

TRACES = sorted((ROOT / "traces").glob("*.json"))
H100 = ROOT / "bench" / "results" / "calibrate-h100-8s.json"
SHIPPED = InterferenceModel.pessimistic


def _nominal(model: InterferenceModel, mechanism: str, gpu_model: str = "") -> ModelParams:
    return model.params(gpu_model)


def _fixed(model: InterferenceModel, mechanism: str, gpu_model: str = "") -> ModelParams:
    return pessimistic(model.params(gpu_model), mechanism)


RULES: dict[str, Callable[[InterferenceModel, str, str], ModelParams]] = {
    "auto, nominal": _nominal,
    "auto, 1.5 x": _fixed,
    "auto": SHIPPED,
}


def run(trace_path: Path, truth_label: str, rule: str) -> dict[str, Any]:
    trace = load_trace(trace_path)
    truth = load_truth(str(H100)) if truth_label == "h100" else DEFAULT_PARAMS
    station = f"sim:{trace.station}" if trace.station else "sim:dgx-station-a100"
    InterferenceModel.pessimistic = RULES.get(rule, SHIPPED)  # type: ignore[method-assign,assignment]
    try:
        policy = "carma" if rule == "carma" else "auto"
        result = Simulation(trace, policy=policy, station=station, truth=truth).run()
    finally:
        InterferenceModel.pessimistic = SHIPPED  # type: ignore[method-assign]
    return {
        "trace": trace_path.stem,
        "truth": truth_label,
        "rule": rule,
        "makespan_s": round(result.makespan_s),
        "mean_jct_s": round(result.mean_jct_s),
        "p95_jct_s": round(result.p95_jct_s),
        "energy_kwh": round(result.energy_kwh, 3),
        "lost": result.lost,
        "time_sliced": result.placement_classes.get("shared-naive", 0),
    }


def hms(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60}h{minutes % 60:02d}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [
        run(trace, truth, rule)
        for trace in TRACES
        for truth in ("defaults", "h100")
        for rule in ("carma", *RULES)
    ]
    if args.json:
        meta = {"date": date.today().isoformat(), "machine": platform.machine(), "rows": rows}
        print(json.dumps(meta, indent=2))
        return
    carma = {(r["trace"], r["truth"]): r for r in rows if r["rule"] == "carma"}
    print("SIMULATED, " + date.today().isoformat())
    print(
        "| trace | truth | policy | makespan | ÷ carma | mean JCT | p95 JCT | energy ÷ carma "
        "| time-sliced |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        base = carma[(r["trace"], r["truth"])]
        lost = f" (lost {r['lost']})" if r["lost"] else ""
        print(
            f"| {r['trace']} | {r['truth']} | {r['rule']} | {hms(r['makespan_s'])}{lost} | "
            f"{r['makespan_s'] / base['makespan_s']:.3f} | {hms(r['mean_jct_s'])} | "
            f"{hms(r['p95_jct_s'])} | {r['energy_kwh'] / base['energy_kwh']:.3f} | "
            f"{r['time_sliced']} |"
        )


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
