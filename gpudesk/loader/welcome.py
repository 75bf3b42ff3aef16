"""A consumer's hello, as its producer answers it: a welcome, or a refusal.

The consumer's side of the exchange is `handshake.py`. A hello the producer cannot serve is
refused with the reason (no pid, a batch that needs more than half of the ring, or the producer
stops: `producer_info.stop_reason`). Otherwise the consumer's state is set up (`ConsumerState`):
the epoch it starts in (the stream's, or the one it resumes, with the batches of it it already
has), what of that epoch the stream has passed (made again for it), its lease; the ring grows to
hold its share, and the welcome tells it all of that and where to get the ring.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import zmq

from gpudesk.hw import process_start
from gpudesk.loader.consumer_state import ConsumerState, need_slots
from gpudesk.loader.producer_info import note_reuse
from gpudesk.loader.protocol import PID_MAX_LIMIT, encode

if TYPE_CHECKING:
    from gpudesk.loader.producer import Producer

log = logging.getLogger("gpudesk.loader")


class ResumeFrom(msgspec.Struct, frozen=True):
    """Where a consumer that resumes is in its epoch: the batches of it (by epoch) it has."""

    epoch: int
    received: dict[int, list[int]] = msgspec.field(default_factory=dict)


class Hello(msgspec.Struct, frozen=True):
    """A consumer's hello (protocol.py). On a station any member the loader is shared with may
    send one, so it is checked whole: a hello of another shape is refused, never the end of
    the producer that serves them all."""

    pid: Annotated[int, msgspec.Meta(ge=1, le=PID_MAX_LIMIT)]
    batch_size: Annotated[int, msgspec.Meta(ge=0)] | None = None  # 0 or None: the producer's
    resume: ResumeFrom | None = None
    job: str | None = None  # GPUDESK_JOB_ID, where the engine started it


def hello(producer: Producer, ident: bytes, message: dict[str, Any]) -> None:
    """Answer the hello `message` from the peer `ident`: welcome it as a consumer, or refuse."""
    try:
        said = msgspec.convert(message, Hello, str_keys=True)
    except msgspec.ValidationError as exc:
        refuse(producer, ident, f"a hello this producer cannot read ({exc})")
        return
    pid, resume = said.pid, said.resume
    batch_size = said.batch_size or producer.plan.batch_size
    per_slot = producer.plan.batch_size
    if batch_size < 1 or math.ceil(batch_size / per_slot) > producer.config.slots // 2:
        refuse(
            producer,
            ident,
            f"a batch of {batch_size} needs more than half of the ring "
            f"({producer.config.slots} slots of {per_slot}); start the producer with "
            "--slots larger or --batch-size larger",
        )
        return
    started = process_start.started(pid)
    note_reuse(producer, said.job, pid, resumed=resume is not None)
    epoch = producer.stream_position()[0]
    got: dict[int, set[int]] = {}
    if resume is not None:
        epoch = resume.epoch
        for e, js in resume.received.items():
            got.setdefault(e, set()).update(js)
    need = need_slots(batch_size, per_slot)
    consumer = ConsumerState(
        ident, pid, started, batch_size, need, epoch, time.monotonic(), got=got
    )
    while len(consumer.got.get(consumer.epoch, ())) >= producer.plan.per_epoch:
        consumer.got.pop(consumer.epoch)
        consumer.epoch += 1
    consumer.missing = producer._passed(consumer)
    welcome_staging = producer.staging.welcome()
    if welcome_staging["staging"] is not None:
        consumer.mirror_gen = welcome_staging["staging"]["gen"]
    producer.consumers[ident] = consumer
    producer.consumers_total += 1
    producer.table.grow(producer._slots_needed())
    producer.ctl.send_multipart(
        [
            ident,
            encode(
                "welcome",
                epoch=consumer.epoch,
                batches_per_epoch=producer.plan.per_epoch,
                dataset_len=producer.plan.length,
                batch_size=per_slot,
                pid=os.getpid(),
                started=process_start.started(os.getpid()),
                fd_socket=str(producer.fd_path),
                makeups=len(consumer.missing),
                managed=producer.config.managed,
                lease=consumer.cap,
                **welcome_staging,
            ),
        ]
    )
    log.info(
        "loader %s: consumer pid %d joined at %s (batch %d, %d batches of its epoch passed)",
        producer.config.name,
        pid,
        producer.stream_position(),
        batch_size,
        len(consumer.missing),
    )


def refuse(producer: Producer, ident: bytes, why: str, **more: Any) -> None:
    """Tell the peer `ident` that it is not served, and why (`more`: `stopping=True`)."""
    with contextlib.suppress(zmq.ZMQError):
        producer.ctl.send_multipart([ident, encode("refused", message=why, **more)])


def released(message: dict[str, Any]) -> list[int]:
    """The slots a consumer's `release` gives back; none where it names them otherwise than as
    a list of whole numbers (a member's peer may send what it likes)."""
    slots = message.get("slots", [])
    if isinstance(slots, list) and all(type(s) is int for s in slots):
        return slots
    log.warning("a release of slots that are not a list of numbers, passed over")
    return []
