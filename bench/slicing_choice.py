"""Per job, MPS or time-slicing (issue 39 item 3): what `auto`'s choice does on the bundled
traces, SIMULATED.

    python bench/slicing_choice.py [--json]

For each bundled trace on its own station, with the model's defaults and with the H100
calibration (bench/results/calibrate-h100-8s.json) as the simulated truth (the policy starts from
the defaults and learns), three policies side by side in one run:

- `mps`: forced MPS, the comparator;
- `auto`: time-slicing beside MPS clients only where it gains more than MPS even with its own
  costs at the pessimistic end of their range (model_params.PESSIMISTIC_FACTOR, 1.5 x);
- `auto, nominal`: the same choice at the model's nominal costs (the factor set to 1.0).

Prints makespan, mean and p95 JCT, and how many jobs each ran time-sliced (`shared-naive`).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpudesk.policy import model_params  # noqa: E402
from gpudesk.policy.interference import DEFAULT_PARAMS  # noqa: E402
from gpudesk.policy.simulator import Simulation, load_trace, load_truth  # noqa: E402

TRACES = sorted((ROOT / "traces").glob("*.json"))
H100 = ROOT / "bench" / "results" / "calibrate-h100-8s.json"


def run(trace_path: Path, truth_label: str, rule: str) -> dict[str, Any]:
    trace = load_trace(trace_path)
    truth = load_truth(str(H100)) if truth_label == "h100" else DEFAULT_PARAMS
    station = f"sim:{trace.station}" if trace.station else "sim:dgx-station-a100"
    saved = model_params.PESSIMISTIC_FACTOR
    model_params.PESSIMISTIC_FACTOR = 1.0 if rule == "auto, nominal" else saved
    try:
        policy = "mps" if rule == "mps" else "auto"
        result = Simulation(trace, policy=policy, station=station, truth=truth).run()
    finally:
        model_params.PESSIMISTIC_FACTOR = saved
    return {
        "trace": trace_path.stem,
        "truth": truth_label,
        "rule": rule,
        "makespan_s": round(result.makespan_s),
        "mean_jct_s": round(result.mean_jct_s),
        "p95_jct_s": round(result.p95_jct_s),
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
        for rule in ("mps", "auto", "auto, nominal")
    ]
    if args.json:
        meta = {"date": date.today().isoformat(), "machine": platform.machine(), "rows": rows}
        print(json.dumps(meta, indent=2))
        return
    print("SIMULATED, " + date.today().isoformat())
    print("| trace | truth | rule | makespan | mean JCT | p95 JCT | time-sliced jobs |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        lost = f" (lost {r['lost']})" if r["lost"] else ""
        print(
            f"| {r['trace']} | {r['truth']} | {r['rule']} | {hms(r['makespan_s'])}{lost} | "
            f"{hms(r['mean_jct_s'])} | {hms(r['p95_jct_s'])} | {r['time_sliced']} |"
        )


if __name__ == "__main__":
    main()
