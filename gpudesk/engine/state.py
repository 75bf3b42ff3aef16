"""The two small pieces of state the engine's collaborators share: the station config in force
and the "look at the queue again" flag."""

from __future__ import annotations

from dataclasses import dataclass

from gpudesk.core.station import StationConfig
from gpudesk.engine.store.database import Store


@dataclass
class PlacementDue:
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

    def replace(self, config: StationConfig) -> None:
        self.config = config
        self.store.set_setting("station", config.to_dict())
