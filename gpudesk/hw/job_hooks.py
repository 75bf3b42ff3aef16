"""Commands run when a job ends (pueue's `callback`, Slurm's `--mail-type=END`; issue 41,
item 5): the station's hook, from `hooks.toml` in the engine's home, and a job's own
`submit --notify CMD`.

    [job_end]
    command = ["/usr/local/bin/notify-end", "--to", "lab-channel"]   # no shell
    timeout_s = 30

Each gets GPUDESK_JOB_ID, GPUDESK_JOB_NAME, GPUDESK_JOB_STATE, GPUDESK_JOB_EXIT_CODE (empty when
none), GPUDESK_JOB_REASON, GPUDESK_JOB_OWNER and GPUDESK_JOB_OWNER_UID in its environment.

Root trusts nothing a user controls (gpudesk.trust): a system engine reads `hooks.toml` only
when it is a regular file of root's, one name, writable by root alone (else it says why in the
log and runs no hook), and runs it as root with an environment it built; a job's `--notify`
runs with `/bin/sh -c` in a process already dropped to the job's owner (uid, gid, groups), with
an environment the engine built (her HOME and names from the password database), never hers.
The engine reads `hooks.toml` again, with the same checks, when it changes (`JobEndHooks.refresh`
on the loop's step: a stat every RECHECK_S); one it may no longer use turns the station's hook
off, said once in the log and as an event.

Nothing here waits on the engine's loop: `JobEndHooks.job_changed` (an event listener, on the
loop) only queues the run; worker threads start each hook in its own session, keep the first
64 KiB of its output, kill its process group at its timeout, and write what happened to
`hooks.log` beside engine.log. A failing or hanging hook changes nothing about the job."""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import select
import signal
import stat
import subprocess
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from pathlib import Path

import msgspec

from gpudesk import trust
from gpudesk.core.identity import Identity, OwnerGone, as_known_now
from gpudesk.core.records import JobRecord
from gpudesk.core.station import STATION_EVENT
from gpudesk.hw.runner import run_as
from gpudesk.paths import open_state_file
from gpudesk.text import printable, safe_text
from gpudesk.toml_lines import tomllib

log = logging.getLogger("gpudesk.engine")

HOOKS_FILE = "hooks.toml"
HOOKS_LOG = "hooks.log"
DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 3600.0
NOTIFY_TIMEOUT_S = 30.0  # a job's --notify
OUTPUT_KEPT = 64 * 1024  # of a hook's output, per run, into hooks.log
LOG_ROTATE_BYTES = 16 * 1024 * 1024  # hooks.log past this becomes hooks.log.1
WORKERS_PER_LANE = 2  # hooks of one lane (the station's, a member's) running at once
WORKERS_MAX = 16  # hook threads in all; past it a lane's runs wait for one to come free
QUEUE_MAX = 1000  # runs waiting in one lane (the station's, a member's); past it one is dropped
SEEN_MAX = 10_000  # job endings remembered, so that one is never hooked twice
RECHECK_S = 2.0  # how often the loop's step looks whether hooks.toml changed


class HookConfigError(ValueError):
    """hooks.toml cannot be used: why, in one line."""


class HookConfig(msgspec.Struct, frozen=True):
    """The station's job-end hook: its argv (run without a shell) and its timeout."""

    command: tuple[str, ...]
    timeout_s: float = DEFAULT_TIMEOUT_S


def parse_hooks(text: str, program: str | None = None) -> HookConfig | None:
    """hooks.toml's `[job_end]` (None: no hook). `program` is the command's first word found
    on the site's PATH where it is not a path (the caller's lookup)."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HookConfigError(f"not TOML: {exc}") from None
    unknown = sorted(set(document) - {"job_end"})
    if unknown:
        raise HookConfigError(f"[{unknown[0]}]: unknown table (known: [job_end])")
    table = document.get("job_end")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise HookConfigError("job_end: expected a table")
    extra = sorted(set(table) - {"command", "timeout_s"})
    if extra:
        raise HookConfigError(f"job_end.{extra[0]}: unknown key (known: command, timeout_s)")
    command = table.get("command")
    if (
        not isinstance(command, list)
        or not command
        or not all(isinstance(a, str) and a and "\x00" not in a for a in command)
    ):
        raise HookConfigError(
            'job_end.command: expected a list of words, e.g. ["/usr/local/bin/notify-end"]'
        )
    timeout = table.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise HookConfigError(f"job_end.timeout_s: expected seconds, found {timeout!r}")
    if not 0 < timeout <= MAX_TIMEOUT_S:
        raise HookConfigError(f"job_end.timeout_s: expected 0 to {MAX_TIMEOUT_S:g} s")
    if "/" not in command[0]:
        if program is None:
            raise HookConfigError(
                f"job_end.command: {command[0]!r} is not on the site's PATH; give its full path"
            )
        command = [program, *command[1:]]
    return HookConfig(tuple(command), float(timeout))


def load_hooks(root: Path, system: bool) -> HookConfig | None:
    """The station's hook from `root/hooks.toml` (None: none, or one that cannot be used: the
    engine log says why). A system engine takes it only as a regular file of root's with one
    name that no one else may write: a hook it runs as root must be root's own word."""
    return read_hooks(root / HOOKS_FILE, system)[0]


def read_hooks(path: Path, system: bool) -> tuple[HookConfig | None, str | None]:
    """`load_hooks`' hook, and why the file there cannot be used (None: it can, or there is
    none), said in one line of the engine log too."""
    owner = 0 if system else os.geteuid()
    try:
        fd = trust.open_untrusted(path, owner)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return _unusable(path, str(exc))
    try:
        st = os.fstat(fd)
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            mode = stat.S_IMODE(st.st_mode)
            return _unusable(path, f"others may write it (mode {mode:o}); `chmod go-w {path}`")
        text = os.read(fd, 64 * 1024).decode("utf-8", "replace")
    finally:
        os.close(fd)
    try:
        first = tomllib.loads(text).get("job_end", {}).get("command", [""])[0]
        program = trust.site_program(first) if isinstance(first, str) and first else None
        config = parse_hooks(text, program)
    except (HookConfigError, tomllib.TOMLDecodeError, AttributeError, IndexError) as exc:
        return _unusable(path, str(exc))
    if config is not None:
        log.info("job-end hook: %s (timeout %g s)", list(config.command), config.timeout_s)
    return config, None


def _unusable(path: Path, why: str) -> tuple[None, str]:
    log.error("%s: not used, no job-end hook runs: %s", path, why)
    return None, why


# What says that hooks.toml changed: the name's own (a link is not followed: read_hooks
# refuses one) device, inode, mtime, ctime, size, mode and owner; None while there is none.
# Mode and owner: a chmod or chown that makes it unsafe within the clock's tick.
Signature = tuple[int, ...] | None


def file_signature(path: Path) -> Signature:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_mode, st.st_uid)


def reread_event(config: HookConfig | None, problem: str | None, present: bool) -> str:
    """The event of hooks.toml read again. Its command is not said: events are every user's,
    and a hook's words may hold a token (the engine log, root's, has them)."""
    if problem is not None:
        return f"{HOOKS_FILE} changed and is not used: no job-end hook runs ({problem})"
    if config is None:
        state = "has no [job_end]" if present else "was removed"
        return f"{HOOKS_FILE} {state}: no job-end hook runs"
    return (
        f"{HOOKS_FILE} read again: the station's job-end hook runs (timeout {config.timeout_s:g} s)"
    )


def job_variables(job: JobRecord) -> dict[str, str]:
    """What a hook is told of the job that ended."""
    return {
        "GPUDESK_JOB_ID": str(job.id),
        "GPUDESK_JOB_NAME": job.name,
        "GPUDESK_JOB_STATE": job.state.value,
        "GPUDESK_JOB_EXIT_CODE": "" if job.exit_code is None else str(job.exit_code),
        "GPUDESK_JOB_REASON": safe_text(job.reason or ""),
        "GPUDESK_JOB_OWNER": job.owner.name,
        "GPUDESK_JOB_OWNER_UID": str(job.owner.uid),
    }


STATION_LANE = "station"


class HookRun(msgspec.Struct, frozen=True):
    """One hook to run: its argv and environment, whom it runs as (None: the engine's user),
    its timeout, and what the log calls it."""

    argv: tuple[str, ...]
    env: dict[str, str]
    user: Identity | None
    timeout_s: float
    what: str
    job_id: int = 0
    lane: str = STATION_LANE  # whose turn it waits for: the station's hook, or a member's
    umask: int = -1  # a --notify's: its job's (its submitter's); -1: the engine's, as Popen's


class Lanes:
    """The hooks waiting to run, a lane each for the station's hook and for each member's
    `--notify`: the station's go first, then the members' in turn, one run each, and no lane
    has more than `per_lane` running at once. So a member whose jobs' hooks are many or hang
    (each until its timeout) holds at most `per_lane` workers and delays her own hooks, not
    another's nor the station's; and a lane full (QUEUE_MAX) drops only its own."""

    def __init__(self, most: int = QUEUE_MAX, per_lane: int = WORKERS_PER_LANE) -> None:
        self.most = most
        self.per_lane = per_lane
        self.waiting: OrderedDict[str, deque[HookRun]] = OrderedDict()
        self.running: Counter[str] = Counter()
        self.ready = threading.Condition()
        self.closed = False  # the engine stopped: nothing waiting runs

    def put(self, run: HookRun) -> bool:
        """Queue `run`; False when its lane is full (it is not queued)."""
        with self.ready:
            lane = self.waiting.setdefault(run.lane, deque())
            if len(lane) >= self.most:
                return False
            lane.append(run)
            self.ready.notify_all()
            return True

    def get(self) -> HookRun | None:
        """The next run (waits for one), counted as running until `done`: the station's first,
        else the next member's lane, of the lanes with fewer than `per_lane` running. None once
        `close`d."""
        with self.ready:
            while (name := self._next_lane()) is None:
                if self.closed:
                    return None
                self.ready.wait()
            lane = self.waiting.pop(name)
            run = lane.popleft()
            if lane:
                self.waiting[name] = lane  # to the back of the turn
            self.running[name] += 1
            return run

    def done(self, run: HookRun) -> None:
        """`run` (from `get`) has ended: its lane may start another."""
        with self.ready:
            self.running[run.lane] -= 1
            if self.running[run.lane] <= 0:
                del self.running[run.lane]
            self.ready.notify_all()

    def close(self) -> None:
        """Drop every waiting run; the workers waiting in `get` end."""
        with self.ready:
            self.closed = True
            self.waiting.clear()
            self.ready.notify_all()

    def workers_wanted(self) -> int:
        """Workers that would all be busy now: each lane's running and waiting runs, up to
        `per_lane` a lane."""
        with self.ready:
            lanes = set(self.waiting) | set(self.running)
            return sum(
                min(self.per_lane, self.running[name] + len(self.waiting.get(name, ())))
                for name in lanes
            )

    def _next_lane(self) -> str | None:
        free = [name for name in self.waiting if self.running[name] < self.per_lane]
        if not free:
            return None
        return STATION_LANE if STATION_LANE in free else free[0]


class HookResult(msgspec.Struct, frozen=True):
    returncode: int | None  # None: killed at its timeout
    seconds: float
    output: bytes
    cut: int  # output bytes beyond OUTPUT_KEPT, not kept


class HooksClosed(Exception):
    """The engine stopped before the hook started: it is not run."""


class LiveHooks:
    """The hooks running now, by pid (each leads its process group). A hook is started and its
    pid added under `lock`, which `close` holds while it kills them: none starts after."""

    def __init__(self) -> None:
        self.pids: set[int] = set()
        self.lock = threading.Lock()
        self.closed = False

    def close(self) -> list[int]:
        """No hook starts from now on; the pids of those running, killed (their groups)."""
        with self.lock:
            self.closed = True
            for pid in self.pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            return sorted(self.pids)


def run_hook(run: HookRun, live: LiveHooks | None = None) -> HookResult:
    """Run one hook to its end or its timeout (then its process group is killed), keeping the
    first OUTPUT_KEPT bytes of its output. On a worker thread, never the loop. `live` holds
    its pid while it runs (what `JobEndHooks.close` kills); once closed, HooksClosed."""
    started = time.monotonic()
    user = as_known_now(run.user) if run.user else None  # OwnerGone: her uid is not hers
    with live.lock if live is not None else contextlib.nullcontext():
        if live is not None and live.closed:
            raise HooksClosed
        process = _start(run, user)
        if live is not None:
            live.pids.add(process.pid)
    try:
        return _follow(process, run, started)
    finally:
        if live is not None:
            with live.lock:
                live.pids.discard(process.pid)


def _start(run: HookRun, user: Identity | None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        run.argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd="/",
        env=run.env,
        start_new_session=True,  # its own process group: all of it is killed at the timeout
        user=user.uid if user else None,
        group=user.gid if user else None,
        extra_groups=list(user.groups) if user else None,
        umask=run.umask,
    )


def _follow(process: subprocess.Popen[bytes], run: HookRun, started: float) -> HookResult:
    assert process.stdout is not None
    deadline = started + run.timeout_s
    kept, cut = bytearray(), 0
    fd = process.stdout.fileno()
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break  # every writer is gone
        room = OUTPUT_KEPT - len(kept)
        kept += chunk[:room]
        cut += max(0, len(chunk) - room)
    timed_out = time.monotonic() >= deadline
    if timed_out:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    else:  # its output is closed: it ends now (or is killed at what is left of its time)
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
    code = process.wait()
    process.stdout.close()
    return HookResult(None if timed_out else code, time.monotonic() - started, bytes(kept), cut)


class JobEndHooks:
    """Runs the hooks of each job that ends, off the loop (module docstring). Made by `at`, it
    reads hooks.toml again when the file changes (`refresh`, from the loop's step)."""

    @classmethod
    def at(cls, root: Path, system: bool, wake: Callable[[], None]) -> JobEndHooks:
        """The hooks of the engine whose home is `root`, from its hooks.toml, watched."""
        path = root / HOOKS_FILE
        seen = file_signature(path)  # before the read: a change meanwhile is read again
        hooks = cls(read_hooks(path, system)[0], root / HOOKS_LOG, system, wake)
        hooks.path, hooks.signature = path, seen
        return hooks

    def __init__(
        self,
        config: HookConfig | None,
        log_path: Path,
        system: bool,
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        self.config = config
        self.log_path = log_path
        self.system = system
        self.wake = wake  # the loop, when a hook has ended (its line for the job's events)
        self.ended: queue.SimpleQueue[tuple[int, str]] = queue.SimpleQueue()
        self.runs = Lanes()
        self.seen: OrderedDict[tuple[int, float | None, int], None] = OrderedDict()
        self.workers: list[threading.Thread] = []
        self.lock = threading.Lock()  # one writer of hooks.log at a time
        self.live = LiveHooks()  # the hooks running now
        self.path: Path | None = None  # hooks.toml, when watched (`at`)
        self.signature: Signature = None
        self.next_check = 0.0  # monotonic

    def refresh(self, add_event: Callable[..., None], now: float | None = None) -> None:
        """On the loop's step, every RECHECK_S: hooks.toml read again, with the same checks as
        at start, when its name, content, mode or owner changed. What it now says replaces
        the station's hook (an unusable or removed file: none), in the log and a station
        event (`gpudesk engine status` lists the latest). A job's own --notify is not
        touched."""
        now = time.monotonic() if now is None else now
        if self.path is None or now < self.next_check:
            return
        self.next_check = now + RECHECK_S
        seen = file_signature(self.path)
        if seen == self.signature:
            return
        self.signature = seen
        config, problem = read_hooks(self.path, self.system)
        if config is None and problem is None:
            log.info("%s: no job-end hook runs now", self.path)
        self.config = config
        add_event(STATION_EVENT, reread_event(config, problem, seen is not None))

    def job_changed(self, job: JobRecord) -> None:
        """An event listener: a job that ended gets its hooks queued (never waited for)."""
        if not job.state.terminal or (self.config is None and job.spec.notify is None):
            return
        key = (job.id, job.ended_at, job.attempts)
        if key in self.seen:
            return  # a later event of the same ending
        self.seen[key] = None
        if len(self.seen) > SEEN_MAX:
            self.seen.popitem(last=False)
        for run in self.runs_for(job):
            self.queue(run)

    def queue(self, run: HookRun) -> None:
        """Queue one run, and start a worker if every one there is would be busy (up to
        WORKERS_MAX: one member's hanging hooks hold only her lane's WORKERS_PER_LANE)."""
        if not self.runs.put(run):
            log.warning("%s not run: %d of its lane's hooks wait already", run.what, QUEUE_MAX)
            return
        if len(self.workers) < min(WORKERS_MAX, self.runs.workers_wanted()):
            worker = threading.Thread(target=self._work, name="job-hook", daemon=True)
            worker.start()
            self.workers.append(worker)

    def drain(self, add_event: Callable[..., None]) -> None:
        """On the loop: each hook that ended since, an event of its job (kind `hook`; the
        store's `add_event(kind, message, job_id=...)`); and hooks.toml, if it changed."""
        self.refresh(add_event)
        while True:
            try:
                job_id, said = self.ended.get_nowait()
            except queue.Empty:
                return
            add_event("hook", said, job_id=job_id)

    def close(self) -> None:
        """The engine stops: the hooks still running are killed (their process groups), not
        left behind without a timeout; those still waiting never run, nor start later."""
        self.runs.close()
        for pid in self.live.close():
            log.warning("a job-end hook (pid %d) was killed: the engine stopped", pid)

    def runs_for(self, job: JobRecord) -> list[HookRun]:
        variables = job_variables(job)
        runs = []
        if self.config is not None:  # the station's: the engine's user (root on a system one)
            env = trust.engine_environment(None, **variables) if self.system else None
            runs.append(
                HookRun(
                    self.config.command,
                    env or {**os.environ, **variables},
                    None,
                    self.config.timeout_s,
                    f"job {job.id}'s job-end hook",
                    job.id,
                )
            )
        if job.spec.notify is not None:  # the job's own: as its owner
            owner = run_as(job.owner)
            env = trust.engine_environment(owner, **variables) if owner else None
            runs.append(
                HookRun(
                    ("/bin/sh", "-c", job.spec.notify),
                    env or {**os.environ, **variables},
                    owner,
                    NOTIFY_TIMEOUT_S,
                    f"job {job.id}'s --notify (as {job.owner.name})",
                    job.id,
                    f"uid {job.owner.uid}",
                    -1 if job.spec.umask is None else job.spec.umask,
                )
            )
        return runs

    def _work(self) -> None:
        while (run := self.runs.get()) is not None:
            try:
                self._run(run)
            finally:
                self.runs.done(run)

    def _run(self, run: HookRun) -> None:
        try:
            result = run_hook(run, self.live)
        except HooksClosed:
            return
        except (OSError, OwnerGone) as exc:
            self._record(run, f"could not start: {exc}", b"")
            return
        if result.returncode is None:
            said = f"killed after its timeout of {run.timeout_s:g} s"
        else:
            said = f"exit {result.returncode} in {result.seconds:.2f} s"
        if result.cut:
            said += f" ({result.cut} bytes of output beyond {OUTPUT_KEPT} not kept)"
        self._record(run, said, result.output)

    def _record(self, run: HookRun, said: str, output: bytes) -> None:
        self.ended.put((run.job_id, f"{run.what.split(' ', 2)[-1]}: {said}"))
        self.wake()
        (log.warning if not said.startswith("exit 0 ") else log.info)("%s: %s", run.what, said)
        text = printable(safe_text(output.decode("utf-8", "surrogateescape")))
        lines = [f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {run.what}: {said}"]
        lines += [f"  | {line}" for line in text.splitlines()]
        with self.lock, contextlib.suppress(OSError):
            if self.log_path.exists() and self.log_path.stat().st_size > LOG_ROTATE_BYTES:
                os.replace(self.log_path, self.log_path.with_name(HOOKS_LOG + ".1"))
            fd = open_state_file(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            with os.fdopen(fd, "a", encoding="utf-8") as out:
                out.write("\n".join(lines) + "\n")
