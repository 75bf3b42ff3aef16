"""The producer: one process per dataset that loads each batch once for every consumer.

It builds the dataset from its factory, runs an ordinary torch DataLoader with W workers over a
stream of batches, and copies each batch once into a slot of the shared ring; every consumer
that wants the batch is told its slot and maps it. A slot is reused only when every consumer it
was given to has released it, so nothing is ever dropped; the slowest consumer can lag the
others by the ring's size before the producer waits for it.

The stream is a sequence of epochs; epoch `e` visits the dataset in the order
`randperm(len, seed + e)`, in batches `(e, 0) ... (e, B - 1)`, the same for every consumer. A
consumer sees every batch published after it joined. One that joins mid-epoch at `(e, j)`
starts at once and gets the batches it missed, `(e, 0) ... (e, j - 1)`, produced again for it
("make-ups", interleaved with the stream), so its first epoch is still every sample exactly
once. A restarted producer continues the stream where its info file says the last one was, and a
resuming consumer gets the batches of its epoch it had not received as make-ups.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import logging
import math
import os
import signal
import socket
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import zmq

from gpudesk.loader.protocol import (
    LoaderError,
    check_name,
    decode,
    encode,
    process_alive,
    read_info,
    write_info,
)
from gpudesk.loader.ring import Ring, RingError, flatten, plan_layout, unflatten
from gpudesk.paths import Home

log = logging.getLogger("gpudesk.loader")

LIVENESS_EVERY_S = 0.2  # how often consumers' processes are checked (a SIGKILL is seen in this)
INFO_EVERY_S = 1.0  # how often the stream position is written down (for a restart)
RATE_WINDOW_S = 5.0  # batches/s are measured over this window
WORKER_NICENESS = 10  # added to the DataLoader workers' niceness (see _yield_to_consumers)
Key = tuple[int, int]  # (epoch, batch within the epoch)
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes, the last a NUL


@dataclass(frozen=True)
class ProducerConfig:
    name: str
    factory: str  # "module:callable", returning a map-style torch Dataset
    factory_kwargs: dict[str, Any] = field(default_factory=dict)
    batch_size: int = 64
    workers: int = 2
    seed: int = 0
    shuffle: bool = True
    slots: int = 16
    idle_exit_s: float | None = None  # stop after this long without a consumer
    managed: bool = False  # started by the engine, which restarts it if it dies
    selection: str | None = None  # a data-selection preset (gpudesk.selection), e.g. el2n-25
    target: str | None = None  # MODULE:FACTORY of the target set a targeted preset ranks by
    target_kwargs: dict[str, Any] = field(default_factory=dict)

    def check(self) -> ProducerConfig:
        check_name(self.name)
        if ":" not in self.factory:
            raise LoaderError(
                f"--dataset {self.factory!r}: expected MODULE:FACTORY, e.g. "
                "gpudesk.workloads.images:make_dataset"
            )
        if self.batch_size < 1 or self.workers < 0 or self.slots < 4:
            raise LoaderError(
                "batch size must be at least 1, workers at least 0 and the ring at least 4 slots"
            )
        if self.selection is not None:
            from gpudesk.selection.presets import PresetError, parse_preset

            try:
                parse_preset(self.selection)
            except PresetError as exc:
                raise LoaderError(f"--selection: {exc}") from None
        if self.target is not None and ":" not in self.target:
            raise LoaderError(f"--target {self.target!r}: expected MODULE:FACTORY")
        return self

    def identity(self) -> dict[str, Any]:
        """What must match for a restarted producer to continue an old one's stream."""
        return {
            "factory": self.factory,
            "factory_kwargs": self.factory_kwargs,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "selection": self.selection,
            "target": self.target,
            "target_kwargs": self.target_kwargs,
        }


def load_factory(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise LoaderError(f"cannot import the dataset module {module_name!r}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise LoaderError(f"{module_name} has no callable {attr!r} to build the dataset")
    return factory


class BatchPlan:
    """The DataLoader's batch sampler: the stream, with make-ups slipped in between."""

    def __init__(
        self,
        length: int,
        batch_size: int,
        seed: int,
        shuffle: bool,
        start: Key = (0, 0),
        subset: Callable[[int], Sequence[int]] | None = None,
    ) -> None:
        """`length`: samples per epoch; `subset(epoch)`, when given, names them (a data
        selection), else they are 0 .. length - 1."""
        self.length, self.batch_size, self.seed, self.shuffle = length, batch_size, seed, shuffle
        self.subset = subset
        self.per_epoch = math.ceil(length / batch_size)
        self.stream_next: Key = start  # the next stream key to hand to the DataLoader
        self.makeups: deque[Key] = deque()
        self.in_flight: deque[tuple[Key, bool]] = deque()  # (key, is a make-up), in order
        self._last_makeup = False
        self._orders: dict[int, list[int]] = {}

    def order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            import torch

            if self.shuffle:
                generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
                self._orders[epoch] = torch.randperm(self.length, generator=generator).tolist()
            else:
                self._orders[epoch] = list(range(self.length))
            if self.subset is not None:
                chosen = self.subset(epoch)
                self._orders[epoch] = [int(chosen[i]) for i in self._orders[epoch]]
            for old in [e for e in self._orders if e < epoch - 2]:
                del self._orders[old]  # make-ups reach back one epoch at most, resumes two
        return self._orders[epoch]

    def indices(self, key: Key) -> list[int]:
        epoch, index = key
        return self.order(epoch)[index * self.batch_size : (index + 1) * self.batch_size]

    def advance(self, key: Key) -> Key:
        epoch, index = key
        return (epoch, index + 1) if index + 1 < self.per_epoch else (epoch + 1, 0)

    def __iter__(self) -> Iterator[list[int]]:
        while True:
            # Make-ups take turns with the stream, but once the stream has left a make-up's
            # epoch they go first: its consumer cannot finish that epoch without them, and every
            # later stream batch it is given meanwhile holds a slot until it does.
            if self.makeups and (not self._last_makeup or self.makeups[0][0] < self.stream_next[0]):
                key, makeup = self.makeups.popleft(), True
            else:
                key, makeup = self.stream_next, False
                self.stream_next = self.advance(key)
            self._last_makeup = makeup
            self.in_flight.append((key, makeup))
            yield self.indices(key)


@dataclass
class _Consumer:
    ident: bytes
    pid: int
    create_time: float | None
    batch_size: int
    epoch: int  # the producer epoch its current epoch follows
    joined_at: float
    wants: set[Key] = field(default_factory=set)  # make-ups still to deliver to it
    held: set[int] = field(default_factory=set)  # slots delivered and not released
    delivered: int = 0
    position: Key | None = None  # the last key delivered
    times: deque[float] = field(default_factory=lambda: deque(maxlen=512))

    def rate(self, now: float) -> float:
        recent = [t for t in self.times if t >= now - RATE_WINDOW_S]
        span = min(RATE_WINDOW_S, now - self.joined_at)
        return len(recent) / span if span > 0 else 0.0


class Producer:
    def __init__(self, config: ProducerConfig, home: Home) -> None:
        self.config = config.check()
        self.home = home
        self.ctl_path, self.fd_path, self.info_path = home.loader_paths(config.name)
        longest = max((self.ctl_path, self.fd_path), key=lambda p: len(os.fsencode(p)))
        if len(os.fsencode(longest)) > MAX_SOCKET_PATH:
            raise LoaderError(
                f"the socket path {longest} is longer than a Unix socket allows "
                f"({MAX_SOCKET_PATH} bytes): use a shorter loader name, or a "
                "GPUDESK_HOME with a shorter path"
            )
        self.consumers: dict[bytes, _Consumer] = {}
        self.refs: list[int] = []  # per slot: consumers still holding it
        self.next_slot = 0
        self.stopping = False
        self.started = time.time()
        self.produced = 0
        self.makeups_produced = 0
        self.published: deque[tuple[Key, bool, Any]] = deque()  # produced, waiting for a slot
        self.bytes_written = 0
        self.last_info = 0.0
        self.consumers_total = 0  # consumers served over the producer's life, departed included
        self.delivered_total = 0  # batches handed to them
        self.selection: Any = None  # a gpudesk.selection.apply.DatasetSelection, if asked for
        self.selection_cache: Any = None
        self.selection_cpu_s = 0.0
        self._previous_info: dict[str, Any] | None = None
        self._first_user_paid = False  # the first job served a fresh pre-pass is not a reuse

    # ------------------------------------------------------------------ setup
    def _claim(self) -> Key:
        """Take over the name: refuse if a live producer has it; continue a dead one's stream
        when it had the same settings."""
        info = read_info(self.info_path)
        # A lock held for the producer's life: two started at once cannot both get past here
        # (the info file is written only once the first batch is made). A POSIX lock, not
        # flock: the DataLoader's forked workers do not inherit it, so a producer killed with
        # its workers still exiting can be restarted at once.
        self._lock = os.open(
            self.info_path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
        )
        try:
            fcntl.lockf(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock)
            info = read_info(self.info_path)
            raise LoaderError(
                f"a producer for {self.config.name!r} already runs "
                + (f"(pid {info['pid']})" if info and info.get("pid") else "(it is starting)")
                + "; stop it first"
            ) from None
        self._previous_info = info
        start: Key = (0, 0)
        if info is not None:
            if process_alive(int(info.get("pid", 0)), info.get("create_time")):
                raise LoaderError(
                    f"a producer for {self.config.name!r} already runs "
                    f"(pid {info['pid']}); stop it first"
                )
            if info.get("identity") == self.config.identity() and info.get("stream_next"):
                start = tuple(info["stream_next"])
        for path in (self.ctl_path, self.fd_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        return start

    def run(self) -> int:
        self.home.ensure()
        self.home.private_subdir(self.home.loader_dir)
        start = self._claim()
        dataset, length = self._open_dataset()
        cpu_before = time.process_time()
        if self.config.selection:
            self._write_preparing(f"data selection {self.config.selection}")
        self.selection = self._select(dataset) if self.config.selection else None
        self.selection_cpu_s = time.process_time() - cpu_before  # not loading: kept apart
        if self.selection is not None:
            length = self.selection.kept
        batch_size = min(self.config.batch_size, length)
        self.plan = BatchPlan(
            length,
            batch_size,
            self.config.seed,
            self.config.shuffle,
            start,
            self.selection.epoch_indices if self.selection else None,
        )
        self._start_loading(dataset, batch_size)
        self._open_sockets()
        import psutil

        self.proc = psutil.Process()
        self._write_info()
        log.info(
            "loader %s: %d samples, batches of %d, %d workers, %d slots of %.1f MiB",
            self.config.name,
            length,
            batch_size,
            self.config.workers,
            self.config.slots,
            self.ring.layout.batch_bytes / 2**20,
        )
        try:
            return self._loop()
        finally:
            self._close()

    def _open_dataset(self) -> tuple[Any, int]:
        """The factory's dataset and its length; a dataset without one, or an empty one, is
        refused with a one-line reason."""
        dataset = load_factory(self.config.factory)(**self.config.factory_kwargs)
        try:
            length = len(dataset)
        except TypeError:
            raise LoaderError(
                f"{self.config.factory} did not return a map-style dataset (it has no length)"
            ) from None
        if length < 1:
            raise LoaderError(f"{self.config.factory} returned an empty dataset")
        return dataset, length

    def _start_loading(self, dataset: Any, batch_size: int) -> None:
        """Start the DataLoader on the plan and size the ring from its first batch."""
        import torch
        from torch.utils.data import DataLoader

        torch.set_num_threads(1)  # the producer copies; its workers decode
        loader = DataLoader(
            dataset,
            batch_sampler=self.plan,
            num_workers=self.config.workers,
            worker_init_fn=_yield_to_consumers,
            persistent_workers=self.config.workers > 0,
            prefetch_factor=2 if self.config.workers > 0 else None,
        )
        self.batches: Iterator[Any] = iter(loader)
        first_key, first_makeup, first = self._next_batch()
        tensors, _ = flatten(first)
        full = first if tensors[0].shape[0] == batch_size else None
        if full is None:  # a last, short batch came first (a tiny dataset): pad the layout
            full = _padded(first, batch_size)
        self.ring = Ring.create(
            plan_layout(full, batch_size, self.config.slots), f"gpudesk-{self.config.name}"
        )
        self.refs = [0] * self.config.slots
        self.published.append((first_key, first_makeup, first))

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
        self.fd_server.setblocking(False)
        self.poller = zmq.Poller()
        self.poller.register(self.ctl, zmq.POLLIN)
        self.poller.register(self.fd_server, zmq.POLLIN)

    def _select(self, dataset: Any) -> Any:
        """The data selection this producer serves (computed, or reused from the cache)."""
        from gpudesk.selection.apply import select
        from gpudesk.selection.cache import SelectionCache
        from gpudesk.selection.presets import PresetError

        target = None
        if self.config.target:
            try:
                target = load_factory(self.config.target)(**self.config.target_kwargs)
            except LoaderError:
                raise
            except Exception as exc:  # the user's factory: say which, without a traceback
                raise LoaderError(
                    f"the selection target {self.config.target} failed: {type(exc).__name__}: {exc}"
                ) from None
        cache = SelectionCache(self.home.selection_dir)
        try:
            chosen = select(
                dataset,
                self.config.selection or "full",
                cache,
                seed=self.config.seed,
                target=target,
                identity={"factory": self.config.factory, "kwargs": self.config.factory_kwargs},
            )
        except PresetError as exc:
            raise LoaderError(f"selection {self.config.selection}: {exc}") from None
        for problem in cache.problems:
            log.warning("loader %s: %s", self.config.name, problem)
        about = chosen.describe()
        log.info(
            "loader %s: selection %s keeps %d of %d samples (%s, %.2f s)",
            self.config.name,
            about["preset"],
            about["kept"],
            about["of"],
            "reused from the cache"
            if about["reused"]
            else "no pre-pass"
            if about["key"] is None
            else "pre-pass computed and cached",
            about["select_s"],
        )
        self.selection_cache = cache
        return chosen

    def _next_batch(self) -> tuple[Key, bool, Any]:
        batch = next(self.batches)
        key, makeup = self.plan.in_flight.popleft()
        return key, makeup, batch

    # ------------------------------------------------------------------- loop
    def _loop(self) -> int:
        last_check = time.monotonic()
        idle_since = time.monotonic()
        while not self.stopping:
            can_publish = bool(self.consumers) and self._slot_for_next() is not None
            events = dict(self.poller.poll(0 if can_publish else 50))
            if self.ctl in events:
                self._drain_control()
            if self.fd_server.fileno() in events:
                self._serve_fd()
            now = time.monotonic()
            if now - last_check >= LIVENESS_EVERY_S:
                last_check = now
                self._check_consumers()
                if self.consumers:
                    idle_since = now
                elif (
                    self.config.idle_exit_s is not None
                    and now - idle_since >= self.config.idle_exit_s
                ):
                    log.info(
                        "loader %s: no consumer for %.0f s, stopping",
                        self.config.name,
                        self.config.idle_exit_s,
                    )
                    break
            if time.time() - self.last_info >= INFO_EVERY_S:
                self._write_info()
            if self.consumers:
                self._publish_ready()
        return 0

    def _slot_for_next(self) -> int | None:
        """A free slot for the next batch, keeping enough back for pending make-ups so that a
        consumer finishing its epoch is never stuck behind batches of its next one."""
        free = [i for i in range(len(self.refs)) if self.refs[i] == 0]
        if not free:
            return None
        needs_makeup = [c for c in self.consumers.values() if c.wants]
        head_is_makeup = bool(self.published) and self.published[0][1]
        if needs_makeup and not head_is_makeup:
            reserve = max(math.ceil(c.batch_size / self.plan.batch_size) for c in needs_makeup)
            if len(free) <= reserve:
                return None
        for offset in range(len(self.refs)):  # round robin keeps slots adjacent in order
            slot = (self.next_slot + offset) % len(self.refs)
            if self.refs[slot] == 0:
                return slot
        return None

    def _publish_ready(self) -> None:
        # Keep a few produced batches at hand so a make-up behind a stream batch that is
        # waiting for a slot can go first.
        while len(self.published) < 2 + 2 * self.config.workers or self._makeups_stuck():
            self.published.append(self._next_batch())
            self.produced += 1
        for position, (key, makeup, batch) in enumerate(self.published):
            recipients = self._recipients(key, makeup)
            if not recipients:
                del self.published[position]
                return  # a make-up nobody wants any more (its consumer left)
            if not makeup and position > 0:
                continue  # stream batches go in order; a make-up further back may still go
            slot = self._slot_for_next() if not makeup else self._any_free_slot()
            if slot is None:
                continue  # a make-up further back may still fit the reserve
            del self.published[position]
            self._publish(slot, key, makeup, batch, recipients)
            return

    def _makeups_stuck(self) -> bool:
        """True when the batches at hand are all stream batches that may not take the free
        slots, while a consumer waits for make-ups still behind them in the DataLoader (pulled
        ahead before it joined): then pull past them, or nothing would ever move."""
        if any(makeup for _, makeup, _ in self.published):
            return False
        if not any(c.wants for c in self.consumers.values()):
            return False
        if not self.plan.makeups and not any(makeup for _, makeup in self.plan.in_flight):
            return False
        return self._slot_for_next() is None and self._any_free_slot() is not None

    def _any_free_slot(self) -> int | None:
        for offset in range(len(self.refs)):
            slot = (self.next_slot + offset) % len(self.refs)
            if self.refs[slot] == 0:
                return slot
        return None

    def _recipients(self, key: Key, makeup: bool) -> list[_Consumer]:
        if makeup:
            return [c for c in self.consumers.values() if key in c.wants]
        return list(self.consumers.values())

    def _publish(
        self, slot: int, key: Key, makeup: bool, batch: Any, recipients: list[_Consumer]
    ) -> None:
        import torch

        tensors, _ = flatten(batch)
        ids = torch.tensor(self.plan.indices(key), dtype=torch.int64)
        try:
            count = self.ring.write(slot, tensors, ids)
        except RingError as exc:
            raise LoaderError(f"loader {self.config.name}: {exc}") from None
        self.bytes_written += sum(t.numel() * t.element_size() for t in tensors) + ids.numel() * 8
        self.next_slot = (slot + 1) % len(self.refs)
        if makeup:
            self.makeups_produced += 1
        # t: when it was sent (wall clock), so a consumer can tell how long the hand-off took
        message = encode("batch", slot=slot, n=count, key=list(key), t=time.time())
        now = time.monotonic()
        for consumer in recipients:
            if makeup:
                consumer.wants.discard(key)
            try:
                self.ctl.send_multipart([consumer.ident, message])
            except zmq.ZMQError:  # it went away between the check and now
                self._drop(consumer, "its socket is gone")
                continue
            self.refs[slot] += 1
            consumer.held.add(slot)
            consumer.delivered += 1
            self.delivered_total += 1
            consumer.position = key
            if not makeup and not consumer.wants:  # it has all of its earlier epochs
                consumer.epoch = max(consumer.epoch, key[0])
            consumer.times.append(now)

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
            if kind == "hello":
                self._hello(ident, message)
            elif kind == "release":
                consumer = self.consumers.get(ident)
                if consumer is not None:
                    for slot in message.get("slots", ()):
                        if slot in consumer.held:
                            consumer.held.discard(slot)
                            self.refs[slot] -= 1
            elif kind == "bye":
                consumer = self.consumers.get(ident)
                if consumer is not None:
                    self._drop(consumer, "it said goodbye")
            elif kind == "status":
                with contextlib.suppress(zmq.ZMQError):
                    self.ctl.send_multipart([ident, encode("status", **self.status())])

    def _hello(self, ident: bytes, message: dict[str, Any]) -> None:
        try:
            pid = int(message["pid"])
            batch_size = int(message.get("batch_size") or self.plan.batch_size)
        except (KeyError, TypeError, ValueError):
            self._refuse(ident, "a hello without a pid")
            return
        per_slot = self.plan.batch_size
        if batch_size < 1 or math.ceil(batch_size / per_slot) > len(self.refs) // 2:
            self._refuse(
                ident,
                f"a batch of {batch_size} needs more than half of the ring "
                f"({len(self.refs)} slots of {per_slot}); start the producer with "
                "--slots larger or --batch-size larger",
            )
            return
        import psutil

        try:
            create_time = psutil.Process(pid).create_time()
        except psutil.Error:
            create_time = None
        resume = message.get("resume") or None
        self._note_reuse(message.get("job"), pid, resumed=bool(resume))
        stream_next = self._stream_position()
        epoch = stream_next[0]
        received: set[Key] = set()
        if resume:
            epoch = int(resume["epoch"])
            received = {
                (int(e), int(j)) for e, js in resume.get("received", {}).items() for j in js
            }
        # Everything of its epochs that the stream has already passed, it gets made up.
        wants = {
            (e, j)
            for e in range(epoch, stream_next[0] + 1)
            for j in range(self.plan.per_epoch)
            if (e, j) < stream_next and (e, j) not in received
        }
        consumer = _Consumer(
            ident, pid, create_time, batch_size, epoch, time.monotonic(), wants=wants
        )
        self.consumers[ident] = consumer
        self.consumers_total += 1
        coming = (
            set(self.plan.makeups)
            | {k for k, makeup in self.plan.in_flight if makeup}
            | {k for k, makeup, _ in self.published if makeup}
        )
        self.plan.makeups.extend(sorted(wants - coming))
        self.ctl.send_multipart(
            [
                ident,
                encode(
                    "welcome",
                    layout=self.ring.layout.to_dict(),
                    epoch=epoch,
                    batches_per_epoch=self.plan.per_epoch,
                    dataset_len=self.plan.length,
                    pid=os.getpid(),
                    create_time=self.proc.create_time(),
                    fd_socket=str(self.fd_path),
                    makeups=len(wants),
                    managed=self.config.managed,
                ),
            ]
        )
        log.info(
            "loader %s: consumer pid %d joined at %s (batch %d, %d make-ups)",
            self.config.name,
            pid,
            stream_next,
            batch_size,
            len(wants),
        )

    def _note_reuse(self, job: Any, pid: int, resumed: bool) -> None:
        """Record, in the selection cache, that a job trains on this selection's pre-pass."""
        chosen = self.selection.selection if self.selection is not None else None
        if chosen is None or chosen.key is None or resumed:
            return
        if not chosen.reused and not self._first_user_paid:
            self._first_user_paid = True  # it paid for the pre-pass
            return
        who = f"job {job}" if job else f"pid {pid}"
        try:
            self.selection_cache.note_reuse(chosen.key, f"{who} via loader {self.config.name}")
        except (OSError, ValueError) as exc:
            log.warning(
                "loader %s: could not record the reuse of %s: %s", self.config.name, chosen.key, exc
            )

    def _stream_position(self) -> Key:
        """The first stream key not yet given to anyone: consumers joining now get it next."""
        pending = [k for k, makeup, _ in self.published if not makeup]
        pending += [k for k, makeup in self.plan.in_flight if not makeup]
        return min(pending) if pending else self.plan.stream_next

    def _refuse(self, ident: bytes, why: str) -> None:
        with contextlib.suppress(zmq.ZMQError):
            self.ctl.send_multipart([ident, encode("refused", message=why)])

    def _serve_fd(self) -> None:
        while True:
            try:
                conn, _ = self.fd_server.accept()
            except (BlockingIOError, InterruptedError):
                return
            with conn:
                conn.settimeout(1.0)
                with contextlib.suppress(OSError):
                    socket.send_fds(conn, [b"ring"], [self.ring.fd])

    def _check_consumers(self) -> None:
        for consumer in list(self.consumers.values()):
            if not process_alive(consumer.pid, consumer.create_time):
                self._drop(consumer, "its process died")

    def _drop(self, consumer: _Consumer, why: str) -> None:
        for slot in consumer.held:
            self.refs[slot] -= 1
        consumer.held.clear()
        self.consumers.pop(consumer.ident, None)
        orphaned = set(self.plan.makeups) - {k for c in self.consumers.values() for k in c.wants}
        self.plan.makeups = deque(k for k in self.plan.makeups if k not in orphaned)
        log.info("loader %s: consumer pid %d left (%s)", self.config.name, consumer.pid, why)

    # ----------------------------------------------------------------- status
    def status(self) -> dict[str, Any]:
        now = time.monotonic()
        cpu = 0.0
        workers = 0
        with contextlib.suppress(Exception):
            times = self.proc.cpu_times()
            cpu = times.user + times.system
            for child in self.proc.children(recursive=True):
                with contextlib.suppress(Exception):
                    child_times = child.cpu_times()
                    cpu += child_times.user + child_times.system
                    workers += 1
        cpu = max(0.0, cpu - self.selection_cpu_s)
        chosen = None
        if self.selection is not None:
            chosen = {**self.selection.describe(), "cpu_s": round(self.selection_cpu_s, 3)}
        return {
            "name": self.config.name,
            "pid": os.getpid(),
            "dataset": self.config.factory,
            "dataset_len": self.plan.length,
            "batch_size": self.plan.batch_size,
            "batches_per_epoch": self.plan.per_epoch,
            "workers": self.config.workers,
            "worker_processes": workers,
            "seed": self.config.seed,
            "stream": list(self._stream_position()),
            "produced": self.produced,
            "makeups_produced": self.makeups_produced,
            "bytes_written": self.bytes_written,
            "consumers_total": self.consumers_total,
            "delivered_total": self.delivered_total,
            "slots": len(self.refs),
            "slots_used": sum(1 for r in self.refs if r),
            "slot_bytes": self.ring.layout.batch_bytes,
            "cpu_s": round(cpu, 3),
            "uptime_s": round(time.time() - self.started, 3),
            "managed": self.config.managed,
            "selection": chosen,  # its CPU is not counted in cpu_s (loading)
            "consumers": [
                {
                    "pid": c.pid,
                    "batch_size": c.batch_size,
                    "epoch": c.epoch,
                    "position": list(c.position) if c.position else None,
                    "delivered": c.delivered,
                    "batches_per_s": round(c.rate(now), 2),
                    "held_slots": len(c.held),
                    "makeups_left": len(c.wants),
                }
                for c in self.consumers.values()
            ],
        }

    def _write_preparing(self, what: str) -> None:
        """Say, before a long preparation (a selection's pre-pass), that this producer is
        coming: consumers wait for it instead of giving up. The stream position of the
        producer before it is kept, for a restart after a failure here."""
        import psutil

        kept = {
            key: value
            for key, value in (self._previous_info or {}).items()
            if key in ("identity", "stream_next")
        }
        write_info(
            self.info_path,
            {
                **kept,
                "name": self.config.name,
                "pid": os.getpid(),
                "create_time": psutil.Process().create_time(),
                "preparing": what,
                "managed": self.config.managed,
                "started_at": self.started,
            },
        )

    def _write_info(self) -> None:
        self.last_info = time.time()
        write_info(
            self.info_path,
            {
                "name": self.config.name,
                "pid": os.getpid(),
                "create_time": self.proc.create_time(),
                "control": f"ipc://{self.ctl_path}",
                "fd_socket": str(self.fd_path),
                "identity": self.config.identity(),
                "stream_next": list(self._stream_position()),
                "managed": self.config.managed,
                "started_at": self.started,
            },
        )

    def _close(self) -> None:
        message = encode("bye", message=f"the producer for {self.config.name!r} is stopping")
        for consumer in list(self.consumers.values()):
            with contextlib.suppress(zmq.ZMQError):
                self.ctl.send_multipart([consumer.ident, message])
        self.ctl.close(linger=200)
        self.fd_server.close()
        for path in (self.ctl_path, self.fd_path, self.info_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _yield_to_consumers(_worker_id: int) -> None:
    """Decode workers are throughput work; the consumers they feed and the producer's hand-off
    are the latency path. A little lower priority lets a waking consumer take a core from a
    busy worker at once instead of waiting out its time slice."""
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)


def _padded(batch: Any, batch_size: int) -> Any:
    """A batch shaped as a full one, for laying out the ring."""
    import torch

    tensors, structure = flatten(batch)
    grown = [torch.zeros((batch_size, *t.shape[1:]), dtype=t.dtype) for t in tensors]
    return unflatten(structure, grown)


def serve(config: ProducerConfig, home: Home) -> int:
    producer = Producer(config, home)

    def stop(signum: int, _frame: object) -> None:
        producer.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return producer.run()
