"""`gpudesk calibrate`: fit the interference model's parameters for this GPU model with short
probes (docs/calibration.md). On a SIMULATED station the same plan runs against the model with
chosen "true" parameters (`--truth`), so the fit can be checked without a GPU.

Only the standard library and typer at module level: torch is imported by the probe processes
alone, never here.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gpudesk.api.state_home import state_home
from gpudesk.cli.common import current_home, engine_client, fail, print_json
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_USAGE
from gpudesk.cli.std_streams import already_done

if TYPE_CHECKING:
    from gpudesk.core.calibration_records import AloneMeasurement, Plan
    from gpudesk.policy.calibration import Report

calibrate_app = typer.Typer()

DEFAULT_SECONDS = 8.0
DEFAULT_MECHANISMS = "naive,mps,mig"


@calibrate_app.command()
def calibrate(
    gpu: int = typer.Option(0, "--gpu", min=0, help="The GPU to calibrate (it must be idle)."),
    seconds: float = typer.Option(
        DEFAULT_SECONDS, "--seconds", min=0.5, max=600.0, help="Seconds each probe run measures."
    ),
    mechanisms: str = typer.Option(
        DEFAULT_MECHANISMS, "--mechanisms", help="Sharing mechanisms to probe, comma-separated."
    ),
    station: str | None = typer.Option(
        None,
        "--station",
        help="sim:MODEL for a SIMULATED GPU (default: GPUDESK_BACKEND, else the real one).",
    ),
    truth: Path | None = typer.Option(
        None,
        "--truth",
        help="JSON of the SIMULATED GPU's true parameters (default: the published defaults).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the plan and its time, run nothing."
    ),
    save: bool | None = typer.Option(
        None,
        "--save/--no-save",
        help="Keep the fit for this GPU model (default: on a real GPU yes, simulated no).",
    ),
) -> None:
    """Fit the interference model's parameters for this GPU model with short probes.

    Runs a torch probe at a few intensities alone, in pairs under naive time-slicing and under
    MPS, and on each free MIG slice where the GPU is already in MIG mode; prints each probe's
    measured rate beside the model's prediction with the published defaults and with the fit,
    and each parameter fitted against its default. Never changes MIG mode, the compute mode,
    clocks or power limits; refuses when the GPU has other processes on it."""
    from gpudesk.core.backend_names import is_simulated
    from gpudesk.policy.calibration import (
        CalibrationError,
        build_plan,
        load_params,
        parse_mechanisms,
        sim_slices,
    )
    from gpudesk.policy.interference import DEFAULT_PARAMS

    chosen = station or os.environ.get("GPUDESK_BACKEND") or "auto"
    try:
        mechs = parse_mechanisms(mechanisms)
        truth_params = load_params(truth) if truth is not None else None
    except CalibrationError as exc:
        fail(str(exc), EXIT_USAGE)
    simulated = is_simulated(chosen)
    if truth_params is not None and not simulated:
        fail(
            "--truth sets a SIMULATED GPU's parameters: use it with --station sim:MODEL", EXIT_USAGE
        )
    if simulated:
        gpu_name = _sim_gpu_name(chosen, gpu)
        plan = build_plan(
            mechs, seconds, free_slices=sim_slices(gpu_name) if "mig" in mechs else ()
        )
        if dry_run:
            _print_plan(plan, f"SIMULATED {chosen} GPU {gpu} ({gpu_name})", json_out)
            return
        _run_simulated(chosen, gpu_name, plan, truth_params or DEFAULT_PARAMS, json_out, save)
        return
    _run_real(chosen, gpu, mechs, seconds, dry_run, json_out, save)


def _sim_gpu_name(station: str, gpu: int) -> str:
    from gpudesk.core.backend_names import check_backend_name
    from gpudesk.hw.telemetry.backend import make_backend

    try:
        backend = make_backend(check_backend_name(station))
    except ValueError as exc:
        fail(f"--station: {exc}", EXIT_USAGE)
    inventory = backend.inventory()
    if gpu >= len(inventory):
        fail(f"--gpu {gpu}: {station} has {len(inventory)} GPU(s)", EXIT_USAGE)
    return inventory[gpu].name or station


def _run_simulated(
    station: str, gpu_name: str, plan: Plan, truth: Any, json_out: bool, save: bool | None
) -> None:
    from gpudesk.policy.calibration import report, simulate_measurements

    result = report(station, gpu_name, plan, simulate_measurements(plan, truth), truth=truth)
    saved = save_fit(result) if save else None
    _show(result, json_out, saved)


def _refuse(message: str) -> None:
    fail(f"gpudesk calibrate cannot run here. {message}", EXIT_FAILED)


def _run_real(
    backend: str,
    gpu: int,
    mechs: tuple[str, ...],
    seconds: float,
    dry_run: bool,
    json_out: bool,
    save: bool | None,
) -> None:
    from gpudesk.hw.probe_runner import (
        CalibrationRefused,
        check_torch,
        inspect_gpu,
        run_plan,
    )
    from gpudesk.policy.calibration import build_plan, report

    if backend == "none":
        _refuse(
            "This station is CPU-only (GPUDESK_BACKEND=none): calibrate measures how jobs slow "
            "each other on an NVIDIA GPU, with torch probes on the GPU and NVML readings. Run it "
            "on the GPU server with an idle GPU, or try it on a SIMULATED GPU with "
            "`gpudesk calibrate --station sim:h100` (add --truth FILE to set its parameters)."
        )
    try:
        target = inspect_gpu(gpu)
    except CalibrationRefused as exc:
        if not dry_run:
            _refuse(str(exc))
        plan = build_plan(mechs, seconds)
        _print_plan(plan, f"GPU {gpu} (not read: {exc})", json_out)
        return
    reference = load_reference(target.name) if target.mig_mode else None
    plan = build_plan(mechs, seconds, mig_mode=target.mig_mode, free_slices=target.free_slices)
    if dry_run:
        _print_plan(plan, f"GPU {gpu} ({target.name}, {target.uuid})", json_out)
        return
    if not plan.runs:
        _refuse("The plan is empty: " + "; ".join(plan.notes or ("nothing to probe",)) + ".")
    if target.mig_mode and not reference:
        _refuse(
            f"GPU {gpu} ({target.name}) is in MIG mode, and a MIG slice's rate is its speed "
            "against the whole GPU, which a GPU in MIG mode cannot show. Calibrate a "
            f"{target.name} outside MIG mode first (its probes alone are kept as the "
            "reference); calibrate never changes MIG mode."
        )
    try:
        info = check_torch()
        say = _progress_printer()
        say(
            f"calibrating GPU {gpu} ({target.name}) with torch {info.get('torch')}: "
            f"{len(plan.runs)} runs, {plan.probe_seconds:g} s of probes, about "
            f"{plan.estimated_wall_s:.0f} s in all"
        )
        done = run_plan(plan, target, reference=reference, say=say)
    except CalibrationRefused as exc:
        _refuse(str(exc))
    result = report(f"GPU {gpu}", target.name, plan, done.measurements)
    result.wall_s = done.wall_s
    result.notes.extend(done.notes)
    saved = save_fit(result) if save is None or save else None
    _show(result, json_out, saved)


def _progress_printer() -> Any:
    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    return say


# --- saving -----------------------------------------------------------------------------------
def calibration_file(gpu_model: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", gpu_model).strip("-") or "gpu"
    # a station's: in the state folder its engine names (an admin calibrates it as root)
    return state_home(current_home()).root / f"calibration-{slug}.json"


def save_fit(result: Report) -> Path:
    """Keep the fit for this GPU model, in two places:

    - `$GPUDESK_HOME/calibration-<GPU model>.json`: the fit, its observations and the probes'
      alone measurements (a later calibration of a MIG-mode GPU compares with them);
    - for a real GPU, the engine's model: the observations go to `Client.model_observe(gpu_model,
      observations, source="calibrated")`, so placement uses them and `gpudesk model show`
      lists the parameters as calibrated. A SIMULATED fit never goes there (it would pass for
      this GPU model's). An engine that cannot be reached is reported, the file kept."""
    path = calibration_file(result.gpu_model)
    data = result.to_dict()
    data["saved_at"] = time.time()
    data["source"] = "simulated" if result.simulated else "calibrated"
    data["alone"] = {
        name: {
            "steps_per_s": m.steps_per_s,
            "sm": m.sm,
            "membw": m.membw,
            "kernel_active": m.kernel_active,
            "burst": m.burst,
            "gap_ms": m.gap_ms,
        }
        for name, m in result.alone.items()
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
    from gpudesk.text import printable_line

    already_done(f"the fit was saved all the same to {printable_line(str(path))}")
    if not result.simulated and result.observations:
        from gpudesk.api.errors import EngineError
        from gpudesk.policy.calibration import alone_observations

        try:
            with engine_client() as client:
                done = client.model_observe(
                    result.gpu_model,
                    [p.observation for p in result.observations] + alone_observations(result.alone),
                    source="calibrated",
                )
            moved = ", ".join(f"{k} ({v})" for k, v in sorted(done.moved.items())) or "none"
            print(
                f"engine model for {done.gpu_model}: {done.accepted} observations taken, "
                f"{done.ignored} ignored; moved {moved} (see `gpudesk model show`)",
                file=sys.stderr,
            )
        except (EngineError, OSError) as exc:
            print(
                f"warning: the engine did not take the observations ({exc}); the fit is kept "
                f"in {path}",
                file=sys.stderr,
            )
    return path


def load_reference(gpu_model: str) -> dict[str, AloneMeasurement] | None:
    """The probes alone from the last saved calibration of this GPU model (not simulated)."""
    from gpudesk.core.calibration_records import AloneMeasurement

    path = calibration_file(gpu_model)
    try:
        data = json.loads(path.read_text())
        if data.get("simulated"):
            return None
        return {
            name: AloneMeasurement(
                name,
                float(m["steps_per_s"]),
                sm=m.get("sm"),
                membw=m.get("membw"),
                kernel_active=m.get("kernel_active"),
                burst=int(m.get("burst") or 0),
                gap_ms=float(m.get("gap_ms") or 0.0),
            )
            for name, m in data["alone"].items()
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


# --- output -----------------------------------------------------------------------------------
def _print_plan(plan: Plan, where: str, json_out: bool) -> None:
    if json_out:
        print_json({"target": where, "plan": plan.to_dict()})
        return
    from gpudesk import render

    print(f"calibration plan for {where}")
    rows = [
        (
            str(k + 1),
            run.mechanism,
            "+".join(run.intensities),
            run.mig.profile if run.mig else "",
            f"{run.seconds:g}",
        )
        for k, run in enumerate(plan.runs)
    ]
    print(render.table(("#", "MECHANISM", "PROBES", "SLICE", "SECONDS"), rows, right=(0, 4)))
    print(
        f"{len(plan.runs)} runs, total probe time {plan.probe_seconds:g} s; expected wall time "
        f"about {plan.estimated_wall_s:.0f} s (each run also starts torch and warms up)"
    )
    for note in plan.notes:
        print(f"note: {note}")


def _show(result: Report, json_out: bool, saved: Path | None) -> None:
    if json_out:
        data = result.to_dict()
        data["saved"] = str(saved) if saved else None
        print_json(data)
        return
    from gpudesk import render

    label = "SIMULATED " if result.simulated else ""
    print(f"{label}calibration of {result.station} ({result.gpu_model})")
    if result.wall_s is not None:
        print(f"took {result.wall_s:.0f} s; {result.plan.probe_seconds:g} s of probes")
    print()
    print("probes alone (the workloads the model sees):")
    rows: list[tuple[str, ...]] = [
        (
            name,
            f"{w.sm * 100:.0f}%",
            f"{w.membw * 100:.0f}%",
            _pct(result.alone[name].kernel_active),
            f"{result.alone[name].steps_per_s:.2f}",
        )
        for name, w in result.workloads.items()
    ]
    print(
        render.table(("PROBE", "SM", "MEMBW", "KERNEL-ACTIVE", "STEPS/S"), rows, right=(1, 2, 3, 4))
    )
    print()
    print("rates (speed against alone on the whole GPU):")
    rows = [
        (
            r.run,
            r.intensity,
            f"{r.measured:.3f}",
            f"{r.by_default:.3f}",
            f"{r.by_fit:.3f}",
            r.informs or "-",
        )
        for r in result.rows
    ]
    print(
        render.table(
            ("RUN", "PROBE", "MEASURED", "DEFAULTS", "FIT", "INFORMS"), rows, right=(2, 3, 4)
        )
    )
    print(f"RMS residual: defaults {_num(result.rms_default)}, fit {_num(result.rms_fit)}")
    print()
    params_rows = [
        (p.name, f"{p.default:.4g}", f"{p.fitted:.4g}", str(p.observations), p.how)
        for p in result.fit.per_param
    ]
    print(
        render.table(("PARAMETER", "DEFAULT", "FITTED", "OBS", "HOW"), params_rows, right=(1, 2, 3))
    )
    if result.truth is not None:
        truth = ", ".join(f"{k}={v:g}" for k, v in result.truth.to_dict().items())
        print(f"SIMULATED truth: {truth}")
    for note in result.to_dict()["notes"]:
        print(f"note: {note}")
    if saved:
        where = "" if result.simulated else " and sent to the engine's model"
        from gpudesk.text import printable_line

        print(f"saved to {printable_line(str(saved))}{where}")  # in GPUDESK_HOME, spelled out


def _pct(value: float | None) -> str:
    return f"{value * 100:.0f}%" if value is not None else "-"


def _num(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "-"
