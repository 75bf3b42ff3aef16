"""A consumer whose producer went away mid-epoch (it died, or said bye as it stopped).

Under the engine, which restarts the producer, the consumer waits for the new one up to its
resume wait (`GPUDESK_LOADER_RESUME_S`, 30 s for a producer the engine manages; `resume_s`),
or until the engine says it does not start one (`station_access.engines_word`: it gave up, and
no other producer holds the name), through a pre-pass it prepares, and reconnects saying the
epoch it is in and the batches of it it already has: the producer gives it the rest of that
epoch. Batches it had received but not yet handed out are asked for again, and the samples of
a half-used batch are skipped; every batch is made under its own seed, so what is made again
is what was lost. A producer that
failed for good, or one with other settings, ends the wait with the reason; outside the engine
there is nothing to wait for, and it says what to do.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

from gpudesk.loader.batch import Piece
from gpudesk.loader.handshake import PREPARING_POLL_S, ProducerStopped
from gpudesk.loader.protocol import (
    LoaderError,
    final_failure,
    read_info,
    recorded_pid,
    recorded_runs,
    stopping_reason,
)

if TYPE_CHECKING:
    from gpudesk.loader.consumer import SharedLoader


def resume_epoch(loader: SharedLoader, epoch: int, pieces: list[Piece], why: str) -> None:
    """The producer died mid-epoch: wait for the restarted one and carry on. Batches not
    yet handed out are asked for again; samples of a half-used batch are skipped."""
    received = loader._received[epoch]
    loader._skip = {}
    for piece in pieces:
        received.discard(piece.index)
        if piece.start:
            loader._skip[piece.index] = piece.start
    pieces.clear()
    loader._pending.clear()
    for later in [e for e in loader._received if e > epoch]:
        del loader._received[later]
    loader._release = []
    loader._held.clear()
    reconnect(loader, why)


def reconnect(loader: SharedLoader, why: str) -> None:
    """Wait for a producer in the place of the one lost (`why`), for the resume wait, and say
    hello to it as from where this consumer is in its epoch; a LoaderError with the reason where
    none comes, one comes that failed for good, or one with other settings."""
    if loader._socket is not None:
        loader._socket.close()
        loader._socket = None
    wait = loader.resume_s if loader.resume_s is not None else (30.0 if loader.managed else 0.0)
    deadline = time.monotonic() + wait
    info_path = loader.home.loader_paths(loader.name)[2]
    while time.monotonic() < deadline:
        info = read_info(info_path)
        if final_failure(info) is not None:  # the one started again cannot work
            raise LoaderError(f"{why}; {loader._failed_producer(info)}")
        if stopping_reason(info):
            info = None  # it stops as it came (handshake.py): wait for the one in its place
        pid = recorded_pid(info) if info else 0
        if info and pid != loader.producer_pid and recorded_runs(info):
            if info.preparing:  # it comes back after its pre-pass: wait for it
                deadline = max(deadline, time.monotonic() + PREPARING_POLL_S)
                time.sleep(0.1)
                continue
            if info.identity != loader.identity:
                raise LoaderError(
                    f"{why}; the producer now running for {loader.name!r} (pid {pid}) has "
                    "other settings (dataset, batch size, seed or shuffle), so this consumer "
                    "cannot resume its epoch from it"
                )
            with contextlib.suppress(ProducerStopped):  # then wait on for another
                loader._connect(info, resume=True)
                return
        elif refused := loader._engines_word():  # it gave up restarting it
            raise LoaderError(f"{why}; {loader._failed_producer(refused)}")
        time.sleep(0.1)
    raise LoaderError(
        f"{why}; this consumer cannot go on. "
        + (
            f"No producer came back within {wait:.0f} s."
            if wait
            else f"Rerun it as a job of the station (`gpudesk submit --dataset {loader.name} "
            "...`): its engine restarts producers and lets consumers resume their epoch."
            if loader.home.is_system  # where `loader serve` is refused
            else "Restart it (`gpudesk loader serve ...`) and rerun, or run under gpudesk, "
            "which restarts producers and lets consumers resume their epoch."
        )
    )
