"""What a client of the engine raises. Standard library only: the CLI catches `EngineError`
around every command, `--help` included, without loading msgspec or the models."""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

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


# Where an engine's refusal names one job of a submit request: by its place, `jobs[3]: …`,
# `jobs[0].gpus: …` or `jobs[0] ('name').priority: …` (gpudesk.engine.requests; the index is
# the request's), or by its name, `job 'name' asks for 8 GPUs …` (the station's admission, a
# Slurm cluster's mapping: gpudesk.engine.backends); the name as the engine quotes it
_QUOTED = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
_REQUEST_JOB = re.compile(
    rf"jobs\[(?P<index>\d+)\](?: \((?:{_QUOTED})\))?(?:\.(?P<field>[a-z_]+))?: (?P<rest>.*)",
    re.DOTALL,
)
_NAMED_JOB = re.compile(rf"job (?P<name>{_QUOTED}):? (?P<rest>.*)", re.DOTALL)


class JobRefusal(msgspec.Struct, frozen=True):
    """The engine's refusal of one job of a submit request, the `index`-th (None: named by
    `name` alone, as the engine quotes it: "'g1'"): of its `field` where it names one, and why
    (`rest`)."""

    index: int | None
    field: str | None
    rest: str
    name: str | None = None

    def of(self, names: Sequence[str]) -> int | None:
        """Which of the request's jobs (their `names`, in order) is refused; None: none of
        them. A name picks a job only in a request whose names are unique (a profile's)."""
        from gpudesk.text import safe_text

        if self.index is not None:
            return self.index if self.index < len(names) else None
        quoted = {repr(n): k for k, n in enumerate(names)}
        quoted.update({repr(safe_text(n)): k for k, n in enumerate(names)})
        return quoted.get(self.name or "")


def job_refusal(exc: EngineError) -> JobRefusal | None:
    """What `exc` says of one job of a submit request; None where it names none."""
    match = _REQUEST_JOB.fullmatch(str(exc))
    if match is not None:
        return JobRefusal(int(match["index"]), match["field"], match["rest"])
    named = _NAMED_JOB.fullmatch(str(exc))
    if named is not None:
        return JobRefusal(None, None, named["rest"], named["name"])
    return None


__all__ = ["BAD_REPLY", "EVENTS_MISSED", "TOO_LARGE", "EngineError", "JobRefusal", "job_refusal"]
