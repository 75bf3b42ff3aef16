"""`gpudesk loader`: run a dataset's producer, and see the producers of this home."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpudesk.cli.common import factory_kwargs, fail
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_USAGE
from gpudesk.text import json_text, quoted

if TYPE_CHECKING:
    from gpudesk.loader.producer_config import ProducerConfig

DEVICE_HELP = (
    "cpu: consumers copy batches to their GPU themselves; cuda: stage each batch once on the "
    "producer's GPU and hand it to every consumer there (CUDA IPC); auto: cuda for large "
    "batches (docs/loader.md)."
)

SHARE_HELP = (
    "private: only this user's jobs may read it; group: every member of the station's group "
    "too, on a system engine (sharing a loader shares the data)."
)

loader_app = typer.Typer(
    help="Shared data loaders: one producer per dataset.", no_args_is_help=True
)


@loader_app.command("serve")
def serve_command(
    name: Annotated[str, typer.Argument(help="The loader's name; consumers ask for it.")],
    dataset: Annotated[
        str, typer.Option("--dataset", help="MODULE:FACTORY returning a map-style torch Dataset.")
    ],
    arg: Annotated[
        list[str],
        typer.Option("--arg", help="key=value for the factory (repeatable; JSON values)."),
    ] = [],  # noqa: B006
    batch_size: Annotated[int, typer.Option("--batch-size", min=1)] = 64,
    workers: Annotated[int, typer.Option("--workers", min=0)] = 2,
    seed: Annotated[int, typer.Option("--seed", min=-(2**63), max=2**63 - 1)] = 0,
    slots: Annotated[
        int,
        typer.Option(
            "--slots",
            min=4,
            max=4096,
            help="Batches the shared ring holds at least (it grows with its consumers).",
        ),
    ] = 16,
    no_shuffle: Annotated[bool, typer.Option("--no-shuffle")] = False,
    idle_exit: Annotated[
        float | None,
        typer.Option(
            "--idle-exit", min=0.0, help="Stop after this many seconds without a consumer."
        ),
    ] = None,
    selection: Annotated[
        str | None,
        typer.Option(
            "--selection",
            help="Serve only part of the dataset: a data-selection preset such as "
            "el2n-25 (see `gpudesk select`); its pre-pass runs here unless cached.",
        ),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            help="MODULE:FACTORY of the target set a targeted preset (less-P) ranks samples by.",
        ),
    ] = None,
    target_arg: Annotated[
        list[str],
        typer.Option("--target-arg", help="key=value for the target factory (repeatable)."),
    ] = [],  # noqa: B006
    device: Annotated[str, typer.Option("--device", help=DEVICE_HELP)] = "cpu",
    share: Annotated[str, typer.Option("--share", help=SHARE_HELP)] = "private",
    managed: Annotated[bool, typer.Option("--managed", hidden=True)] = False,
) -> None:
    """Run the producer for a dataset until stopped (SIGTERM or Ctrl-C)."""
    from gpudesk.loader.producer import ProducerConfig

    config = ProducerConfig(
        name,
        dataset,
        factory_kwargs(arg),
        batch_size,
        workers,
        seed,
        not no_shuffle,
        slots,
        idle_exit,
        managed,
        selection,
        target,
        factory_kwargs(target_arg),
        device,
        share,
    )
    raise typer.Exit(_serve(config))


def _serve(config: ProducerConfig) -> int:
    """The producer run until stopped, its exit status; a failure said in one line."""
    from gpudesk.api.state_home import state_home
    from gpudesk.loader.producer import serve
    from gpudesk.loader.protocol import EXIT_FINAL, FinalError, LoaderError
    from gpudesk.paths import Home

    try:
        if not config.managed:
            # A name or option typed wrong is a usage error (2) for a person; only the engine,
            # which restarts what exits otherwise, is told "failed for good" (EXIT_FINAL).
            try:
                config.check()
            except LoaderError as exc:
                fail(str(exc), EXIT_USAGE)
        # By hand it says, on stdout, what it serves and why it stopped (stderr stays for
        # errors and warnings); the engine logs a managed one's start and end itself.
        # a station's producer reads the selection cache in the state folder its engine names
        home = state_home(Home.from_env())
        return serve(config, home, None if config.managed else _say)
    except FinalError as exc:  # its settings cannot work: the engine does not start it again
        fail(str(exc), EXIT_FINAL)
    except LoaderError as exc:
        fail(str(exc), EXIT_FAILED)


def _say(line: str) -> None:
    """One line for the person who started the producer. A reader that left (`| head -1`),
    or a stdout that cannot be written (a full disk), stops nothing: the producer serves on,
    and what it says later goes nowhere."""
    from gpudesk.cli.std_streams import OutputUnwritable

    try:
        print(line, flush=True)
    except (OSError, OutputUnwritable):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


@loader_app.command("register")
def register_command(
    profile: Annotated[Path, typer.Argument(help="The profile whose [datasets] to register.")],
) -> None:
    """Register a profile's [datasets] with the engine, submitting nothing.

    On a shared station registering a dataset is an admin's (its producer runs its code, as its
    owner): `sudo gpudesk loader register PROFILE` lets the members' `gpudesk run` of it go on.
    `gpudesk run` registers them too, with its jobs.
    """
    from gpudesk.cli.common import current_home, engine_client
    from gpudesk.cli.run import _loaded

    specs = [d.loader for d in _loaded(str(profile)).datasets.values() if d.loader is not None]
    if not specs:
        fail(f"{quoted(str(profile))} has no [datasets] table with a shared loader", EXIT_USAGE)
    with engine_client() as client:
        client.register_datasets(specs)
    names = ", ".join(spec.name for spec in specs)
    print(f"registered with {current_home().description}: {names}")


@loader_app.command("status")
def status_command(
    name: Annotated[str | None, typer.Argument(help="One loader (default: all).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show each producer: consumers, epochs, batches/s, slots, CPU used, orphaned.

    A producer whose engine is gone is shown orphaned, since when, and when it stops by itself;
    one that is stopping, and why.
    """
    from gpudesk.loader.orphan import orphan_of
    from gpudesk.loader.status import collect
    from gpudesk.render import orphaned

    if name is not None:
        from gpudesk.loader.protocol import LoaderError, check_name

        try:  # no loader can have it: a name typed wrong, as `serve` says it
            check_name(name)
        except LoaderError as exc:
            fail(str(exc), EXIT_USAGE)
    loaders = collect(name)
    if as_json:
        print(json_text({"loaders": loaders}, indent=2))
        return
    if not loaders:
        print("no shared loaders are running" + (f" named {quoted(name)}" if name else ""))
        return
    for entry in loaders:
        if entry.get("error"):
            print(f"{entry['name']}: {entry['error']}")
            continue
        if entry.get("preparing"):
            print(f"{entry['name']}  pid {entry['pid']}  preparing {entry['preparing']}")
            continue
        if entry.get("stopping"):
            print(f"{entry['name']}  pid {entry['pid']}  stopping: {entry['stopping']}")
            continue
        print(
            f"{entry['name']}  pid {entry['pid']}  {entry['dataset']}  "
            f"{entry['dataset_len']} samples, batches of {entry['batch_size']}, "
            f"{entry['workers']} workers  epoch {entry['stream'][0]} "
            f"batch {entry['stream'][1]}/{entry['batches_per_epoch']}"
        )
        orphan = orphan_of(entry)
        if orphan is not None:
            print(f"  {orphaned(orphan, time.time())}")
        chosen = entry.get("selection")
        if chosen:
            print(
                f"  selection {chosen['preset']}: trains on {chosen['kept']} of "
                f"{chosen['of']} samples"
                + ("" if chosen["key"] is None else f" (cache entry {chosen['key']})")
            )
        print(
            f"  slots {entry['slots_used']}/{entry['slots']} used "
            f"({entry['slot_bytes'] / 2**20:.1f} MiB each)  produced {entry['produced']} "
            f"(+{entry['makeups_produced']} make-ups)  CPU {entry['cpu_s']:.1f} s"
        )
        if not entry["consumers"]:
            print("  no consumers")
        for c in entry["consumers"]:
            position = "-" if c["position"] is None else f"{c['position'][0]}/{c['position'][1]}"
            print(
                f"  consumer pid {c['pid']:<7} batch {c['batch_size']:<5} epoch "
                f"{c['epoch']:<4} at {position:<9} {c['batches_per_s']:>7.1f} batches/s  "
                f"holds {c['held_slots']}"
                + (f"  make-ups left {c['makeups_left']}" if c["makeups_left"] else "")
            )
