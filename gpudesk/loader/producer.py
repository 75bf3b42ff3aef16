"""The producer: one process per dataset that loads each batch once for every consumer.

It builds the dataset from its factory and runs an ordinary torch DataLoader with W workers over
a stream of batch requests. Each request names a slot of the shared ring, and the worker that
fetches the batch writes it there itself (`fetch.py`); the producer tells every consumer that
takes the batch which slot it is in. Nothing is copied on the way, nothing pickled.

The stream is a sequence of epochs; epoch `e` visits the dataset in the order `randperm(len, seed *
1_000_003 + e)`, in batches `(e, 0) ... (e, B - 1)`, the same for every consumer, and every batch is
fetched under its own seed (`fetch.batch_seed`), so it is the same wherever and whenever it is made.
A consumer reads every batch of each of its epochs exactly once, in any order: the stream's as they
come, and the ones it missed (it joined mid-epoch, it fell behind, or a restarted producer lost
them) from the ring while they are still there, else made again for it ("make-ups").

Flow control. A consumer is given at most `need + LOOKAHEAD` slots at a time (`need`: the slots
one of its batches spans), and as many batches it had no room for yet are kept for it (pinned):
its look-back. The ring has slots for all of that beside the requests in flight, so a consumer
with room always finds a slot for its next batch. When the stream would run further ahead of a
consumer than its look-back, it waits for it, so that consumers of about the same pace keep
sharing every batch; but only briefly: at most HOLD_PATIENCE_S at once and HOLD_SHARE of the
time (`hold.py`). A consumer that needs more is let go: the stream no longer waits for it, it
gets what is still in the ring, and what it lacks beyond that is made again for it, at its own
pace (until it catches up). No consumer waits longer than that for another's pace, and the ring
stays bounded.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import signal
import socket
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, cast

import zmq

from gpudesk.loader.batch import BatchError, BatchMeta, Packed
from gpudesk.loader.batch_plan import BatchPlan
from gpudesk.loader.consumer_state import ConsumerState
from gpudesk.loader.device_decode import DeviceDecoder, decoder_for
from gpudesk.loader.fetch import Key, RingWriter, Source, passthrough
from gpudesk.loader.hold import HOLD_PATIENCE_S, hold
from gpudesk.loader.orphan import IdleExit
from gpudesk.loader.producer_config import (
    ProducerConfig,
    check_socket_paths,
    open_dataset,
    select_data,
)
from gpudesk.loader.producer_info import (
    claim,
    say_stopping,
    serving_line,
    status_report,
    stop_reason,
    stopped_line,
    write_failed,
    write_preparing,
    write_serving,
)
from gpudesk.loader.protocol import (
    FinalError,
    LoaderError,
    ProducerInfo,
    check_name,
    decode,
    encode,
    process_alive,
)
from gpudesk.loader.ring import Ring
from gpudesk.loader.slots import SlotTable
from gpudesk.loader.staging import Staging
from gpudesk.loader.station_access import hand_out_ring, open_sockets_to, prepare_serving
from gpudesk.loader.welcome import hello, refuse, released
from gpudesk.loader.workers import WorkerEnd, WorkerGone, WorkerWatch
from gpudesk.paths import Home

log = logging.getLogger("gpudesk.loader")

LIVENESS_EVERY_S = 0.2  # how often consumers' processes are checked (a SIGKILL is seen in this)
INFO_EVERY_S = 1.0  # how often the stream position is written down (for a restart)
PREFETCH = 2  # the DataLoader's prefetch_factor: requests in flight per worker


class Producer:
    def __init__(self, config: ProducerConfig, home: Home) -> None:
        self.config = config  # checked in `_prepare`, where a failure is recorded as final
        self.home = home
        try:  # no info file to say why in: a name that is not one has no path
            check_name(config.name)
        except LoaderError as exc:
            raise FinalError(str(exc)) from None
        self.ctl_path, self.fd_path, self.info_path = home.loader_paths(config.name)
        self.consumers: dict[bytes, ConsumerState] = {}
        self.stopping = False
        self.stopped_by: str | None = None  # what told it to stop: "SIGTERM", a worker's end
        # a line for the person who started it by hand (`serving_line`, `stopped_line`)
        self.say: Callable[[str], None] | None = None
        self.started = time.time()
        self.produced = 0
        self.makeups_produced = 0
        self.unplaced: deque[tuple[Packed, bool]] = deque()  # made without a slot, waiting
        self.last_info = 0.0
        self.consumers_total = 0  # consumers served over the producer's life, departed included
        self.delivered_total = 0  # batches handed to them
        self.selection: Any = None  # a gpudesk.selection.apply.DatasetSelection, if asked for
        self.selection_cache: Any = None
        self.selection_cpu_s = 0.0
        self.previous_info: ProducerInfo | None = None
        self.first_user_paid = False  # the first job served a fresh pre-pass is not a reuse
        self.staging = Staging(self.config.device)
        self.decoder: DeviceDecoder | None = None  # set where the producer decodes on its GPU
        self.gens: dict[int, int] = {}  # slot -> the mirror generation its batch is staged in
        self.watch: WorkerWatch | None = None  # its DataLoader's workers, once they run

    # ------------------------------------------------------------------ setup
    def _claim(self) -> Key:
        claimed = claim(self.config, self.info_path, (self.ctl_path, self.fd_path))
        self.lock, self.previous_info = claimed.lock, claimed.previous
        return claimed.start

    def run(self) -> int:
        self.group = prepare_serving(self.home, self.config.name, self.config.share)
        start = self._claim()
        try:
            dataset, length = self._prepare()
        except LoaderError as exc:
            write_failed(self, str(exc))
            raise FinalError(str(exc)) from None
        batch_size = min(self.config.batch_size, length)
        self.plan = BatchPlan(
            length,
            batch_size,
            self.config.seed,
            self.config.shuffle,
            start,
            self.selection.epoch_indices if self.selection else None,
            self._reserve,
            self._needed,
        )
        self._start_loading(dataset, batch_size)
        self._open_sockets()
        import psutil

        self.proc = psutil.Process()
        config = self.config  # its liveness checks begin here (`_loop`), the info file with them
        self.idle = IdleExit(config.name, config.idle_exit_s, config.managed, time.monotonic())
        self._write_info()
        log.info(
            "loader %s: %d samples, batches of %d, %d workers, %d slots of %.1f MiB",
            self.config.name,
            length,
            batch_size,
            self.config.workers,
            len(self.table.slots),
            self.table.slot_bytes / 2**20,
        )
        if self.say is not None and not self.stopping:  # not told to stop while it prepared
            self.say(serving_line(self, length, batch_size))
        try:
            return self._loop()
        finally:
            self._close()

    def _prepare(self) -> tuple[Any, int]:
        """What the settings alone decide, before the ring and the sockets are opened: the
        sockets' paths, the dataset, its selection and its length. A LoaderError here is final
        (`run`): the same settings would fail again, so the producer is not worth starting
        again."""
        self.config.check()
        check_socket_paths(self.config.name, self.home)
        dataset, length = open_dataset(self.config)
        cpu_before = time.process_time()
        if self.config.selection:
            write_preparing(self, f"data selection {self.config.selection}")
        self.selection = self._select(dataset) if self.config.selection else None
        self.selection_cpu_s = time.process_time() - cpu_before  # not loading: kept apart
        return dataset, (self.selection.kept if self.selection is not None else length)

    def _start_loading(self, dataset: Any, batch_size: int) -> None:
        """Open the ring, start the DataLoader on the plan and place its first batch (which
        lays the ring out)."""
        import torch
        from torch.utils.data import DataLoader

        torch.set_num_threads(1)  # the producer hands out batches; its workers decode
        self.ring = Ring.create(f"gpudesk-{self.config.name}")
        self.table = SlotTable(self.ring, self.config.slots, batch_size)
        self.table.grow(self._slots_needed())
        workers = self.config.workers
        # The batch sampler yields requests, not index lists, and the dataset answers them
        # with a Packed batch (fetch.py): the DataLoader only carries them to and fro.
        # A dataset that decodes on the GPU is fetched encoded and decoded here (device_decode).
        self.decoder = decoder_for(dataset, self.config.device)
        source = self.decoder.source() if self.decoder else Source(dataset, self.ring_writer())
        loader: Any = DataLoader(
            cast(Any, source),
            batch_sampler=cast(Any, self.plan),
            collate_fn=cast(Any, passthrough),
            num_workers=workers,
            persistent_workers=workers > 0,
            prefetch_factor=PREFETCH if workers > 0 else None,
        )
        self.batches: Iterator[Packed] = iter(loader)
        # torch's own watch raises from wherever a worker's death finds the producer, even one
        # that a SIGTERM to the whole process group stops with it (workers.py).
        self.watch = WorkerWatch.of(self.batches, self._worker_stopped)
        self._pull()

    def ring_writer(self) -> RingWriter:
        return RingWriter(os.getpid(), self.ring.fd)

    def _slots_needed(self) -> int:
        """Enough for the requests in flight, what every consumer may hold and have kept for
        it, and one more: then a consumer with room always finds a free slot."""
        in_flight = PREFETCH * self.config.workers or 1
        shares = sum(2 * c.cap for c in self.consumers.values())
        return max(self.config.slots, in_flight + 1 + shares)

    def _needed(self, key: Key) -> bool:
        consumers = self.consumers.values()
        return not consumers or any(c.wants_later(key) for c in consumers)

    def _reserve(self) -> tuple[int | None, tuple[tuple[int, int], ...]]:
        slot = self.table.reserve()
        return slot, (() if slot is None else self.table.request_regions(slot))

    def _open_sockets(self) -> None:
        """The control socket consumers talk to, and the socket that hands them the ring's fd."""
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self.ctl = context.socket(zmq.ROUTER)
        self.ctl.setsockopt(zmq.ROUTER_MANDATORY, 1)  # an unknown peer raises, never drops
        self.ctl.setsockopt(zmq.SNDHWM, 4 * self.config.slots + 64)  # above what can queue
        self.ctl.setsockopt(zmq.RCVHWM, 0)
        self.ctl.setsockopt(zmq.LINGER, 0)
        self.ctl.bind(f"ipc://{self.ctl_path}")
        self.fd_server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.fd_server.bind(str(self.fd_path))
        self.fd_server.listen(16)
        open_sockets_to((self.ctl_path, self.fd_path), self.home, self.config.share)
        self.fd_server.setblocking(False)
        self.poller = zmq.Poller()
        self.poller.register(self.ctl, zmq.POLLIN)
        self.poller.register(self.fd_server, zmq.POLLIN)

    def _select(self, dataset: Any) -> Any:
        chosen, self.selection_cache = select_data(self.config, self.home, dataset)
        return chosen

    # ------------------------------------------------------------------- loop
    def _loop(self) -> int:
        last_check = time.monotonic()
        while not self.stopping:
            pull = bool(self.consumers) and self._wants_pull()
            # Block on the control socket until something happens, or until the next liveness
            # check (or a hold's next reckoning): the loop never spins.
            wake = last_check + LIVENESS_EVERY_S - time.monotonic()
            if any(c.holding_since is not None for c in self.consumers.values()):
                wake = min(wake, HOLD_PATIENCE_S / 10)
            wait_ms = 0 if pull else max(1, int(1000 * wake))
            events = dict(self.poller.poll(wait_ms))
            self._check_workers()
            if self.ctl in events:
                self._drain_control()
            if self.fd_server.fileno() in events:
                self._serve_fd()
            now = time.monotonic()
            if now - last_check >= LIVENESS_EVERY_S:
                last_check = now
                self._check_consumers()
                if self.idle.stops(bool(self.consumers), now):
                    break
            if time.time() - self.last_info >= INFO_EVERY_S:
                self._write_info()
            self._dispatch()
            if self.consumers and self._wants_pull():
                self._pull()  # waits for the workers: only when a consumer has room for it
                self._dispatch()
        return 0

    def _wants_pull(self) -> bool:
        """Whether to take the next batch from the DataLoader: one in flight, or the one it will
        ask for next, would go to a consumer now (a make-up ordered, or room for it), and no
        consumer that keeps pace would lose a batch for it. Pulling also asks for the next one;
        so a stream nobody reads is not made further."""
        consumers = self.consumers.values()
        keys = [r.key for r, _ in self.plan.in_flight] + [self.plan.peek()]
        wanted = bool(self.plan.makeups) or any(
            any(key in c.ordered or c.accepts(key) for c in consumers) for key in keys
        )
        return wanted and not hold(self, keys[0])

    def _pull(self) -> None:
        """Take the next made batch from the DataLoader and place it."""
        packed = self._next_batch()
        if packed is None:
            return  # a worker was stopped, the producer with it
        if self.decoder is not None:
            packed = self.decoder.finish(cast(Any, packed))
        request, makeup = self.plan.in_flight.popleft()
        assert packed.key == request.key, (packed.key, request.key)
        self.produced += 1
        self.makeups_produced += makeup
        slot = request.slot if request.slot is not None else self.table.take_free()
        if slot is None:
            self.unplaced.append((packed, makeup))
            return
        self._place(slot, packed)

    def _next_batch(self) -> Packed | None:
        """The DataLoader's next batch; None where a worker died of a stop signal meanwhile
        (the producer stops: the batch would never come). A worker that failed raises
        LoaderError."""
        watch = self.watch
        if watch is None:
            return next(self.batches)
        try:
            with watch.interruptible():
                return next(self.batches)
        except (WorkerGone, RuntimeError):
            # torch's wait for the batch turns WorkerGone into its RuntimeError "exited
            # unexpectedly", and raises that itself too, 5 s on, for a worker it sees dead.
            watch.look()
            if self.stopping:
                return None
            self._check_workers()
            raise

    def _worker_stopped(self, end: WorkerEnd) -> None:
        """A worker was killed by a stop signal (workers.py): the producer stops as if told
        to itself. The signal may well be on its way to it too (to the whole process group),
        in no set order."""
        if not self.stopping:
            log.warning(
                "loader %s: its DataLoader worker (pid %d) %s: stopping",
                self.config.name,
                end.pid,
                end.how(),
            )
            self.stopped_by = f"its DataLoader worker (pid {end.pid}) {end.how()}"
        self.stopping = True

    def _check_workers(self) -> None:
        """Fail for a worker that died, unless the producer stops anyway."""
        watch = self.watch
        if watch is not None and watch.failure is not None and not self.stopping:
            raise LoaderError(watch.failure.failure(self.config.name))

    def _place(self, slot: int, packed: Packed) -> None:
        try:
            meta = self.table.place(slot, packed)
        except (BatchError, RuntimeError) as exc:
            raise LoaderError(f"loader {self.config.name}: {exc}") from None
        assert self.ring.base is not None
        self.gens[slot] = self.staging.stage(self.ring.base, meta, self.ring.end, packed.loose)
        key = packed.key
        consumers = list(self.consumers.values())
        for consumer in consumers:
            self._feed(consumer)  # in order: what it lacks from before goes first
            if consumer.epoch == key[0] and not consumer.has(key):
                consumer.missing.add(key)  # it had no room: the look-back, or a make-up
        for consumer in consumers:
            if consumer.wants_later(key):
                self.table.pin(slot, consumer.ident, consumer.cap)

    def _feed(self, consumer: ConsumerState) -> None:
        """Give it what it takes of the batches in the ring, oldest first."""
        where = self.table.where
        if consumer.room() <= 0 and not (consumer.ordered and consumer.ordered & where.keys()):
            return
        for key in sorted(k for k in where if k in consumer.ordered or consumer.accepts(k)):
            if key in where and (key in consumer.ordered or consumer.accepts(key)):
                slot = where[key]
                meta = self.table.slots[slot].meta
                assert meta is not None
                self._give(consumer, slot, meta)

    def _give(self, consumer: ConsumerState, slot: int, meta: BatchMeta) -> None:
        state = self.table.slots[slot]
        key = state.key
        assert key is not None
        staged, consumer.mirror_gen = self.staging.batch_fields(
            self.gens.get(slot, 0), consumer.mirror_gen
        )
        fields = {"slot": slot, "key": list(key), "n": meta.count, "meta": meta.to_wire()}
        message = encode("batch", **fields, t=time.time(), **staged)
        try:
            self.ctl.send_multipart([consumer.ident, message])
        except zmq.ZMQError:  # it went away between the check and now
            self._drop(consumer, "its socket is gone")
            return
        self.table.unpin(slot, consumer.ident)
        state.refs += 1
        consumer.held.add(slot)
        consumer.ordered.discard(key)
        consumer.missing.discard(key)
        consumer.got.setdefault(key[0], set()).add(key[1])
        consumer.delivered += 1
        self.delivered_total += 1
        consumer.position = key
        consumer.times.append(time.monotonic())
        while len(consumer.got.get(consumer.epoch, ())) >= self.plan.per_epoch:
            self._next_epoch(consumer)

    def _next_epoch(self, consumer: ConsumerState) -> None:
        """It has been given every batch of its epoch: on to the next one, noting what of it
        the stream has already passed."""
        consumer.got.pop(consumer.epoch, None)
        consumer.epoch += 1
        consumer.missing = self._passed(consumer)
        if not consumer.keeps_pace and not consumer.missing:
            consumer.keeps_pace = True  # it caught up with the stream

    def _passed(self, consumer: ConsumerState) -> set[Key]:
        """The batches of its epoch the stream has passed and it was not given."""
        epoch = consumer.epoch
        position = self.plan.stream_next
        end = (
            self.plan.per_epoch
            if position[0] > epoch
            else position[1]
            if position[0] == epoch
            else 0
        )
        coming = self.plan.coming() | {p.key for p, _ in self.unplaced}
        got = consumer.got.get(epoch, set())
        return {(epoch, j) for j in range(end) if j not in got and (epoch, j) not in coming}

    def _dispatch(self) -> None:
        """Give consumers with room what they take from the ring, and order what they lack."""
        self._follow()
        while self.unplaced:
            slot = self.table.take_free()
            if slot is None:
                break
            packed, _ = self.unplaced.popleft()
            self._place(slot, packed)
        for consumer in list(self.consumers.values()):
            self._feed(consumer)
            self._order_makeups(consumer)

    def _follow(self) -> None:
        """Keep the stream where it is of use. When no consumer reads its epoch or the one
        before any more (the ones that did left; those left behind lag), it goes back to the
        earliest batch one of them lacks: they take the stream again, instead of make-ups beside
        a stream nobody reads. When everyone is past it (a restarted producer continues from
        the position last written down, a second old), it goes on to where they are."""
        head = self.plan.stream_next
        consumers = self.consumers.values()
        if not consumers:
            return
        start = min((c.epoch, c.first_gap(self.plan.per_epoch)) for c in consumers)
        behind = head < start
        if start == head or not (behind or all(head[0] > c.epoch + 1 for c in consumers)):
            return
        log.info("loader %s: the stream moves from %s to %s", self.config.name, head, start)
        self.plan.stream_next = start
        self.plan.makeups = deque(k for k in self.plan.makeups if k < start)
        for consumer in consumers:
            consumer.missing = {k for k in consumer.missing if k < start}
            consumer.keeps_pace = True  # the stream is theirs again

    def _order_makeups(self, consumer: ConsumerState) -> None:
        """Ask the DataLoader again for what it lacks of its epoch and is nowhere at hand; as
        much as it has room for."""
        room = consumer.room()
        if room <= 0 or not consumer.missing:
            return
        coming: set[Key] | None = None
        where = self.table.where
        for key in heapq.nsmallest(room + len(consumer.ordered), consumer.missing):
            if room <= 0:
                break
            if key in consumer.ordered or key in where:
                continue
            if coming is None:
                coming = self.plan.coming() | {p.key for p, _ in self.unplaced}
            if key not in coming:
                self.plan.makeups.append(key)
            consumer.ordered.add(key)
            room -= 1

    # ---------------------------------------------------------------- control
    def _drain_control(self) -> None:
        while True:
            try:
                ident, raw = self.ctl.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except ValueError:
                continue
            try:
                message = decode(raw)
            except LoaderError as exc:
                log.warning("loader %s: %s", self.config.name, exc)
                continue
            kind = message["type"]
            if kind == "hello" and self.stopping:  # told to stop: it would not serve it
                refuse(self, ident, stop_reason(self), stopping=True)
            elif kind == "hello":
                hello(self, ident, message)
            elif kind == "release":
                consumer = self.consumers.get(ident)
                if consumer is not None:
                    for slot in released(message):
                        if slot in consumer.held:
                            consumer.held.discard(slot)
                            self.table.slots[slot].refs -= 1
            elif kind == "path":
                consumer = self.consumers.get(ident)
                if consumer is not None:
                    consumer.data_path = str(message.get("path"))[:200]
            elif kind == "bye":
                consumer = self.consumers.get(ident)
                if consumer is not None:
                    self._drop(consumer, "it said goodbye")
            elif kind == "status":
                with contextlib.suppress(zmq.ZMQError):
                    self.ctl.send_multipart([ident, encode("status", **self.status())])

    def stream_position(self) -> Key:
        """The first stream key not yet made: consumers joining now get it next."""
        pending = [r.key for r, makeup in self.plan.in_flight if not makeup]
        pending += [p.key for p, makeup in self.unplaced if not makeup]
        return min(pending) if pending else self.plan.stream_next

    def _serve_fd(self) -> None:
        share, group = self.config.share, self.group
        hand_out_ring(self.fd_server, self.ring.reader_fd, self.config.name, share, group)

    def _check_consumers(self) -> None:
        for consumer in list(self.consumers.values()):
            if not process_alive(consumer.pid, consumer.started):
                self._drop(consumer, "its process died")

    def _drop(self, consumer: ConsumerState, why: str) -> None:
        for slot in consumer.held:
            self.table.slots[slot].refs -= 1
        consumer.held.clear()
        self.table.unpin_all(consumer.ident)
        self.consumers.pop(consumer.ident, None)
        self._cancel_makeups()
        log.info("loader %s: consumer pid %d left (%s)", self.config.name, consumer.pid, why)

    def _cancel_makeups(self) -> None:
        """Make-ups that no consumer left ordered are not made. A consumer that lacks one too
        did not order it: it was coming (`_passed`), so it is missing to it again, to order at
        its own pace; else it would wait for ever for a batch nobody makes (a consumer that
        joined, or resumed, while one that left had its make-ups queued)."""
        wanted = {k for c in self.consumers.values() for k in c.ordered}
        cancelled = [k for k in self.plan.makeups if k not in wanted]
        self.plan.makeups = deque(k for k in self.plan.makeups if k in wanted)
        for consumer in self.consumers.values():
            consumer.missing.update(
                k for k in cancelled if k[0] == consumer.epoch and not consumer.has(k)
            )

    # ----------------------------------------------------------------- status
    def status(self) -> dict[str, Any]:
        return status_report(self)

    def _write_info(self) -> None:
        self.last_info = time.time()
        write_serving(self)

    def _close(self) -> None:
        say_stopping(self)
        message = encode("bye", message=f"the producer for {self.config.name!r} is stopping")
        for consumer in list(self.consumers.values()):
            with contextlib.suppress(zmq.ZMQError):
                self.ctl.send_multipart([consumer.ident, message])
        self.ctl.close(linger=200)
        self.fd_server.close()
        self.staging.close()
        shutdown = getattr(self.batches, "_shutdown_workers", None)
        if callable(shutdown):
            shutdown()
        for path in (self.ctl_path, self.fd_path, self.info_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def serve(config: ProducerConfig, home: Home, say: Callable[[str], None] | None = None) -> int:
    """Run the producer until it stops; its exit status. `say`: where a producer run by hand
    says that it serves, and why it stopped (None: it says nothing, its log has warnings)."""
    producer = Producer(config, home)
    producer.say = say

    def stop(signum: int, _frame: object) -> None:
        if not producer.stopping:
            name = signal.Signals(signum).name
            producer.stopped_by = f"{name} (Ctrl-C)" if signum == signal.SIGINT else name
        producer.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    status = producer.run()
    if say is not None:
        say(stopped_line(producer))
    return status
