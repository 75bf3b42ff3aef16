"""`gpudesk run PROFILE`: run a profile to completion (the following and the report:
gpudesk.cli.run_report)."""

from __future__ import annotations

import contextlib
import sys
import textwrap
from pathlib import Path

import typer

from gpudesk import render
from gpudesk.cli.common import engine_client, fail, print_json, target_cluster
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE

run_app = typer.Typer()


@run_app.command()
def run(
    profile: Path = typer.Argument(..., help="A profile.toml with [[jobs]] and [[sweeps]]."),
    report: Path | None = typer.Option(
        None,
        "--report",
        help="Also write the report here (JSON when the name ends in .json, else text).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
    on: str | None = typer.Option(
        None,
        "--on",
        help="Where the jobs run: station, or slurm (the profile's [cluster], or a default "
        "one; docs/slurm.md). Default: slurm when the profile has a [cluster], else station.",
    ),
    partition: str | None = typer.Option(None, "--partition", help="Slurm partition."),
    account: str | None = typer.Option(None, "--account", help="Slurm account."),
    qos: str | None = typer.Option(None, "--qos", help="Slurm QOS."),
    apply_station: bool = typer.Option(
        False,
        "--apply-station",
        help="Apply the profile's [station] settings to the engine (they stay after the run; "
        "an admin's on a shared station). Without it, the run says which differ.",
    ),
) -> None:
    """Run a profile to completion: submit its jobs, follow them, report.

    Exits 0 only if every job succeeded. Ctrl-C cancels this run's jobs and still reports. A
    profile whose [station] asks for a SIMULATED station runs on one of its own, beside your
    engine, which it leaves as it is (docs/shared-station.md)."""
    from gpudesk.api.own_station import own_station, own_station_home, simulated_backend
    from gpudesk.cli.run_report import run_profile, write_report
    from gpudesk.profile import ProfileError, load_profile

    try:
        loaded = load_profile(profile)
    except ProfileError as exc:
        fail(f"the profile is not valid:\n{exc}", EXIT_USAGE)
    cluster = target_cluster(on, loaded.cluster, partition=partition, account=account, qos=qos)
    progress = sys.stderr if json_out else sys.stdout
    source = f"{profile} (gpudesk's bundled example)" if loaded.bundled else str(profile)
    simulated = simulated_backend(loaded) if cluster is None else None
    with contextlib.ExitStack() as stack:
        if simulated is not None:
            home = own_station_home(simulated)
            client = stack.enter_context(own_station(loaded, simulated))
            where = (
                f"a SIMULATED station of its own ({simulated}, home {home.root}); your engine is "
                f"left as it is. Its jobs afterwards: GPUDESK_HOME={home.root} gpudesk history"
            )
        else:
            client = stack.enter_context(engine_client())
            where = client.home.description
        if cluster is not None:
            where = "Slurm" + (f" partition {cluster.partition}" if cluster.partition else "")
            where += f", followed by {client.home.description}"
        said = f"running {len(loaded.jobs)} job(s) from {source} on {where}"
        print(
            textwrap.fill(
                said, render.terminal_width(), break_on_hyphens=False, break_long_words=False
            ),
            file=progress,
        )
        progress.flush()
        try:
            result = run_profile(
                loaded,
                client,
                progress_stream=progress,
                cluster=cluster,
                # its own station is set as the profile says; another only when asked
                apply_station=apply_station or simulated is not None,
            )
        except KeyboardInterrupt:
            print("left the run; the engine is finishing the cancels", file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED) from None
    if report is not None:
        try:
            write_report(result, report)
        except OSError as exc:
            print(
                f"error: could not write the report to {report}: {exc.strerror or exc}",
                file=sys.stderr,
            )
    if json_out:
        print_json(result.to_dict())
    else:
        print("\n" + result.text())
    if result.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if not result.succeeded:
        raise typer.Exit(EXIT_FAILED)
