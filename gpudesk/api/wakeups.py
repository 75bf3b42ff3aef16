"""The engine's job events as wake-ups for a follower that reads the state itself.

`gpudesk run` lists its jobs again on each wake-up; an event only says that something changed.
A follower that falls behind by more than its bound is cut off by the engine (`events_missed`:
a run busy queueing thousands of jobs does not read the events their queueing sends). What was
missed is no loss to it, as the next listing is the state: it subscribes again and wakes.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING

from gpudesk.api.errors import EVENTS_MISSED, EngineError

if TYPE_CHECKING:
    from types import TracebackType

    from gpudesk.api.client import Client, EventStream


class Wakeups:
    """`with Wakeups(client, "job") as wakeups:` ... `wakeups.wait(timeout)`."""

    def __init__(self, client: Client, topic: str) -> None:
        self.client, self.topic = client, topic
        self._stack = ExitStack()
        self._events: EventStream | None = None
        self.resubscribed = 0  # how often the engine cut it off (for tests and logs)

    def __enter__(self) -> Wakeups:
        self._subscribe()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stack.close()

    def _subscribe(self) -> EventStream:
        self._events = self._stack.enter_context(self.client.events(self.topic))
        return self._events

    def wait(self, timeout: float) -> bool:
        """Whether something happened within `timeout` seconds, the events that said so read."""
        events = self._events or self._subscribe()
        try:
            if not events.wait(timeout):
                return False
            events.drain()
        except EngineError as exc:
            if exc.code != EVENTS_MISSED:
                raise
            self._stack.close()  # the engine closed it: follow anew
            self._stack = ExitStack()
            self._events = None
            self.resubscribed += 1
            self._subscribe()
        return True

    def drain(self) -> None:
        """Read what has come meanwhile, without waiting."""
        self.wait(0.0)
