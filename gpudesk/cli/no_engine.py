"""What a command that only reads says when no engine runs: it never starts one (issue 41).

`gpudesk queue`, `show`, `logs`, `wait` and `history` ask a running engine, as `pueue status`
asks its daemon and `squeue` asks slurmctld, neither of which starts one. Only a command that
needs an engine to do what it was asked starts one: `submit`, `run`, `engine start`, the desk
(where jobs are submitted and acted on; `--readonly`, which only watches, does not), and the
commands that change a job or the station. With none running in a personal home:

- in a home where no engine has ever run (no store), the answer is known, and said in one line:
  nothing is queued (exit 0), no job has finished (exit 0), job N is unknown (exit 1, as for
  any unknown job);
- in a home where `submit` would start none (GPUDESK_HOME a link, a file, another user's
  folder): submit's refusal, exit 1, as `submit` gives it;
- in a home whose engine has stopped, its jobs are in a store only an engine reads: one
  `error:` line says so and how to start it, exit 3 (as `gpudesk engine status` says).

A command that changes jobs (`cancel`, `hold`, `release`, `priority`, `requeue`, `edit`,
`suspend`, `resume`) starts a stopped engine to act on its jobs, but in a home where none ever
ran there is no job to act on: it says so in one line, exit 1, and starts nothing
(`acting_client`).

A system engine (GPUDESK_SOCKET) is never started by its users: it is asked as before, and
its own errors say who starts it. Standard library at module level: `gpudesk queue`'s fast path
runs without typer.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

from gpudesk.cli.common import current_home, engine_client, fail
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_NOT_RUNNING
from gpudesk.text import printable_line, quoted

if TYPE_CHECKING:
    from gpudesk.api.client import Client
    from gpudesk.api.errors import EngineError
    from gpudesk.paths import Home


def running_client(home: Home | None = None) -> Client | None:
    """A client of the home's engine when one runs (a system engine: always), else None; it
    never starts one."""
    from gpudesk.api.client import Client
    from gpudesk.api.connection import engine_pid

    home = home or current_home()
    if not home.is_system and engine_pid(home) is None:
        return None
    return Client.connect(home, autostart=False)


def reading_client(ref: str | None = None) -> Client:
    """A client of the running engine for a command about job `ref` (or about the engine's
    state); with none running, the command's one line and exit code (module docstring)."""
    home = current_home()
    client = running_client(home)
    if client is None:
        if ref is not None and never_ran(home):
            fail(f"no job with id or name {quoted(ref)}: {no_engine_line(home)}", EXIT_FAILED)
        stopped(home)
    return client


def acting_client(refs: Sequence[str]) -> Client:
    """A client of the engine (started if need be) for a command that changes the jobs
    `refs` (none: picked by filters); in a home where no engine ever ran, none of them exists:
    one line, exit 1, no engine started."""
    home = current_home()
    if not home.is_system and never_ran(home):
        what = f"no job with id or name {quoted(refs[0])}" if refs else "no live job matches"
        fail(f"{what}: {no_engine_line(home)}", EXIT_FAILED)
    return engine_client()


def require_running() -> None:
    """For a reader with no empty answer (`gpudesk --readonly`, the desk that only watches):
    `stopped` unless an engine runs."""
    client = running_client()
    if client is None:
        stopped(current_home())
    client.close()


def never_ran(home: Home) -> bool:
    """No engine has run in this home: it has no store and no job folders, so no jobs."""
    return not any(os.path.lexists(path) for path in (home.db, home.jobs_dir))


def no_engine_line(home: Home) -> str:
    """What a command says of a home where no engine ever ran; in one where `submit` would
    start none (a link, another user's folder), submit's refusal instead, exit 1."""
    if (refusal := home.refusal()) is not None:
        fail(refusal, EXIT_FAILED)
    return f"no engine is running for {home.root} (`gpudesk submit` starts one)"


def stopped(home: Home) -> NoReturn:
    """The error of a read in a home whose engine has stopped (or never ran, for a command
    that has no empty answer)."""
    fail(
        f"no engine is running for {home.root}; this command only asks a running one and "
        f"does not start it: {how_to_start(home)}",
        EXIT_NOT_RUNNING,
    )


def how_to_start(home: Home) -> str:
    """How a personal home's stopped engine starts: "`gpudesk engine start` starts it (its jobs
    are kept)", or why that would not start one."""
    from gpudesk.core.lost_database import lost_database

    # The home named as the command found it: `GPUDESK_HOME=… gpudesk history` (a profile's
    # own SIMULATED station) is not started by a bare `gpudesk engine start` (that is yours).
    quoted_home = printable_line(shlex.quote(str(home.root)))
    named = f"GPUDESK_HOME={quoted_home} " if os.environ.get("GPUDESK_HOME") else ""
    # (a database deleted under the last engine: the next one refuses to start, and says why)
    if problem := lost_database(home):
        return f"`{named}gpudesk engine start` would not start one: {problem}"
    return f"`{named}gpudesk engine start` starts it (its jobs are kept)"


AWAY_POLL_S = 1.0  # while the engine is away, how often `wait` and `logs -f` ask it again


class _EngineAway:
    """How `wait` and `logs -f` go through an outage of the engine (gpudesk.api.connection
    .Outage): said once on stderr, then asked again every AWAY_POLL_S until it answers, for as
    long as it takes (as the jobs may take: they run on without it), and said once it does.
    `check`: called at each try, raises to give up (`wait --timeout`)."""

    def __init__(self, home: Home, what: str, check: Callable[[], None] | None) -> None:
        self.home, self.what, self.check = home, what, check
        self.since: float | None = None  # monotonic: since when it is away

    def away(self, error: EngineError) -> None:
        from gpudesk.api.connection import EngineNotAllowed, who_starts

        if self.since is None:
            self.since = time.monotonic()
            # a socket that refuses someone it served is new (being set up by an engine that is
            # starting, or one started for another --group); the rest is "not there"
            why = (
                " (its socket refuses you now: an engine starting, or one started for another "
                "group)"
                if isinstance(error, EngineNotAllowed)
                else ""
            )
            print(
                printable_line(
                    f"gpudesk: {self.home.description} is not answering{why}: stopped, or "
                    "restarting (an upgrade). Jobs run on without it; this command waits for "
                    f"it to answer again, then goes on waiting for {self.what} "
                    f"({who_starts(self.home)}; Ctrl-C stops waiting)"
                ),
                file=sys.stderr,
                flush=True,
            )
        if self.check is not None:
            self.check()
        time.sleep(AWAY_POLL_S)

    def back(self) -> None:
        if self.since is not None:
            away_s = time.monotonic() - self.since
            self.since = None
            print(
                f"gpudesk: the engine answers again (away {away_s:.0f} s); waiting on for "
                f"{self.what}",
                file=sys.stderr,
                flush=True,
            )


@contextmanager
def engine_kept_waiting(
    client: Client, what: str, check: Callable[[], None] | None = None, again: str | None = None
) -> Iterator[None]:
    """For a command that waits on the engine for jobs (`wait`, `logs -f`): an engine that
    stops answering while it waits (stopped, or restarted for an upgrade: its jobs run on) is
    waited for (`_EngineAway`), as the desk and `top` follow it. What still ends the wait (an
    unsafe socket folder, an error of the connection's own) is exit 3, as for an engine not
    running when it began: 1 would be a job's failure to a script (docs/jobs.md, "An engine
    restarted while you wait", says where 3 can still be a job's own). `what`: what is waited
    for ("job(s) 3 4"); `check`: as `_EngineAway`'s; `again`: the command that waits again
    (else this one, as it was run)."""
    from gpudesk.api.errors import EngineError

    client.outlast(_EngineAway(client.home, what, check))
    try:
        yield
    except EngineError as exc:
        if exc.code != "unavailable":
            raise
        again = again or shlex.join(["gpudesk", *sys.argv[1:]])
        fail(
            f"gave up waiting for {what}: {exc}. The jobs go on: they outlive the engine, which "
            f"takes them up again when it starts. To wait again, run: {again}",
            EXIT_NOT_RUNNING,
        )
    finally:
        client.outlast(None)


def say_nothing(home: Home, nothing: str, *, machine_output: bool) -> None:
    """A listing's answer with no engine running: `nothing` (e.g. "nothing is queued") in
    one line where no engine has ever run (on stderr when the listing itself goes to stdout
    as JSON or CSV), else `stopped`."""
    if not never_ran(home):
        stopped(home)
    said = printable_line(f"{no_engine_line(home)}: {nothing}")  # the home's path spelled out
    print(said, file=sys.stderr if machine_output else sys.stdout)
