"""The `gpudesk` command line. Commands are thin: they parse, call the engine client, print.

Heavy modules (zmq, rich, the profile parser) are imported inside the commands that use them and
torch is never imported here, so `gpudesk --help` starts at once.
"""

from __future__ import annotations

import inspect
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from gpudesk import __version__
from gpudesk.loader.cli import loader_app
from gpudesk.mig_cli import mig_app
from gpudesk.select_cli import select_app

if TYPE_CHECKING:
    from gpudesk.engine.client import EngineClient
    from gpudesk.engine.station import StationConfig
    from gpudesk.paths import Home

EXIT_FAILED = 1  # the command ran but something it did failed (a job, the engine)
EXIT_USAGE = 2  # bad input: a profile, an argument
EXIT_INTERRUPTED = 130

app = typer.Typer(
    name="gpudesk",
    help="Queue, pack and watch training jobs on a single GPU workstation.",
    add_completion=False,
    no_args_is_help=False,  # no command opens the desk
    context_settings={"help_option_names": ["-h", "--help"]},
)
engine_app = typer.Typer(help="Start, stop and inspect the engine daemon.", no_args_is_help=True)
app.add_typer(engine_app, name="engine")
app.add_typer(mig_app, name="mig")
app.add_typer(loader_app, name="loader")
app.add_typer(select_app, name="select")


def _reflow_help(group: typer.Typer) -> None:
    """Command help from docstrings, each paragraph one line: typer keeps a docstring's line
    breaks, which wrap raggedly at the terminal's width."""
    for command in group.registered_commands:
        doc = inspect.getdoc(command.callback) if command.callback else None
        if command.help is None and doc:
            command.help = "\n\n".join(" ".join(p.split()) for p in doc.split("\n\n"))
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _reflow_help(sub.typer_instance)


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    raise CliError(message, code)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def _home() -> Home:
    from gpudesk.paths import Home

    return Home.from_env()


def _client() -> EngineClient:
    from gpudesk.engine.client import connect

    return connect(_home())


def _version_callback(value: bool) -> None:
    if value:
        print(f"gpudesk {__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: bool = typer.Option(
        False,
        "--version",
        callback=_version_callback,
        is_eager=True,
        help="Print the version and exit.",
    ),
    readonly: bool = typer.Option(
        False, "--readonly", help="Open the desk without any action (for a shared screen)."
    ),
    refresh: float = typer.Option(
        1.0, "--refresh", min=0.2, max=60.0, help="Seconds between the desk's redraws."
    ),
) -> None:
    """Queue, pack and watch training jobs on a single GPU workstation.

    With no command, opens the desk (a terminal UI) on the engine, starting it if needed."""
    if ctx.invoked_subcommand is None:
        _open_desk(readonly, refresh, None)


def _open_desk(readonly: bool, refresh: float, replay: Path | None) -> None:
    if not sys.stdout.isatty() or not sys.stdin.isatty():
        fail(
            "the desk needs a terminal; for pipes and scripts use `gpudesk top --once`, "
            "`gpudesk queue` or `gpudesk --help`",
            EXIT_USAGE,
        )
    from gpudesk.screens import run_desk

    message = run_desk(readonly=readonly, refresh_s=refresh, replay=replay)
    if message:
        print(message)


@app.command()
def desk(
    readonly: bool = typer.Option(
        False, "--readonly", help="Hide every action (for a shared screen): watch only."
    ),
    refresh: float = typer.Option(
        1.0, "--refresh", min=0.2, max=60.0, help="Seconds between redraws."
    ),
    replay: Path | None = typer.Option(
        None,
        "--replay",
        help="Play back a recorded desk (JSON frames) instead of following the engine.",
    ),
) -> None:
    """Open the desk: live GPU cards, the queue with its actions, loaders and MIG.

    `q` closes the desk and leaves the engine and its jobs running."""
    if replay is not None and not replay.is_file():
        fail(f"--replay: {replay} is not a file", EXIT_USAGE)
    _open_desk(readonly, refresh, replay)


# --------------------------------------------------------------------------- run
@app.command()
def run(
    profile: Path = typer.Argument(..., help="A profile.toml with [[jobs]] and [[sweeps]]."),
    report: Path | None = typer.Option(
        None,
        "--report",
        help="Also write the report here (JSON when the name ends in .json, else text).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
) -> None:
    """Run a profile to completion: submit its jobs, follow them, report.

    Exits 0 only if every job succeeded. Ctrl-C cancels this run's jobs and still reports."""
    from gpudesk.headless import run_profile, write_report
    from gpudesk.profile import ProfileError, load_profile

    try:
        loaded = load_profile(profile)
    except ProfileError as exc:
        fail(f"the profile is not valid:\n{exc}", EXIT_USAGE)
    client = _client()  # run_profile applies the profile's [station] to the engine
    progress = sys.stderr if json_out else sys.stdout
    print(
        f"running {len(loaded.jobs)} job(s) from {profile} on the engine at {client.home.root}",
        file=progress,
        flush=True,
    )
    try:
        result = run_profile(loaded, client, progress_stream=progress)
    except KeyboardInterrupt:
        print("left the run; the engine is finishing the cancels", file=sys.stderr)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        client.close()
    if report is not None:
        try:
            write_report(result, report)
        except OSError as exc:
            print(
                f"error: could not write the report to {report}: {exc.strerror or exc}",
                file=sys.stderr,
            )
    if json_out:
        _print_json(result.to_dict())
    else:
        print("\n" + result.text())
    if result.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if not result.succeeded:
        raise typer.Exit(EXIT_FAILED)


# ------------------------------------------------------------------------ submit
def _parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            fail(f"--env takes NAME=VALUE, found {pair!r}", EXIT_USAGE)
        env[key] = value
    return env


@app.command(context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True})
def submit(
    command: list[str] = typer.Argument(
        ..., metavar="-- COMMAND [ARGS]...", help="The command to run, after `--`."
    ),
    name: str | None = typer.Option(
        None, "--name", "-n", help="Job name (default: the program's name)."
    ),
    gpus: int = typer.Option(0, "--gpus", help="GPUs the job needs."),
    mem: float | None = typer.Option(None, "--mem", help="GPU memory the job needs, GB."),
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
    priority: int = typer.Option(0, "--priority", help="Higher runs first (-1000..1000)."),
    max_attempts: int = typer.Option(
        1, "--max-attempts", help="Retry a failed job up to this many attempts in all."
    ),
    env: list[str] = typer.Option([], "--env", "-e", help="NAME=VALUE for the job (repeatable)."),
    workdir: Path | None = typer.Option(
        None, "--workdir", "-C", help="Working directory (default: here)."
    ),
    shell: bool = typer.Option(False, "--shell", help="Run COMMAND (one string) with /bin/sh."),
    json_out: bool = typer.Option(False, "--json", help="Print the new job as JSON."),
) -> None:
    """Queue one job: gpudesk submit [OPTIONS] -- COMMAND [ARGS]..."""
    from gpudesk.engine.client import submit_env
    from gpudesk.engine.jobs import JobSpec, SpecError

    if command and command[0] == "--":
        command = command[1:]
    if not command:
        fail("no command given: gpudesk submit [OPTIONS] -- COMMAND [ARGS]...", EXIT_USAGE)
    cwd = (workdir or Path.cwd()).expanduser().absolute()
    raw = {
        "name": name or Path(command[0]).name,
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
    }
    try:
        spec = JobSpec.from_dict(raw)
    except SpecError as exc:
        option = {"memory_gb": "--mem", "sm_pct": "--sm", "max_attempts": "--max-attempts"}.get(
            exc.key, f"--{exc.key}"
        )
        fail(f"{option}: {exc.message}", EXIT_USAGE)
    if not cwd.is_dir():
        fail(f"--workdir: {cwd} is not a directory", EXIT_USAGE)
    with _client() as client:
        job_id = client.request("submit", jobs=[spec.to_dict()], env=submit_env())["ids"][0]
    if json_out:
        _print_json({"id": job_id, "name": spec.name})
    else:
        print(f"submitted job {job_id} ({spec.name})")


# ------------------------------------------------------------------------- queue
def _queue_rows(jobs: list[dict[str, Any]]) -> str:
    from gpudesk import render

    rows = [
        (
            j["id"],
            j["name"],
            "held" if j["held"] else j["state"],
            j["spec"]["priority"],
            f"{j['attempts'] - j['attempts_before_requeue']}/{j['max_attempts']}",
            j["spec"]["gpus"],
            j["slot"] or "",
            render.duration(render.job_runtime(j)),
            j["exit_code"],
            render.clock(j["submitted_at"]),
        )
        for j in jobs
    ]
    return render.table(
        ("ID", "NAME", "STATE", "PRI", "TRY", "GPUS", "SLOT", "TIME", "EXIT", "SUBMITTED"),
        rows,
        max_widths={1: 24},
        right=(0, 3, 5, 7, 8),
    )


@app.command()
def queue(
    all_jobs: bool = typer.Option(False, "--all", "-a", help="Include finished jobs."),
    group: str | None = typer.Option(None, "--group", "-g", help="Only this run's jobs."),
    limit: int = typer.Option(500, "--limit", help="Show at most the newest N jobs."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List queued and running jobs (with --all, finished ones too)."""
    states = None if all_jobs else ["queued", "running"]
    with _client() as client:
        jobs = client.request("jobs", states=states, group=group, limit=max(1, limit))["jobs"]
    if json_out:
        _print_json({"jobs": jobs})
        return
    if not jobs:
        print(
            "no jobs"
            if all_jobs
            else "no queued or running jobs (gpudesk queue --all shows finished ones)"
        )
        return
    print(_queue_rows(jobs))


# -------------------------------------------------------------------------- show
@app.command()
def show(
    job: str = typer.Argument(..., help="Job id, or name (the newest job of that name)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    env: bool = typer.Option(False, "--env", help="Include the job's full environment."),
) -> None:
    """Show one job: its spec, attempts, events and why it waits."""
    from gpudesk import render

    with _client() as client:
        data = client.request("show", job=job, env=env)
    if json_out:
        _print_json(data)
        return
    j, spec = data["job"], data["job"]["spec"]
    command = spec["command"][0] if spec["shell"] else shlex.join(spec["command"])
    lines = [
        f"job {j['id']}: {j['name']}",
        f"  state      {j['state']}"
        + (", held" if j["held"] else "")
        + (f" ({j['reason']})" if j["reason"] else ""),
        f"  command    {command}" + ("  [shell]" if spec["shell"] else ""),
        f"  workdir    {spec['workdir'] or '-'}",
        f"  asks for   {spec['gpus']} GPU(s)"
        + (f", {spec['memory_gb']:g} GB" if spec["memory_gb"] else "")
        + (f", {spec['sm_pct']:g}% SM" if spec["sm_pct"] is not None else "")
        + (f", dataset {spec['dataset']}" if spec["dataset"] else "")
        + (f" ({spec['selection']})" if spec.get("selection") else ""),
        f"  priority   {spec['priority']}   attempts {_attempts_text(j)}",
        f"  submitted  {render.clock(j['submitted_at'])}   started {render.clock(j['started_at'])}"
        f"   ended {render.clock(j['ended_at'])}   time {render.duration(render.job_runtime(j))}",
    ]
    if j["group"]:
        lines.append(f"  run        {j['group']}")
    if data["waiting"]:
        lines.append(f"  waiting    {data['waiting']}")
    if data["attempts"]:
        lines.append("attempts:")
        for a in data["attempts"]:
            exit_code = "-" if a["exit_code"] is None else a["exit_code"]
            took = (
                render.duration((a["ended_at"] or time.time()) - a["started_at"])
                if a["started_at"]
                else "-"
            )
            lines.append(
                f"  #{a['number']}  {a['state']:<13} {a['placement'].get('slot', '-'):<7} "
                f"pid {a['pid'] or '-':<8} exit {exit_code:<4} {took}"
            )
            lines.append(f"      log {a['log']}")
    lines.extend(_usage_lines(data.get("usage")))
    lines.append("events:")
    for e in data["events"]:
        lines.append(f"  {render.clock(e['ts'])}  {e['state'] or e['kind']:<10} {e['message']}")
    if "env" in data:
        lines.append("environment:")
        lines.extend(f"  {k}={v}" for k, v in sorted(data["env"].items()))
    print("\n".join(lines))


def _attempts_text(job: dict[str, Any]) -> str:
    """ "2/3", or after a requeue "1/3 since requeued (4 in all)"."""
    before = job["attempts_before_requeue"]
    counted = f"{job['attempts'] - before}/{job['max_attempts']}"
    return f"{counted} since requeued ({job['attempts']} in all)" if before else counted


def _usage_lines(usage: dict[str, Any] | None) -> list[str]:
    """What a job used: energy (with carbon), CPU, memory, I/O."""
    from gpudesk import render

    if not usage:
        return ["usage:     not measured yet"]

    def mib(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f} MiB"

    lines = ["usage:"]
    if usage["gpu_j"] is not None:
        idle = usage["gpu_idle_j"]
        how = {
            "exclusive": "exclusive GPU",
            "sm share": "shared GPU, split by SM share",
            "even": "shared GPU, split evenly",
        }.get(usage["split"] or "", "")
        source = (
            "energy counter" if usage["gpu_source"] == "counter" else f"{usage['gpu_source']} power"
        )
        baseline = (
            f" = {render.joules(usage['gpu_above_idle_j'])} above an idle baseline of "
            f"{render.joules(idle)}"
            if idle is not None
            else " (idle baseline unknown)"
        )
        lines.append(
            f"  GPU energy {render.joules(usage['gpu_j'])}{baseline}  [{source}; {how}]"
            + ("  ESTIMATE" if usage["estimate"] else "")
        )
    cpu = usage["cpu_j"]
    lines.append(
        "  CPU energy "
        + (
            f"{render.joules(cpu)} (RAPL, by share of busy CPU time)"
            if cpu is not None
            else "n/a (RAPL not readable here)"
        )
    )
    if usage["total_j"] is not None:
        lines.append(
            f"  carbon     {usage['carbon_g']:.2f} g CO2e at {usage['grid_g_per_kwh']:g} g/kWh"
        )
    lines.append(
        f"  CPU time   {render.duration(usage['cpu_s'])}   peak RSS "
        f"{mib(usage['rss_peak_mib'])}   I/O read {mib(usage['io_read_mib'])} "
        f"written {mib(usage['io_write_mib'])}"
    )
    return lines


# -------------------------------------------------------------------------- logs
@app.command()
def logs(
    job: str = typer.Argument(..., help="Job id or name."),
    follow: bool = typer.Option(
        False,
        "--follow",
        "-f",
        help="Keep printing new output until the job ends (across retries).",
    ),
    attempt: int | None = typer.Option(
        None, "--attempt", help="Which attempt (default: the latest)."
    ),
) -> None:
    """Print a job's output."""
    from gpudesk.logs import LogFollower

    with _client() as client:
        data = client.request("show", job=job)
        attempts = data["attempts"]
        if attempt is not None:
            chosen = [a for a in attempts if a["number"] == attempt]
            if not chosen:
                fail(
                    f"job {data['job']['id']} has no attempt {attempt} (it has {len(attempts)})",
                    EXIT_USAGE,
                )
            attempts = chosen
        if not attempts and not follow:
            print(
                f"job {data['job']['id']} has not started yet: {data['waiting'] or ''}",
                file=sys.stderr,
            )
            return
        follower = LogFollower(client, data["job"]["id"], sys.stdout)
        if follow and attempt is None:
            follower.follow()
        else:
            follower.dump(attempts[-1]["log"])


# ------------------------------------------------------------------- job control
def _job_control(op: str, jobs: list[str], json_out: bool, **args: Any) -> None:
    """Send a job-control op and print what it did to each job. The engine resolves every job
    first (one unknown job: an error, nothing done); exits 1 if it refused any job."""
    with _client() as client:
        results = client.request(op, jobs=jobs, **args)["results"]
    if json_out:
        _print_json({"results": results})
    else:
        for r in results:
            print(f"job {r['id']} ({r['name']}): {r['outcome']}")
    if not all(r.get("ok", True) for r in results):  # cancel never refuses: no "ok"
        raise typer.Exit(EXIT_FAILED)


@app.command()
def cancel(
    jobs: list[str] = typer.Argument(..., help="Job ids or names."),
    grace: float = typer.Option(10.0, "--grace", help="Seconds between SIGTERM and SIGKILL."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Cancel jobs: queued ones at once, running ones with SIGTERM, then SIGKILL after --grace."""
    _job_control("cancel", jobs, json_out, grace=grace)


@app.command()
def hold(
    jobs: list[str] = typer.Argument(..., help="Job ids or names."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Hold queued jobs: they keep their place in the queue but do not start until released.

    Exits 1 if a job could not be held (it is running or finished)."""
    _job_control("hold", jobs, json_out)


@app.command()
def release(
    jobs: list[str] = typer.Argument(..., help="Job ids or names."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Release held jobs: they may start again, from the place in the queue they kept."""
    _job_control("release", jobs, json_out)


@app.command()
def priority(
    jobs: list[str] = typer.Argument(..., help="Job ids or names."),
    value: int | None = typer.Option(
        None, "--set", help="The new priority, -1000..1000 (higher runs first)."
    ),
    up: bool = typer.Option(False, "--up", help="Raise the priority by one."),
    down: bool = typer.Option(False, "--down", help="Lower the priority by one."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Change jobs' priority (--set N, --up or --down).

    A queued job moves in the queue at once.

    A running or finished job keeps it for when it is queued again (a retry, a requeue)."""
    from gpudesk.engine.jobs import check_priority

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
    if value is None:
        _job_control("priority", jobs, json_out, delta=1 if up else -1)
        return
    try:
        check_priority(value)
    except ValueError as exc:
        fail(f"--set: {exc}", EXIT_USAGE)
    _job_control("priority", jobs, json_out, priority=value)


@app.command()
def requeue(
    jobs: list[str] = typer.Argument(..., help="Job ids or names."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Run finished jobs again (failed, cancelled or succeeded) as the same jobs.

    Each gets a fresh budget of max_attempts; its attempt numbers continue.

    Exits 1 if a job is still running."""
    _job_control("requeue", jobs, json_out)


# --------------------------------------------------------------------------- top
@app.command()
def top(
    once: bool = typer.Option(False, "--once", help="Print one frame and exit."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON snapshot and exit."),
    interval: float = typer.Option(
        1.0, "--interval", "-n", min=0.1, max=3600, help="Seconds between frames."
    ),
) -> None:
    """A plain monitor for SSH: station, host CPU/memory, running jobs. Never starts the engine."""
    from gpudesk.top import run_top

    try:
        run_top(_home(), once=once, as_json=json_out, interval=interval)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)


# ---------------------------------------------------------------------- simulate
SIMULATE_POLICIES = "exclusive,carma,auto,naive,mps,mig"


@app.command()
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
    from gpudesk import render
    from gpudesk.engine.placement.policy import POLICY_NAMES
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
        _print_json(
            {
                "trace": loaded.name,
                "station": chosen,
                "simulated": True,
                "estimator": estimator,
                "results": [r.to_dict() for r in results],
            }
        )
        return
    base = next((r for r in results if r.policy == "exclusive"), results[0])
    rows = []
    for r in results:
        ratio = r.makespan_s / base.makespan_s
        rows.append(
            (
                r.policy,
                render.duration(r.makespan_s),
                f"{ratio:.2f}",
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
        )
    print(
        f"SIMULATED {chosen}: trace {loaded.name}, {len(loaded.jobs)} jobs, memory hints "
        f"from {estimator}; ratios against {base.policy}"
    )
    print(
        render.table(
            (
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
            ),
            rows,
            right=tuple(range(1, 12)),
        )
    )


# ------------------------------------------------------------------------ engine
def _station_from_options(
    slots: int | None, policy: str | None, backend: str | None
) -> StationConfig | None:
    from gpudesk.engine.station import StationConfig

    given = {k: v for k, v in (("slots", slots), ("policy", policy), ("backend", backend)) if v}
    if not given:
        return None
    try:
        return StationConfig.from_dict(given)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)


@engine_app.command("start")
def engine_start(
    foreground: bool = typer.Option(
        False, "--foreground", help="Run in this terminal, logging to stderr (for debugging)."
    ),
    slots: int | None = typer.Option(
        None, "--slots", help="Concurrent jobs on a CPU-only station (default: cores)."
    ),
    policy: str | None = typer.Option(None, "--policy", help="Placement policy."),
    backend: str | None = typer.Option(None, "--backend", help="Hardware backend."),
) -> None:
    """Start the engine for this GPUDESK_HOME (one per home)."""
    from gpudesk.engine.client import engine_pid, start_engine

    home = _home()
    station = _station_from_options(slots, policy, backend)
    pid = engine_pid(home)
    if pid is not None:
        fail(f"an engine is already running for {home.root} (pid {pid})")
    if foreground:
        import logging

        from gpudesk.engine.daemon import serve

        logging.basicConfig(
            stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s"
        )
        raise typer.Exit(serve(home, station))
    pid = start_engine(home, station)
    print(f"engine started (pid {pid}) for {home.root}")


@engine_app.command("stop")
def engine_stop(
    timeout: float = typer.Option(10.0, "--timeout", help="Seconds to wait for it to exit."),
) -> None:
    """Stop the engine. Running jobs keep running and are re-adopted by the next engine."""
    from gpudesk.engine.client import EngineClient, engine_pid

    home = _home()
    if engine_pid(home) is None:
        print(f"no engine is running for {home.root}")
        return
    with EngineClient(home, timeout=timeout) as client:
        running = client.request("shutdown")["running_attempts"]
    deadline = time.monotonic() + timeout
    while engine_pid(home) is not None:
        if time.monotonic() > deadline:
            fail(f"the engine did not exit within {timeout:g} s")
        time.sleep(0.05)
    suffix = f"; {running} running job(s) keep running" if running else ""
    print(f"engine stopped{suffix}")


@engine_app.command("status")
def engine_status(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Is the engine running, and what is its station doing?"""
    from gpudesk import render
    from gpudesk.engine.client import EngineClient, EngineError, engine_pid

    home = _home()
    pid = engine_pid(home)
    if pid is None:
        if json_out:
            _print_json({"running": False, "home": str(home.root)})
        else:
            print(f"engine: not running (home {home.root})")
        raise typer.Exit(3)
    try:
        with EngineClient(home, timeout=5.0) as client:
            status = client.request("status")
    except EngineError as exc:
        fail(f"the engine (pid {pid}) holds the lock but does not answer: {exc}")
    if json_out:
        _print_json({"running": True, **status})
        return
    station, counts = status["station"], status["counts"]
    print(
        f"engine: running (pid {status['pid']}, version {status['version']}, up "
        f"{render.duration(time.time() - status['started_at'])})"
    )
    print(f"home:    {status['home']}")
    print(
        f"station: backend {station['effective_backend']}"
        + (" (SIMULATED)" if station.get("simulated") else "")
        + f", policy {station['policy']}, "
        f"{status['slots']['busy']}/{status['slots']['total']} slots busy, "
        f"{station['cores']} cores, {station['gpus']} GPUs"
    )
    if station.get("gpu_problem"):
        print(f"GPUs:    {station['gpu_problem']}")
    print("jobs:    " + ", ".join(f"{n} {s}" for s, n in counts.items()))


# -------------------------------------------------------------------------- main
_reflow_help(app)  # every command is registered by now


def main(argv: list[str] | None = None) -> None:
    from gpudesk.engine.protocol import EngineError

    try:
        app(args=argv, prog_name="gpudesk", standalone_mode=True)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.code)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_FAILED)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        os._exit(0)  # `gpudesk queue | head`: the reader left; that is not an error
