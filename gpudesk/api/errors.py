"""What a client of the engine raises. Standard library only: the CLI catches `EngineError`
around every command, `--help` included, without loading msgspec or the models."""

from __future__ import annotations

BAD_REPLY = "bad_reply"  # the engine answered something this client's models do not describe
TOO_LARGE = "too_large"  # a request over the protocol's message limit: never sent
# An event stream the engine cut off because it fell too far behind: events were missed, and a
# follower subscribes again and reads the state anew (protocol.EVENTS_MISSED).
EVENTS_MISSED = "events_missed"


class EngineError(RuntimeError):
    """The engine answered with an error, or could not be reached or started, or its reply
    does not match the models (`code` BAD_REPLY). `code` is one of the protocol's error codes
    (docs/protocol.md), "unavailable" when no engine answered."""

    def __init__(self, message: str, code: str = "unavailable") -> None:
        super().__init__(message)
        self.code = code


__all__ = ["BAD_REPLY", "EVENTS_MISSED", "TOO_LARGE", "EngineError"]
