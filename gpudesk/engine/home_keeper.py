"""A running engine's files kept where clients and the next engine look for them. A state folder
removed or moved away under the engine takes its lock, socket, log, database and running
attempts' folders with it; its jobs run on, and so does the engine, which puts back what it
holds and says what is lost (what the logs held). A new engine started meanwhile does not start
beside it (hw/containment's hold); one that took the home for good makes it stop (the database
at the path is another: `StoreConnection.keep_in_place`).
"""

from __future__ import annotations

import logging
import os

import msgspec

from gpudesk import joblog
from gpudesk.engine.attempts import Attempts
from gpudesk.engine.control_socket import CannotListen, ControlSocket
from gpudesk.engine.store.database import Store
from gpudesk.home_lock import AlreadyRunning, EngineLock
from gpudesk.hw import runner
from gpudesk.paths import Home, HomeError

log = logging.getLogger("gpudesk.engine")


class HomeKeeper(msgspec.Struct):
    home: Home
    lock: EngineLock
    store: Store
    control: ControlSocket
    attempts: Attempts
    engine_log: str | None  # the engine's output, where it is the home's log (logcap)

    def step(self) -> bool:
        """Put back what went; True when the engine must stop."""
        try:
            if self.lock.keep(self.home, self.control.access.group):
                self._put_back()
        except (AlreadyRunning, HomeError, OSError, CannotListen, runner.LaunchError) as exc:
            log.error("the state folder %s went while the engine ran: %s", self.home.root, exc)
        return self.store.keep_in_place(self.lock.in_place)  # the database, from the open copy

    def _put_back(self) -> None:
        if self.engine_log is not None:  # it went with the folder
            joblog.reattach_stdout(self.engine_log)
        for live in self.attempts.live.values():
            folder = self.home.attempt_dir(live.attempt.job_id, live.attempt.number)
            if not folder.is_dir():  # where its wrapper writes the outcome
                runner.prepare(folder, private=live.uid != os.getuid())
        self.control.keep_bound()
        lost = f"what this log and {len(self.attempts.live)} running job(s)' logs held is lost"
        log.error(
            "the state folder %s went while the engine ran: put back; %s", self.home.root, lost
        )
