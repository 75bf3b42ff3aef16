"""`gpudesk simulate TRACE`: replay a job trace on a SIMULATED station under placement policies."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpudesk.cli.common import EXIT_USAGE, fail, print_json

if TYPE_CHECKING:
    from gpudesk.engine.placement.simulator import SimResult

simulate_app = typer.Typer()

SIMULATE_POLICIES = "exclusive,carma,auto,naive,mps,mig"


@simulate_app.command()
def simulate(
    trace: Path = typer.Argument(..., help="A job trace (JSON), e.g. the CARMA Philly trace."),
    station: str | None = typer.Option(
        None,
        "--station",
        help="Simulated station (default: the trace's, else sim:dgx-station-a100).",
    ),
    policy: str = typer.Option(
        SIMULATE_POLICIES, "--policy", "-p", help="Policies to compare, comma-separated."
    ),
    estimator: str = typer.Option(
        "gpumemnet",
        "--estimator",
        help="Which of the trace's memory estimates jobs give as their hint.",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Replay a job trace on a SIMULATED station through the engine's placement policies."""
    from gpudesk.engine.placement.policies import POLICY_NAMES
    from gpudesk.engine.placement.simulator import TraceError, load_trace
    from gpudesk.engine.placement.simulator import simulate as run_simulation

    policies = [p.strip() for p in policy.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICY_NAMES]
    if unknown or not policies:
        fail(
            f"--policy: unknown policy {', '.join(unknown) or '(none)'}; known: "
            f"{', '.join(POLICY_NAMES)}",
            EXIT_USAGE,
        )
    try:
        loaded = load_trace(trace)
        chosen = station or (f"sim:{loaded.station}" if loaded.station else "sim:dgx-station-a100")
        results = run_simulation(loaded, policies, station=chosen, estimator=estimator)
    except (TraceError, ValueError) as exc:
        fail(str(exc), EXIT_USAGE)
    if json_out:
        print_json(
            {
                "trace": loaded.name,
                "station": chosen,
                "simulated": True,
                "estimator": estimator,
                "results": [r.to_dict() for r in results],
            }
        )
        return
    print(
        f"SIMULATED {chosen}: trace {loaded.name}, {len(loaded.jobs)} jobs, memory hints "
        f"from {estimator}; ratios against {_baseline(results).policy}"
    )
    print(_results_table(results))


_RESULT_HEADERS = (
    "POLICY",
    "MAKESPAN",
    "x",
    "MEAN JCT",
    "P95 JCT",
    "MEAN WAIT",
    "GPU-H",
    "kWh",
    "x",
    "OOM",
    "RECOVERED",
    "LOST",
)


def _baseline(results: list[SimResult]) -> SimResult:
    """What the ratios compare with: the exclusive policy, else the first one run."""
    return next((r for r in results if r.policy == "exclusive"), results[0])


def _results_table(results: list[SimResult]) -> str:
    """One row per policy; the "x" columns are makespan and energy against the exclusive
    policy's (else the first policy's)."""
    from gpudesk import render

    base = _baseline(results)
    rows = [
        (
            r.policy,
            render.duration(r.makespan_s),
            f"{r.makespan_s / base.makespan_s:.2f}",
            render.duration(r.mean_jct_s),
            render.duration(r.p95_jct_s),
            render.duration(r.mean_wait_s),
            f"{r.gpu_busy_hours:.1f}",
            f"{r.energy_kwh:.2f}",
            f"{r.energy_kwh / base.energy_kwh:.2f}",
            r.oom_crashes,
            r.oom_recovered,
            r.lost,
        )
        for r in results
    ]
    return render.table(_RESULT_HEADERS, rows, right=tuple(range(1, 12)))
