"""`gpudesk suspend / resume` (a running job's processes stopped and continued, as Slurm's
`scontrol suspend` and pueue's `pause JOB`) and `gpudesk drain / undrain` (the station starts
no new job, as Slurm drains a node and pueue pauses its queue)."""

from __future__ import annotations

import sys

import typer

from gpudesk.cli.common import (
    JOB_REFS_HELP,
    complete_job,
    engine_client,
    print_json,
    report_outcomes,
)
from gpudesk.cli.job_refs import act_on_known
from gpudesk.cli.no_engine import acting_client
from gpudesk.cli.std_streams import already_done

control_app = typer.Typer()


@control_app.command()
def suspend(
    jobs: list[str] = typer.Argument(..., help=JOB_REFS_HELP, autocompletion=complete_job),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Suspend running jobs: SIGSTOP to their processes, which keep their GPUs and GPU memory.

    A suspended job is still placed (nothing else starts in its room) and its time limit does
    not count the time it spends suspended. `gpudesk resume` continues it; `gpudesk cancel`
    ends it. Exits 1 if a job could not be suspended (not running, or a Slurm job)."""
    with acting_client(list(jobs)) as client:
        results, unknown = act_on_known(client, jobs, client.suspend)
    report_outcomes(results, json_out, unknown)


@control_app.command()
def resume(
    jobs: list[str] = typer.Argument(..., help=JOB_REFS_HELP, autocompletion=complete_job),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Resume suspended jobs: SIGCONT to their processes, where they left off.

    Exits 1 if a job could not be resumed (queued or finished, or a Slurm job)."""
    with acting_client(list(jobs)) as client:
        results, unknown = act_on_known(client, jobs, client.resume)
    report_outcomes(results, json_out, unknown)


@control_app.command()
def drain(
    reason: str | None = typer.Option(
        None, "--reason", "-r", metavar="TEXT", help="Why, shown with the drain."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Drain the station for maintenance: start no new job until `gpudesk undrain`.

    Running jobs go on; submissions are accepted and wait (as Drained). Kept across an engine
    restart. An admin's (a personal engine's owner's). The whole station: a single GPU is not
    drained on its own."""
    with engine_client() as client:
        result = client.drain(reason)
    if result.drain is not None and result.changed:
        already_done("the station was drained all the same: gpudesk engine status says so")
    if json_out:
        from gpudesk.api.models import to_builtins

        print_json(to_builtins(result))
        return
    state = result.drain
    if state is None:  # an engine cannot answer so, but say something true if it did
        print("not drained")
        return
    print(state.line() if result.changed else f"already {state.line()}: that drain is kept")


@control_app.command()
def undrain(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Undrain the station: jobs start again."""
    with engine_client() as client:
        result = client.undrain()
    if result.ended is not None:
        already_done("the station was undrained all the same: gpudesk engine status says so")
    if json_out:
        from gpudesk.api.models import to_builtins

        print_json(to_builtins(result))
        return
    if result.ended is None:
        print("not drained", file=sys.stderr)
        return
    print(f"undrained (it was {result.ended.line()})")
