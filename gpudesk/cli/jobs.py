"""Job control: `gpudesk submit / queue / show / logs / wait / cancel / hold / release /
priority / requeue`. Each command parses, asks the engine, prints."""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpudesk.cli.common import (
    complete_job,
    engine_client,
    fail,
    print_json,
    target_cluster,
)
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_TIMED_OUT, EXIT_USAGE
from gpudesk.cli.plot_output import PLOT_HELP, plot_target, write_plot
from gpudesk.cli.queue_listing import DEFAULT_LIMIT, QueueOptions, list_queue

if TYPE_CHECKING:
    from gpudesk.api.models import (
        ActionOutcome,
        AlternativeView,
        AttemptView,
        JobDetail,
        JobView,
        UsageSummary,
    )
    from gpudesk.plots.common import PlotTarget

jobs_app = typer.Typer()


# ------------------------------------------------------------------------ submit
def _parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            fail(f"--env takes NAME=VALUE, found {pair!r}", EXIT_USAGE)
        env[key] = value
    return env


# Options end at the command: its first word that is not an option, or whatever follows `--`.
# An option gpudesk does not know, before that, is a usage error rather than the start of the
# command (pueue and sbatch read the line the same way); everything from the command on is the
# command's own, `--lr 3` and `--help` included.
@jobs_app.command(context_settings={"allow_interspersed_args": False})
def submit(
    command: list[str] = typer.Argument(
        ...,
        metavar="COMMAND [ARGS]...",
        help="The command to run and its arguments. Put `--` before it when it starts with `-`.",
    ),
    name: str | None = typer.Option(
        None, "--name", "-n", help="Job name (default: the program's name)."
    ),
    gpus: int = typer.Option(0, "--gpus", help="GPUs the job needs."),
    mem: float | None = typer.Option(
        None,
        "--mem",
        help="GPU memory the job needs, in GiB (1,024 MiB, as NVIDIA's profile names count: a "
        "40 GB A100 has 40).",
    ),
    sm: float | None = typer.Option(
        None,
        "--sm",
        help="Share of a GPU's SMs the job keeps busy, % (a hint for placement and the simulator).",
    ),
    dataset: str | None = typer.Option(None, "--dataset", help="Dataset the job reads."),
    selection: str | None = typer.Option(
        None,
        "--selection",
        help="Train on part of the "
        "dataset: a data-selection preset such as el2n-25 "
        "(overrides the dataset's own).",
    ),
    priority: int = typer.Option(
        0,
        "--priority",
        help="Higher runs first (-1000..1000). Above 0 is an admin's to give on a shared "
        "station; anyone may go lower.",
    ),
    max_attempts: int = typer.Option(
        1, "--max-attempts", help="Retry a failed job up to this many attempts in all."
    ),
    env: list[str] = typer.Option(
        [], "--env", "-e", metavar="NAME=VALUE", help="NAME=VALUE for the job (repeatable)."
    ),
    workdir: Path | None = typer.Option(
        None, "--workdir", "-C", metavar="DIR", help="Working directory (default: here)."
    ),
    shell: bool = typer.Option(False, "--shell", help="Run COMMAND (one string) with /bin/sh."),
    time_limit: str | None = typer.Option(
        None,
        "--time",
        "-t",
        metavar="TIME",
        help="Wall-clock limit, as sbatch --time takes it (90 is 90 minutes; 1:30:00, "
        "2-12:00:00) or with units (90s, 30m, 2h): then SIGTERM, SIGKILL after 10 s, and "
        "the job fails as timed out.",
    ),
    after: list[str] = typer.Option(
        [],
        "--after",
        metavar="JOB",
        autocompletion=complete_job,
        help="Start only once these jobs have succeeded (ids or names, comma-separated or "
        "repeated); if one fails or is cancelled, this job is cancelled.",
    ),
    mlflow_uri: str | None = typer.Option(
        None,
        "--mlflow-uri",
        metavar="URI",
        help="Track the job as an MLflow run in this store (sqlite:///mlflow.db, a file here; "
        "http://host:5000): its params, GPU and CPU metrics, energy and result line; the job "
        "gets MLFLOW_RUN_ID. Needs the mlflow extra (docs/tracking.md).",
    ),
    experiment: str | None = typer.Option(
        None,
        "--experiment",
        metavar="NAME",
        help="The MLflow experiment of --mlflow-uri (default: gpudesk).",
    ),
    on: str | None = typer.Option(
        None,
        "--on",
        metavar="PLACE",
        help="station (default), or slurm: submit it to the Slurm cluster with sbatch "
        "(docs/slurm.md).",
    ),
    partition: str | None = typer.Option(None, "--partition", help="Slurm partition."),
    account: str | None = typer.Option(None, "--account", help="Slurm account."),
    qos: str | None = typer.Option(None, "--qos", help="Slurm QOS."),
    json_out: bool = typer.Option(False, "--json", help="Print the new job as JSON."),
) -> None:
    """Queue one job: gpudesk submit [OPTIONS] [--] COMMAND [ARGS]...

    gpudesk's options come first; from the command on, every word is the command's."""
    from gpudesk.api.submit import change_lines
    from gpudesk.core.jobs import JobSpec, SpecError
    from gpudesk.text import safe_text

    if not command:
        fail("no command given: gpudesk submit [OPTIONS] [--] COMMAND [ARGS]...", EXIT_USAGE)
    cluster = target_cluster(on, None, partition=partition, account=account, qos=qos)
    cwd = (workdir or Path.cwd()).expanduser().absolute()
    raw = {
        # a program whose file name is not UTF-8 runs as it is; its name only shows it
        "name": name or safe_text(Path(command[0]).name),
        "command": [" ".join(command)] if shell else command,
        "shell": shell,
        "workdir": str(cwd),
        "env": _parse_env(env),
        "gpus": gpus,
        "memory_gb": mem,
        "sm_pct": sm,
        "dataset": dataset,
        "selection": selection,
        "priority": priority,
        "max_attempts": max_attempts,
        "cluster": cluster,
    }
    if time_limit is not None:
        from gpudesk.core.jobs import MAX_TIME_LIMIT_S
        from gpudesk.units import parse_duration

        try:
            seconds = parse_duration(time_limit)
        except ValueError as exc:
            fail(f"--time: {exc}", EXIT_USAGE)
        if not 1 <= seconds <= MAX_TIME_LIMIT_S:
            fail(
                f"--time: a time limit is 1 s to 366 days; {time_limit} is {seconds:g} s",
                EXIT_USAGE,
            )
        raw["time_limit_s"] = seconds
    if experiment is not None and mlflow_uri is None:
        fail("--experiment names an MLflow experiment: give --mlflow-uri too", EXIT_USAGE)
    if mlflow_uri is not None:
        from gpudesk.core.jobs import resolve_mlflow_uri

        # a relative sqlite path means one here, as a relative --workdir does
        raw["tracking"] = {
            "mlflow_uri": resolve_mlflow_uri(mlflow_uri.strip(), str(Path.cwd())),
            "experiment": experiment,
        }
    try:
        spec = JobSpec.from_dict(raw)
    except SpecError as exc:
        if exc.key == "tracking":  # "mlflow_uri: …" or "experiment: …"
            field, _, message = exc.message.partition(": ")
            fail(f"--{field.replace('_', '-')}: {message}", EXIT_USAGE)
        option = {
            "memory_gb": "--mem",
            "sm_pct": "--sm",
            "max_attempts": "--max-attempts",
            "time_limit_s": "--time",
        }.get(exc.key, f"--{exc.key}")
        fail(f"{option}: {exc.message}", EXIT_USAGE)
    if not cwd.is_dir():
        fail(f"--workdir: {cwd} is not a directory", EXIT_USAGE)
    refs = [ref.strip() for value in after for ref in value.split(",")]
    if any(not ref for ref in refs):
        fail(
            "--after: expected job ids or names separated by commas, e.g. --after 3,prep",
            EXIT_USAGE,
        )
    with engine_client() as client:
        if refs:  # names become ids here: the job waits for those jobs, not later namesakes
            ids = [
                int(ref) if ref.isascii() and ref.isdigit() else client.show(ref).job.id
                for ref in refs
            ]
            try:
                spec = JobSpec.from_dict({**raw, "after": ids})
            except SpecError as exc:
                fail(f"--after: {exc.message}", EXIT_USAGE)
        submitted = client.submit_jobs([spec])
        (job_id,) = submitted.ids
        # a Slurm job: say the id Slurm gave it, as sbatch would
        slurm = client.show(job_id).job.slurm if cluster is not None and not json_out else None
    change = submitted.waits_for_change.get(job_id)
    if json_out:
        print_json(
            {
                "id": job_id,
                "name": spec.name,
                "simulated": submitted.simulated,
                "waits_for_change": change,
            }
        )
    else:
        where = f" as Slurm job {slurm.job_id} on {slurm.cluster}" if slurm else ""
        if submitted.simulated and slurm is None:
            where = f" on a SIMULATED station ({submitted.simulated}: its GPUs are not real)"
        print(f"submitted job {job_id} ({spec.name}){where}")
        # queued, but no GPU will drain for it: say so now, not at the next `queue`
        for line in change_lines(submitted.waits_for_change):
            print(f"note: {line}", file=sys.stderr)


# ------------------------------------------------------------------------- queue
@jobs_app.command()
def queue(
    all_jobs: bool = typer.Option(False, "--all", "-a", help="Include finished jobs."),
    group: str | None = typer.Option(None, "--group", "-g", help="Only this run's jobs."),
    limit: int = typer.Option(
        DEFAULT_LIMIT,
        "--limit",
        help="Show at most N waiting jobs (every running one is shown); with --all or --state, "
        "the newest N jobs. Says what it left out.",
    ),
    user: str | None = typer.Option(None, "--user", "-u", help="Only this user's jobs."),
    me: bool = typer.Option(False, "--me", help="Only my jobs."),
    state: str | None = typer.Option(
        None,
        "--state",
        "-s",
        help="Only jobs in these states, comma-separated: queued, held, running, succeeded, "
        "failed, cancelled (finished ones need no --all).",
    ),
    name: str | None = typer.Option(
        None, "--name", help="Only jobs whose name matches this shell pattern (train-*)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List queued and running jobs (with --all, finished ones too), everyone's unless
    --user or --me."""
    # gpudesk.cli.fast_path runs the same function for a plain command line, before typer
    list_queue(QueueOptions(all_jobs, group, limit, user, me, state, name, json_out))


# -------------------------------------------------------------------------- show
AFTER_LABEL = "  after      "  # `show`'s fields are labelled in this width
FIELD_INDENT = " " * len(AFTER_LABEL)  # where a field's value starts in `show`
ATTEMPT_INDENT = " " * len("      why ")  # an attempt's log, cgroup and reason, continued
EVENT_INDENT = len("  00:00:00  ") + 11  # an event's message, continued under itself


@jobs_app.command()
def show(
    job: str = typer.Argument(
        ..., help="Job id, or name (the newest job of that name).", autocompletion=complete_job
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    env: bool = typer.Option(False, "--env", help="Include the job's full environment."),
    plot: str | None = typer.Option(
        None,
        "--plot",
        metavar="FILE",
        help="Also draw its SM activity, memory, power and CPU over its life. " + PLOT_HELP,
    ),
) -> None:
    """Show one job: its spec, attempts, events and why it waits."""
    from gpudesk import render
    from gpudesk.api.models import to_builtins

    target = plot_target(plot, machine_output="--json" if json_out else None)
    with engine_client() as client:
        data = client.show(job, env=env, series=target is not None)
        # the jobs it runs after, as they stand now (archived ones too: named by id)
        after = client.jobs(ids=data.job.spec.after) if data.job.spec.after and not json_out else []
    if json_out:
        print_json(to_builtins(data))
        _plot_job(target, data)
        return
    j, spec = data.job, data.job.spec
    width = render.terminal_width()
    command = spec.command[0] if spec.shell else shlex.join(spec.command)
    lines = [
        f"job {j.id}: {j.name}",
        f"  user       {j.user} (uid {j.uid})",
        f"  state      {j.state}"
        + (", held" if j.held else "")
        + (f" ({j.reason})" if j.reason else ""),
        *_packed(
            "  command    ",
            ([command] if spec.shell else [shlex.quote(arg) for arg in spec.command])
            + (["[shell]"] if spec.shell else []),
            width,
        ),
        f"  workdir    {spec.workdir or '-'}",
        f"  asks for   {spec.gpus} GPU(s)"
        + (f", {spec.memory_gb:g} GB" if spec.memory_gb else "")
        + (f", {spec.sm_pct:g}% SM" if spec.sm_pct is not None else "")
        + (f", dataset {spec.dataset}" if spec.dataset else "")
        + (f" ({spec.selection})" if spec.selection else ""),
        f"  priority   {spec.priority}   attempts {_attempts_text(j)}"
        + (
            f"   time limit {render.duration(spec.time_limit_s)} per attempt"
            if spec.time_limit_s is not None
            else ""
        ),
        f"  submitted  {render.clock(j.submitted_at)}   started {render.clock(j.started_at)}"
        f"   ended {render.clock(j.ended_at)}"
        f"   time {render.duration(render.runtime(j.started_at, j.ended_at))}",
    ]
    if spec.after:
        states = {other.id: other for other in after}
        refs = [
            f"job {ref} ({states[ref].name}, {states[ref].state})"
            if ref in states
            else f"job {ref} (gone)"
            for ref in spec.after
        ]
        # what it still waits for; once it has run (or was cancelled for them) it waits no more
        until = "starts once all have succeeded" if j.state == "queued" else ""
        lines.extend(_after_lines(refs, until, width))
    if j.group:
        lines.append(f"  run        {j.group}" + (f", sweep {spec.sweep}" if spec.sweep else ""))
    if data.tracking is not None:
        run = data.tracking
        lines.append(
            f"  mlflow     {run.mlflow_uri}, experiment {run.experiment}, "
            + (f"run {run.run_id}" if run.run_id else "run not made yet")
            + (f" (the store: {run.error})" if run.error else "")
        )
    if data.waiting:  # the reason says "waiting ...", "held: ...", "pending in Slurm ..."
        lines.append(render.fill(f"  why        {data.waiting}", width, FIELD_INDENT))
    if data.attempts:
        lines.append("attempts:")
        for a in data.attempts:
            exit_code = "-" if a.exit_code is None else a.exit_code
            took = (
                render.duration((a.ended_at or time.time()) - a.started_at) if a.started_at else "-"
            )
            lines.append(
                f"  #{a.number}  {a.state:<13} {a.placement.slot:<7} "
                f"pid {a.pid or '-':<8} exit {exit_code:<4} {took}"
            )
            lines.append(f"      log {a.log}")
            if a.containment:
                lines.append(render.fill(f"      in  {a.containment}", width, ATTEMPT_INDENT))
            lines.append(render.fill(f"      why {a.placement.reason}", width, ATTEMPT_INDENT))
            lines.extend(_alternative_lines(a.placement.alternatives))
    lines.extend(_usage_lines(data.usage, j, data.attempts))
    lines.append("events:")
    for e in data.events:
        event = f"  {render.clock(e.ts)}  {e.state or e.kind:<10} {e.message}"
        lines.append(render.fill(event, width, " " * EVENT_INDENT))
    if data.env is not None:
        lines.append("environment:")
        lines.extend(f"  {k}={v}" for k, v in sorted(data.env.items()))
    print("\n".join(lines))
    _plot_job(target, data)


def _after_lines(refs: list[str], until: str, width: int) -> list[str]:
    """show's `after` field in `width` columns: the jobs it runs after, a sweep's many of them
    continued under the first, each job's mention kept on one line; then `until` ("" for
    nothing), wrapped as prose."""
    pieces = [f"{ref}," for ref in refs[:-1]] + [refs[-1] + (":" if until else "")]
    return _packed(AFTER_LABEL, pieces + until.split(), width)


def _packed(label: str, pieces: list[str], width: int) -> list[str]:
    """A field of `show` in `width` columns: `pieces` after `label`, as many to a line as fit,
    the rest continued under the first; a piece (a job's mention, a command's argument with
    its quotes) is never split, so a longer one runs past `width`."""
    lines = [label + pieces[0]] if pieces else [label.rstrip()]
    for piece in pieces[1:]:
        if len(lines[-1]) + 1 + len(piece) > width:
            lines.append(FIELD_INDENT + piece)
        else:
            lines[-1] += " " + piece
    return lines


def _plot_job(target: PlotTarget | None, data: JobDetail) -> None:
    """`show --plot`, after what show prints."""
    if target is None:
        return
    from gpudesk import render
    from gpudesk.plots.job import job_figure, job_text

    write_plot(
        target,
        lambda: job_figure(data),
        lambda: job_text(data, width=render.terminal_width()),
    )


def _alternative_lines(alternatives: list[AlternativeView]) -> list[str]:
    """What placement weighed: each slot with the job's predicted speed there (1.00 = alone
    on a whole GPU) and the work per second the station gains."""
    if not alternatives:
        return []
    lines = ["      weighed (predicted speed, station gain):"]
    for alt in alternatives:
        mark = "*" if alt.note == "chosen" else " "
        note = f"  {alt.note}" if alt.note and alt.note != "chosen" else ""
        lines.append(f"       {mark} {alt.slot:<16} {alt.rate:5.2f} {alt.gain:6.2f}{note}")
    return lines


def _attempts_text(job: JobView) -> str:
    """ "2/3", or after a requeue "1/3 since requeued (4 in all)"."""
    before = job.attempts_before_requeue
    counted = f"{job.attempts - before}/{job.max_attempts}"
    return f"{counted} since requeued ({job.attempts} in all)" if before else counted


def _na(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def _usage_lines(
    usage: UsageSummary | None, job: JobView, attempts: list[AttemptView]
) -> list[str]:
    """What a job used since it started: energy (Wh, as every view shows it; `--json` keeps
    joules) with carbon, CPU, memory, I/O."""
    from gpudesk import render
    from gpudesk.units import watt_hours

    if not usage:
        if job.terminal and not attempts:
            return [f"usage:     none: it never ran ({job.state} before it started)"]
        return ["usage:     not measured yet"]
    on_mig = any(a.placement.mode == "mig" for a in attempts)

    def mib(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f} MiB"

    lines = ["usage:"]
    if usage.gpu_j is not None:
        idle = usage.gpu_idle_j
        how = {
            # a MIG slice's energy is not measured: NVML counts the whole GPU's, every slice
            # and the idle ones included
            "exclusive": "the whole GPU in MIG mode, not the slice's own: its idle slices included"
            if on_mig
            else "exclusive GPU",
            "sm share": "shared GPU, split by SM share",
            "mps share": "shared GPU, split by SM share, its MPS clients' share evenly",
            "even": "shared GPU, split evenly",
        }.get(usage.split or "", "")
        source = "energy counter" if usage.gpu_source == "counter" else f"{usage.gpu_source} power"
        baseline = (
            f" = {watt_hours(usage.gpu_above_idle_j)} above an idle baseline of {watt_hours(idle)}"
            if idle is not None
            else " (idle baseline unknown)"
        )
        lines.append(
            f"  GPU energy {render.energy_cell(usage.gpu_j, usage.estimate)}{baseline}"
            f"  [{source}; {how}]" + ("  ESTIMATE" if usage.estimate else "")
        )
    cpu = usage.cpu_j
    lines.append(
        "  CPU energy "
        + (
            f"{watt_hours(cpu)} (RAPL, by share of busy CPU time)"
            if cpu is not None
            else "n/a (RAPL not readable here)"
        )
    )
    if usage.total_j is not None:
        lines.append(
            f"  carbon     {_na(usage.carbon_g, '{:.2f}')} g CO2e at {usage.grid_g_per_kwh:g} g/kWh"
        )
    lines.append(
        f"  CPU time   {render.duration(usage.cpu_s)}   peak RSS "
        f"{mib(usage.rss_peak_mib)}   I/O read {mib(usage.io_read_mib)} "
        f"written {mib(usage.io_write_mib)}"
    )
    return lines


# -------------------------------------------------------------------------- logs
@jobs_app.command()
def logs(
    job: str = typer.Argument(..., help="Job id or name.", autocompletion=complete_job),
    follow: bool = typer.Option(
        False,
        "--follow",
        "-f",
        help="Keep printing new output until the job ends (across retries).",
    ),
    attempt: int | None = typer.Option(
        None, "--attempt", help="Which attempt (default: the latest)."
    ),
    lines: int | None = typer.Option(
        None,
        "--lines",
        "-n",
        min=0,
        metavar="N",
        help="Only the last N lines (with -f: then follow, as tail -n N -f).",
    ),
    raw: bool = typer.Option(
        False,
        "--raw",
        help="Write the job's control characters and escape sequences to the terminal as they "
        "are (without it a terminal gets them spelled out, as \\x1b; a pipe always gets them "
        "as they are). Another user's job is always spelled out.",
    ),
) -> None:
    """Print a job's output."""
    from gpudesk import joblog
    from gpudesk.cli.logs import LogFollower
    from gpudesk.untrusted import UntrustedFileError

    with engine_client() as client:
        data = client.show(job)
        attempts = data.attempts
        if attempt is not None:
            attempts = [a for a in attempts if a.number == attempt]
            if not attempts:
                fail(
                    f"job {data.job.id} has no attempt {attempt} (it has {len(data.attempts)})",
                    EXIT_USAGE,
                )
        if not attempts and not follow:
            print(
                f"job {data.job.id} has not started yet: {data.waiting or ''}",
                file=sys.stderr,
            )
            return
        follower = LogFollower(
            client,
            data.job.id,
            sys.stdout,
            data.job.uid,
            # someone else's job (root reading it here, directly) is spelled out as the
            # engine spells it out for its other readers
            spell_controls=(not raw and sys.stdout.isatty()) or os.geteuid() != data.job.uid,
            keep_carriage_return=os.geteuid() == data.job.uid,
        )
        try:
            if follow and attempt is None:
                ended = follower.follow(lines)
            else:
                follower.dump(attempts[-1], lines)
                return
        except UntrustedFileError as exc:  # read directly: the engine would refuse it too
            fail(joblog.refusal(data.job.id, exc))
    # like `tail --pid` plus the job's own status, so `gpudesk logs -f 3 && next` chains
    raise typer.Exit(ended.exit_status)


@jobs_app.command()
def wait(
    jobs: list[str] = typer.Argument(..., help="Job ids or names.", autocompletion=complete_job),
    timeout: float | None = typer.Option(
        None, "--timeout", min=0, help="Give up after this many seconds (exit 124)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing; only exit."),
) -> None:
    """Wait until jobs end; exit 0 if all succeeded, else with the status of the first one
    (in the order given) that did not: its exit code, 128+N if signal N killed it, or 1."""
    from gpudesk.api.submit import WaitStopped, wait_for_jobs

    deadline = None if timeout is None else time.monotonic() + timeout
    with engine_client() as client:
        ids: list[int] = []
        for ref in jobs:  # every job resolved first: one unknown job, and none is waited for
            job_id = client.show(ref).job.id
            if job_id not in ids:
                ids.append(job_id)
        try:
            ended = wait_for_jobs(
                client,
                ids,
                stop=None if deadline is None else lambda: time.monotonic() >= deadline,
                on_end=None if quiet else lambda job: print(job.outcome, flush=True),
                usage=False,
            )
        except WaitStopped:
            if not quiet:
                print(f"gave up after {timeout:g} s; some jobs have not ended", file=sys.stderr)
            raise typer.Exit(EXIT_TIMED_OUT) from None
    by_id = {job.id: job for job in ended}
    failed = [by_id[job_id] for job_id in ids if by_id[job_id].exit_status != 0]
    raise typer.Exit(failed[0].exit_status if failed else 0)


# ------------------------------------------------------------------- job control
def _report_outcomes(results: list[ActionOutcome], json_out: bool) -> None:
    """Print what a job-control request did to each job. The engine resolves every job first
    (one unknown job: an error, nothing done); exits 1 if it refused any job."""
    from gpudesk.api.models import to_builtins

    if json_out:
        print_json({"results": to_builtins(results)})
    else:
        for r in results:
            print(f"job {r.id} ({r.name}): {r.outcome}")
    if any(not r.ok for r in results):
        raise typer.Exit(EXIT_FAILED)


@jobs_app.command()
def cancel(
    jobs: list[str] = typer.Argument(..., help="Job ids or names.", autocompletion=complete_job),
    grace: float = typer.Option(
        10.0, "--grace", metavar="SECONDS", help="Seconds between SIGTERM and SIGKILL."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Cancel jobs: queued ones at once, running ones with SIGTERM, then SIGKILL after --grace."""
    with engine_client() as client:
        results = client.cancel(list(jobs), grace=grace)
    _report_outcomes(results, json_out)


@jobs_app.command()
def hold(
    jobs: list[str] = typer.Argument(..., help="Job ids or names.", autocompletion=complete_job),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Hold queued jobs: they keep their place in the queue but do not start until released.

    Exits 1 if a job could not be held (it is running or finished)."""
    with engine_client() as client:
        results = client.hold(list(jobs))
    _report_outcomes(results, json_out)


@jobs_app.command()
def release(
    jobs: list[str] = typer.Argument(..., help="Job ids or names.", autocompletion=complete_job),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Release held jobs: they may start again, from the place in the queue they kept."""
    with engine_client() as client:
        results = client.release(list(jobs))
    _report_outcomes(results, json_out)


@jobs_app.command()
def priority(
    jobs: list[str] = typer.Argument(..., help="Job ids or names.", autocompletion=complete_job),
    value: int | None = typer.Option(
        None, "--set", help="The new priority, -1000..1000 (higher runs first)."
    ),
    up: bool = typer.Option(False, "--up", help="Raise the priority by one."),
    down: bool = typer.Option(False, "--down", help="Lower the priority by one."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Change jobs' priority (--set N, --up or --down).

    A queued job moves in the queue at once.

    A running or finished job keeps it for when it is queued again (a retry, a requeue).

    On a shared station only an admin raises a priority above 0; you may lower yours, and
    raise it back to 0."""
    from gpudesk.core.jobs import check_priority

    given = [
        flag
        for flag, used in (("--set", value is not None), ("--up", up), ("--down", down))
        if used
    ]
    if len(given) != 1:
        fail(
            "give exactly one of --set N, --up or --down"
            + (f" (found {' and '.join(given)})" if given else ""),
            EXIT_USAGE,
        )
    if value is not None:
        try:
            check_priority(value)
        except ValueError as exc:
            fail(f"--set: {exc}", EXIT_USAGE)
    with engine_client() as client:
        if value is None:
            results = client.set_priority(list(jobs), delta=1 if up else -1)
        else:
            results = client.set_priority(list(jobs), priority=value)
    _report_outcomes(results, json_out)


@jobs_app.command()
def requeue(
    jobs: list[str] = typer.Argument(..., help="Job ids or names.", autocompletion=complete_job),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Run finished jobs again (failed, cancelled or succeeded) as the same jobs.

    Each gets a fresh budget of max_attempts; its attempt numbers continue.

    Exits 1 if a job is still running, or if requeueing it would leave its owner more
    queued jobs than [station] max_queued_per_user allows."""
    with engine_client() as client:
        results = client.requeue(list(jobs))
    _report_outcomes(results, json_out)
