"""One tracking worker process, as the engine holds it: started as the jobs' owner, fed through
a non-blocking pipe (`outbox`), its replies read on the engine's loop, restarted (within a bound)
when it dies.

Why a process per owner: a tracking URI is the user's (sqlite:////home/alice/mlruns.db), so
whatever writes to it must have that user's rights, never root's; and mlflow's import (seconds
holding the GIL) and a slow store must never stall the engine's loop.

What the engine gives a worker of another user: her identity (uid, groups) as the user database
has her now, set before the exec, an environment it built (`trust.known_environment`: nothing
from her requests, nothing of root's; both asked off the loop), `/` as its folder, and the ops
of her own runs only (`tracker`). What it takes back is hers to forge: lines of at most
`messages.MAX_REPLY_BYTES`, each decoded as untrusted input (`messages.decode_reply`); what they
may change is the tracker's to check. Its stderr is a log in root's state folder that she can
write as much as she likes to: the engine empties it once it passes LOG_MAX_BYTES (`_cap_log`),
so her worker cannot fill the station's disk.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from pathlib import Path

import msgspec

from gpudesk.core.identity import Identity, OwnerGone
from gpudesk.engine.offloop import Offload
from gpudesk.engine.services.tracking.replies import Complaints
from gpudesk.paths import UnsafePath, open_state_file
from gpudesk.spawn import SAFE_CWD, module_argv
from gpudesk.tracking import messages
from gpudesk.tracking.inbox import Inbox
from gpudesk.tracking.outbox import Outbox
from gpudesk.trust import OWNER_BOUND_S, RunsAs, known_environment

log = logging.getLogger("gpudesk.engine")

WORKER_MODULE = "gpudesk.tracking.worker"
# A worker that keeps dying is started again at most this often within the window; then it
# stays down (tracking paused for its owner, said in the log and `status`) until the window
# has passed, so a broken install cannot turn into a fork loop.
MAX_RESTARTS = 5
RESTART_WINDOW_S = 600.0
RESTART_DELAY_S = 2.0
READ_CHUNK = 1 << 16
READS_PER_PUMP = 16  # 1 MiB of replies per loop step at most: far more than a worker says
LOG_MAX_BYTES = 16 * 1024 * 1024  # a worker's log past this is emptied (a worker says little)
LOG_CHECK_S = 5.0
# The worker gives up on its store this long at most per call, and does its own retries: mlflow's
# own (7 retries, backing off to minutes) would hold every other update behind one call.
WORKER_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "PYTHONUNBUFFERED": "1",
}


class WorkerState(msgspec.Struct):
    """What `status` shows of a worker."""

    uid: int
    pid: int | None = None
    restarts: int = 0
    problem: str | None = None  # why it is not running, when it is not
    starting: bool = False  # whom it runs as is being asked off the loop (`ensure_running`)


class Sidecar:
    """The worker for one owner. `owner` None: the engine's own user (a personal engine, or a
    system engine's own jobs)."""

    def __init__(
        self,
        uid: int,
        owner: Identity | None,
        log_path: str,
        on_start: Callable[[bool], None],
        offload: Offload | None = None,  # the engine's (a sidecar built alone asks in place)
    ) -> None:
        self.uid = uid
        self.owner = owner
        self.offload = offload
        self.log_path = log_path
        # What the tracker sends a new worker first; told whether it replaces one (a restart).
        self.on_start = on_start
        self.started_before = False
        self.outbox = Outbox()
        self.process: subprocess.Popen[bytes] | None = None
        # Its replies not believed (unreadable, or not its to give: the tracker's checks), said
        # in the log now and then: one voice per worker, however many reasons.
        self.complaints = Complaints(uid)
        self.inbox = Inbox(self.complaints.dropped)  # its replies, read as they come
        self.log_checked_at = 0.0
        self.log_emptied = 0  # times its log was emptied for its size (said the first time)
        self.starts: deque[float] = deque()
        self.next_start = 0.0
        self.state = WorkerState(uid)

    # ------------------------------------------------------------ life cycle
    def ensure_running(self) -> None:
        """Start the worker if it is not running and may be started now."""
        if self.process is not None and self.process.poll() is None:
            return
        if self.process is not None:
            self._lost()
        now = time.monotonic()
        if now < self.next_start:
            return
        while self.starts and now - self.starts[0] > RESTART_WINDOW_S:
            self.starts.popleft()
        if len(self.starts) >= MAX_RESTARTS:
            self.next_start = self.starts[0] + RESTART_WINDOW_S
            self.state.problem = (
                f"the tracking worker died {MAX_RESTARTS} times within "
                f"{RESTART_WINDOW_S / 60:g} min; not started again before "
                f"{time.strftime('%H:%M', time.localtime(time.time() + self.next_start - now))} "
                f"(its log: {self.log_path})"
            )
            return
        self.starts.append(now)
        if self.owner is None or self.offload is None:
            self._started(known_environment(self.owner, **WORKER_ENV) if self.owner else None)
            return
        # whom it runs as, asked of the user database off the loop; started on its answer
        self.next_start, self.state.starting = now + OWNER_BOUND_S, True  # not started again
        ask, done = partial(known_environment, self.owner, **WORKER_ENV), self._asked
        self.offload(f"asking whom uid {self.uid}'s worker runs as", ask, done, OWNER_BOUND_S)

    def _asked(self, who: RunsAs | str | None) -> None:
        self._started(who or f"asking the user database took longer than {OWNER_BOUND_S:g} s")

    def _started(self, who: RunsAs | str | None) -> None:
        """Start the worker as `who` says: whom, with what environment (None: the engine's own
        user), or why not."""
        self.state.starting = False
        try:
            if isinstance(who, str):
                raise OwnerGone(who)
            self._start(who)
        except (OSError, UnsafePath, OwnerGone) as exc:
            self.process = None
            self.next_start = time.monotonic() + RESTART_DELAY_S
            self.state.problem = f"the tracking worker could not be started: {exc}"
            if self.owner is not None and not isinstance(exc, OwnerGone):
                self.state.problem += (
                    f" (it runs as uid {self.owner.uid}, the jobs' owner: the engine's Python, "
                    f"{sys.executable}, and gpudesk[mlflow] must be ones the station's users "
                    "may run, e.g. a system-wide install)"
                )
            log.warning("%s", self.state.problem)
            return
        self.state.problem = None
        restart, self.started_before = self.started_before, True
        self.on_start(restart)

    def _start(self, who: RunsAs | None) -> None:
        owner, env = who if who is not None else (None, {**os.environ, **WORKER_ENV})
        out = open_state_file(Path(self.log_path), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            self.process = subprocess.Popen(
                module_argv(WORKER_MODULE),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=out,
                cwd=SAFE_CWD,
                start_new_session=True,  # a Ctrl-C meant for the engine is not the worker's
                env=env,
                # the owner's, on a system engine (a job of another user); else the engine's
                user=owner.uid if owner else None,
                group=owner.gid if owner else None,
                extra_groups=list(owner.groups) if owner else None,
            )
        finally:
            os.close(out)
        assert self.process.stdin is not None and self.process.stdout is not None
        for stream in (self.process.stdin, self.process.stdout):
            flags = fcntl.fcntl(stream.fileno(), fcntl.F_GETFL)
            fcntl.fcntl(stream.fileno(), fcntl.F_SETFL, flags | os.O_NONBLOCK)
        self.inbox = Inbox(self.complaints.dropped)
        self.outbox.restart()
        self.state.pid = self.process.pid
        self.state.restarts = len(self.starts) - 1
        log.info("tracking worker for uid %d started (pid %d)", self.uid, self.process.pid)

    def _lost(self) -> None:
        process = self.process
        assert process is not None
        code = process.poll()
        for stream in (process.stdin, process.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        self.process = None
        self.state.pid = None
        self.next_start = time.monotonic() + RESTART_DELAY_S
        self.state.problem = (
            f"the tracking worker exited ({code}); restarting (its log: {self.log_path})"
        )
        log.warning("tracking worker for uid %d exited (%s); restarting", self.uid, code)

    def close(self) -> None:
        """The engine stops: end of input tells the worker to finish what it holds, which it
        does within messages.EXIT_GRACE_S (`reap` waits for it)."""
        if self.process is None:
            return
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.outbox.write_to(self.process.stdin.fileno())
        for stream in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()

    def reap(self, deadline: float) -> None:
        """After `close`: the worker waited for until `deadline` (monotonic), then killed."""
        process, self.process = self.process, None
        if process is None:
            return
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            log.warning(
                "tracking worker for uid %d (pid %d) had not ended: killed", self.uid, process.pid
            )

    # ------------------------------------------------------------- the pipe
    def send(self, op: messages.Op, droppable: bool = False) -> None:
        self.outbox.put(messages.encode(op), droppable)

    def send_first(self, ops: list[messages.Op]) -> None:
        """Ops a new worker must have before the updates that waited for it (`on_start`)."""
        self.outbox.put_first([messages.encode(op) for op in ops])

    def fds(self) -> tuple[int | None, int | None]:
        """(the fd to read replies from, the fd to write to when something waits)."""
        process = self.process
        if process is None or process.stdout is None or process.stdin is None:
            return None, None
        return process.stdout.fileno(), process.stdin.fileno() if self.outbox.pending else None

    def _cap_log(self) -> None:
        """Empty the worker's log once it passes LOG_MAX_BYTES (looked at every LOG_CHECK_S):
        the worker writes it as its owner, and root's state folder is not hers to fill. Its fd
        appends (O_APPEND), so what it writes next lands at the start again."""
        now = time.monotonic()
        if now - self.log_checked_at < LOG_CHECK_S:
            return
        self.log_checked_at = now
        try:
            if os.stat(self.log_path).st_size <= LOG_MAX_BYTES:
                return
            os.truncate(self.log_path, 0)
        except OSError:
            return
        self.log_emptied += 1
        if self.log_emptied == 1:
            log.warning(
                "tracking worker for uid %d: its log passed %d MiB and was emptied (%s)",
                self.uid,
                LOG_MAX_BYTES >> 20,
                self.log_path,
            )

    def pump(self) -> list[messages.Reply]:
        """Write what waits, read what the worker said: at most READS_PER_PUMP chunks, so a
        worker that writes without end cannot hold the engine's loop (what is left waits for
        the next step: the poll wakes it again). Never blocks."""
        self._cap_log()
        process = self.process
        if process is None or process.stdin is None or process.stdout is None:
            return []
        with contextlib.suppress(OSError):  # BrokenPipeError: it died; ensure_running restarts it
            self.outbox.write_to(process.stdin.fileno())
        replies: list[messages.Reply] = []
        for _ in range(READS_PER_PUMP):
            try:
                chunk = os.read(process.stdout.fileno(), READ_CHUNK)
            except BlockingIOError:
                break
            except OSError:
                break
            if not chunk:
                break
            replies += self.inbox.take(chunk)
        return replies
