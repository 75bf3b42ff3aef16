"""`gpudesk simulate TRACE`: replay a job trace on a SIMULATED station under placement policies."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gpudesk.cli.common import fail, print_json
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_USAGE
from gpudesk.cli.plot_output import PLOT_HELP, plot_target, write_plot

if TYPE_CHECKING:
    from gpudesk.plots.common import PlotTarget
    from gpudesk.policy.interference import ModelParams
    from gpudesk.policy.sim_bounds import LowerBound
    from gpudesk.policy.simulator import SimResult, Simulation, Trace

simulate_app = typer.Typer()

SIMULATE_POLICIES = "exclusive,naive,mps,mig,carma,auto"
FORCED_MODES = ("exclusive", "naive", "mps", "mig")


_TRACE = typer.Argument(..., help="A job trace (JSON), e.g. the CARMA Philly trace.")
_STATION = typer.Option(
    None,
    "--station",
    help="Simulated station: sim:dgx-station-a100, sim:a100-40gb, sim:a100-80gb, sim:h100, "
    "sim:h200, each with xN for N GPUs (default: the trace's, else sim:dgx-station-a100).",
)
_POLICY = typer.Option(
    SIMULATE_POLICIES, "--policy", "-p", help="Policies to compare, comma-separated."
)
_ESTIMATOR = typer.Option(
    "gpumemnet",
    "--estimator",
    help="Jobs' memory hints: a trace estimator's guess (gpumemnet, horus, faketensor) or "
    "measured (the true peak, as the history of earlier runs would give it).",
)
_MIG = typer.Option(
    None,
    "--mig",
    help="MIG-mode GPUs with a fixed layout from the GPU model's own table, e.g. "
    "3=3g.20gb,2g.10gb,1g.5gb,1g.5gb (items without = continue the last GPU; 3= alone: MIG "
    "mode, no instances). Repeat it for more GPUs: --mig 0=7g.40gb --mig 1=7g.40gb.",
)
_MIG_REPARTITION = typer.Option(
    False,
    "--mig-repartition",
    help="As the engine does with [station] mig_repartition = true: under auto and mig, an "
    "idle MIG-mode GPU gets the layout the queue wants where the interference model says "
    "the change pays (10 s per change, assumed).",
)
_QUEUE_ORDER = typer.Option(
    "submission",
    "--queue-order",
    help="As [station] queue_order: submission, or shortest (highest response ratio next, "
    "with run times learned from the replay's finished runs of the same model).",
)
_PROGRESS_LINES = typer.Option(
    False,
    "--progress-lines",
    help="Take every job as printing `progress DONE/TOTAL` lines (as the bundled workloads "
    "do): placement then knows each running job's remaining time from its progress, as the "
    "engine does. Without it only the trace's jobs marked `progress: true` do; the others' "
    "remaining time comes from their model's finished runs, or is unknown.",
)
_TRUTH = typer.Option(
    None,
    "--truth",
    help="JSON object of interference-model parameters for the simulated ground truth "
    "(partial; the rest are the defaults). The policy starts from the defaults.",
)
_TRUTH_FORM = typer.Option(
    "current",
    "--truth-form",
    help="The form of the simulated truth on shared GPUs: current (the model placement "
    "predicts with); queueing-h100 / queueing-all, in which the members of a pair slow each "
    "other unequally, fitted to measured pairs; or once-paid, whose cost of sharing does not "
    "grow with the number of tenants, as an H200 measured (docs/simulator.md). Not with "
    "--lower-bound.",
)
_LEARN = typer.Option(
    True,
    "--learn/--no-learn",
    help="Feed the policy's learner the rates jobs show (as the engine does).",
)
_PRIOR_KNOWS_TRUTH = typer.Option(
    False, "--prior-knows-truth", help="Give the policy the truth as its prior."
)
_LOWER_BOUND = typer.Option(
    False,
    "--lower-bound",
    help="Also print the lower bounds no policy can beat under the simulated truth (makespan: "
    "the latest arrival + run time alone, a fluid throughput bound, and one by kind of job; "
    "mean JCT: the mean run "
    "time alone, and one counting the queueing no schedule avoids) and each policy's ratio to "
    "them. docs/simulator.md has how.",
)
_JSON = typer.Option(False, "--json", help="Print the results as JSON.")
_PLOT = typer.Option(
    None,
    "--plot",
    metavar="FILE",
    help="Also draw each policy's GPU timeline and its makespan, mean JCT and energy. " + PLOT_HELP,
)


@dataclass(frozen=True)
class _Run:
    """What `simulate` ran: the trace, the station, the truth, and each policy's simulation
    and result (in the order --policy names them)."""

    trace: Trace
    station: str
    truth: ModelParams
    sims: list[Simulation]
    results: list[SimResult]
    bound: LowerBound | None = None
    truth_form: str = "current"  # its form on shared GPUs (--truth-form)


@simulate_app.command()
def simulate(
    ctx: typer.Context,
    trace: str = _TRACE,
    station: str | None = _STATION,
    policy: str = _POLICY,
    estimator: str = _ESTIMATOR,
    mig: list[str] | None = _MIG,
    mig_repartition: bool = _MIG_REPARTITION,
    queue_order: str = _QUEUE_ORDER,
    progress_lines: bool = _PROGRESS_LINES,
    truth: Path | None = _TRUTH,
    truth_form: str = _TRUTH_FORM,
    learn: bool = _LEARN,
    prior_knows_truth: bool = _PRIOR_KNOWS_TRUTH,
    lower_bound: bool = _LOWER_BOUND,
    json_out: bool = _JSON,
    plot: str | None = _PLOT,
) -> None:
    """Replay a job trace on a SIMULATED station through the engine's placement policies."""
    target = plot_target(plot, machine_output="--json" if json_out else None)
    policies = _policies(policy)
    # an --estimator the user chose (here or in a config file) must have guesses in the trace;
    # the default may lack them (typer's own click: its ParameterSource is compared by name)
    named = getattr(ctx.get_parameter_source("estimator"), "name", None) != "DEFAULT"
    ran = _run(
        trace,
        policies,
        station=station,
        estimator=estimator,
        truth=truth,
        truth_form=truth_form,
        prior_knows_truth=prior_knows_truth,
        learn=learn,
        mig=mig,
        mig_repartition=mig_repartition,
        with_bound=lower_bound,
        queue_order=queue_order,
        progress_lines=progress_lines,
        estimator_named=named,
    )
    first = ran.results[0]
    if first.impossible == first.jobs:
        reasons = "; ".join(f"job {j['id']} {j['reason']}" for j in first.impossible_jobs[:5])
        fail(
            f"no job of {ran.trace.name} can run on {ran.station} (SIMULATED): {reasons}",
            EXIT_FAILED,
        )
    layouts = {str(g): list(v) for g, v in sorted(ran.sims[0].mig_layouts.items())}
    if json_out:
        _print_json(ran, layouts, estimator=estimator, mig_repartition=mig_repartition, learn=learn)
    else:
        _print_text(ran, layouts, estimator=estimator, learn=learn, truth=truth)
    _plot(target, ran.results, ran.sims[0], ran.trace.name, ran.station)


def _policies(policy: str) -> list[str]:
    """--policy's names, each one the engine knows."""
    from gpudesk.policy.policies import POLICY_NAMES

    policies = [p.strip() for p in policy.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICY_NAMES]
    if unknown or not policies:
        fail(
            f"--policy: unknown policy {', '.join(unknown) or '(none)'}; known: "
            f"{', '.join(POLICY_NAMES)}",
            EXIT_USAGE,
        )
    twice = sorted({p for p in policies if policies.count(p) > 1}, key=policies.index)
    if twice:  # a replay is deterministic: the same policy again is the same row again
        fail(f"--policy: {', '.join(twice)} is named more than once", EXIT_USAGE)
    return policies


def _run(
    trace: str | Path,
    policies: list[str],
    *,
    station: str | None,
    estimator: str,
    truth: Path | None,
    prior_knows_truth: bool,
    learn: bool,
    truth_form: str = "current",
    mig: list[str] | None,
    mig_repartition: bool,
    with_bound: bool = False,
    queue_order: str = "submission",
    progress_lines: bool = False,
    estimator_named: bool = False,
) -> _Run:
    """The trace replayed under each policy; a trace, truth or option the simulator refuses
    is a usage error, as is an --estimator the user named (`estimator_named`) that no job of
    the trace has a guess from."""
    from gpudesk.core.station import QUEUE_ORDERS
    from gpudesk.policy.interference import DEFAULT_PARAMS
    from gpudesk.policy.queueing_form import truth_form as truth_form_named
    from gpudesk.policy.simulator import (
        Simulation,
        TraceError,
        load_trace,
        load_truth,
        with_progress_lines,
    )

    if queue_order not in QUEUE_ORDERS:
        fail(f"--queue-order: expected one of {', '.join(QUEUE_ORDERS)}", EXIT_USAGE)
    try:
        form = truth_form_named(truth_form)
    except ValueError as exc:
        fail(f"--truth-form: {exc}", EXIT_USAGE)
    if form is not None and with_bound:
        fail(
            "--lower-bound is proved for the model's own form only: it cannot be used with "
            f"--truth-form {truth_form}",
            EXIT_USAGE,
        )
    try:
        loaded = load_trace(trace)
        if estimator_named:
            _refuse_absent_estimator(loaded, estimator)
        if progress_lines:
            loaded = with_progress_lines(loaded)
        truth_params = load_truth(truth) if truth is not None else DEFAULT_PARAMS
        chosen = station or loaded.sim_station
        sims = [
            Simulation(
                loaded,
                policy=p,
                station=chosen,
                estimator=estimator,
                truth=truth_params,
                policy_params=truth_params if prior_knows_truth else None,
                learn=learn,
                mig=",".join(mig) if mig else None,
                mig_repartition=mig_repartition,
                queue_order=queue_order,
                truth_form=form,
            )
            for p in policies
        ]
        results = [s.run() for s in sims]
    except (TraceError, ValueError) as exc:
        fail(str(exc), EXIT_USAGE)
    bound = None
    if with_bound and any(r.impossible is None for r in sims[0].runs):
        from gpudesk.policy.sim_bounds import bound_of

        bound = bound_of(sims[0])
    return _Run(loaded, chosen, truth_params, sims, results, bound, truth_form)


def _refuse_absent_estimator(trace: Trace, estimator: str) -> None:
    """A usage error where no job of the trace has a guess from `estimator`: every hint would
    be the true peak, which the user did not ask for."""
    from gpudesk.policy.trace import estimators_given, missing_estimates

    if missing_estimates(trace, estimator) < len(trace.jobs):
        return
    given = estimators_given(trace)
    has = f"guesses from {', '.join(given)}" if given else "no estimator's guesses"
    fail(
        f"--estimator {estimator}: no job of {trace.name} has a {estimator} guess "
        f"(estimate_{estimator}_mb); the trace has {has}, and --estimator measured gives each "
        "job its true peak",
        EXIT_USAGE,
    )


def _print_json(
    ran: _Run,
    layouts: dict[str, list[str]],
    *,
    estimator: str,
    mig_repartition: bool,
    learn: bool,
) -> None:
    from gpudesk.policy.trace import missing_estimates

    sims, results = ran.sims, ran.results
    ratios = _ratios(results)
    extra: dict[str, Any] = {}
    if ran.bound is not None:
        extra["lower_bound"] = {
            **ran.bound.to_dict(),
            "ratios": {r.policy: _bound_ratios(r, ran.bound) for r in results},
        }
    print_json(
        {
            "trace": ran.trace.name,
            "station": ran.station,
            "gpu_model": sims[0].model.name,
            "gpus": sims[0].gpu_count,
            "simulated": True,
            "label": "SIMULATED",
            "estimator": estimator,
            # jobs with no guess from the estimator: their hint is their true peak
            "jobs_without_estimate": missing_estimates(ran.trace, estimator),
            "mig": layouts,
            "mig_repartition": mig_repartition,
            "learn": learn,
            "progress_lines": sum(j.progress for j in ran.trace.jobs),
            "truth": ran.truth.to_dict(),
            "truth_form": ran.truth_form,
            "prior": sims[0].learner.prior.to_dict(),
            "results": [r.to_dict() for r in results],
            "ratios": {k: round(v, 4) if isinstance(v, float) else v for k, v in ratios.items()},
            **extra,
        }
    )


def _bound_ratios(result: SimResult, bound: LowerBound) -> dict[str, Any]:
    """A policy's makespan and mean JCT over the bounds; None for a policy that lost jobs (it
    finished fewer of them: its figures are not comparable), with `lost` saying how many."""
    if result.lost:
        return {"makespan": None, "mean_jct": None, "mean_jct_queue": None, "lost": result.lost}
    return {
        "makespan": round(result.makespan_s / bound.makespan_of(result), 4),
        "mean_jct": round(result.mean_jct_s / bound.mean_jct_s, 4),
        "mean_jct_queue": round(result.mean_jct_s / bound.mean_jct_queue_of(result), 4),
        "lost": 0,
    }


def _bound_lines(bound: LowerBound) -> list[str]:
    alpha, beta = bound.fluid_weight
    term, burst = bound.class_term, bound.burst_term
    given = ""  # the terms that hold for a run of the station as given
    if term is not None:
        kinds = len(term.classes)
        given += (
            f", by class {_hours(term.makespan_s)} (work arriving from {_hours(term.from_s)}, "
            f"{kinds} {'class' if kinds == 1 else 'classes'} of job; a run of the station as "
            "given)"
        )
    if burst is not None and burst.makespan_s > bound.arrival_term_s:  # (else it says nothing)
        given += (
            f", packed {_hours(burst.makespan_s)} ({burst.jobs} job{'' if burst.jobs == 1 else 's'}"
            f" of one program from {_hours(burst.from_s)}, each where it starts; a run of the "
            "station as given)"
        )
    return [
        f"lower bound (SIMULATED truth): makespan {_hours(bound.makespan_s)} = max(latest "
        f"arrival + run time alone {_hours(bound.arrival_term_s)} (job {bound.arrival_job}), "
        f"fluid {_hours(bound.fluid_term_s)} (work arriving from "
        f"{_hours(bound.fluid_from_s)}, weight {alpha:g} x SM + {beta:.3g} per job, at most "
        f"{bound.fluid_throughput:.3f} per GPU){given}); mean JCT "
        f"{_hours(bound.mean_jct_s)} (mean run time alone), {_hours(bound.mean_jct_queue_s)} "
        f"counting the queueing no schedule avoids"
    ]


def _hours(seconds: float) -> str:
    from gpudesk import render

    return render.duration(seconds)


def _print_text(
    ran: _Run, layouts: dict[str, list[str]], *, estimator: str, learn: bool, truth: Path | None
) -> None:
    """The results as a table, under a line that says what was simulated, with notes."""
    sims, results, loaded, chosen = ran.sims, ran.results, ran.trace, ran.station
    first = results[0]
    ratios = _ratios(results)
    mig_text = (
        "; MIG " + " ".join(f"{g}={','.join(v) or '(none)'}" for g, v in layouts.items())
        if layouts
        else ""
    )
    from gpudesk import render

    width = render.terminal_width()
    lines = [
        f"SIMULATED {chosen} ({sims[0].gpu_count} x {sims[0].model.name}{mig_text}): trace "
        f"{loaded.name}, {len(loaded.jobs)} jobs, {_hints_text(loaded, estimator)}, learning "
        f"{'on' if learn else 'off'}{_progress_text(loaded)}"
        f"{', truth from ' + str(truth) if truth else ''}"
        f"{'' if ran.truth_form == 'current' else ', truth of the ' + ran.truth_form + ' form'}; "
        f"ratios against {_baseline(results).policy}"
    ]
    print(render.fill(lines[0], width))
    print(_results_table(results, width, ran.bound))
    notes = list(_ratio_lines(ratios))
    if ran.bound is not None:
        notes[:0] = _bound_lines(ran.bound)
    for r in results:
        if r.mig_violations:
            notes.append(
                f"{r.policy}: {r.mig_violations} whole-GPU placement(s) on a GPU in MIG mode "
                "(impossible on real hardware; played out as if allowed)"
            )
        elif r.not_runnable and r.policy in FORCED_MODES:
            notes.append(f"{r.policy}: not a mode this station can run as given: {r.not_runnable}")
        for j in r.impossible_jobs if r is first else ():
            notes.append(f"impossible: job {j['id']} ({j['name']}) {j['reason']}")
        for reason, jobs in _by_reason(r.lost_jobs).items():
            notes.append(f"lost under {r.policy}: {_listed(jobs)}: {reason}")
    for note in notes:
        print(render.fill(note, width))


def _hints_text(trace: Trace, estimator: str) -> str:
    """ "memory hints from horus", saying so where jobs have no guess from it (their hint is
    then their true peak: sim_records.new_run)."""
    from gpudesk.policy.trace import missing_estimates

    missing, total = missing_estimates(trace, estimator), len(trace.jobs)
    if not missing:
        return f"memory hints from {estimator}"
    if missing == total:
        return f"memory hints: each job's true peak (no job has a {estimator} guess)"
    has = "has" if missing == 1 else "have"
    their = "its" if missing == 1 else "their"
    return (
        f"memory hints from {estimator} ({missing} of {total} jobs {has} none: {their} true "
        "peak is used)"
    )


def _progress_text(trace: Trace) -> str:
    """ ", every job prints progress lines" / ", 3 of 60 jobs print ..." / "" for none."""
    printing = sum(j.progress for j in trace.jobs)
    if not printing:
        return ""
    if printing == len(trace.jobs):
        return ", every job prints progress lines"
    return f", {printing} of {len(trace.jobs)} jobs print progress lines"


def _plot(
    target: PlotTarget | None,
    results: list[SimResult],
    sim: Simulation,
    trace_name: str,
    station: str,
) -> None:
    """`--plot`, after the results are printed (a plot that fails does not lose them)."""
    if target is None:
        return
    from gpudesk import render
    from gpudesk.plots.simulate import simulate_figure, simulate_text

    gpus = sim.gpu_count
    caption = (
        f"{station} ({gpus} × {sim.model.name}): trace {trace_name}, {len(sim.trace.jobs)} "
        f"jobs, {_hints_text(sim.trace, sim.estimator)}"
    )
    write_plot(
        target,
        lambda: simulate_figure(results, gpus=gpus, caption=caption),
        lambda: simulate_text(results, gpus=gpus, caption=caption, width=render.terminal_width()),
    )


def _by_reason(jobs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for j in jobs:
        grouped.setdefault(str(j["reason"]), []).append(j)
    return grouped


LISTED_JOBS = 8  # a lost-jobs line names this many, then counts the rest


def _listed(jobs: list[dict[str, Any]]) -> str:
    """ "job 4 (bert)" or "12 jobs: 1 (a), 2 (b), ... and 4 more"."""
    named = ", ".join(f"{j['id']} ({j['name']})" for j in jobs[:LISTED_JOBS])
    if len(jobs) == 1:
        return f"job {named}"
    more = f" and {len(jobs) - LISTED_JOBS} more" if len(jobs) > LISTED_JOBS else ""
    return f"{len(jobs)} jobs: {named}{more}"


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
    "IMPOSSIBLE",
)


def _baseline(results: list[SimResult]) -> SimResult:
    """What the ratios compare with: the exclusive policy, else the first one run; of those
    that lost the fewest jobs (one that lost jobs finished sooner by not running them)."""
    fewest = min(r.lost for r in results)
    complete = [r for r in results if r.lost == fewest]
    return next((r for r in complete if r.policy == "exclusive"), complete[0])


def _ratios(results: list[SimResult]) -> dict[str, Any]:
    """auto against carma and against the best forced mode the station as given can run, where
    those were run and lost no more jobs than auto (a policy that lost jobs finished sooner by
    not running them)."""
    auto = next((r for r in results if r.policy == "auto"), None)
    if auto is None or auto.makespan_s <= 0:
        return {}
    by = {r.policy: r for r in results if r.makespan_s > 0 and r.lost <= auto.lost}
    out: dict[str, Any] = {}
    if "exclusive" in by:
        out["auto_vs_exclusive"] = auto.makespan_s / by["exclusive"].makespan_s
    carma = by.get("carma")
    if carma is not None:
        out["auto_vs_carma"] = auto.makespan_s / carma.makespan_s
        if carma.energy_kwh > 0:
            out["auto_vs_carma_energy"] = auto.energy_kwh / carma.energy_kwh
    # only the modes the station as given can run (SimResult.not_runnable says why not)
    forced = [by[m] for m in FORCED_MODES if m in by and by[m].not_runnable is None]
    if forced:
        best = min(forced, key=lambda r: r.makespan_s)
        out["auto_vs_best_forced"] = auto.makespan_s / best.makespan_s
        out["best_forced"] = best.policy
    return out


def _ratio_lines(ratios: dict[str, Any]) -> list[str]:
    lines = []
    if "auto_vs_carma" in ratios:
        energy = ratios.get("auto_vs_carma_energy")
        lines.append(
            f"auto ÷ carma: {ratios['auto_vs_carma']:.2f} makespan"
            + (f", {energy:.2f} energy" if energy is not None else "")
        )
    if "auto_vs_best_forced" in ratios:
        lines.append(
            f"auto ÷ best forced mode ({ratios['best_forced']}): "
            f"{ratios['auto_vs_best_forced']:.2f} makespan"
        )
    return lines


def _ratio_cell(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "-"


def _result_row(r: SimResult, base: SimResult, bound: LowerBound | None) -> tuple[object, ...]:
    """One policy's row. A policy that lost jobs finished fewer of them: "lost N" stands where
    its makespan would be, and it has no ratio to compare; with no job finished, no completion
    times either (not 0 s)."""
    from gpudesk import render

    done = r.jobs - r.lost - r.impossible > 0

    def when(seconds: float) -> str:
        return render.duration(seconds) if done else "-"

    if r.lost:
        makespan: tuple[str, ...] = (f"lost {r.lost}", "-", *(("-",) if bound else ()))
    else:
        makespan = (render.duration(r.makespan_s), _ratio_cell(r.makespan_s, base.makespan_s))
        makespan += (_ratio_cell(r.makespan_s, bound.makespan_of(r)),) if bound else ()
    jct: tuple[str, ...] = (when(r.mean_jct_s),)
    if bound is not None:
        jct += ("-" if r.lost else _ratio_cell(r.mean_jct_s, bound.mean_jct_s),)
    return (
        r.policy,
        *makespan,
        *jct,
        when(r.p95_jct_s),
        when(r.mean_wait_s),
        f"{r.gpu_busy_hours:.1f}",
        f"{r.energy_kwh:.2f}",
        _ratio_cell(r.energy_kwh, base.energy_kwh),
        r.oom_crashes,
        r.oom_recovered,
        r.lost,
        r.impossible,
    )


def _results_table(
    results: list[SimResult], width: int | None = None, bound: LowerBound | None = None
) -> str:
    """One row per policy (`_result_row`); the "x" columns are makespan and energy against the
    exclusive policy's (else the first policy's); with a lower bound, "÷LB" columns after
    makespan and mean JCT. Where the whole table is wider than `width`, the times and energy
    come first and the crash and loss counts after, as a table of their own where any is not 0,
    else as one line."""
    from gpudesk import render

    base = _baseline(results)
    headers: tuple[str, ...] = _RESULT_HEADERS
    if bound is not None:
        at = headers.index("MEAN JCT")
        headers = (*headers[:3], "÷LB", headers[at], "÷LB", *headers[at + 1 :])
    rows = [_result_row(r, base, bound) for r in results]
    whole = render.table(headers, rows, right=tuple(range(1, len(headers))))
    if width is None or max(len(line) for line in whole.splitlines()) <= width:
        return whole
    split = headers.index("OOM")
    # makespan, energy and their ratios stay; the other times give way, the lower bound's first
    keep = ("MEAN JCT", "MEAN WAIT", "P95 JCT", "GPU-H", "÷LB")
    optional = [i for name in keep for i, h in enumerate(headers[:split]) if h == name]
    times, left_out = render.fitted_table(headers[:split], [row[:split] for row in rows],
        width=width, optional=optional, right=tuple(range(1, split)), shrink=(0,))  # fmt: skip
    if left_out:
        named = ", ".join(dict.fromkeys(left_out))  # the two ÷LB columns said once
        times += "\n" + render.fill(f"({named} in --json or a wider terminal)", width)
    counts = [(row[0], *row[split:]) for row in rows]
    if not any(any(count for count in row[1:]) for row in counts):
        said = "OOM crashes, recoveries, lost and impossible jobs: none under any policy"
        return f"{times}\n{render.fill(said, width)}"
    losses = render.table(
        ("POLICY", *headers[split:]),
        counts,
        right=tuple(range(1, len(counts[0]))),
        width=width,
        shrink=(0,),
    )
    return f"{times}\n\n{losses}"
