"""The station's drain (`gpudesk drain`; Slurm's DRAIN, pueue's `pause`): while it is on, the
scheduler starts no new job; running jobs go on, submits queue. Kept in the store's settings
(an engine restarted during maintenance stays drained); each change a `station` event.
Station-wide only: docs/jobs.md, "Draining the station", says why not per GPU."""

from __future__ import annotations

import logging
import time

import msgspec

from gpudesk.core.identity import Caller
from gpudesk.core.station import STATION_EVENT
from gpudesk.core.wire.control import DrainView
from gpudesk.engine.store.database import Store

log = logging.getLogger("gpudesk.engine")
DRAIN_SETTING = "drain"


class Drain:
    def __init__(self, store: Store) -> None:
        self.store = store
        try:
            self.state = msgspec.convert(store.setting(DRAIN_SETTING), DrainView | None)
        except msgspec.ValidationError:  # damaged: drained still, and said
            self.state = DrainView(by="?", uid=-1, since=time.time(), reason="(unreadable)")

    @property
    def active(self) -> bool:
        return self.state is not None

    def drain(self, caller: Caller, reason: str | None) -> bool:
        """Drain the station; False when it was already (that drain is kept)."""
        if self.state is not None:
            return False
        self.state = DrainView(by=caller.name, uid=caller.uid, since=time.time(), reason=reason)
        self.store.set_setting(DRAIN_SETTING, msgspec.to_builtins(self.state))
        self._say(f"station: {self.state.line()}")  # one line: the reason spelled out
        return True

    def undrain(self, caller: Caller) -> DrainView | None:
        """Lift the drain; the drain it lifted (None: there was none)."""
        ended, self.state = self.state, None
        if ended is not None:
            self.store.set_setting(DRAIN_SETTING, None)
            self._say(f"station: undrained by {caller.name} (was {ended.line()})")
        return ended

    def explain(self) -> str | None:
        """Why no job starts, for `show`'s `waiting`; None while not drained."""
        if self.state is None:
            return None
        return f"the station is {self.state.line()}: no job starts until it is undrained"

    def _say(self, message: str) -> None:
        log.info("%s", message)
        self.store.add_event(STATION_EVENT, message)
