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
time. A consumer that needs more is let go: the stream no longer waits for it, it gets what is
still in the ring, and what it lacks beyond that is made again for it, at its own pace (until it
catches up). No consumer waits longer than that for another's pace, and the ring stays bounded.
"""

from __future__ import annotations

import contextlib
import fcntl
import heapq
import importlib
import logging
import math
import os
import signal
import socket
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import zmq

from gpudesk.loader.batch import BatchError, BatchMeta, Packed
from gpudesk.loader.fetch import Key, Request, RingWriter, Source, batch_seed, passthrough
from gpudesk.loader.protocol import (
    LoaderError,
    check_name,
    decode,
    encode,
    process_alive,
    read_info,
    write_info,
)
from gpudesk.loader.ring import Ring
from gpudesk.loader.slots import SlotTable
from gpudesk.paths import Home

log = logging.getLogger("gpudesk.loader")

LIVENESS_EVERY_S = 0.2  # how often consumers' processes are checked (a SIGKILL is seen in this)
INFO_EVERY_S = 1.0  # how often the stream position is written down (for a restart)
RATE_WINDOW_S = 5.0  # batches/s are measured over this window
LOOKAHEAD = 2  # batches a consumer may have waiting beyond the ones it is reading
HOLD_PATIENCE_S = 0.5  # the longest the stream waits at once for a consumer that lags
HOLD_WINDOW_S = 5.0  # ... and over this window (decaying) at most HOLD_SHARE of the time
HOLD_SHARE = 0.1
ORDERS_KEPT = 8  # epochs whose shuffled order is kept at hand (a laggard may reach back)
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes, the last a NUL
PREFETCH = 2  # the DataLoader's prefetch_factor: requests in flight per worker


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
            from gpudesk.selection.preset_names import PresetError, parse_preset

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
    """The DataLoader's batch sampler: the stream, with make-ups slipped in between.

    Each request it yields carries the batch's seed and the ring slot reserved for it
    (`reserve`, the producer's), so the worker can write the batch in place."""

    def __init__(
        self,
        length: int,
        batch_size: int,
        seed: int,
        shuffle: bool,
        start: Key = (0, 0),
        subset: Callable[[int], Sequence[int]] | None = None,
        reserve: Callable[[], tuple[int | None, tuple[tuple[int, int], ...]]] | None = None,
        needed: Callable[[Key], bool] | None = None,
    ) -> None:
        """`length`: samples per epoch; `subset(epoch)`, when given, names them (a data
        selection), else they are 0 .. length - 1."""
        self.length, self.batch_size, self.seed, self.shuffle = length, batch_size, seed, shuffle
        self.subset = subset
        self.reserve = reserve
        self.needed = needed  # whether a stream batch is of use to anyone (else it is skipped)
        self.per_epoch = math.ceil(length / batch_size)
        self.stream_next: Key = start  # the next stream key to hand to the DataLoader
        self.makeups: deque[Key] = deque()
        self.in_flight: deque[tuple[Request, bool]] = deque()  # (request, is a make-up), in order
        self._last_makeup = False
        self._orders: OrderedDict[int, list[int]] = OrderedDict()

    def order(self, epoch: int) -> list[int]:
        if epoch in self._orders:
            self._orders.move_to_end(epoch)
            return self._orders[epoch]
        import torch

        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            order = torch.randperm(self.length, generator=generator).tolist()
        else:
            order = list(range(self.length))
        if self.subset is not None:
            chosen = self.subset(epoch)
            order = [int(chosen[i]) for i in order]
        self._orders[epoch] = order
        while len(self._orders) > ORDERS_KEPT:
            self._orders.popitem(last=False)
        return order

    def indices(self, key: Key) -> list[int]:
        epoch, index = key
        return self.order(epoch)[index * self.batch_size : (index + 1) * self.batch_size]

    def advance(self, key: Key) -> Key:
        epoch, index = key
        return (epoch, index + 1) if index + 1 < self.per_epoch else (epoch + 1, 0)

    def request(self, key: Key) -> Request:
        slot, regions = self.reserve() if self.reserve is not None else (None, ())
        return Request(key, tuple(self.indices(key)), batch_seed(self.seed, *key), slot, regions)

    def peek(self) -> Key:
        """The key the next request will be for."""
        return self.makeups[0] if self.makeups and not self._last_makeup else self._next_stream()

    def _next_stream(self) -> Key:
        """The stream's next key, past what everyone already has (after a rewind, a restart)."""
        key = self.stream_next
        for _ in range(3 * self.per_epoch):  # a consumer needs all of its epoch after next
            if self.needed is None or self.needed(key):
                break
            key = self.advance(key)
        return key

    def coming(self) -> set[Key]:
        """Batches asked for and not yet made."""
        return set(self.makeups) | {r.key for r, _ in self.in_flight}

    def __iter__(self) -> Iterator[Request]:
        while True:
            # Make-ups take turns with the stream: a consumer that lags gets its batches at its
            # own pace, and the stream goes on meanwhile for the others.
            if self.makeups and not self._last_makeup:
                key, makeup = self.makeups.popleft(), True
            else:
                key, makeup = self._next_stream(), False
                self.stream_next = self.advance(key)
            self._last_makeup = makeup
            request = self.request(key)
            self.in_flight.append((request, makeup))
            yield request


@dataclass
class _Consumer:
    ident: bytes
    pid: int
    create_time: float | None
    batch_size: int
    need: int  # slots one of its batches may span
    epoch: int  # the producer epoch it reads now: its first one not wholly given to it
    joined_at: float
    got: dict[int, set[int]] = field(default_factory=dict)  # epoch -> batches given to it
    missing: set[Key] = field(default_factory=set)  # of its epoch: passed by, not given
    ordered: set[Key] = field(default_factory=set)  # coming for it (room kept for them)
    held: set[int] = field(default_factory=set)  # slots given and not released
    delivered: int = 0
    position: Key | None = None  # the last key delivered
    times: deque[float] = field(default_factory=lambda: deque(maxlen=512))
    keeps_pace: bool = True  # the stream waits (briefly) for it rather than leave it behind
    holding_since: float | None = None  # when the stream began to wait for it
    hold_debt: float = 0.0  # seconds the stream waited for it, decaying over HOLD_WINDOW_S
    debt_at: float = 0.0  # when hold_debt was last reckoned
    gap: Key = (0, 0)  # (epoch, j): where `first_gap` last found the first batch it lacks

    def debt(self, now: float) -> float:
        return self.hold_debt * math.exp(-(now - self.debt_at) / HOLD_WINDOW_S)

    @property
    def cap(self) -> int:
        return self.need + LOOKAHEAD

    def room(self) -> int:
        return self.cap - len(self.held) - len(self.ordered)

    def has(self, key: Key) -> bool:
        return key[1] in self.got.get(key[0], ())

    def first_gap(self, per_epoch: int) -> int:
        """The first batch of its epoch it was not given. What it got of an epoch only grows,
        so the search goes on from where it last stopped: the producer asks on every turn of its
        loop, and an epoch may have thousands of batches."""
        epoch, j = self.gap
        if epoch != self.epoch:
            j = 0
        got = self.got.get(self.epoch, ())
        while j < per_epoch and j in got:
            j += 1
        self.gap = (self.epoch, j)
        return j

    def accepts(self, key: Key) -> bool:
        """Whether it would take `key` now (room aside from what it ordered)."""
        epoch = key[0]
        if self.has(key) or self.room() <= 0:
            return False
        if epoch == self.epoch:
            return True
        # Its next epoch, but only into room beyond what its current one may still need:
        # a consumer holding only batches of its next epoch could never finish this one.
        return epoch == self.epoch + 1 and self.room() > self.need

    def wants_later(self, key: Key) -> bool:
        return key[0] >= self.epoch and not self.has(key)

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
        self.stopping = False
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
            self._reserve,
            self._needed,
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
            len(self.table.slots),
            self.table.slot_bytes / 2**20,
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
        loader: Any = DataLoader(
            cast(Any, Source(dataset, RingWriter(os.getpid(), self.ring.fd))),
            batch_sampler=cast(Any, self.plan),
            collate_fn=cast(Any, passthrough),
            num_workers=workers,
            persistent_workers=workers > 0,
            prefetch_factor=PREFETCH if workers > 0 else None,
        )
        self.batches: Iterator[Packed] = iter(loader)
        self._pull()

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
        self.fd_server.setblocking(False)
        self.poller = zmq.Poller()
        self.poller.register(self.ctl, zmq.POLLIN)
        self.poller.register(self.fd_server, zmq.POLLIN)

    def _select(self, dataset: Any) -> Any:
        """The data selection this producer serves (computed, or reused from the cache)."""
        from gpudesk.selection.apply import select
        from gpudesk.selection.cache import SelectionCache
        from gpudesk.selection.preset_names import PresetError

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

    # ------------------------------------------------------------------- loop
    def _loop(self) -> int:
        last_check = time.monotonic()
        idle_since = time.monotonic()
        while not self.stopping:
            pull = bool(self.consumers) and self._wants_pull()
            # Block on the control socket until something happens, or until the next liveness
            # check (or a hold's next reckoning): the loop never spins.
            wake = last_check + LIVENESS_EVERY_S - time.monotonic()
            if any(c.holding_since is not None for c in self.consumers.values()):
                wake = min(wake, HOLD_PATIENCE_S / 10)
            wait_ms = 0 if pull else max(1, int(1000 * wake))
            events = dict(self.poller.poll(wait_ms))
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
        return wanted and not self._hold(keys[0])

    def _hold(self, key: Key) -> bool:
        """Whether the stream waits before making `key` (the next batch out): for consumers
        that keep pace, would not take it now and have no look-back left for it. Each may hold
        it only so long (HOLD_PATIENCE_S at once, HOLD_SHARE of the time); then it is let go."""
        now = time.monotonic()
        holding = False
        for consumer in self.consumers.values():
            blocks = (
                consumer.keeps_pace
                and key not in consumer.ordered
                and not consumer.accepts(key)
                and consumer.wants_later(key)
                and len(self.table.pins.get(consumer.ident, ())) >= consumer.cap
            )
            if not blocks:
                if consumer.holding_since is not None:
                    consumer.hold_debt = consumer.debt(now) + now - consumer.holding_since
                    consumer.debt_at = now
                    consumer.holding_since = None
                continue
            if consumer.holding_since is None:
                consumer.holding_since = now
            waited = now - consumer.holding_since
            if waited > HOLD_PATIENCE_S or consumer.debt(now) + waited > HOLD_SHARE * HOLD_WINDOW_S:
                self._let_go(consumer, waited)
                continue
            holding = True
        return holding

    def _let_go(self, consumer: _Consumer, waited: float) -> None:
        consumer.keeps_pace = False
        consumer.holding_since = None
        consumer.hold_debt = 0.0
        log.info(
            "loader %s: consumer pid %d is slower than the others (they waited %.2f s for it "
            "at once, more in all): the stream goes on without waiting for it",
            self.config.name,
            consumer.pid,
            waited,
        )

    def _pull(self) -> None:
        """Take the next made batch from the DataLoader and place it."""
        packed = next(self.batches)
        request, makeup = self.plan.in_flight.popleft()
        assert packed.key == request.key, (packed.key, request.key)
        self.produced += 1
        self.makeups_produced += makeup
        slot = request.slot if request.slot is not None else self.table.take_free()
        if slot is None:
            self.unplaced.append((packed, makeup))
            return
        self._place(slot, packed)

    def _place(self, slot: int, packed: Packed) -> None:
        try:
            self.table.place(slot, packed)
        except (BatchError, RuntimeError) as exc:
            raise LoaderError(f"loader {self.config.name}: {exc}") from None
        key = packed.key
        consumers = list(self.consumers.values())
        for consumer in consumers:
            self._feed(consumer)  # in order: what it lacks from before goes first
            if consumer.epoch == key[0] and not consumer.has(key):
                consumer.missing.add(key)  # it had no room: the look-back, or a make-up
        for consumer in consumers:
            if consumer.wants_later(key):
                self.table.pin(slot, consumer.ident, consumer.cap)

    def _feed(self, consumer: _Consumer) -> None:
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

    def _give(self, consumer: _Consumer, slot: int, meta: BatchMeta) -> None:
        state = self.table.slots[slot]
        key = state.key
        assert key is not None
        message = encode(
            "batch", slot=slot, key=list(key), n=meta.count, meta=meta.to_wire(), t=time.time()
        )
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

    def _next_epoch(self, consumer: _Consumer) -> None:
        """It has been given every batch of its epoch: on to the next one, noting what of it
        the stream has already passed."""
        consumer.got.pop(consumer.epoch, None)
        consumer.epoch += 1
        consumer.missing = self._passed(consumer)
        if not consumer.keeps_pace and not consumer.missing:
            consumer.keeps_pace = True  # it caught up with the stream

    def _passed(self, consumer: _Consumer) -> set[Key]:
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

    def _order_makeups(self, consumer: _Consumer) -> None:
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
            if kind == "hello":
                self._hello(ident, message)
            elif kind == "release":
                consumer = self.consumers.get(ident)
                if consumer is not None:
                    for slot in message.get("slots", ()):
                        if slot in consumer.held:
                            consumer.held.discard(slot)
                            self.table.slots[slot].refs -= 1
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
        if batch_size < 1 or math.ceil(batch_size / per_slot) > self.config.slots // 2:
            self._refuse(
                ident,
                f"a batch of {batch_size} needs more than half of the ring "
                f"({self.config.slots} slots of {per_slot}); start the producer with "
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
        epoch = self._stream_position()[0]
        got: dict[int, set[int]] = {}
        if resume:
            epoch = int(resume["epoch"])
            for e, js in resume.get("received", {}).items():
                got.setdefault(int(e), set()).update(int(j) for j in js)
        # A batch that does not start on a slot boundary may span one slot more.
        need = math.ceil(batch_size / per_slot) + (1 if batch_size % per_slot else 0)
        consumer = _Consumer(
            ident, pid, create_time, batch_size, need, epoch, time.monotonic(), got=got
        )
        while len(consumer.got.get(consumer.epoch, ())) >= self.plan.per_epoch:
            consumer.got.pop(consumer.epoch)
            consumer.epoch += 1
        consumer.missing = self._passed(consumer)
        self.consumers[ident] = consumer
        self.consumers_total += 1
        self.table.grow(self._slots_needed())
        self.ctl.send_multipart(
            [
                ident,
                encode(
                    "welcome",
                    epoch=consumer.epoch,
                    batches_per_epoch=self.plan.per_epoch,
                    dataset_len=self.plan.length,
                    batch_size=per_slot,
                    pid=os.getpid(),
                    create_time=self.proc.create_time(),
                    fd_socket=str(self.fd_path),
                    makeups=len(consumer.missing),
                    managed=self.config.managed,
                ),
            ]
        )
        log.info(
            "loader %s: consumer pid %d joined at %s (batch %d, %d batches of its epoch passed)",
            self.config.name,
            pid,
            self._stream_position(),
            batch_size,
            len(consumer.missing),
        )

    def _note_reuse(self, job: Any, pid: int, resumed: bool) -> None:
        """Record, in the selection cache, that a job trains on this selection's pre-pass."""
        from gpudesk.selection.cache import loader_use

        chosen = self.selection.selection if self.selection is not None else None
        if chosen is None or chosen.key is None or resumed:
            return
        if not chosen.reused and not self._first_user_paid:
            self._first_user_paid = True  # it paid for the pre-pass
            return
        who = f"job {job}" if job else f"pid {pid}"
        try:
            self.selection_cache.note_reuse(chosen.key, loader_use(who, self.config.name))
        except (OSError, ValueError) as exc:
            log.warning(
                "loader %s: could not record the reuse of %s: %s", self.config.name, chosen.key, exc
            )

    def _stream_position(self) -> Key:
        """The first stream key not yet made: consumers joining now get it next."""
        pending = [r.key for r, makeup in self.plan.in_flight if not makeup]
        pending += [p.key for p, makeup in self.unplaced if not makeup]
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
            self.table.slots[slot].refs -= 1
        consumer.held.clear()
        self.table.unpin_all(consumer.ident)
        self.consumers.pop(consumer.ident, None)
        wanted = {k for c in self.consumers.values() for k in c.ordered}
        self.plan.makeups = deque(k for k in self.plan.makeups if k in wanted)
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
            "bytes_written": self.table.bytes_written,
            "bytes_copied": self.table.bytes_copied,
            "consumers_total": self.consumers_total,
            "delivered_total": self.delivered_total,
            "slots": len(self.table.slots),
            "slots_used": self.table.used(),
            "slot_bytes": self.table.slot_bytes,
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
                    "makeups_left": len(c.missing),
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
        shutdown = getattr(self.batches, "_shutdown_workers", None)
        if callable(shutdown):
            shutdown()
        for path in (self.ctl_path, self.fd_path, self.info_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def serve(config: ProducerConfig, home: Home) -> int:
    producer = Producer(config, home)

    def stop(signum: int, _frame: object) -> None:
        producer.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return producer.run()
