"""Who runs a GPU process gpudesk did not start, and what: on a shared server the first question
about GPU 2 is "whose process is that?". NVML gives a pid; `/proc` (through psutil) gives its
owner and command line, as nvitop shows them.

Looked up on the sampler's thread, once per process (a pid and its start time: a reused pid is
looked up again; one caught in `execve`, whose command line reads empty, again on the next
sample), and forgotten when the process is gone. The command line is text its owner
chose: it is kept as valid Unicode with control characters spelled out and cut to
`MAX_COMMAND` characters before any view carries it. What /proc will not show the engine (a
process that ended meanwhile) is left unknown. Where /proc is mounted `hidepid` (users may not
see each other's processes), nothing is looked up: a system engine, which runs as root and
sees them all, would otherwise show every user what the site hides.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

import msgspec
import psutil

from gpudesk.text import printable, safe_text

MAX_COMMAND = 200  # characters of a command line a view carries (nvitop's column is ~80)


class ForeignProcess(msgspec.Struct, frozen=True):
    user: str | None  # the login name of its real uid, else the uid as text
    command: str | None  # its command line, cut, control characters spelled out


def _command(proc: psutil.Process) -> tuple[str | None, bool]:
    """The process's command line as a view carries it, and whether that is settled: a process
    caught in `execve` reads an empty command line for a moment, and then only its name is
    said, to be looked up again next time (what /proc refuses stays refused)."""
    try:
        args = proc.cmdline()
        settled = bool(args)
    except psutil.Error:
        args, settled = [], True
    try:
        text = shlex.join(args) if args else proc.name()
    except psutil.Error:
        return None, settled
    text = printable(safe_text(text)).replace("\n", "\\n").replace("\t", " ")
    return (text if len(text) <= MAX_COMMAND else text[: MAX_COMMAND - 1] + "…"), settled


def _user(proc: psutil.Process) -> str | None:
    try:
        return proc.username()
    except KeyError:  # a uid with no name (psutil raises it from pwd)
        try:
            return str(proc.uids().real)
        except psutil.Error:
            return None
    except psutil.Error:
        return None


def proc_hides_processes(mounts: str = "/proc/self/mounts") -> bool:
    """Whether /proc is mounted with `hidepid` other than 0 (or `off`): the site hides users'
    processes from each other."""
    try:
        with open(mounts, encoding="utf-8", errors="replace") as listing:
            lines = listing.read().splitlines()
    except OSError:
        return False
    for line in lines:
        fields = line.split()
        if len(fields) >= 4 and fields[1] == "/proc" and fields[2] == "proc":
            for option in fields[3].split(","):
                key, _, value = option.partition("=")
                if key == "hidepid" and value not in ("0", "off"):
                    return True
    return False


class ForeignProcesses:
    """The owner and command of GPU processes by pid, kept while each process lives."""

    def __init__(self, hidden: bool | None = None) -> None:
        self._known: dict[int, tuple[float, ForeignProcess]] = {}
        self.hidden = proc_hides_processes() if hidden is None else hidden

    def describe(self, pids: Iterable[int]) -> dict[int, ForeignProcess]:
        if self.hidden:
            return {}
        found: dict[int, ForeignProcess] = {}
        for pid in pids:
            try:
                proc = psutil.Process(pid)
                started = proc.create_time()
            except psutil.Error:
                continue
            known = self._known.get(pid)
            if known is None or known[0] != started:
                command, settled = _command(proc)
                known = (started, ForeignProcess(_user(proc), command))
                if settled:  # else its name only, for now: looked up again next time
                    self._known[pid] = known
            found[pid] = known[1]
        for gone in [pid for pid in self._known if pid not in found]:
            del self._known[gone]
        return found
