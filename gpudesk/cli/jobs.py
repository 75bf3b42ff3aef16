"""Job control: `gpudesk submit / queue / show / logs / cancel / hold / release / priority /
requeue` (`wait`: gpudesk.cli.wait). Each command parses, asks the engine, prints."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpudesk.cli import job_picks, submit_extras
from gpudesk.cli.common import (
    JOB_REFS_HELP,
    ONE_JOB_HELP,
    complete_job,
    complete_signal,
    fail,
    print_json,
    target_cluster,
)
from gpudesk.cli.common import report_outcomes as _report_outcomes
from gpudesk.cli.exit_codes import EXIT_USAGE
from gpudesk.cli.job_picks import Picks, check_picks, picked_refs
from gpudesk.cli.job_refs import act_on_known
from gpudesk.cli.no_engine import acting_client, engine_kept_waiting, reading_client
from gpudesk.cli.plot_output import PLOT_HELP, plot_target
from gpudesk.cli.queue_listing import DEFAULT_LIMIT, QueueOptions, list_queue
from gpudesk.core.protocol import MAX_ROW_ID
from gpudesk.text import printable_line, quoted

if TYPE_CHECKING:
    from gpudesk.api.client import Client
    from gpudesk.api.models import (
        AttemptView,
        JobDetail,
    )
    from gpudesk.cli.logs import LogFollower

jobs_app = typer.Typer()


# ------------------------------------------------------------------------ submit
# submit's arguments and options, declared once here so that the command reads as its steps
_COMMAND = typer.Argument(
    ...,
    metavar="COMMAND [ARGS]...",
    help="The command to run and its arguments. Put `--` before it when it starts with `-`.",
)
_NAME = typer.Option(None, "--name", "-n", help="Job name (default: the program's name).")
_GPUS = typer.Option(0, "--gpus", help="GPUs the job needs.")
_MEM = typer.Option(
    None,
    "--mem",
    help="GPU memory the job needs, in GiB (1,024 MiB, as NVIDIA's profile names count: a "
    "40 GB A100 has 40).",
)
_SM = typer.Option(
    None,
    "--sm",
    help="Share of a GPU's SMs the job keeps busy on average over its run, start-up included, %"
    " (a hint for placement and the simulator; docs/interference.md).",
)
_DATASET = typer.Option(None, "--dataset", help="Dataset the job reads.")
_SELECTION = typer.Option(
    None,
    "--selection",
    help="Train on part of the "
    "dataset: a data-selection preset such as el2n-25 "
    "(overrides the dataset's own).",
)
_PRIORITY = typer.Option(
    0,
    "--priority",
    help="Higher runs first (-1000..1000). Above 0 is an admin's to give on a shared "
    "station; anyone may go lower.",
)
_MAX_ATTEMPTS = typer.Option(
    1, "--max-attempts", help="Retry a failed job up to this many attempts in all."
)
_ENV = typer.Option(
    [], "--env", "-e", metavar="NAME=VALUE", help="NAME=VALUE for the job (repeatable)."
)
_WORKDIR = typer.Option(
    None, "--workdir", "-C", metavar="DIR", help="Working directory (default: here)."
)
_SHELL = typer.Option(False, "--shell", help="Run COMMAND (one string) with /bin/sh.")
_TIME = typer.Option(
    None,
    "--time",
    "-t",
    metavar="TIME",
    help="Wall-clock limit, as sbatch --time takes it (90 is 90 minutes; 1:30:00, "
    "2-12:00:00) or with units (90s, 30m, 2h): then SIGTERM, SIGKILL after 10 s, and "
    "the job fails as timed out. none (or 0, UNLIMITED): no limit, over a config's default.",
)
_AFTER = typer.Option(
    [],
    "--after",
    metavar="JOB",
    autocompletion=complete_job,
    help="Start only once these jobs have succeeded (ids or names, comma-separated or "
    "repeated; an array's id: every task of it, 144_2: one task, as Slurm's afterok); if one "
    "fails or is cancelled, this job is cancelled.",
)
_MLFLOW_URI = typer.Option(
    None,
    "--mlflow-uri",
    metavar="URI",
    help="Track the job as an MLflow run in this store (sqlite:///mlflow.db, a file here; "
    "http://host:5000): its params, GPU and CPU metrics, energy and result line; the job "
    "gets MLFLOW_RUN_ID. Needs the mlflow extra (docs/tracking.md).",
)
_EXPERIMENT = typer.Option(
    None,
    "--experiment",
    metavar="NAME",
    help="The MLflow experiment of --mlflow-uri (default: gpudesk).",
)
_ON = typer.Option(
    None,
    "--on",
    metavar="PLACE",
    help="station (default), or slurm: submit it to the Slurm cluster with sbatch (docs/slurm.md).",
)
_PARTITION = typer.Option(None, "--partition", help="Slurm partition.")
_ACCOUNT = typer.Option(None, "--account", help="Slurm account.")
_QOS = typer.Option(None, "--qos", help="Slurm QOS.")
_SUBMIT_JSON = typer.Option(False, "--json", help="Print the new job as JSON.")
_HOLD = typer.Option(
    False,
    "--hold",
    help="Queue it held: it keeps its place but does not start until `gpudesk release JOB` "
    "(as sbatch --hold; pueue add --stashed). Station jobs only.",
)
_PARSABLE = typer.Option(
    False,
    "--parsable",
    help="Print the new job's id alone, for a script (`id=$(gpudesk submit --parsable -- …)`), "
    "as sbatch --parsable does; notes still go to stderr.",
)
_PREEMPTIBLE = typer.Option(
    False,
    "--preemptible",
    help="It may give way to a higher-priority or starving job on a full station: it gets "
    "--preempt-signal, then SIGTERM after --preempt-grace, and is requeued to resume "
    "(GPUDESK_PREEMPTED=1). It should checkpoint and exit non-zero (docs/preemption.md).",
)
_PREEMPT_SIGNAL = typer.Option(
    None,
    "--preempt-signal",
    metavar="SIG",
    help="The signal that asks it to checkpoint: USR1 (default), USR2, INT, TERM or HUP.",
)
_PREEMPT_GRACE = typer.Option(
    None,
    "--preempt-grace",
    metavar="SECONDS",
    help="Seconds from that signal to SIGTERM (default 120, at most 3600).",
)


# Options end at the command: its first word that is not an option, or whatever follows `--`.
# An option gpudesk does not know, before that, is a usage error rather than the start of the
# command (pueue and sbatch read the line the same way); everything from the command on is the
# command's own, `--lr 3` and `--help` included.
@jobs_app.command(context_settings={"allow_interspersed_args": False})
def submit(
    command: list[str] = _COMMAND,
    name: str | None = _NAME,
    gpus: int = _GPUS,
    mem: float | None = _MEM,
    sm: float | None = _SM,
    dataset: str | None = _DATASET,
    selection: str | None = _SELECTION,
    priority: int = _PRIORITY,
    max_attempts: int = _MAX_ATTEMPTS,
    env: list[str] = _ENV,
    workdir: Path | None = _WORKDIR,
    shell: bool = _SHELL,
    time_limit: str | None = _TIME,
    after: list[str] = _AFTER,
    mlflow_uri: str | None = _MLFLOW_URI,
    experiment: str | None = _EXPERIMENT,
    on: str | None = _ON,
    partition: str | None = _PARTITION,
    account: str | None = _ACCOUNT,
    qos: str | None = _QOS,
    json_out: bool = _SUBMIT_JSON,
    parsable: bool = _PARSABLE,
    hold: bool = _HOLD,
    preemptible: bool = _PREEMPTIBLE,
    preempt_signal: str | None = _PREEMPT_SIGNAL,
    preempt_grace: float | None = _PREEMPT_GRACE,
    begin: str | None = submit_extras.BEGIN,
    comment: str | None = submit_extras.COMMENT,
    array: str | None = submit_extras.ARRAY,
    after_any: list[str] = submit_extras.AFTER_ANY,
    after_notok: list[str] = submit_extras.AFTER_NOTOK,
    notify: str | None = submit_extras.NOTIFY,
) -> None:
    """Queue one job: gpudesk submit [OPTIONS] [--] COMMAND [ARGS]...

    gpudesk's options come first; from the command on, every word is the command's."""
    from gpudesk.cli import submit_job

    if not command:
        fail("no command given: gpudesk submit [OPTIONS] [--] COMMAND [ARGS]...", EXIT_USAGE)
    if parsable and json_out:
        fail("--parsable and --json each say how to print the job: give one", EXIT_USAGE)
    cluster = target_cluster(on, None, partition=partition, account=account, qos=qos)
    cwd = (workdir or Path.cwd()).expanduser().absolute()
    raw = submit_job.job_fields(
        command,
        name=name,
        shell=shell,
        cwd=cwd,
        env=env,
        gpus=gpus,
        mem=mem,
        sm=sm,
        dataset=dataset,
        selection=selection,
        priority=priority,
        max_attempts=max_attempts,
        cluster=cluster,
    )
    submit_job.add_limit_and_tracking(raw, time_limit, mlflow_uri, experiment)
    submit_job.add_preemption(raw, preemptible, preempt_signal, preempt_grace)
    extras = submit_extras.apply(raw, begin, comment, array, after_any, after_notok, notify)
    spec = submit_job.checked_spec(raw)
    submit_job.check_gpu_hints(spec)
    if cluster is None:  # a Slurm job's folder is the cluster's to see
        submit_job.check_workdir_usable(cwd)
    refs = submit_job.after_refs(after)
    if hold and cluster is not None:
        fail("--hold: a job sent to Slurm cannot be held at submit yet", EXIT_USAGE)
    submit_job.submit_and_report(
        raw,
        spec,
        refs,
        to_cluster=cluster is not None,
        json_out=json_out,
        parsable=parsable,
        hold=hold,
        extras=extras,
    )


# ------------------------------------------------------------------------- queue
@jobs_app.command()
def queue(
    all_jobs: bool = typer.Option(False, "--all", "-a", help="Include finished jobs."),
    group: str | None = typer.Option(None, "--group", "-g", help="Only this run's jobs."),
    limit: int = typer.Option(
        DEFAULT_LIMIT,
        "--limit",
        min=1,
        help="Show at most N waiting jobs (every running one is shown); with --all or --state, "
        "the newest N jobs. Says what it left out.",
    ),
    user: str | None = typer.Option(None, "--user", "-u", help="Only this user's jobs."),
    me: bool = typer.Option(False, "--me", help="Only my jobs."),
    state: str | None = typer.Option(
        None,
        "--state",
        "-s",
        help="Only jobs in these states, comma-separated: queued, held, running, suspended, "
        "succeeded, failed, cancelled (finished ones need no --all).",
    ),
    name: str | None = typer.Option(
        None,
        "--name",
        help="Only jobs whose name matches this shell pattern, case-sensitive (train-*, "
        "lr-[0-9]?); the engine matches it, so --limit counts only the matches.",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    long: bool = typer.Option(
        False,
        "--long",
        "-l",
        help="Also each running job's remaining time, and each job's begin time, array task "
        "and comment.",
    ),
) -> None:
    """List queued and running jobs (with --all, finished ones too), everyone's unless
    --user or --me. Asks a running engine; never starts one (`gpudesk engine start` does)."""
    # gpudesk.cli.fast_path runs the same function for a plain command line, before typer
    # past the largest id a store holds, a limit is every job ("1<=x<=9223372036854775807"
    # would only say the store's own bound)
    limit = min(limit, MAX_ROW_ID)
    list_queue(QueueOptions(all_jobs, group, limit, user, me, state, name, json_out, long))


# -------------------------------------------------------------------------- show


@jobs_app.command()
def show(
    job: str = typer.Argument(..., help=ONE_JOB_HELP, autocompletion=complete_job),
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
    from gpudesk.cli.job_detail import detail_lines, plot_job

    target = plot_target(plot, machine_output="--json" if json_out else None)
    with reading_client(job) as client:
        data = client.show(job, env=env, series=target is not None)
        # the jobs it runs after, as they stand now (archived ones too: named by id)
        after = client.jobs(ids=data.job.spec.after) if data.job.spec.after and not json_out else []
    if json_out:
        print_json(to_builtins(data))
    else:
        width = render.terminal_width()
        print("\n".join(detail_lines(data, after, width, render.table_width())))
    plot_job(target, data)


# -------------------------------------------------------------------------- logs
def _stdout_follower(client: Client, data: JobDetail, raw: bool) -> LogFollower:
    """`gpudesk logs`' printer: spelled out on a terminal (unless `raw`), else the job's bytes,
    byte for byte, on stdout's buffer."""
    from gpudesk.cli.logs import LogFollower

    return LogFollower(
        client,
        data.job.id,
        sys.stdout,
        data.job.uid,
        # someone else's job (root reading it here, directly) is spelled out as the
        # engine spells it out for its other readers
        spell_controls=(not raw and sys.stdout.isatty()) or os.geteuid() != data.job.uid,
        keep_carriage_return=os.geteuid() == data.job.uid,
        raw_out=sys.stdout.buffer,
    )


@jobs_app.command()
def logs(
    job: str = typer.Argument(..., help=ONE_JOB_HELP, autocompletion=complete_job),
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
        help="Write the job's output to the terminal byte for byte, as cat: its control "
        "characters, escape sequences and bytes that are not UTF-8 as they are (without it a "
        "terminal gets them spelled out, as \\x1b; a pipe always gets the bytes as they are). "
        "Another user's job is always spelled out.",
    ),
    json_out: bool = typer.Option(
        False,
        "--json",
        help="Print the attempt's output as it is now as one JSON object (job, name, state, "
        "attempt, output), for a script; not with --follow.",
    ),
) -> None:
    """Print a job's output."""
    from gpudesk import joblog, render
    from gpudesk.cli.logs import print_log_json
    from gpudesk.cli.std_streams import follow_to_the_end
    from gpudesk.untrusted import UntrustedFileError

    if json_out and follow:
        fail("--json prints the output as it is now; follow it with -f alone", EXIT_USAGE)
    if follow:  # its exit status is the job's: a reader that leaves does not end it
        follow_to_the_end()

    with reading_client(job) as client:
        data = client.show(job)
        attempts = data.attempts
        if attempt is not None:
            attempts = [a for a in attempts if a.number == attempt]
            if not attempts:
                fail(
                    f"job {data.job.id} has no attempt {attempt} (it has {len(data.attempts)})",
                    EXIT_USAGE,
                )
        if data.array is not None and not json_out:  # on stderr: stdout is the job's output
            said = render.array_tasks_text(data.array.tasks, data.array.jobs)
            print(
                f"job {data.job.id} is task {data.job.spec.array_task} of {said}", file=sys.stderr
            )
        if not json_out and not follow and (not attempts or attempts[-1].state == "launch_failed"):
            print(_no_output(data, attempts[-1] if attempts else None), file=sys.stderr)
            return
        if not follow and attempts and (gone := _log_gone(attempts[-1])):
            fail(f"job {data.job.id}'s {gone}")
        try:
            if json_out:  # a log the job replaced (a link, a FIFO) is refused as plain logs'
                print_log_json(client, data, attempts[-1] if attempts else None, lines)
                return
            follower = _stdout_follower(client, data, raw)
            if follow and attempt is None:
                with engine_kept_waiting(client, f"job {data.job.id}"):
                    ended = follower.follow(lines)
            else:
                follower.dump(attempts[-1], lines)
                return
        except UntrustedFileError as exc:  # read directly: the engine would refuse it too
            fail(joblog.refusal(data.job.id, exc))
    # like `tail --pid` plus the job's own status, so `gpudesk logs -f 3 && next` chains
    raise typer.Exit(ended.exit_status)


def _log_gone(attempt: AttemptView) -> str | None:
    """Why an attempt's log cannot be printed, where its file was removed (by hand, to free
    room): said, where it printed nothing and exited 0. None where it is there, or this
    process cannot look (the engine reads it: `logs.refused`)."""
    from gpudesk.cli.logs import refused

    path = attempt.log
    if path is None or refused(path) or os.path.lexists(path):
        return None
    return (
        f"attempt {attempt.number} log {printable_line(path)} no longer exists: it was "
        "removed since the attempt wrote it, and its output with it"
    )


def _no_output(data: JobDetail, attempt: AttemptView | None) -> str:
    """Why a job has no output to print: its attempt never started (a missing working folder),
    it never ran (cancelled, or after a job that failed), or it waits."""
    job = data.job
    if attempt is not None:
        return f"job {job.id}'s attempt {attempt.number} never started: {attempt.reason or ''}"
    if job.terminal:
        why = f" ({job.state_detail})" if job.reason else ""
        return f"job {job.id} never ran: it was {job.state} before it started{why}"
    return f"job {job.id} has not started yet" + (f": {data.waiting}" if data.waiting else "")


# ------------------------------------------------------------------- job control
CANCEL_STATES = ("queued", "held", "running", "suspended")
PICKED_JOBS = JOB_REFS_HELP[:-1] + " (or pick them with the options)."


@jobs_app.command()
def cancel(
    jobs: list[str] = typer.Argument(None, help=PICKED_JOBS, autocompletion=complete_job),
    grace: float = typer.Option(
        10.0, "--grace", metavar="SECONDS", help="Seconds between SIGTERM and SIGKILL."
    ),
    user: job_picks.UserPick = None,
    me: job_picks.MePick = False,
    name: job_picks.NamePick = None,
    group: job_picks.GroupPick = None,
    state: str | None = typer.Option(
        None,
        "--state",
        metavar="STATE",
        help="Only live jobs in this state: queued, held, running, suspended.",
    ),
    signal: str | None = typer.Option(
        None,
        "--signal",
        "-s",
        metavar="SIG",
        autocompletion=complete_signal,
        help="Send SIG (USR1, SIGUSR2, 10: by name or number) to the running jobs' processes "
        "instead of cancelling them (as scancel --signal).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Cancel jobs: queued ones at once, running ones with SIGTERM, then SIGKILL after --grace.

    Name them, or pick them as scancel does: --user/--me, --name GLOB, --group RUN (a run's
    jobs), --state (together: the jobs every one of them picks). Without --user/--me a
    station member picks her own jobs alone, as scancel --me would; an admin, anyone's. The
    engine checks each as it checks a named one. A job named that does not exist is said
    (exit 1); the others are cancelled all the same, as scancel does (hold, release, requeue,
    priority too).

    With --signal SIG, send SIG to the running jobs and leave them running: USR1, USR2, INT,
    TERM or HUP, the signals a job's wrapper outlives (a suspended job sees it when resumed)."""
    if state is not None and state not in CANCEL_STATES:
        fail(
            f"--state: {quoted(state)} is not a live state; use {', '.join(CANCEL_STATES)}",
            EXIT_USAGE,
        )
    picks = Picks(user, me, name, group)
    check_picks(jobs, picks, ("--state", state is not None))
    sent = _signal_name(signal) if signal is not None else None
    states = None if state is None else (state,)
    with acting_client(list(jobs or [])) as client:
        picked = picked_refs(client, jobs, picks, states)
        if not picked.refs:
            print(picked.none_matches("live"), file=sys.stderr)
            return
        results, unknown = act_on_known(
            client,
            picked.refs,
            lambda r: client.signal(r, sent) if sent else client.cancel(r, grace),
        )
    _report_outcomes(results, json_out, unknown)


def _signal_name(signal: str) -> str:
    """--signal's signal by its full name, or one paragraph saying which are sent."""
    from gpudesk.core.job_signals import job_signal

    try:
        return job_signal(signal)
    except ValueError as exc:
        fail(f"--signal: {exc}", EXIT_USAGE)


@jobs_app.command()
def hold(
    jobs: list[str] = typer.Argument(None, help=PICKED_JOBS, autocompletion=complete_job),
    user: job_picks.UserPick = None,
    me: job_picks.MePick = False,
    name: job_picks.NamePick = None,
    group: job_picks.GroupPick = None,
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Hold queued jobs: they keep their place in the queue but do not start until released.

    Name them, or pick them as cancel does: --user/--me, --name GLOB, --group RUN (the queued
    jobs not held that every one of them picks). Exits 1 if a job could not be held (running
    or finished)."""
    _hold_or_release("hold", jobs, Picks(user, me, name, group), json_out)


@jobs_app.command()
def release(
    jobs: list[str] = typer.Argument(None, help=PICKED_JOBS, autocompletion=complete_job),
    user: job_picks.UserPick = None,
    me: job_picks.MePick = False,
    name: job_picks.NamePick = None,
    group: job_picks.GroupPick = None,
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Release held jobs: they may start again, from the place in the queue they kept.

    Name them, or pick them as cancel does: --user/--me, --name GLOB, --group RUN (the held
    jobs every one of them picks: an array's, `--name 'NAME_*'`). Exits 1 if a job could not
    be released (it is running or finished)."""
    _hold_or_release("release", jobs, Picks(user, me, name, group), json_out)


def _hold_or_release(op: str, jobs: list[str] | None, picks: Picks, json_out: bool) -> None:
    """`hold` (among the queued jobs not held) or `release` (among the held ones)."""
    among = "queued" if op == "hold" else "held"
    check_picks(jobs, picks)
    with acting_client(list(jobs or [])) as client:
        picked = picked_refs(client, jobs, picks, (among,))
        if not picked.refs:
            print(picked.none_matches(among), file=sys.stderr)
            return
        act = client.hold if op == "hold" else client.release
        results, unknown = act_on_known(client, picked.refs, act)
    _report_outcomes(results, json_out, unknown)


@jobs_app.command()
def priority(
    jobs: list[str] = typer.Argument(..., help=JOB_REFS_HELP, autocompletion=complete_job),
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
        # `gpudesk priority 5 10` (scontrol's order, without its keyword): say the flag
        hint = (
            f"; to set job(s) {' '.join(jobs[:-1])} to priority {jobs[-1]}: gpudesk priority "
            f"{' '.join(jobs[:-1])} --set {jobs[-1]}"
            if not given and len(jobs) > 1 and jobs[-1].lstrip("-").isdigit()
            else ""
        )
        fail(
            "give exactly one of --set N, --up or --down"
            + (f" (found {' and '.join(given)})" if given else "")
            + printable_line(hint),
            EXIT_USAGE,
        )
    if value is not None:
        try:
            check_priority(value)
        except ValueError as exc:
            fail(f"--set: {exc}", EXIT_USAGE)
    with acting_client(list(jobs)) as client:
        delta = (1 if up else -1) if value is None else None
        results, unknown = act_on_known(
            client, jobs, lambda r: client.set_priority(r, priority=value, delta=delta)
        )
    _report_outcomes(results, json_out, unknown)


@jobs_app.command()
def requeue(
    jobs: list[str] = typer.Argument(..., help=JOB_REFS_HELP, autocompletion=complete_job),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Run finished jobs again (failed, cancelled or succeeded) as the same jobs.

    Each gets a fresh budget of max_attempts; its attempt numbers continue.

    Exits 1 if a job is still running, or if requeueing it would leave its owner more
    queued jobs than [station] max_queued_per_user allows."""
    with acting_client(list(jobs)) as client:
        results, unknown = act_on_known(client, jobs, client.requeue)
    _report_outcomes(results, json_out, unknown)
