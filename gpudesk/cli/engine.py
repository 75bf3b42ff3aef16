"""`gpudesk engine start / stop / status / print-unit`: the daemon for this GPUDESK_HOME."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpudesk.cli.common import current_home, engine_client, fail, print_json
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_NOT_RUNNING, EXIT_USAGE
from gpudesk.cli.std_streams import already_done
from gpudesk.paths import SYSTEM_ADMIN_GROUP, SYSTEM_GROUP, SYSTEM_SOCKET, SYSTEM_STATE_DIR
from gpudesk.text import printable_line, printable_message, quoted

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpudesk.api.models import LoopTimingView, StationStatus
    from gpudesk.core.station import StationConfig
    from gpudesk.paths import Home

VALUE_INDENT = " " * len("station: ")  # where `engine status`'s values start, continued there
engine_app = typer.Typer(help="Start, stop and inspect the engine daemon.", no_args_is_help=True)


def _station_from_options(
    slots: int | None, policy: str | None, backend: str | None
) -> tuple[StationConfig | None, tuple[str, ...]]:
    """The settings `engine start` was given and their keys: only those change; the others
    stay as the home's last engine had them."""
    from gpudesk.core.station import StationConfig

    given = {k: v for k, v in (("slots", slots), ("policy", policy), ("backend", backend)) if v}
    if not given:
        return None, ()
    try:
        return StationConfig.from_dict(given), tuple(given)
    except ValueError as exc:
        # said as the option that gave it (`--slots: …`), not as the [station] key: a value a
        # config file gave is then said as the file's, with its line (main._said_as_config)
        message = str(exc)
        for key in given:
            if message.startswith(f"station.{key}: "):
                message = f"--{key}: {message.removeprefix(f'station.{key}: ')}"
        fail(message, EXIT_USAGE)


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
    system: bool = typer.Option(
        False,
        "--system",
        help="The station's engine for a whole group (root; docs/shared-station.md).",
    ),
    # readable=False: click's Path checks that an existing path is readable by whoever runs
    # this, which root's 0711 state folder is not for a member, even where --system is not given
    state_dir: Path = typer.Option(
        SYSTEM_STATE_DIR,
        "--state-dir",
        readable=False,
        help="With --system: where its state lives.",
    ),
    socket: Path = typer.Option(
        SYSTEM_SOCKET,
        "--socket",
        readable=False,
        help="With --system: its socket (its folder is the group's).",
    ),
    group: str = typer.Option(
        SYSTEM_GROUP, "--group", help="With --system: the group whose members may use it."
    ),
    admin_group: str | None = typer.Option(
        None,
        "--admin-group",
        help="With --system: the group of its admins (default gpudesk-admin, when it exists).",
    ),
) -> None:
    """Start the engine for this GPUDESK_HOME (one per home), or with --system the station's
    engine for a whole group."""
    from gpudesk.api.connection import EngineNotStarted, daemon_args, start_engine
    from gpudesk.paths import Home

    if system:
        home = Home.system(socket, state_dir)
        system_args = ("--group", group) + (("--admin-group", admin_group) if admin_group else ())
        if os.geteuid() == 0:  # else it is told first that a system engine is root's (exit 1)
            _check_groups(group, admin_group)
    else:
        home = current_home()
        system_args = ()
    station, keys = _station_from_options(slots, policy, backend)
    if _runs_already(home, system, foreground, group, station, keys):
        return
    if foreground:
        import logging

        from gpudesk.engine import daemon

        if system:  # the daemon's own entry: it checks the group and sets up its logging
            raise typer.Exit(daemon.main(daemon_args(home, station, system_args, keys)))
        logging.basicConfig(
            stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s"
        )
        requested = {key: getattr(station, key) for key in keys}
        raise typer.Exit(daemon.serve(home, requested))
    try:
        pid = start_engine(home, station, system_args=system_args, keys=keys)
    except EngineNotStarted as exc:
        if not system or os.geteuid() != 0:
            raise
        # the daemon's exit status, as the service (and docs/shared-station.md) knows it
        fail(str(exc), exc.status)
    already_done(f"the engine was started all the same (pid {pid}): gpudesk engine status shows it")
    # the home's path spelled out (GPUDESK_HOME may hold an ESC), as in every line here
    print(printable_line(f"engine started (pid {pid}): {home.description}{_simulated(home)}"))
    if system:
        _warn_if_members_cannot_run(group)


def _warn_if_members_cannot_run(group: str) -> None:
    from gpudesk.cli.install_reach import members_cannot_run

    warning = members_cannot_run(group)
    if warning is not None:
        print(warning, file=sys.stderr)


def _simulated(home: Home) -> str:
    """Where the engine just started watches a SIMULATED station (GPUDESK_BACKEND, or the
    home's setting), the words that say so; else ""."""
    from gpudesk.api.client import Client
    from gpudesk.api.errors import EngineError

    try:
        with Client.connect(home, autostart=False) as client:
            station = client.status().station
    except (EngineError, OSError):  # stopped again already: `engine status` says why
        return ""
    if not station.simulated:
        return ""
    return f", on a SIMULATED station ({station.effective_backend}: its GPUs are not real)"


def _runs_already(
    home: Home,
    system: bool,
    foreground: bool,
    group: str,
    station: StationConfig | None,
    keys: tuple[str, ...],
) -> bool:
    """True where the engine `engine start` names runs already (said so, or failed where it is
    not the one asked for); fails where a member's shell names the station's, which is down
    (root starts it)."""
    from gpudesk.api.connection import engine_pid, who_starts

    pid = engine_pid(home)
    if pid is not None:
        if foreground:
            fail(f"{home.description} is already running (pid {pid})", _running_exit(system))
        if system:
            _same_station(home, pid, group)
        _already_running(home, pid, station, keys)
        return True
    if home.is_system and not system:
        # who_starts: on a station at another socket, the bare `--system` started another one
        fail(
            f"this shell talks to {home.description} (GPUDESK_SOCKET, or the station's "
            f"socket exists), which is not running: {who_starts(home)}; or set GPUDESK_HOME to "
            "start a personal engine",
            EXIT_NOT_RUNNING,
        )
    return False


def _running_exit(system: bool) -> int:
    """`engine start`'s exit where an engine runs and this start cannot be it: the daemon's
    "another engine runs there" for a system engine, else a failure."""
    from gpudesk.home_lock import EXIT_ALREADY_RUNNING

    return EXIT_ALREADY_RUNNING if system else EXIT_FAILED


def _check_groups(group: str, admin_group: str | None) -> None:
    """A system engine's groups exist, else its daemon's bad-arguments words and exit 2, here
    too where an engine already runs (which keeps its own group)."""
    from gpudesk.core.identity import group_id, no_such_group

    for option, name in (("--group", group), ("--admin-group", admin_group)):
        if name is not None and group_id(name) is None:
            fail(no_such_group(option, name), EXIT_USAGE)


def _same_station(home: Home, pid: int, group: str) -> None:
    """`engine start --system` where an engine answers at the socket: nothing to do where it
    is the station asked for (its state folder, and the group its socket's folder is given
    to); else one paragraph and the daemon's exit 3, since a running engine keeps its own
    settings and this start would change none of them."""
    from gpudesk.core.identity import group_id
    from gpudesk.core.known_owner import group_name

    status = _ask_status(home, pid)
    try:
        given_to = os.stat(home.socket_dir).st_gid
    except OSError:
        given_to = None
    asked = group_id(group)
    differ = []
    if Path(status.home) != home.root:
        differ.append(f"its state folder is {status.home}, not {home.root}")
    if given_to is not None and given_to != asked:
        differ.append(f"it serves the group {group_name(given_to)}, not {group}")
    if differ:
        fail(
            f"{home.description} is already running (pid {pid}), and {'; '.join(differ)}: a "
            "running engine keeps its own settings, and this start changed nothing. Stop it "
            "first (`sudo systemctl stop gpudesk`, or `sudo GPUDESK_SOCKET="
            f"{home.control_socket} gpudesk engine stop`) to start the station asked for, or "
            "give this one a --socket of its own.",
            _running_exit(True),
        )


def _already_running(
    home: Home, pid: int, station: StationConfig | None, keys: tuple[str, ...]
) -> None:
    """`engine start` where the engine runs: nothing to do, exit 0, as `systemctl start` (and
    `engine stop` where none runs). Unless it was given a setting the running engine has
    otherwise, which starting would not apply: one paragraph, exit 1, saying what does."""
    from gpudesk.api.client import Client
    from gpudesk.api.errors import EngineError

    if station is not None and keys:
        try:
            with Client.connect(home, autostart=False) as client:
                running = client.status().station
        except (EngineError, OSError):
            fail(f"{home.description} is already running (pid {pid})")
        # slots unset is the host's cores: what it runs with is what is compared
        has_now = {key: getattr(running, key) for key in keys} | {
            "slots": running.slots or running.effective_slots
        }
        other = [key for key in keys if has_now[key] != getattr(station, key)]
        if other:
            has = ", ".join(f"{key}={has_now[key]}" for key in other)
            wanted = " ".join(f"{key}={getattr(station, key)}" for key in other)
            fail(
                f"{home.description} is already running (pid {pid}), with {has}: starting it "
                f"changes nothing on a running engine; `gpudesk engine set {wanted}` does"
            )
    if home.is_system:  # a member's start too: the station's engine runs, there is none to start
        print(printable_line(f"{home.description} is already running (pid {pid})"))
        return
    print(printable_line(f"engine already running (pid {pid}): {home.description}"))


@engine_app.command("stop")
def engine_stop(
    timeout: float = typer.Option(
        10.0, "--timeout", min=0.5, max=86400.0, help="Seconds to wait for it to exit."
    ),
) -> None:
    """Stop the engine. Running jobs keep running and are re-adopted by the next engine."""
    from gpudesk.api.client import Client
    from gpudesk.api.connection import engine_pid

    home = current_home()
    if engine_pid(home) is None:
        print(printable_line(f"{home.description} is not running"))
        return
    with Client.attach(home, timeout=timeout) as client:
        running = client.shutdown().running_attempts
    deadline = time.monotonic() + timeout
    while engine_pid(home) is not None:
        if time.monotonic() > deadline:
            fail(f"the engine did not exit within {timeout:g} s")
        time.sleep(0.05)
    already_done("the engine was stopped all the same")
    suffix = f"; {running} running job(s) keep running" if running else ""
    print(f"engine stopped{suffix}")


def _settings_table(pairs: list[str]) -> dict[str, object]:
    """`KEY=VALUE` words as a [station] table: each value read as TOML (`slots=4`,
    `isolation=true`, `grid_intensity=56.1`), a bare word as a string (`policy=fifo`,
    `grid_intensity=FR`, `metrics_listen=127.0.0.1:9400`); an empty value goes back to the
    default."""
    from gpudesk.toml_lines import tomllib

    table: dict[str, object] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            fail(
                f"expected KEY=VALUE, found {quoted(pair)} (e.g. metrics_listen=127.0.0.1:9400)", 2
            )
        value: object = None
        if raw.strip():
            try:
                value = tomllib.loads(f"value = {raw}")["value"]
            except (ValueError, RecursionError):
                # not a TOML value (TOMLDecodeError is a ValueError; so is a number past
                # int()'s digit limit; `[[[[…` nested past the stack is a RecursionError): the
                # word as it is, which the engine checks as it checks any setting
                value = raw.strip()
        table[key] = value
    return table


@engine_app.command("set")
def engine_set(
    settings: list[str] = typer.Argument(
        ..., metavar="KEY=VALUE...", help="Station settings, as a profile's [station] names them."
    ),
) -> None:
    """Change station settings on the engine, as a profile's [station] would: `gpudesk engine
    set metrics_listen=127.0.0.1:9400 grid_intensity=FR`. An empty value (`slots=`) goes back
    to the default. On a shared station only an admin changes them; anyone else is told what
    the station keeps. Settings are kept for the next engine of this home."""
    from gpudesk.core.station import StationConfig

    table = _settings_table(settings)
    try:
        asked = StationConfig.from_dict({k: v for k, v in table.items() if v is not None})
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    with engine_client() as client:
        result = client.configure(asked, list(table))
    if result.changes:
        already_done(
            "the station's settings were changed all the same: gpudesk engine status shows them"
        )
    for change in result.changes:
        print(f"station: {change.message}")
    for refused in result.not_applied:
        print(f"station: {refused.message}", file=sys.stderr)
    if not result.changes and not result.not_applied:
        print("station: nothing to change (it runs these settings already)")
    if result.not_applied:
        raise typer.Exit(EXIT_FAILED)


@engine_app.command("status")
def engine_status(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Is the engine running, and what is its station doing?"""
    from gpudesk.api.connection import engine_pid
    from gpudesk.api.models import to_builtins

    home = current_home()
    pid = engine_pid(home)
    kind = "system" if home.is_system else "personal"
    if pid is None:
        _say_not_running(home, kind, json_out)
        raise typer.Exit(EXIT_NOT_RUNNING)
    status = _ask_status(home, pid)
    if json_out:
        print_json(
            {"running": True, "kind": kind, "socket": str(home.control_socket)}
            | to_builtins(status)
            | {"home_source": "engine", "home_unknown": None}
            | {"served_group": _served_group_or_none(home)}
        )
        return
    _print_engine_and_station(status, home)
    _print_users_and_stores(status)


def _say_not_running(home: Home, kind: str, json_out: bool) -> None:
    if json_out:
        source = None if home.is_system else _home_named_by()
        print_json(
            {
                "running": False,
                "kind": kind,
                "home": None if source is None else str(home.root),
                "socket": str(home.control_socket),
                "home_source": source,
                "home_unknown": STATE_DIR_UNKNOWN if source is None else None,
            }
        )
    else:
        _print_not_running(home)


def _print_not_running(home: Home) -> None:
    """A stopped engine said as a running one is (`_print_engine_and_station`): which engine
    this shell talks to, where its state is, and how it starts."""
    from gpudesk.api.connection import who_starts
    from gpudesk.cli.no_engine import how_to_start

    say = _sayer()
    say("engine: not running")
    if home.is_system:
        say(printable_line(f"talks to: the station's system engine at {home.control_socket}"))
        say(f"state:   not known: {STATE_DIR_UNKNOWN} ({SYSTEM_STATE_DIR} by default)")
        say(printable_line(f"start:   {who_starts(home)}"))
        return
    named = {"default": "the default home"}.get(source := _home_named_by(), f"from {source}")
    say(printable_line(f"talks to: the personal engine of {home.root} ({named})"))
    say(printable_line(f"socket:  {home.control_socket}"))
    say(printable_line(f"start:   {how_to_start(home)}"))


def _home_named_by() -> str:
    """What names the personal home `paths.resolve_home` takes when none is given: "GPUDESK_HOME",
    "XDG_STATE_HOME" ($XDG_STATE_HOME/gpudesk) or "default" (~/.local/state/gpudesk)."""
    if os.environ.get("GPUDESK_HOME"):
        return "GPUDESK_HOME"
    return "XDG_STATE_HOME" if os.path.isabs(os.environ.get("XDG_STATE_HOME", "")) else "default"


# A station's state folder is its engine's --state-dir: a socket names none, and only the
# running engine says which it is (its `ping`, docs/shared-station.md). `/var/lib/gpudesk`, the
# default, is no more than a guess while it is down, and `status --json` states no guess.
STATE_DIR_UNKNOWN = (
    "the station's engine is down: its state folder is the --state-dir it was started with, "
    "which only the running engine names"
)


def _ask_status(home: Home, pid: int) -> StationStatus:
    """The engine's status; an engine that holds the lock but does not answer fails."""
    from gpudesk.api.client import Client
    from gpudesk.api.errors import BAD_REPLY, EngineError

    try:
        with Client.attach(home, timeout=5.0) as client:
            status = client.status()
    except EngineError as exc:
        if exc.code == BAD_REPLY:
            fail(str(exc))
        fail(f"the engine (pid {pid}) holds the lock but does not answer: {exc}")
    return status


def _print_engine_and_station(status: StationStatus, home: Home) -> None:
    """The engine (pid, version, uptime, whose), its station, grid, metrics, jobs and loop."""
    from gpudesk import render

    say = _sayer()
    station = status.station
    say(
        f"engine: running (pid {status.pid}, version {status.version}, up "
        f"{render.duration(time.time() - status.started_at)})"
    )
    if home.is_system:
        say(printable_line(f"talks to: the station's system engine at {home.control_socket}"))
        say(printable_line(f"state:   {status.home}"))
        say(printable_line(f"serves:  {_members(home)}; admins: {station.admins or 'not said'}"))
    else:
        say(printable_line(f"talks to: the personal engine of {status.home}"))
    say(
        f"station: backend {station.effective_backend}"
        + (" (SIMULATED)" if station.simulated else "")
        + f", policy {station.policy}, "
        f"{status.slots.busy}/{status.slots.total} slots busy, "
        f"{station.cores} cores, {station.gpus} GPU{'s' * (station.gpus != 1)}"
    )
    if station.gpu_problem:
        say(f"GPUs:    {printable_message(station.gpu_problem)}")
    say(f"grid:    {station.grid_text}")
    if station.metrics_url:
        simulated = " (SIMULATED station)" if station.simulated else ""
        say(f"metrics: {station.metrics_url} (Prometheus){simulated}")
    elif station.metrics_problem:
        say(f"metrics: {printable_message(station.metrics_problem.removeprefix('metrics: '))}")
    if status.drain is not None:
        say(f"DRAINED: the station is {status.drain.line()}; no job starts until undrained")
    say("jobs:    " + ", ".join(f"{n} {s}" for s, n in status.counts.items()))
    if status.store_problem:
        say(f"store:   {printable_message(status.store_problem)}")
    if status.loop is not None and status.loop.requests:
        say(f"loop:    {loop_line(status.loop)}")


def _members(home: Home) -> str:
    """Whom a system engine serves, as the kernel enforces it: the members of its socket
    folder's group (the engine makes it 0750 root:GROUP, `--group`)."""
    try:
        group = _served_group(home)
    except OSError as exc:
        return f"not known ({home.socket_dir}: {exc.strerror})"
    if isinstance(group, int):
        return f"the members of group {group} (a group with no name)"
    return f"the members of {group}"


def _served_group(home: Home) -> str | int:
    """The group of a system engine's socket folder, which the kernel holds every connection
    to: its name, or its gid where the group has no name. Read here, by the client, as the
    kernel has it (the engine's word would be what it was started with). Raises OSError."""
    import grp

    gid = home.socket_dir.stat().st_gid
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return gid


def _served_group_or_none(home: Home) -> str | int | None:
    """`--json`'s `served_group`: as `_served_group`; null for a personal engine, which serves
    its own user, and where the socket folder cannot be read."""
    if not home.is_system:
        return None
    try:
        return _served_group(home)
    except OSError:
        return None


def _print_users_and_stores(status: StationStatus) -> None:
    """Fair share by user, the MLflow stores' health, the shared loaders starting or not
    serving, and the latest station changes."""
    from gpudesk import render

    say = _sayer()
    if status.station.fairshare_half_life_h and len(status.users) > 1:
        half_life = status.station.fairshare_half_life_h
        say(f"users:   fair share, lightest first (usage decayed, half-life {half_life:g} h)")
    for share in status.users if len(status.users) > 1 else ():
        say(
            f"  {share.user:<12} {share.usage_gpu_h:8.2f} GPU-h  {share.running_gpus} GPU(s) "
            f"running  {share.waiting} waiting"
        )
    for store in status.tracking:
        how = (
            f"failing since {render.clock(store.error_since)}: {printable_message(store.error)}"
            if store.error
            else "its tracking worker is starting"
            if store.starting
            else "ok"
        )
        dropped = f", {store.dropped} metric points dropped" if store.dropped else ""
        say(
            f"mlflow:  {printable_message(store.mlflow_uri)} ({store.user}): {how}; "
            f"{store.queued} update(s) queued{dropped}"
        )
    for loader in status.loaders:
        if loader.starting or loader.problem:
            how = "starting" if loader.starting else printable_message(str(loader.problem))
            say(f"loader:  {loader.name}: {how}")
    for change in status.station_changes:
        stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(change.ts))
        say(f"changed: {stamp} {printable_message(change.message)}")  # an old row's ESC too


def _sayer() -> Callable[[str], None]:
    """How `engine status` says a `key:    value` line: on a terminal folded into its width,
    continued under the value; to a pipe whole, one line as a script greps it."""
    from gpudesk import render

    width = render.table_width()
    return lambda line: print(render.fold(line, width, VALUE_INDENT))


def loop_line(loop: LoopTimingView) -> str:
    """How long requests held the engine's loop lately, the slowest's op, and its turns:
    "1234 requests, p99 3.1 ms, max 40 ms (jobs); turns p99 0.4 ms, max 9 ms (schedule)".
    Past the window, the figures are the latest requests' and the line says so."""
    text = f"{loop.requests} requests"
    if loop.window < loop.requests:
        text += f" (figures over the latest {loop.window})"
    if loop.p99_ms is not None and loop.max_ms is not None:
        text += f", p99 {loop.p99_ms:g} ms, max {loop.max_ms:g} ms"
        if loop.slowest:
            text += f" ({loop.slowest[0].op})"
    turns = loop.turns
    if turns.p99_ms is not None and turns.max_ms is not None:
        text += f"; turns p99 {turns.p99_ms:g} ms, max {turns.max_ms:g} ms"
        if turns.slowest:
            text += f" ({turns.slowest[0].step})"
    return text


@engine_app.command("print-unit")
def engine_print_unit(
    state_dir: Path = typer.Option(
        SYSTEM_STATE_DIR, "--state-dir", readable=False, help="Where its state lives."
    ),
    socket: Path = typer.Option(
        SYSTEM_SOCKET, "--socket", readable=False, help="Its socket (its folder is the group's)."
    ),
    group: str = typer.Option(SYSTEM_GROUP, "--group", help="The group whose members may use it."),
    admin_group: str | None = typer.Option(
        None,
        "--admin-group",
        help=f"The group of its admins (default {SYSTEM_ADMIN_GROUP}, when it exists).",
    ),
) -> None:
    """Print the systemd unit of the station's engine, run by this Python. Install it with
    `gpudesk engine print-unit | sudo tee /etc/systemd/system/gpudesk.service`."""
    from gpudesk.api.connection import daemon_args
    from gpudesk.cli.engine_unit import unit_text
    from gpudesk.paths import Home
    from gpudesk.spawn import module_argv

    home = Home.system(socket, state_dir)
    # No --admin-group unless one is named: the engine then takes the default group where it
    # exists and root alone where not, as `engine start --system` does (a unit naming a missing
    # group exited 2, which its RestartPreventExitStatus left down).
    system_args = ("--group", group) + (("--admin-group", admin_group) if admin_group else ())
    argv = module_argv("gpudesk.engine.daemon", *daemon_args(home, None, system_args))
    defaults = Home.system()
    state, runtime = home.root == defaults.root, home.socket_dir == defaults.socket_dir
    sys.stdout.write(unit_text(argv, state_dir=state, runtime_dir=runtime))
    _warn_if_members_cannot_run(group)  # on stderr: the unit itself goes to `tee`
