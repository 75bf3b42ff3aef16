"""A consumer's hello, answered: a welcome, a refusal, or word that the producer stopped.

A consumer finds its producer by the producer's info file, then says hello on its control socket.
Between the two (a SharedLoader imports torch first: a second or more) the producer may stop,
told to (SIGTERM) or by itself (`--idle-exit`, or orphaned: `orphan.py`). A hello that comes as
it stops is refused, saying so (`refused {stopping: true}`, producer_info.say_stopping); one
that comes once its socket is closed gets no answer at all. So the consumer waits for the
answer in short steps, and between them looks whether the producer is still there and not
stopping (its info file says `stopping` once it begins to). Either way it learns at once that
the producer stopped, and why where the producer said, instead of waiting CONNECT_TIMEOUT_S for
an answer that cannot come, and then, under the engine, RESUME_S more for it to come back.

What the consumer then does is what it does where it finds no producer: wait for another as
long as it would have (a job the engine started with its producer: START_WAIT_S; a consumer
resuming: its resume wait), read locally (`fallback=True`), or fail with the reason.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudesk.loader.protocol import (
    LoaderError,
    decode,
    final_failure,
    process_alive,
    read_info,
    stopping_reason,
)

if TYPE_CHECKING:
    import zmq

    from gpudesk.loader.consumer import SharedLoader

CONNECT_TIMEOUT_S = 10.0  # a live producer that does not answer a hello for this long is stuck
STEP_MS = 200  # while waiting for the answer, the producer is looked at this often


class ProducerStopped(LoaderError):
    """The producer stopped, or is stopping, as this consumer said hello: there is nothing to
    read from it (another may come up in its place)."""


def await_answer(
    sock: zmq.Socket[bytes], info: dict[str, Any], info_path: Path, name: str
) -> dict[str, Any]:
    """The producer's answer to the hello just sent on `sock` (a welcome or a refusal), the
    producer being the one `info` describes; ProducerStopped where it stops or is gone."""
    pid = info.get("pid")
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while not sock.poll(STEP_MS):
        why = gone(info, info_path)
        if why is not None:
            raise ProducerStopped(stopped(name, pid, why))
        if time.monotonic() >= deadline:
            raise LoaderError(
                f"the producer for {name!r} (pid {pid}) did not answer within "
                f"{CONNECT_TIMEOUT_S:.0f} s"
            )
    reply = decode(sock.recv())
    if reply["type"] == "refused" and reply.get("stopping"):
        raise ProducerStopped(stopped(name, pid, str(reply.get("message"))))
    return reply


def gone(info: dict[str, Any], info_path: Path) -> str | None:
    """Why the producer `info` describes will not answer (it has exited, or it stops, saying
    why in its info file); None while it is there to serve."""
    pid = int(info.get("pid", 0))
    if not process_alive(pid, info.get("create_time")):
        return "it has exited"
    now = read_info(info_path)
    return stopping_reason(now) if now is not None and now.get("pid") == pid else None


def stopped(name: str, pid: Any, why: str) -> str:
    """The sentence a consumer says it with (then what it does about it)."""
    return f"the producer for {name!r} (pid {pid}) stopped as this consumer connected: {why}"


def connect_first(loader: SharedLoader, wait: float) -> tuple[dict[str, Any] | None, str | None]:
    """Find the loader's producer, waiting up to `wait` s for one (`_running_producer`), and
    connect to it; one that stops as it is said hello to is passed over for one that comes up
    in its place within what is left of `wait`. Returns the info of the producer connected to
    (or of one that failed for good, or None: none), and why the last one found stopped."""
    deadline = time.monotonic() + wait
    why = None
    while True:
        info = loader._running_producer(max(0.0, deadline - time.monotonic()))
        if info is None or final_failure(info) is not None:
            return info, why
        try:
            loader._connect(info, resume=False)
        except ProducerStopped as exc:
            why = str(exc)
            if time.monotonic() < deadline:
                continue
            return None, why
        return info, None
