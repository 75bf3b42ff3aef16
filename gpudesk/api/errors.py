"""What a client of the engine raises. Standard library only: the CLI catches `EngineError`
around every command, `--help` included, without loading msgspec or the models."""

from __future__ import annotations

import re
from dataclasses import dataclass

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


# Where an engine's refusal names one job of a submit request: `jobs[3]: …`, `jobs[0].gpus: …`
# or `jobs[0] ('name').priority: …` (gpudesk.engine.requests); the index is the request's
_REQUEST_JOB = re.compile(
    r"jobs\[(?P<index>\d+)\](?: \((?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\))?"
    r"(?:\.(?P<field>[a-z_]+))?: (?P<rest>.*)",
    re.DOTALL,
)


@dataclass(frozen=True)
class JobRefusal:
    """The engine's refusal of the `index`-th job of a submit request: of its `field` where it
    names one, and why (`rest`)."""

    index: int
    field: str | None
    rest: str


def job_refusal(exc: EngineError) -> JobRefusal | None:
    """What `exc` says of one job of a submit request; None where it names none."""
    match = _REQUEST_JOB.fullmatch(str(exc))
    if match is None:
        return None
    return JobRefusal(int(match["index"]), match["field"], match["rest"])


__all__ = ["BAD_REPLY", "EVENTS_MISSED", "TOO_LARGE", "EngineError", "JobRefusal", "job_refusal"]
