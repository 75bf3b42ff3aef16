"""`gpudesk mig plan` and `gpudesk mig apply-plan` (registered in gpudesk.cli.mig): they ask the
engine (started if not running), since the plan depends on its queue and its station, simulated
or real: the layout the queue would want on each MIG-capable GPU, what it costs or saves the
queue against the whole GPU (SIMULATED), and applying it through the engine."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from gpudesk.cli.common import engine_client, fail, print_model
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_USAGE
from gpudesk.cli.mig_common import (
    NO_MIG_GPU,
    GpuOption,
    JsonOption,
    engine_errors,
    gpu_title,
    paragraph,
    table,
)
from gpudesk.cli.std_streams import already_done
from gpudesk.units import gib

if TYPE_CHECKING:
    from gpudesk.api.models import MigPlanView, QueueTimeView

APPLY_TIMEOUT_S = 300.0  # applying runs several nvidia-smi calls, each with its own timeout


def _queue_time_lines(times: QueueTimeView) -> list[str]:
    """The queue's drain time with the layout against the whole GPU: the line the desk shows,
    the figures, and what they rest on."""
    from gpudesk.render import duration

    current = ""
    if times.current_s is not None:
        never = f", {times.current_cannot_run} never start" if times.current_cannot_run else ""
        now = "+".join(times.current)
        current = f"; with its layout now ({now}): ~{duration(times.current_s)}{never}"
    return [
        paragraph(f"queue time: {times.summary}"),
        paragraph(
            f"exclusive (one job at a time): ~{duration(times.exclusive_s)}{current}; "
            + "; ".join(times.notes),
            first="    ",
        ),
    ]


def _plan_text(plan: MigPlanView) -> str:
    mode = {
        "enabled": "MIG enabled",
        "pending": "MIG enabled, pending a GPU reset",
        "disabled": "MIG disabled",
    }.get(plan.mig_mode, f"MIG {plan.mig_mode}")
    lines = [gpu_title(plan.gpu, plan.name, plan.simulated, mode)]
    lines.append(f"  current  {', '.join(plan.current) or 'no MIG instances'}")
    lines.append(f"  wanted   {', '.join(plan.wanted) or '-'}")
    if plan.slices:
        rows: list[tuple[object, ...]] = [
            (
                s.profile,
                gib(s.memory_mib),
                s.job_id,
                s.job_name,
                f"{gib(s.job_memory_mib)}, {s.job_sm_pct:.0f}% SM",
            )
            for s in plan.slices
        ]
        rows += [(profile, "", "-", "(spare: for jobs to come)", "") for profile in plan.spare]
        lines.append(table(("SLICE", "MEMORY", "JOB", "NAME", "JOB NEEDS"), rows, right=(1, 2)))
    if plan.left_out:
        more = plan.left_out_total - len(plan.left_out)
        lines.append(f"  not given a slice ({plan.left_out_total}):")
        lines.extend(f"    job {j.job_id} {j.job_name}: {j.reason}" for j in plan.left_out)
        if more > 0:
            lines.append(f"    ... and {more} more")
    if plan.commands:
        lines.append(
            "  applying it runs"
            + (" (on a real GPU; this station is SIMULATED)" if plan.simulated else "")
            + ":"
        )
        lines.extend(f"    {command}" for command in plan.commands)
    if plan.auto:
        lines.append(paragraph(f"auto: {plan.auto}"))
    if plan.queue_time is not None:
        lines.extend(_queue_time_lines(plan.queue_time))
    if plan.allowed:
        lines.append(f"  can apply: yes (`gpudesk mig apply-plan --gpu {plan.gpu}`)")
    else:
        lines.append(paragraph(f"can apply: no. {plan.reason}"))
    return "\n".join(lines)


def plan_cmd(
    gpu: Annotated[int | None, typer.Option("--gpu", "-g", min=0, help="Only this GPU.")] = None,
    json_out: JsonOption = False,
) -> None:
    """The MIG layout the engine's queue would want on each MIG-capable GPU.

    Current and wanted slices, the queued job each slice is for, the nvidia-smi commands that
    applying it would run, whether the engine may apply it (`apply-plan`), or why not, and how
    long the queue would take with the layout against the whole GPU under MPS (SIMULATED)."""
    from gpudesk.cli.no_engine import reading_client

    with engine_errors(), reading_client() as client:  # a read: never starts an engine
        result = client.mig_plan(gpu)
    if json_out:
        print_model(result)
        return
    if not result.plans:
        print(NO_MIG_GPU)
        return
    print("\n\n".join(_plan_text(plan) for plan in result.plans))


def apply_plan_cmd(
    gpu: GpuOption,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes", "-y", help="Apply without asking (needed when stdin is not a terminal)."
        ),
    ] = False,
) -> None:
    """Apply the engine's MIG plan for one GPU (see `gpudesk mig plan`).

    Only where [station] mig_repartition = true, the GPU is in MIG mode and no job runs on it.
    Destroys the GPU's MIG instances and creates the planned ones; the queue is not touched."""
    with engine_errors(), engine_client() as client:
        (plan,) = client.mig_plan(gpu).plans
        if not plan.allowed:
            fail(f"the plan for GPU {gpu} cannot be applied. {plan.reason}", EXIT_FAILED)
        print(_plan_text(plan))
        if not yes:
            if sys.stdin is None or not sys.stdin.isatty():
                fail(
                    "applying a MIG plan needs confirmation: run it in a terminal, or pass --yes",
                    EXIT_USAGE,
                )
            if not typer.confirm(
                f"Destroy GPU {gpu}'s MIG instances and create {', '.join(plan.wanted)}?",
                default=False,
            ):
                fail("not applied; nothing was changed", EXIT_FAILED)
        client.timeout = max(client.timeout, APPLY_TIMEOUT_S)
        applied = client.mig_apply(gpu, plan.wanted, confirm=True)
    already_done(f"GPU {gpu}'s MIG plan was applied all the same: gpudesk mig list shows it")
    print(applied.message)
    if applied.mig_devices:
        rows = [
            (s.device, s.profile, s.gpu_instance_id, s.compute_instance_id, s.placement, s.uuid)
            for s in applied.mig_devices
        ]
        print(table(("DEV", "PROFILE", "GI", "CI", "PLACEMENT", "UUID"), rows, right=(0, 2, 3)))
