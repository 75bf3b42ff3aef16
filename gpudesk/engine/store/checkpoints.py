"""SQLite's checkpoints (the write-ahead log copied back into the database file) on a thread of
their own, with a connection of its own, instead of in the engine loop's commits.

By default the commit that takes the WAL past 1,000 pages runs a checkpoint itself, on the
loop: 87 ms measured once on the 2-core VM (docs/benchmarks.md), every client waiting. The
loop's connection has auto-checkpoints off (`wal_autocheckpoint = 0`) and this thread runs a
PASSIVE checkpoint after the loop commits, at most once every CHECKPOINT_EVERY_S. PASSIVE never
blocks the loop's writes, nor waits for them; what it leaves (frames written meanwhile) the
next one copies. The loop's next write begins the WAL again once a checkpoint has copied all
of it, and truncates it (`journal_size_limit = 0`): the WAL holds no disk beyond its writes,
and a full disk refuses a write as it did (a write into a recycled WAL's space would succeed).
Writes that never pause while a checkpoint runs would keep the WAL from beginning again: past
RESTART_FRAMES the thread runs a RESTART checkpoint, which copies the little the PASSIVE ones
left and makes the loop's next write wait for that, then the WAL begins again.

Crash safety is unchanged: a commit is in the WAL, as durable as before (synchronous=NORMAL),
whichever connection later copies it; a crash in a checkpoint leaves the WAL to replay when the
store next opens. A checkpoint that fails (a full disk) is logged and tried after the next
commit; the WAL grows meanwhile, as it would behind a reader.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

log = logging.getLogger("gpudesk.engine")

# Assumption: a busy engine commits many times a second, a checkpoint costs two fsyncs; once a
# second keeps the WAL to a second's writes (a few hundred pages for a request of 1,000 jobs)
# without a checkpoint for every commit.
CHECKPOINT_EVERY_S = 1.0
# Assumption: four times SQLite's own bound (16 MiB of 4 KiB pages) is a WAL worth a brief wait
# of the loop's next write to begin again; below it the WAL waits for a pause in the writes.
RESTART_FRAMES = 4_000


class Checkpoints:
    def __init__(self, path: Path, every_s: float = CHECKPOINT_EVERY_S) -> None:
        self.path = path
        self.every_s = every_s
        self.done = 0  # checkpoints run (for tests: the WAL is checkpointed, and when)
        # opened here, used by the thread alone
        self._conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._due = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpudesk-checkpoints", daemon=True)
        self._thread.start()

    def wrote(self) -> None:
        """The loop committed: a checkpoint is due (cheap: sets an event)."""
        self._due.set()

    def close(self) -> None:
        self._stop.set()
        self._due.set()
        self._thread.join(timeout=10.0)

    def _run(self) -> None:
        failing = False  # said once, until one succeeds
        try:
            while True:
                self._due.wait()
                if self._stop.is_set():
                    return
                self._due.clear()
                try:
                    _, frames, _ = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    if frames >= RESTART_FRAMES:
                        self._conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
                    self.done += 1
                    failing = False
                except sqlite3.Error as exc:
                    if not failing:
                        log.warning("checkpointing the store's write-ahead log: %s", exc)
                    failing = True
                if self._stop.wait(self.every_s):
                    return
        finally:
            self._conn.close()
