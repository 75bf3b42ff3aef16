"""The desk's "open its log in $PAGER": the job's whole log piped into the pager, as
`gpudesk logs JOB | $PAGER` (git's way with its pager), never output.log by its path.

The engine caps a log by rotating it (gpudesk.joblog): what the job printed first is in the
numbered parts beside output.log, and on tmpfs or NFS output.log begins with a punched hole that
reads as NUL bytes. `gpudesk logs` reads the stream whole (the parts, then output.log past any
hole) and through the engine where the log is another user's; a pager given the path would show
neither the parts nor anything but NULs at its top. A child `gpudesk logs` process rather than
an import: the desk runs it as the CLI would, with the same checks.

The terminal is handed to the pager only once its program is found, and always taken back:
Textual's `App.suspend` does not resume the terminal when its block raises, which left the desk
off its screen, in cooked mode and deaf to every key but Ctrl-C."""

from __future__ import annotations

import contextlib
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from textual.app import App

DEFAULT_PAGER = "less -R +G"


class NoPager(Exception):
    """The pager cannot be started here (said before the terminal is handed over)."""


def pager_command(setting: str | None) -> list[str]:
    """`$PAGER` (`setting`; less where it is unset or empty) as the command to run, its
    program found; NoPager says why it cannot be run."""
    try:
        command = shlex.split(setting or "") or shlex.split(DEFAULT_PAGER)
    except ValueError as exc:  # an unclosed quote
        raise NoPager(f"$PAGER cannot be read ({exc})") from None
    program = command[0]
    found = shutil.which(program)
    if found is None:
        where = "is not an executable file" if "/" in program else "is not on PATH"
        raise NoPager(f"{program} {where}")
    return [found, *command[1:]]


@contextlib.contextmanager
def terminal_handed_over(app: App[Any]) -> Iterator[None]:
    """`app.suspend()` whose way back runs whatever happened in the block: the terminal is the
    desk's again before an exception (or Ctrl-C) goes on. SuspendNotSupported where there is
    no terminal to hand over (headless, a web driver)."""
    suspended = app.suspend()
    suspended.__enter__()
    try:
        yield
    finally:
        suspended.__exit__(None, None, None)  # as a block that ended well: it resumes


def page_job_log(job_id: int, pager: Sequence[str]) -> int:
    """Run `pager` on the job's whole log (its standard input) and wait for it; its exit
    status (negative: the signal that ended it). The reader is stopped if the pager is left
    before it has read everything. A Ctrl-C meant for the pager does not stop the desk (git
    does the same while its pager runs): a handler of our own, which the pager does not
    inherit as it would an ignored signal."""
    with _sigint_left_to_the_pager():
        logs = subprocess.Popen(
            [sys.executable, "-m", "gpudesk", "logs", str(job_id)], stdout=subprocess.PIPE
        )
        assert logs.stdout is not None
        try:
            return subprocess.call(list(pager), stdin=logs.stdout)
        finally:
            logs.stdout.close()  # a reader still writing gets SIGPIPE
            if logs.poll() is None:
                logs.terminate()
            logs.wait()


@contextlib.contextmanager
def _sigint_left_to_the_pager() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set a handler (and only it gets the signal)
        return
    before = signal.signal(signal.SIGINT, lambda _signum, _frame: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
