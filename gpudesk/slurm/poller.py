"""Following Slurm jobs without waiting on Slurm in the loop: the poller thread asks squeue
(and, for ended jobs, scontrol or the completion log) about the jobs not ended yet, each
cluster (slurm.conf and owner) on a thread of its own, runs the scancels the loop asked for,
and hands what it heard (`Heard`) back to the loop, which applies it (`slurm.SlurmBackend.step`).
A cluster that breaks is said once, then now and then while it lasts, and its recovery at once.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable

import msgspec

from gpudesk.core.identity import Identity
from gpudesk.env_seconds import env_seconds
from gpudesk.slurm import commands as slurm
from gpudesk.slurm.commands import Ended, QueueLine, SlurmCommands, SlurmError
from gpudesk.slurm.records import SENDING

# How often squeue is asked while Slurm jobs have not ended. A shared controller serves every
# user's squeue, and its admins ask tools not to poll in tight loops: Snakemake's Slurm executor
# asks every 30 s (snakemake PR #2136), stui at most every 10 s. Each job's start and end times
# are Slurm's own (squeue %S, scontrol/the completion log), not when a poll saw them, so a slow
# poll only delays when gpudesk notices a change, never what it records.
POLL_S = 30.0
# ... and for FAST_FOR_S after gpudesk sent, cancelled or heard a change (a job just submitted
# starts soon; a cancelled one ends), every FAST_POLL_S: a one-line squeue of a user's own jobs.
FAST_POLL_S = 2.0
FAST_FOR_S = 60.0
POLL_ENV = "GPUDESK_SLURM_POLL_S"  # the engine's environment may set one interval (tests: 0.3)
# Assumption: a cluster that stays broken is said again this often, not every poll (2 s would
# fill engine.log with one line per poll); its breaking and its recovery are said at once.
BROKEN_SAY_EVERY_S = 300.0


def poll_s(changed_at: float | None, now: float) -> float:
    """The next poll's wait: the engine's GPUDESK_SLURM_POLL_S (0.1 to 60 s) where set, else
    FAST_POLL_S within FAST_FOR_S of the last change (`changed_at`, monotonic), else POLL_S."""
    if os.environ.get(POLL_ENV):
        return env_seconds(POLL_ENV, POLL_S, 0.1, 60.0)
    recent = changed_at is not None and now - changed_at < FAST_FOR_S
    return FAST_POLL_S if recent else POLL_S


class Watched(msgspec.Struct, frozen=True):
    """A job the poller asks about (a copy of its row: the thread never reads the store)."""

    job_id: int
    conf: str
    owner: Identity  # whom its Slurm clients run as
    submission: str
    task: int | None
    own_id: str | None
    script: str = ""  # an intent's marker: squeue's %o of its sbatch, if it reached Slurm

    @property
    def slurm_id(self) -> str:
        return self.submission if self.task is None else f"{self.submission}_{self.task}"


class Heard(msgspec.Struct, frozen=True):
    """What the poller heard of one job: its squeue line, how it ended, or that no one knows
    it (`line` and `ended` None)."""

    job_id: int
    line: QueueLine | None
    ended: Ended | None = None
    unreachable: str | None = None  # why its cluster could not be asked (then both are None)
    sent: str | None = None  # an intent's sbatch found in Slurm: its submission's id


class _Shared(msgspec.Struct):
    lock: threading.Lock = msgspec.field(default_factory=threading.Lock)
    watched: list[Watched] = msgspec.field(default_factory=list)
    # (conf, owner, Slurm ids, job ids, the signal to send: None cancels)
    cancels: list[tuple[str, Identity, list[str], list[int], str | None]] = msgspec.field(
        default_factory=list
    )


class Poller:
    """The thread that runs squeue/scontrol/scancel, so the loop never waits on Slurm."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self.shared = _Shared()
        self.heard: queue.SimpleQueue[list[Heard] | str] = queue.SimpleQueue()
        self.wake = wake
        self.poke = threading.Event()
        self.stopping = False
        self.thread: threading.Thread | None = None
        self.clients: dict[tuple[str, Identity], SlurmCommands] = {}  # the thread's own
        # (slurm.conf, owner) -> (what it said, when it was last said): the broken clusters
        self.broken: dict[tuple[str, Identity], tuple[str, float]] = {}  # under shared.lock
        self.asking: set[tuple[str, Identity]] = set()  # being polled now; under shared.lock
        # when gpudesk last sent, cancelled or heard a change: polls are fast for a while after
        self.changed_at: float | None = None
        self.states: dict[int, tuple[str | None, bool]] = {}  # job id -> its last state heard

    def watch(self, watched: list[Watched]) -> None:
        with self.shared.lock:
            before = {w.job_id for w in self.shared.watched}
            self.shared.watched = watched
            if {w.job_id for w in watched} - before:
                self.changed_at = time.monotonic()  # a job to follow that was not before
        if watched:
            self._start()

    def cancel(
        self,
        conf: str,
        owner: Identity,
        slurm_ids: list[str],
        job_ids: list[int],
        signal: str | None = None,
    ) -> None:
        """scancel them (with `signal`: `scancel --signal`) as `owner`, on the poller's thread."""
        with self.shared.lock:
            self.shared.cancels.append((conf, owner, slurm_ids, job_ids, signal))
            self.changed_at = time.monotonic()
        self._start()
        self.poke.set()

    def _start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="gpudesk-slurm", daemon=True)
            self.thread.start()

    def stop(self) -> None:
        self.stopping = True
        self.poke.set()

    def _run(self) -> None:
        while not self.stopping:
            with self.shared.lock:
                watched = list(self.shared.watched)
                cancels, self.shared.cancels = self.shared.cancels, []
            for conf, owner, slurm_ids, job_ids, sig in cancels:
                try:
                    refused = self._clients(conf, owner).cancel(slurm_ids, sig)
                except SlurmError as exc:
                    refused = str(exc)
                if refused:
                    what = f"scancel --signal={sig}" if sig else "scancel"
                    self.heard.put(f"{what} of job(s) {', '.join(map(str, job_ids))}: {refused}")
            if watched:
                try:
                    self._poll(watched)
                except Exception as exc:  # a failing Slurm must not end the thread
                    self.heard.put(f"could not ask Slurm about its jobs: {exc}")
                    self.wake()
            with self.shared.lock:
                changed_at = self.changed_at
            self.poke.wait(poll_s(changed_at, time.monotonic()))
            self.poke.clear()

    def _clients(self, conf: str, owner: Identity) -> SlurmCommands:
        """The clients for one owner's jobs on one cluster, kept across polls (each checks its
        slurm.conf once)."""
        key = (conf, owner)
        with self.shared.lock:
            if key not in self.clients:
                self.clients[key] = SlurmCommands(conf, owner)
            return self.clients[key]

    def _poll(self, watched: list[Watched]) -> None:
        """Ask each cluster (slurm.conf and owner) about its jobs on a thread of its own: one
        whose clients wait (a deleted slurm.conf makes each retry for 60 s, a controller that
        does not answer up to commands.TIMEOUT_S) delays no other's news. A cluster still being
        asked from an earlier poll is skipped this time."""
        by_client: dict[tuple[str, Identity], list[Watched]] = {}
        for item in watched:
            by_client.setdefault((item.conf, item.owner), []).append(item)
        with self.shared.lock:
            for key in [k for k in self.broken if k not in by_client]:
                del self.broken[key]  # no job of it is watched any more
            todo = [k for k in by_client if k not in self.asking]
            self.asking.update(todo)
        for key in todo:  # at most one thread per cluster: one still asking is skipped above
            threading.Thread(
                target=self._poll_client,
                args=(key, by_client[key]),
                name="gpudesk-slurm-poll",
                daemon=True,  # a client waiting on a dead controller never holds up an exit
            ).start()

    def _poll_client(self, key: tuple[str, Identity], items: list[Watched]) -> None:
        # one owner's failing cluster (her slurm.conf, her controller) is hers alone: the
        # other owners' jobs are still heard of, and hers count a poll no one answered
        try:
            commands = self._clients(*key)
            commands.conf_checked = False  # a slurm.conf deleted since is noticed at once
            heard = self._poll_one(commands, items)
        except Exception as exc:  # whatever one cluster does, the others are still asked
            said = str(exc) if isinstance(exc, SlurmError) else f"{type(exc).__name__}: {exc}"
            heard = [Heard(i.job_id, None, None, said) for i in items]
            self._say_broken(key, said)
        else:
            self._say_recovered(key)
        finally:
            with self.shared.lock:
                self.asking.discard(key)
        self._note_changes(heard)
        self.heard.put(heard)
        self.wake()

    def _note_changes(self, heard: list[Heard]) -> None:
        """A job whose state moved since the last poll (it started, ended or got a node) makes
        the polls fast for a while: what follows a change (the next job of a sweep starting,
        a dependency released) is then heard soon too."""
        now = time.monotonic()
        with self.shared.lock:
            for item in heard:
                state = (item.line.state if item.line else None, item.ended is not None)
                if self.states.get(item.job_id) != state:
                    if item.job_id in self.states:
                        self.changed_at = now
                    self.states[item.job_id] = state
            watched = {w.job_id for w in self.shared.watched}
            for gone in [j for j in self.states if j not in watched]:
                del self.states[gone]

    def _say_broken(self, key: tuple[str, Identity], said: str) -> None:
        """Warn when a cluster breaks, then at most every BROKEN_SAY_EVERY_S while it stays so."""
        now = time.monotonic()
        with self.shared.lock:
            before = self.broken.get(key)
            if before is not None and now - before[1] < BROKEN_SAY_EVERY_S:
                return
            self.broken[key] = (said, now)
        again = "still " if before is not None else ""
        self.heard.put(
            f"could {again}not ask Slurm about {key[1].name}'s jobs (slurm.conf {key[0]}): "
            f"{said} (said again at most every {BROKEN_SAY_EVERY_S:g} s while it lasts)"
        )

    def _say_recovered(self, key: tuple[str, Identity]) -> None:
        with self.shared.lock:
            was_broken = self.broken.pop(key, None) is not None
        if was_broken:
            self.heard.put(f"Slurm answers about {key[1].name}'s jobs again (slurm.conf {key[0]})")

    @staticmethod
    def _poll_one(commands: SlurmCommands, items: list[Watched]) -> list[Heard]:
        heard: list[Heard] = []
        intents = [i for i in items if i.submission == SENDING]
        if intents:
            found = commands.sent_scripts()
            heard += [Heard(i.job_id, None, None, sent=found.get(i.script)) for i in intents]
            items = [i for i in items if i.submission != SENDING]
        lines = commands.queue(sorted({i.submission for i in items}))
        exact = {line.slurm_id: line for line in lines if not line.pending_tasks}
        pending = {line.own_id: line for line in lines if line.pending_tasks}
        for item in items:
            line = exact.get(item.slurm_id)
            if line is None and item.task is None:
                line = exact.get(item.submission)
            if line is not None:
                ended = None
                if line.state not in slurm.RUNNING_STATES | slurm.QUEUED_STATES:
                    ended = commands.ended(line.own_id)
                heard.append(Heard(item.job_id, line, ended))
            elif item.submission in pending:
                heard.append(Heard(item.job_id, pending[item.submission]))
            else:
                heard.append(Heard(item.job_id, None, commands.ended(item.own_id or item.slurm_id)))
        return heard
