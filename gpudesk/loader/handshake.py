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

A welcome (`connect`) gives the consumer the ring (its descriptor, over the socket the welcome
names), the producer's stream (its epoch, batches per epoch, batch size), the consumer's lease
(`lease.lease_info`) and, where the producer stages batches on its GPU, the mirror this consumer
reads them from if it may (`open_staging`); a consumer resuming says in its hello where it is in
its epoch, and keeps it.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import zmq

from gpudesk.loader.lease import lease_info
from gpudesk.loader.protocol import (
    PID_MAX_LIMIT,
    STEP_MS,
    LoaderError,
    ProducerInfo,
    decode,
    encode,
    final_failure,
    gone,
    receive_fd,
    recorded_start,
)
from gpudesk.loader.ring import Ring

if TYPE_CHECKING:
    from gpudesk.loader.consumer import SharedLoader

CONNECT_TIMEOUT_S = 10.0  # a live producer that does not answer a hello for this long is stuck
PREPARING_POLL_S = 1.0  # a preparing producer is waited for while it lives, checked this often


class Welcome(msgspec.Struct, frozen=True):
    """A producer's welcome (welcome.py sends it). On a station the producer is its owner's
    process, read by the other members' jobs, so it is checked whole: one of another shape is a
    LoaderError saying so, never a traceback in their job. A field a producer of an earlier
    gpudesk did not send has its default (its start as `create_time`)."""

    pid: Annotated[int, msgspec.Meta(ge=1, le=PID_MAX_LIMIT)]
    fd_socket: str
    epoch: int
    batches_per_epoch: Annotated[int, msgspec.Meta(ge=0)]
    dataset_len: Annotated[int, msgspec.Meta(ge=0)]
    batch_size: Annotated[int, msgspec.Meta(ge=1)]
    started: float | None = None
    create_time: float | None = None
    managed: bool = False
    lease: Annotated[int, msgspec.Meta(ge=0)] | None = None  # lease.py: slots lent at most
    staging: dict[str, Any] | None = None  # a mirror handle (staging.MirrorHandle.to_wire)
    staging_off: str | None = None  # why it does not stage
    makeups: int = 0


class ProducerStopped(LoaderError):
    """The producer stopped, or is stopping, as this consumer said hello: there is nothing to
    read from it (another may come up in its place)."""


def await_answer(
    sock: zmq.Socket[bytes], info: ProducerInfo, info_path: Path, name: str
) -> dict[str, Any]:
    """The producer's answer to the hello just sent on `sock` (a welcome or a refusal), the
    producer being the one `info` describes; ProducerStopped where it stops or is gone."""
    pid = info.pid
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


def stopped(name: str, pid: Any, why: str) -> str:
    """The sentence a consumer says it with (then what it does about it)."""
    return f"the producer for {name!r} (pid {pid}) stopped as this consumer connected: {why}"


def connect_first(loader: SharedLoader, wait: float) -> tuple[ProducerInfo | None, str | None]:
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


def connect(loader: SharedLoader, info: ProducerInfo, resume: bool) -> None:
    """Say hello to the producer `info` describes (as from where `loader` is in its epoch, when
    it resumes) and take its welcome: the ring's descriptor, the producer's stream and lease,
    and its staged mirror where this consumer may read it. Its refusal, a stop or a silence is
    a LoaderError (ProducerStopped: it stops or is gone)."""
    # Ready to read before saying hello: the producer does not wait for a consumer that
    # lags, and importing torch takes a second (batches missed meanwhile are made again).
    import torch  # noqa: F401

    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, 0)  # the producer bounds what it sends by the ring size
    if not info.control:
        sock.close()
        raise ProducerStopped(stopped(loader.name, info.pid, "its info file names no socket"))
    sock.connect(info.control)
    state = None
    if resume:
        state = {
            "epoch": loader.epoch,
            "received": {
                str(e): sorted(js) for e, js in loader._received.items() if e >= loader.epoch
            },
        }
    sock.send(
        encode(
            "hello",
            pid=os.getpid(),
            batch_size=loader.batch_size,
            resume=state,
            job=os.environ.get("GPUDESK_JOB_ID"),
        )
    )
    try:  # the answer, or at once word that the producer stops or is gone
        reply = await_answer(sock, info, loader.home.loader_paths(loader.name)[2], loader.name)
    except LoaderError:
        sock.close()
        raise
    welcome = welcome_in(reply, sock, loader.name)
    try:
        ring = Ring.attach(receive_fd(Path(welcome.fd_socket)))  # keeps the fd: to map more
    except OSError as exc:
        leave(sock)
        raise LoaderError(
            f"could not get the shared memory of {loader.name!r} from {welcome.fd_socket}: {exc}"
        ) from None
    except LoaderError:  # refused, or not a ring this consumer may read
        leave(sock)
        raise
    if loader.ring is not None:
        loader.ring.close()  # a restarted producer's ring is another one
    loader.ring = ring
    loader._socket = sock
    loader.producer_pid = welcome.pid
    loader.producer_started = recorded_start(welcome)
    loader.managed = welcome.managed
    loader.per_epoch = welcome.batches_per_epoch
    loader.dataset_len = welcome.dataset_len
    loader.producer_batch = welcome.batch_size
    if loader.batch_size is None:
        loader.batch_size = loader.producer_batch
    if not resume:
        loader.epoch = welcome.epoch  # the producer epoch this consumer epoch follows
        loader.identity = info.identity  # what a restarted producer must match
    loader._held.clear()
    loader._leases.reset()
    loader._need, loader.lease_limit = lease_info(
        welcome.lease, loader.batch_size, loader.producer_batch
    )
    open_staging(loader, welcome)


def welcome_in(reply: dict[str, Any], sock: zmq.Socket[bytes], name: str) -> Welcome:
    """The welcome the producer of `name` answered a hello with; else (a refusal, another
    answer, a welcome of another shape) `sock` closed and a LoaderError saying why."""
    if reply["type"] == "welcome":
        try:
            return msgspec.convert(reply, Welcome)
        except msgspec.ValidationError as exc:
            leave(sock)  # it counts this consumer as one of its own now
            raise LoaderError(
                f"the producer for {name!r} sent a welcome this consumer cannot read ({exc})"
            ) from None
    sock.close()
    if reply["type"] == "refused":
        raise LoaderError(
            f"the producer for {name!r} refused this consumer: {reply.get('message')}"
        )
    raise LoaderError(f"unexpected answer from the producer: {reply['type']}")


def open_staging(loader: SharedLoader, welcome: Welcome) -> None:
    """Read batches from the producer's staged mirror (on this process's GPU) when it has
    one and this consumer may; else from the host ring. Either way, say which (and why)
    to the producer, for `gpudesk loader status`."""
    loader._mirror, loader._mirror_gen = None, 0
    offered = welcome.staging
    if loader.device == "cpu":
        loader.data_path = "host: the consumer asked for device='cpu'"
    elif offered is None:
        loader.data_path = f"host: {welcome.staging_off or 'the producer does not stage'}"
    else:
        loader._open_mirror(offered)
    if loader._socket is not None:
        with contextlib.suppress(zmq.ZMQError):
            loader._socket.send(encode("path", path=loader.data_path))


# how long closing waits to hand the goodbye to the producer's socket (a local ipc pipe)
LEAVE_LINGER_MS = 200


def leave(sock: zmq.Socket[bytes]) -> None:
    """Say goodbye to a producer that welcomed this consumer, then close: it need not keep
    slots for a consumer that will not read them until its process ends."""
    with contextlib.suppress(zmq.ZMQError):
        sock.send(encode("bye"), zmq.NOBLOCK)
    sock.close(linger=LEAVE_LINGER_MS)
