"""The two small pieces of state the engine's collaborators share: the station config in force
and the "look at the queue again" flag."""

from __future__ import annotations

import msgspec

from gpudesk.core.station import StationConfig
from gpudesk.engine.store.database import Store


class PlacementDue(msgspec.Struct):
    """Set by whatever may let a queued job start (a submit, an attempt ending, a GPU read for
    the first time, ...); the loop clears it when it asks the policy again."""

    pending: bool = True

    def mark(self) -> None:
        self.pending = True


class CurrentStation:
    """The station config the engine runs with; every change is kept in the store, so the
    next engine of this home starts with it."""

    def __init__(self, store: Store, config: StationConfig) -> None:
        self.store = store
        self.config = config
        self.home_backend: str | None = None  # `keep`

    def keep(self, home_backend: str | None) -> None:
        """Keep `home_backend` as the home's backend, whatever this engine runs on (None: its
        own): where GPUDESK_BACKEND (its environment's, not the home's) says another, a later
        start without it must not find the home set to it (a SIMULATED station, for a start of
        a test)."""
        self.home_backend = home_backend
        self.replace(self.config)

    def replace(self, config: StationConfig) -> None:
        self.config = config
        kept = config.to_dict()
        if self.home_backend is not None:
            kept["backend"] = self.home_backend
        self.store.set_setting("station", kept)
