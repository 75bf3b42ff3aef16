"""Work a request needs that may wait (a subprocess, a user's file, a lock), done off the loop;
and work too long for one turn of the loop, done a slice a turn (`NextTurn`).

The engine's loop serves every client, so a request handler never waits: one that needs slow or
blocking work returns `Later(work, finish, bound_s, what)`. `work` runs on a worker thread and
must not touch the store or any of the loop's state (it gets what it needs as arguments, e.g. a
path and an owner); `finish(result)` runs back on the loop with its result and builds the reply
(it may read the store). The connection that asked waits for that reply, and only that
connection: every other client is answered meanwhile.

Bounds, so one member cannot use up the workers:
- `bound_s`: a piece of work that has not finished by then is answered "took longer than N s",
  or by its `late` (the thread is left to end on its own; its result is dropped). Work that
  runs a subprocess gives it its own timeout below this bound, so threads do not pile up.
- `WORKERS` threads in all; at most `PER_USER` pieces of one user's work in flight or waiting.
  More are refused at once, naming the limit.
- A thread still held past its task's bound (a user database that never answers, a hung NFS
  read) is replaced, so that `WORKERS` stay free for everyone else; it retires once it returns.
  At most `MOST_THREADS` in all: beyond that, work waits for a thread as before.

A handler whose work is long but needs the loop's state (a cancel of thousands of jobs) answers
`NextTurn` instead (`in_turns` makes one of a generator that yields between its slices): each
slice runs on a later turn, one slice a turn, so every other client is answered and placement
runs between two slices (issue 36: no request holds the loop more than 50 ms).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec

log = logging.getLogger("gpudesk.engine")

T = TypeVar("T")

# Jobs a request acts on (or placement fails) in one turn of the loop: 50-90 us a job on the 2-core
# VM (docs/benchmarks.md, "One transaction a request"), so 13-22 ms a slice, under half of issue
# 36's 50 ms a request, room left for a busier machine and the rest of the turn. A design choice,
# not a tuned value (more slices cost a commit and a turn each).
SLICE_JOBS = 250
# Assumption: 4 threads cover the slow requests a group makes at once (log reads of Slurm jobs,
# Slurm commands at submit); they mostly wait on a subprocess, so they cost the loop no CPU.
WORKERS = 4
# Assumption: a user with 2 slow requests in flight (two terminals following logs) is normal;
# more would let one member hold every worker.
PER_USER = 2
# Assumption: 12 threads stuck at once means the machine itself is failing; more would not help.
MOST_THREADS = 4 * WORKERS


# A service's (what, work, done, bound_s) for `submit`, counted against no user: done(None) where
# `work` failed or took too long (the engine's `_offload_work`)
Offload = Callable[[str, Callable[[], Any], Callable[[Any], None], float], None]


class Busy(Exception):
    """The caller already has `PER_USER` pieces of work in flight."""


@dataclass
class Later(Generic[T]):
    """A handler's answer that comes later: `work()` off the loop, then `finish(result)` on it.
    `work` raising is passed to `finish_error`, which builds the error reply (on the loop).
    `finish` may answer another `Later`: a next step off the loop (a Slurm submit records its
    intent on the loop between its checks and its sbatches)."""

    work: Callable[[], T]
    finish: Callable[[T], msgspec.Struct | Later[Any] | NextTurn]  # a reply, or a next step
    bound_s: float
    what: str  # for messages: "reading job 12's log"
    counted: bool = True  # against the caller's PER_USER (not: a submit's name lookup)
    late: Callable[[], msgspec.Struct | Later[Any] | NextTurn] | None = None  # past bound_s


class NextTurn(msgspec.Struct, frozen=True):
    """A handler's answer that comes after more turns of the loop: `step()` runs on the loop at
    a later turn and answers the reply, or another NextTurn."""

    step: Callable[[], msgspec.Struct | NextTurn]


def in_turns(work: Generator[None, None, Any]) -> Any:
    """`work` run to its next `yield`: its result where it ends before one, else a NextTurn
    that goes on from there on a later turn."""
    try:
        next(work)
    except StopIteration as end:
        return end.value
    return NextTurn(lambda: in_turns(work))


class Pending(msgspec.Struct, frozen=True):
    """What `RequestHandlers.handle` returns for a `Later` or a `NextTurn`: the socket calls
    `start(post)` and holds the connection's next request until the loop calls `post(reply)`."""

    start: Callable[[Callable[[bytes], None]], None]


class _Task(msgspec.Struct):
    uid: int | None
    work: Callable[[], Any]
    done: Callable[[Any, BaseException | None], None]  # on the loop
    deadline: float
    what: str
    bound_s: float
    settled: bool = False
    running: bool = False  # a thread has taken it
    replaced: bool = False  # that thread was stuck in it past its bound: it ends when it returns


class OffLoop(msgspec.Struct):
    """The worker threads and what they post back. `wake` wakes the loop (from any thread);
    the loop calls `deliver()` each turn and uses `poll_timeout` so a deadline is noticed."""

    wake: Callable[[], None]
    workers: int = WORKERS
    per_user: int = PER_USER
    _todo: queue.SimpleQueue[_Task | None] = msgspec.field(default_factory=queue.SimpleQueue)
    _done: queue.SimpleQueue[tuple[_Task, Any, BaseException | None]] = msgspec.field(
        default_factory=queue.SimpleQueue
    )
    _in_flight: list[_Task] = msgspec.field(default_factory=list)
    _threads: list[threading.Thread] = msgspec.field(default_factory=list)
    # NextTurn steps, in order
    _turns: deque[Callable[[], None]] = msgspec.field(default_factory=deque)
    _lock: threading.Lock = msgspec.field(default_factory=threading.Lock)

    def submit(
        self,
        uid: int | None,
        what: str,
        work: Callable[[], Any],
        done: Callable[[Any, BaseException | None], None],
        bound_s: float,
    ) -> None:
        """Run `work` off the loop; `done(result, error)` is called on the loop once, with the
        result, the exception `work` raised, or a TimeoutError past `bound_s`. Raises Busy when
        this user has too much in flight (`uid` None: work counted against no one's)."""
        mine = sum(1 for task in self._in_flight if task.uid == uid)
        if uid is not None and mine >= self.per_user:
            raise Busy(
                f"uid {uid} already has {mine} slow request(s) in progress (the most one user "
                f"may have at once is {self.per_user}); try again when they have finished"
            )
        task = _Task(uid, work, done, time.monotonic() + bound_s, what, bound_s)
        self._in_flight.append(task)
        while len(self._threads) < self.workers:  # started once, on first use
            self._start_thread()
        self._todo.put(task)

    def next_turn(self, step: Callable[[], None]) -> None:
        """Run `step` on the loop at a later turn (`deliver`'s), after the steps queued before."""
        self._turns.append(step)

    def deliver(self) -> None:
        """On the loop: hand finished work to its `done`, time out what is overdue, and run the
        next step of work done in turns (one a turn: each is a slice of a request's work)."""
        if self._turns:
            step = self._turns.popleft()
            try:
                step()
            except Exception:
                log.exception("a request's next step failed")
        while True:
            try:
                task, result, error = self._done.get_nowait()
            except queue.Empty:
                break
            self._settle(task, result, error)
        now = time.monotonic()
        for task in list(self._in_flight):
            if now >= task.deadline:
                self._replace_if_stuck(task)
                self._settle(
                    task,
                    None,
                    TimeoutError(f"{task.what} took longer than {task.bound_s:g} s"),
                )

    def poll_timeout(self, timeout: float) -> float:
        if self._turns:
            return 0.0  # the next step runs at the next turn, once the clients are served
        if not self._in_flight:
            return timeout
        soonest = min(task.deadline for task in self._in_flight)
        return max(0.0, min(timeout, soonest - time.monotonic()))

    def close(self) -> None:
        for _ in self._threads:
            self._todo.put(None)

    # ---------------------------------------------------------------- inside
    def _settle(self, task: _Task, result: Any, error: BaseException | None) -> None:
        if task.settled:
            return  # timed out earlier: the late result is dropped
        task.settled = True
        with contextlib.suppress(ValueError):
            self._in_flight.remove(task)
        try:
            task.done(result, error)
        except Exception:
            log.exception("finishing %s failed", task.what)

    def _replace_if_stuck(self, task: _Task) -> None:
        """Past its bound: where a thread is still in `task`, another takes its place."""
        with self._lock:
            task.replaced = task.running and len(self._threads) < MOST_THREADS
        if task.replaced:
            self._start_thread()

    def _start_thread(self) -> None:
        thread = threading.Thread(target=self._run, name="gpudesk-offloop", daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _run(self) -> None:
        while True:
            task = self._todo.get()
            if task is None:
                return
            if task.settled:
                continue  # timed out while waiting for a thread
            task.running = True
            try:
                result, error = task.work(), None
            except BaseException as exc:  # handed to the loop, which builds the reply
                result, error = None, exc
            with self._lock:
                task.running = False
                if task.replaced:
                    self._threads.remove(threading.current_thread())
            self._done.put((task, result, error))
            self.wake()
            if task.replaced:
                return
