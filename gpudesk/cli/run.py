"""`gpudesk run PROFILE`: run a profile to completion (the following and the report:
gpudesk.cli.run_report)."""

from __future__ import annotations

import contextlib
import shlex
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import typer

from gpudesk import render
from gpudesk.cli.common import engine_client, fail, print_json, target_cluster
from gpudesk.cli.exit_codes import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NOT_RUNNING,
    EXIT_USAGE,
)
from gpudesk.text import printable_line

if TYPE_CHECKING:
    from gpudesk.api.client import Client
    from gpudesk.cli.run_report import EngineLost, LeftRun, RunReport
    from gpudesk.core.cluster import ClusterSpec
    from gpudesk.paths import Home
    from gpudesk.profile import Profile

run_app = typer.Typer()


_PROFILE = typer.Argument(..., help="A profile.toml with [[jobs]] and [[sweeps]].")
_REPORT = typer.Option(
    None,
    "--report",
    metavar="FILE",
    help="Also write the report to FILE (JSON when its name ends in .json, else text), "
    "replacing it whole at the end. Checked before anything is submitted: a new or writable "
    "regular file, not a link, not the profile, not in gpudesk's home.",
)
_JSON = typer.Option(False, "--json", help="Print the report as JSON on stdout.")
_ON = typer.Option(
    None,
    "--on",
    help="Where the jobs run: station, or slurm (the profile's [cluster], or a default "
    "one; docs/slurm.md). Default: slurm when the profile has a [cluster], else station. "
    "On Slurm a data selection's pre-pass runs as a Slurm job first, and each job's loader "
    "reads the selection it cached.",
)
_PARTITION = typer.Option(None, "--partition", help="Slurm partition.")
_ACCOUNT = typer.Option(None, "--account", help="Slurm account.")
_QOS = typer.Option(None, "--qos", help="Slurm QOS.")
_APPLY_STATION = typer.Option(
    False,
    "--apply-station",
    help="Apply the profile's [station] settings to the engine (they stay after the run; "
    "an admin's on a shared station). Without it, the run says which differ.",
)

_ATTACH = typer.Option(
    False,
    "--attach",
    help="Submit nothing: follow your newest run of this profile file (one whose gpudesk run "
    "was killed or lost its terminal; not a run of another file with the same name =) to its "
    "end and report it as that run would have, at once if its jobs have all ended. Ctrl-C "
    "cancels its jobs, as in the run.",
)
_DETACH = typer.Option(
    False,
    "--detach",
    help="Submit the run and return at once, as sbatch does: the engine runs its jobs; "
    "gpudesk run PROFILE --attach follows it later to its end and reports. A profile's "
    "data-selection pre-passes are submitted with its jobs, each job after (afterok) the "
    "pre-pass of its selection: one that fails has the jobs after it cancelled, never run; "
    "--attach records what each pre-pass cost in the selection cache.",
)


@run_app.command()
def run(
    profile: str = _PROFILE,  # not a Path: Path("") would be the current folder
    report: Path | None = _REPORT,
    json_out: bool = _JSON,
    on: str | None = _ON,
    partition: str | None = _PARTITION,
    account: str | None = _ACCOUNT,
    qos: str | None = _QOS,
    apply_station: bool = _APPLY_STATION,
    attach: bool = _ATTACH,
    detach: bool = _DETACH,
) -> None:
    """Run a profile to completion: submit its jobs, follow them, report.

    Exits 0 only if every job succeeded and the --report file, if any, was written (the
    report is printed either way). An engine that stops meanwhile (restarted for an upgrade)
    is waited for, and the run followed on as --attach follows it; where it cannot be (a
    SIMULATED station of the run's own, a profile read from a pipe) it exits 3, the jobs going
    on. Ctrl-C cancels this run's jobs and still reports; a second Ctrl-C leaves without
    waiting for the cancels to end. A profile whose [station] asks for a SIMULATED station
    runs on one of its own, beside your engine, which it leaves as it is
    (docs/shared-station.md)."""
    from gpudesk.api.own_station import simulated_backend
    from gpudesk.cli.std_streams import follow_to_the_end

    if not detach:  # its exit status is its jobs': a reader that leaves does not end it
        follow_to_the_end()
    loaded = _loaded(profile)
    cluster = target_cluster(on, loaded.cluster, partition=partition, account=account, qos=qos)
    _refuse_what_does_not_go_together(loaded, attach, detach, apply_station, report)
    _check_before_submitting(loaded, cluster, report)
    progress = sys.stderr if json_out else sys.stdout
    source = f"{profile} (gpudesk's bundled example)" if loaded.bundled else str(profile)
    simulated = simulated_backend(loaded) if cluster is None else None
    with contextlib.ExitStack() as stack:
        client, where = _connect(stack, loaded, simulated, cluster)
        apply, how_to_apply = _station_settings(client, simulated, apply_station)
        # the profile's path and the home's spelled out: an ESC in them never reaches the terminal
        doing = (
            "attaching to your newest run of"
            if attach
            else f"{'submitting' if detach else 'running'} {_jobs_counted(loaded)} from"
        )
        said = printable_line(f"{doing} {source} on {where}")
        print(
            textwrap.fill(
                said, render.terminal_width(), break_on_hyphens=False, break_long_words=False
            ),
            file=progress,
        )
        progress.flush()
        if detach:
            _detach(client, loaded, profile, json_out, cluster, apply, how_to_apply, simulated)
            return
        result = _followed(
            loaded, client, progress, cluster, (apply, how_to_apply), attach, simulated, profile
        )
    if json_out:
        print_json(result.to_dict())
    else:
        print("\n" + result.text())
    written = report is None or _write_report(result, report)
    if result.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if not result.succeeded or not written:
        raise typer.Exit(EXIT_FAILED)


def _refuse_what_does_not_go_together(
    loaded: Profile,
    attach: bool,
    detach: bool,
    apply_station: bool,
    report: Path | None,
) -> None:
    """Options that cannot go together, or with this profile: one paragraph (exit 2), before
    anything is submitted."""
    from gpudesk.cli.run_detach import detach_refusal

    if attach and loaded.streamed:
        fail(
            f"--attach follows a run of a profile file, and {loaded.path} is a pipe or a "
            "device: no run can be told to be its. `gpudesk wait --group RUN` waits for a run "
            "(its name is what `gpudesk run` printed); give the profile's file to --attach",
            EXIT_USAGE,
        )
    if attach and apply_station:
        fail(
            "--attach follows a run already submitted: it applies no [station] settings; "
            "leave out --apply-station",
            EXIT_USAGE,
        )
    if detach and (refusal := detach_refusal(attach=attach, report=report)):
        fail(refusal, EXIT_USAGE)


def _jobs_counted(profile: Profile) -> str:
    """The jobs a run of `profile` queues, as its first line counts them: its own, and the
    selections' pre-pass jobs it queues before them ("1 pre-pass job and 3 jobs")."""
    from gpudesk.api.prepass import profile_prepasses

    jobs = f"{len(profile.jobs)} job(s)"
    prepasses = len(profile_prepasses(profile))
    return f"{prepasses} pre-pass job(s) and {jobs}" if prepasses else jobs


def _detach(
    client: Client,
    loaded: Profile,
    profile: str,
    json_out: bool,
    cluster: ClusterSpec | None,
    apply_station: bool,
    how_to_apply: str,
    simulated: str | None,
) -> None:
    """--detach: the run submitted, what it is and how to follow it said, and no more."""
    from gpudesk.cli.run_detach import detached_text, submit_detached

    progress = sys.stderr if json_out else sys.stdout
    detached = submit_detached(
        client,
        loaded,
        progress,
        cluster=cluster,
        apply_station=apply_station,
        how_to_apply=how_to_apply,
    )
    if json_out:
        print_json({"profile": loaded.name, **detached.to_dict()})
        return
    print(
        detached_text(detached, _attach_hint(loaded, profile), _home_prefix(client.home, simulated))
    )


def _attach_hint(loaded: Profile, profile: str) -> str | None:
    """The command that follows this profile's run to its end later; None for a profile read
    from a pipe or a device, which no later command can read again (`gpudesk run <(…)`)."""
    return None if loaded.streamed else f"gpudesk run {shlex.quote(profile)} --attach"


def _home_prefix(home: Home, simulated: str | None) -> str:
    """What a command needs before it to reach a profile's own SIMULATED station ("" for
    your engine, which it reaches without)."""
    return f"GPUDESK_HOME={shlex.quote(str(home.root))} " if simulated else ""


def _loaded(profile: str) -> Profile:
    """The profile, or one paragraph (exit 2) saying why it is not valid."""
    from gpudesk.profile import ProfileError, load_profile

    try:
        return load_profile(profile)
    except ProfileError as exc:
        fail(f"the profile is not valid:\n{exc}", EXIT_USAGE)


def _check_before_submitting(
    loaded: Profile, cluster: ClusterSpec | None, report: Path | None
) -> None:
    """What can be checked before anything is submitted (a run may take hours), failing with
    one paragraph: its jobs' folders, when they run on this machine (said by your own process;
    a Slurm job's folders are the cluster's to see; the runner checks again at each start),
    and the --report file."""
    from gpudesk.profile import workdir_problems

    unusable = workdir_problems(loaded) if cluster is None else None
    if unusable is not None:
        fail(f"the profile is not valid:\n{unusable}", EXIT_USAGE)
    if report is not None:
        from gpudesk.cli.report_file import check_report_path, gpudesk_homes

        check_report_path(report, profile=loaded.path, homes=gpudesk_homes())


def _station_settings(client: Client, simulated: str | None, asked: bool) -> tuple[bool, str]:
    """Whether the run applies its profile's [station], and what it says with each setting it
    leaves: a station of its own is set as the profile says (another only when `asked`:
    --apply-station), unless another run's jobs are on it, placed under its settings."""
    from gpudesk.api.own_station import others_live_jobs
    from gpudesk.cli.run_report import APPLY_STATION_HINT

    if simulated is None or asked:
        return asked, APPLY_STATION_HINT
    others = others_live_jobs(client)
    return not others, (
        f"the station of its own runs {others} job(s) of another run under its settings; they "
        "change once those end, or with gpudesk run --apply-station"
    )


def _left_text(left: LeftRun, attach: str | None) -> str:
    """What a second Ctrl-C left behind, and how to see it (`attach`: `_attach_hint`)."""
    listing = f"gpudesk queue --group {shlex.quote(left.group)}"
    if left.cancel_asked:
        return f"left the run; the engine is finishing the cancels ({listing} shows them)"
    follow = f"{attach} follows them to the end and reports, " if attach else ""
    return (
        f"left the run before the engine was asked to cancel its jobs, so they go on: "
        f"{listing} lists them, {follow}gpudesk cancel ID... cancels them"
    )


def _followed(
    loaded: Profile,
    client: Client,
    progress: TextIO,
    cluster: ClusterSpec | None,
    station: tuple[bool, str],
    attach: bool,
    simulated: str | None,
    profile: str,
) -> RunReport:
    """The run submitted (or, `attach`, found) and followed to its end (`run_profile`), and
    followed on where its engine went away and came back (`_outlast`); its report. `station`:
    whether the profile's [station] is applied, and what is said where it is not."""
    from gpudesk.cli.run_attach import NothingToAttach
    from gpudesk.cli.run_report import EngineLost, LeftRun, run_profile

    hint = _attach_hint(loaded, profile)
    while True:
        try:
            return run_profile(
                loaded,
                client,
                progress_stream=progress,
                cluster=cluster,
                apply_station=station[0],
                how_to_apply=station[1],
                attach=attach,
            )
        except NothingToAttach as nothing:
            fail(str(nothing))
        except LeftRun as left:
            print(_left_text(left, hint), file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except EngineLost as lost:
            if not _followable(lost, simulated) or hint is None:
                fail(_lost_text(lost, client.home, simulated, hint), EXIT_NOT_RUNNING)
            _outlast(client, lost, hint)
            attach = True  # the engine is back: follow the run, as --attach does


def _followable(lost: EngineLost, simulated: str | None) -> bool:
    """Whether a run whose engine went away is waited for and followed on (`_outlast`): not on
    a SIMULATED station of its own (nothing starts that engine again), nor where the engine
    cut its submission short (the parts sent wait, held, for the rest; a run that went while
    it waited for its pre-passes had not sent its training jobs)."""
    return simulated is None and lost.whole


def _outlast(client: Client, lost: EngineLost, hint: str) -> None:
    """The engine went away while the run followed its jobs: wait for it to answer again, as
    `wait` does (cli.no_engine.engine_kept_waiting: said once, asked every second), for the
    run to be followed on. Ctrl-C meanwhile leaves the run to its jobs (exit 130)."""
    from gpudesk.cli.no_engine import engine_kept_waiting
    from gpudesk.cli.run_report import LeftRun

    try:
        with engine_kept_waiting(client, f"run {lost.group}", again=hint):
            client.ping()
    except KeyboardInterrupt:
        print(_left_text(LeftRun(lost.group, False), hint), file=sys.stderr)
        raise typer.Exit(EXIT_INTERRUPTED) from None


def _lost_text(lost: EngineLost, home: Home, simulated: str | None, attach: str | None) -> str:
    """The engine went away mid-run: what it said, and how to follow the run's jobs again."""
    if home.is_system:
        start = "once the station's engine is back (an admin: sudo systemctl start gpudesk)"
        prefix = ""
    else:
        prefix = _home_prefix(home, simulated)
        backend = f"GPUDESK_BACKEND={simulated} " if simulated else ""
        start = f"start the engine again ({prefix}{backend}gpudesk engine start)"
    listing = f"{prefix}gpudesk queue --group {shlex.quote(lost.group)}"
    if 0 < len(lost.ids) <= 10:
        follow = f"{prefix}gpudesk wait {' '.join(map(str, lost.ids))} (or {listing})"
    else:
        follow = listing
    report = (
        f"; {attach} follows them to the end and reports, as this run would have" if attach else ""
    )
    return (
        f"{lost}. This run's jobs may still be queued or running: they outlive the engine, "
        f"which takes them up again when it starts. To follow them, {start}, then "
        f"{follow}{report}."
    )


def _connect(
    stack: contextlib.ExitStack[bool | None],
    loaded: Profile,
    simulated: str | None,
    cluster: ClusterSpec | None,
) -> tuple[Client, str]:
    """The engine the run's jobs go to (a SIMULATED station of the profile's own, or yours),
    kept open by `stack`, and where the run says they run."""
    from gpudesk.api.own_station import own_station, own_station_home

    if simulated is not None:
        home = own_station_home(simulated)
        client = stack.enter_context(own_station(loaded, simulated))
        where = (
            f"a SIMULATED station of its own ({simulated}, home {home.root}); your engine is "
            f"left as it is. Its jobs afterwards: GPUDESK_HOME={home.root} gpudesk history, "
            f"once GPUDESK_HOME={home.root} gpudesk engine start has started it again (the "
            "run stops it at its end)"
        )
    else:
        client = stack.enter_context(engine_client())
        where = client.home.description
    if cluster is not None:
        where = "Slurm" + (f" partition {cluster.partition}" if cluster.partition else "")
        where += f", followed by {client.home.description}"
    return client, where


def _write_report(result: RunReport, report: Path) -> bool:
    """--report: the report written (atomically: a failure leaves the file as it was); one
    that cannot be is said in one line, and False returned (the run then exits non-zero)."""
    from gpudesk.cli.run_report import write_report

    try:
        write_report(result, report)
    except OSError as exc:
        print(
            f"error: could not write the report to {printable_line(str(report))} "
            f"({exc.strerror or exc}); the file is "
            "as it was before the run, and the report is printed above",
            file=sys.stderr,
        )
        return False
    return True
