"""What a producer says of itself: its name claimed (a lock, and the stream of a dead producer
of the same settings continued), its info file while it prepares, and its status report.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import zmq

from gpudesk.loader.fetch import Key
from gpudesk.loader.producer_config import ProducerConfig
from gpudesk.loader.protocol import (
    LoaderError,
    ProducerInfo,
    decode,
    encode,
    read_info,
    recorded_pid,
    recorded_runs,
    this_process,
    write_info,
)
from gpudesk.render import duration
from gpudesk.text import printable_line
from gpudesk.units import seconds

log = logging.getLogger("gpudesk.loader")

if TYPE_CHECKING:
    from gpudesk.loader.producer import Producer


@dataclass(frozen=True)
class Claim:
    """A producer's name, taken: the lock it holds for its life, the info file of the producer
    before it (if any), and the stream key it goes on from."""

    lock: int
    previous: ProducerInfo | None
    start: Key


def claim(config: ProducerConfig, info_path: Path, sockets: Sequence[Path]) -> Claim:
    """Take a producer's name over: refuse if a live producer has it; continue a dead one's stream
    when it had the same settings."""
    info = read_info(info_path)
    # A lock held for the producer's life: two started at once cannot both get past here
    # (the info file is written only once the first batch is made). A POSIX lock, not
    # flock: the DataLoader's forked workers do not inherit it, so a producer killed with
    # its workers still exiting can be restarted at once.
    lock = os.open(info_path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock)
        info = read_info(info_path)
        raise LoaderError(
            f"a producer for {config.name!r} already runs "
            + (f"(pid {pid})" if info and (pid := recorded_pid(info)) else "(it is starting)")
            + "; stop it first"
        ) from None
    start: Key = (0, 0)
    if info is not None:
        if recorded_runs(info):
            raise LoaderError(
                f"a producer for {config.name!r} already runs (pid {info.pid}); stop it first"
            )
        if info.identity == config.identity() and info.stream_next:
            start = info.stream_next
    for path in sockets:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return Claim(lock, info, start)


def write_serving(producer: Producer, stopping: str | None = None) -> None:
    """Say, in a producer's info file, where consumers reach it and where its stream is (a
    restarted producer continues from there); whether it has lost its engine (`orphaned`, as
    in its status), and why it stops where it does."""
    write_info(
        producer.info_path,
        this_process(
            name=producer.config.name,
            control=f"ipc://{producer.ctl_path}",
            fd_socket=str(producer.fd_path),
            identity=producer.config.identity(),
            stream_next=producer.stream_position(),
            managed=producer.config.managed,
            started_at=producer.started,
            **orphaned(producer, time.monotonic()),
            stopping=stopping,
        ),
    )


def orphaned(producer: Producer, now: float) -> dict[str, Any]:
    """`{"orphaned": ...}` while the producer's engine is gone (`orphan.py`), else nothing: for
    its info file and its status alike."""
    state = producer.idle.orphan(bool(producer.consumers), now)
    return {} if state is None else {"orphaned": msgspec.to_builtins(state)}


def say_stopping(producer: Producer) -> None:
    """Before a producer closes its sockets: say that it stops, and why, in its info file (a
    consumer that found it before and says hello now learns it at once, `handshake.py`), and
    refuse, saying the same, the hellos already come, which no one would answer."""
    why = stop_reason(producer)
    with contextlib.suppress(OSError):  # it stops all the same: its consumers see it go
        write_serving(producer, stopping=why)
    refusal = encode("refused", message=why, stopping=True)
    while True:
        try:
            ident, raw = producer.ctl.recv_multipart(zmq.NOBLOCK)
            if decode(raw)["type"] == "hello":
                producer.ctl.send_multipart([ident, refusal])
        except zmq.Again:
            return
        except (ValueError, LoaderError, zmq.ZMQError):
            continue


def stop_reason(producer: Producer) -> str:
    """Why a producer stops, for those who come as it does (the log says it, with more)."""
    if producer.idle.why is not None:
        return producer.idle.why  # for want of consumers: --idle-exit, or orphaned
    return "it was told to stop" if producer.stopping else "it failed (see its log)"


def serving_line(producer: Producer, samples: int, batch_size: int) -> str:
    """What a producer run by hand says once consumers can read it: what it serves, where, and
    what stops it (`gpudesk loader serve` prints it on stdout; a managed one's engine logs its
    own line)."""
    config = producer.config
    stops = "Ctrl-C or SIGTERM stops it"
    if config.idle_exit_s is not None:
        stops += f", as does {seconds(config.idle_exit_s)} without a consumer"
    return (
        f"loader {config.name}: serving {printable_line(config.factory)}, {samples} samples in "
        f"batches of {batch_size}, on {printable_line(str(producer.ctl_path))} (pid "
        f"{os.getpid()}); jobs read it as SharedLoader({config.name!r}); {stops}"
    )


def stopped_line(producer: Producer) -> str:
    """What a producer run by hand says as it stops of itself or when told to: why, after how
    long, and what it served."""
    # for want of consumers (--idle-exit, orphaned), else what told it: a signal, a worker's end
    why = producer.idle.why or producer.stopped_by or stop_reason(producer)
    served = (
        f"{producer.delivered_total} batch(es) to {producer.consumers_total} consumer(s) in "
        f"{duration(time.time() - producer.started)}"
    )
    return f"loader {producer.config.name}: stopped: {why}; it served {served}"


def write_preparing(producer: Producer, what: str) -> None:
    """Say, in a producer's info file, before a long preparation (a selection's pre-pass),
    that the producer is coming: consumers wait for it instead of giving up. The stream
    position of the producer before it is kept, for a restart after a failure here."""
    _write_state(producer, preparing=what)


def write_failed(producer: Producer, reason: str) -> None:
    """Say, in a producer's info file, that it failed for good and why (`final_failure`): its
    consumers stop waiting for it, and the engine does not start it again. The stream position
    of the producer before it is kept, for a successor with settings that work."""
    _write_state(producer, failed=reason, transient=False, failed_at=time.time())


def _write_state(producer: Producer, **state: Any) -> None:
    """The info file of a producer that does not serve (yet): `state`, and its predecessor's
    stream, kept."""
    previous = producer.previous_info
    write_info(
        producer.info_path,
        this_process(
            identity=previous.identity if previous else None,
            stream_next=previous.stream_next if previous else None,
            name=producer.config.name,
            managed=producer.config.managed,
            started_at=producer.started,
            **state,
        ),
    )


def status_report(producer: Producer) -> dict[str, Any]:
    """What a producer reports of itself: its dataset, stream, ring, CPU and consumers."""
    now = time.monotonic()
    cpu = 0.0
    workers = 0
    with contextlib.suppress(Exception):
        times = producer.proc.cpu_times()
        cpu = times.user + times.system
        for child in producer.proc.children(recursive=True):
            with contextlib.suppress(Exception):
                child_times = child.cpu_times()
                cpu += child_times.user + child_times.system
                workers += 1
    cpu = max(0.0, cpu - producer.selection_cpu_s)
    chosen = None
    if producer.selection is not None:
        chosen = {**producer.selection.describe(), "cpu_s": round(producer.selection_cpu_s, 3)}
    return {
        "name": producer.config.name,
        "pid": os.getpid(),
        "dataset": producer.config.factory,
        "dataset_len": producer.plan.length,
        "batch_size": producer.plan.batch_size,
        "batches_per_epoch": producer.plan.per_epoch,
        "workers": producer.config.workers,
        "worker_processes": workers,
        "seed": producer.config.seed,
        "stream": list(producer.stream_position()),
        "produced": producer.produced,
        "makeups_produced": producer.makeups_produced,
        "bytes_written": producer.table.bytes_written,
        "bytes_copied": producer.table.bytes_copied,
        "consumers_total": producer.consumers_total,
        "delivered_total": producer.delivered_total,
        "slots": len(producer.table.slots),
        "slots_used": producer.table.used(),
        "slot_bytes": producer.table.slot_bytes,
        "cpu_s": round(cpu, 3),
        "uptime_s": round(time.time() - producer.started, 3),
        "managed": producer.config.managed,
        "selection": chosen,  # its CPU is not counted in cpu_s (loading)
        "staging": producer.staging.describe(),
        "decoding": producer.decoder.describe() if producer.decoder is not None else None,
        **orphaned(producer, now),
        "consumers": [
            {
                "pid": c.pid,
                "batch_size": c.batch_size,
                "epoch": c.epoch,
                "position": list(c.position) if c.position else None,
                "delivered": c.delivered,
                "batches_per_s": round(c.rate(now), 2),
                "held_slots": len(c.held),
                "makeups_left": len(c.missing),
                "data_path": c.data_path,
            }
            for c in producer.consumers.values()
        ],
    }


def note_reuse(producer: Producer, job: Any, pid: int, resumed: bool) -> None:
    """Record, in the selection cache, that a job trains on this selection's pre-pass."""
    from gpudesk.selection.cache import loader_use

    chosen = producer.selection.selection if producer.selection is not None else None
    if chosen is None or chosen.key is None or resumed:
        return
    if not chosen.reused and not producer.first_user_paid:
        producer.first_user_paid = True  # it paid for the pre-pass
        return
    who = f"job {job}" if job else f"pid {pid}"
    try:
        producer.selection_cache.note_reuse(chosen.key, loader_use(who, producer.config.name))
    except (OSError, ValueError) as exc:
        log.warning(
            "loader %s: could not record the reuse of %s: %s", producer.config.name, chosen.key, exc
        )
