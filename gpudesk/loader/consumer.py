"""`SharedLoader`: what a training script iterates instead of its DataLoader.

    from gpudesk.loader import SharedLoader
    loader = SharedLoader("images", batch_size=64,
                          factory="gpudesk.workloads.images:make_dataset")
    for epoch in range(epochs):
        for images, labels in loader:
            ...

With a producer running for the name (started by gpudesk for the profile's `[datasets.NAME]`, or
by `gpudesk loader serve`), each batch is a view of the producer's shared memory: no copy, no
pickling. Without one, and with `fallback=True` and a factory, it is a plain local DataLoader
over the same factory, so the script runs the same outside gpudesk.

A batch stays valid until the next one is asked for; keep a tensor longer with `.clone()`.
Batch sizes that divide the producer's are views of its slots, multiples of it are views across
adjacent slots where they lie in order; any other size is assembled by copying.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

from gpudesk.loader.protocol import (
    ENV_DATASET,
    ENV_RESUME_S,
    VARIANT_SEPARATOR,
    LoaderError,
    check_name,
    decode,
    encode,
    process_alive,
    read_info,
    receive_fd,
)
from gpudesk.loader.ring import Layout, Ring
from gpudesk.paths import Home, UnsafePath

POLL_MS = 200  # while waiting for a batch, the producer's process is checked this often
CONNECT_TIMEOUT_S = 10.0
PREPARING_POLL_S = 1.0  # a preparing producer is waited for while it lives, checked this often
START_WAIT_S = 60.0  # how long a job started with its producer waits for it to come up


@dataclass
class _Piece:
    """Part of a producer batch not yet handed to the user."""

    slot: int
    start: int
    count: int  # samples in the slot
    index: int  # the batch within its epoch


class SharedLoader:
    def __init__(
        self,
        name: str,
        batch_size: int | None = None,
        *,
        factory: str | None = None,
        factory_kwargs: dict[str, Any] | None = None,
        workers: int = 0,
        seed: int = 0,
        shuffle: bool = True,
        fallback: bool = True,
        with_ids: bool = False,
        home: str | os.PathLike[str] | None = None,
        resume_s: float | None = None,
    ) -> None:
        self.name = check_name(name)
        served = os.environ.get(ENV_DATASET)
        if served and served.startswith(f"{name}{VARIANT_SEPARATOR}"):
            # The engine serves this job a variant of the dataset it asked for (the dataset
            # under another data selection, `NAME.PRESET`): read that one.
            self.name = name = served
        self.batch_size = batch_size
        self.factory, self.factory_kwargs = factory, dict(factory_kwargs or {})
        self.workers, self.seed, self.shuffle = workers, seed, shuffle
        self.with_ids = with_ids
        self.home = Home.from_env(home)
        env_resume = os.environ.get(ENV_RESUME_S)
        self.resume_s = (
            resume_s if resume_s is not None else float(env_resume) if env_resume else None
        )
        self.mode = "shared"
        self.last_ids: Any = None
        self._local: Any = None
        self._local_epoch = 0
        self.epoch = 0  # the producer epoch being read; set by the hello reply
        self._socket: zmq.Socket | None = None
        self._received: dict[int, set[int]] = defaultdict(set)  # epoch -> batches received
        self._pending: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        self._held: set[int] = set()
        self._release: list[int] = []
        self._skip: dict[int, int] = {}  # after a resume: samples of a batch already handed out
        # A job the engine started for this dataset had its producer started with it: wait for
        # the producer to come up (it builds the dataset and its first batch) before falling
        # back or giving up.
        wait = START_WAIT_S if os.environ.get(ENV_DATASET) == name else 0.0
        info = self._running_producer(wait)
        if info is not None:
            self._connect(info, resume=False)
        elif fallback and factory:
            self.mode = "local"
        else:
            log = self.home.loader_log(name)
            raise LoaderError(
                f"no shared loader {name!r} is running for GPUDESK_HOME {self.home.root}"
                + (
                    f" (waited {wait:.0f} s for the one gpudesk started; see {log})"
                    if wait
                    else " (start one with `gpudesk loader serve`, or name it in the profile's "
                    "[datasets] table)"
                )
                + ", and no local fallback was asked for (pass factory=... and fallback=True)"
            )

    def _running_producer(self, wait: float) -> dict[str, Any] | None:
        """The info of the live producer for this name, waiting up to `wait` s for one, and for
        as long as a live one says it is preparing (a data selection's pre-pass)."""
        try:
            self.home.checked_loader_dir()  # never trust an info file in someone else's folder
        except UnsafePath as exc:
            raise LoaderError(str(exc)) from None
        except FileNotFoundError:
            pass  # no producer yet; one may still come up while we wait
        info_path = self.home.loader_paths(self.name)[2]
        deadline = time.monotonic() + wait
        said = False
        while True:
            info = read_info(info_path)
            if info and process_alive(int(info.get("pid", 0)), info.get("create_time")):
                if not info.get("preparing"):
                    return info
                if not said:
                    print(
                        f"waiting for the shared loader {self.name!r}: its producer (pid "
                        f"{info['pid']}) is preparing {info['preparing']}",
                        file=sys.stderr,
                        flush=True,
                    )
                    said = True
                deadline = max(deadline, time.monotonic() + PREPARING_POLL_S)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)

    # ------------------------------------------------------------- connecting
    def _connect(self, info: dict[str, Any], resume: bool) -> None:
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 0)  # the producer bounds what it sends by the ring size
        sock.connect(info["control"])
        state = None
        if resume:
            state = {
                "epoch": self.epoch,
                "received": {
                    str(e): sorted(js) for e, js in self._received.items() if e >= self.epoch
                },
            }
        sock.send(
            encode(
                "hello",
                pid=os.getpid(),
                batch_size=self.batch_size,
                resume=state,
                job=os.environ.get("GPUDESK_JOB_ID"),
            )
        )
        if not sock.poll(int(CONNECT_TIMEOUT_S * 1000)):
            sock.close()
            raise LoaderError(
                f"the producer for {self.name!r} (pid {info.get('pid')}) did not "
                f"answer within {CONNECT_TIMEOUT_S:.0f} s"
            )
        reply = decode(sock.recv())
        if reply["type"] == "refused":
            sock.close()
            raise LoaderError(
                f"the producer for {self.name!r} refused this consumer: {reply.get('message')}"
            )
        if reply["type"] != "welcome":
            sock.close()
            raise LoaderError(f"unexpected answer from the producer: {reply['type']}")
        layout = Layout.from_dict(reply["layout"])
        try:
            fd = receive_fd(Path(reply["fd_socket"]))
        except OSError as exc:
            sock.close()
            raise LoaderError(
                f"could not get the shared memory of {self.name!r} from {reply['fd_socket']}: {exc}"
            ) from None
        self.ring = Ring.attach(layout, fd)
        os.close(fd)  # the mapping keeps the memory
        self._socket = sock
        self.producer_pid = int(reply["pid"])
        self.producer_create_time = reply.get("create_time")
        self.managed = bool(reply.get("managed"))
        self.per_epoch = int(reply["batches_per_epoch"])
        self.dataset_len = int(reply["dataset_len"])
        self.producer_batch = layout.batch_size
        if self.batch_size is None:
            self.batch_size = self.producer_batch
        if not resume:
            self.epoch = int(reply["epoch"])  # the producer epoch this consumer epoch follows
            self.identity = info.get("identity")  # what a restarted producer must match
        self._held.clear()

    def __len__(self) -> int:
        if self.mode == "local":
            return math.ceil(len(self._local_dataset()) / (self.batch_size or 64))
        assert self.batch_size is not None
        return math.ceil(self.dataset_len / self.batch_size)

    # --------------------------------------------------------------- iterating
    def __iter__(self) -> Iterator[Any]:
        if self.mode == "local":
            yield from self._iter_local()
            return
        yield from self._iter_shared()

    def _iter_shared(self) -> Iterator[Any]:
        import torch

        assert self.batch_size is not None
        want = self.batch_size
        epoch = self.epoch
        pieces: list[_Piece] = []
        self._take_pending(epoch, pieces)
        complete = False
        try:
            while True:
                have = sum(p.count - p.start for p in pieces)
                finished = len(self._received[epoch]) >= self.per_epoch
                if have >= want or (finished and have):
                    take = min(want, have)
                    batch, ids, spent = self._assemble(pieces, take, torch)
                    self.last_ids = ids
                    yield (batch, ids) if self.with_ids else batch
                    self._release.extend(spent)  # asked for the next: done with these
                    continue
                if finished:
                    complete = True
                    break
                try:
                    self._receive(epoch, pieces)
                except _ProducerLost as lost:
                    self._resume(epoch, pieces, lost.why)
        finally:
            # Done, or the loop was left early: a new iteration starts the next epoch, and the
            # rest of this one is let go as it arrives.
            self._release.extend(p.slot for p in pieces)
            self._flush_release()
            self._received.pop(epoch, None)
            self.epoch = epoch + 1
            del complete

    def _resume(self, epoch: int, pieces: list[_Piece], why: str) -> None:
        """The producer died mid-epoch: wait for the restarted one and carry on. Batches not
        yet handed out are asked for again; samples of a half-used batch are skipped."""
        received = self._received[epoch]
        self._skip = {}
        for piece in pieces:
            received.discard(piece.index)
            if piece.start:
                self._skip[piece.index] = piece.start
        pieces.clear()
        self._pending.clear()
        for later in [e for e in self._received if e > epoch]:
            del self._received[later]
        self._release = []
        self._held.clear()
        self._reconnect(why)

    def _take_pending(self, epoch: int, pieces: list[_Piece]) -> None:
        for slot, count, index in sorted(self._pending.pop(epoch, []), key=lambda p: p[2]):
            pieces.append(_Piece(slot, 0, count, index))

    def _receive(self, epoch: int, pieces: list[_Piece]) -> None:
        """Wait for the next batch message; file it under its epoch."""
        sock = self._socket
        assert sock is not None
        self._flush_release()
        while not sock.poll(POLL_MS):
            self._check_producer()
            sock = self._socket
            assert sock is not None
        message = decode(sock.recv())
        kind = message["type"]
        if kind == "bye":
            raise _ProducerLost(message.get("message") or "the producer stopped")
        if kind != "batch":
            return
        slot, count = int(message["slot"]), int(message["n"])
        key_epoch, index = (int(k) for k in message["key"])
        self._held.add(slot)
        if key_epoch < self.epoch or index in self._received[key_epoch]:
            self._release.append(slot)  # a batch it already has (a restarted producer)
            return
        self._received[key_epoch].add(index)
        if key_epoch == epoch:
            pieces.append(_Piece(slot, self._skip.pop(index, 0), count, index))
        else:
            self._pending[key_epoch].append((slot, count, index))

    def _assemble(self, pieces: list[_Piece], take: int, torch: Any) -> tuple[Any, Any, list[int]]:
        """`take` samples from the front of `pieces`: a view when they lie in one slot or in
        full adjacent slots, else a copy. Returns the batch, its ids and the slots it used up."""
        first = pieces[0]
        ring = self.ring
        per = self.producer_batch
        if first.count - first.start >= take:
            batch, ids = _sliced(ring.batch(first.slot, first.count), first.start, take)
            first.start += take
            spent = []
            if first.start == first.count:
                pieces.pop(0)
                spent.append(first.slot)
            return batch, ids, spent
        # Several slots: a view if they are whole, in order and adjacent in the ring.
        need_slots = math.ceil(take / per)
        run = pieces[:need_slots]
        adjacent = (
            len(run) == need_slots
            and all(p.start == 0 for p in run)
            and all(p.count == per for p in run[:-1])
            and all(run[i + 1].slot == run[i].slot + 1 for i in range(len(run) - 1))
            and sum(p.count for p in run) >= take
        )
        if adjacent:
            batch, ids = ring.batch(first.slot, take, slots=need_slots)
            used = take
            spent = []
            for piece in run:
                step = min(piece.count, used)
                piece.start += step
                used -= step
            while pieces and pieces[0].start == pieces[0].count:
                spent.append(pieces.pop(0).slot)
            return batch, ids, spent
        parts = []
        left = take
        spent = []
        while left:
            piece = pieces[0]
            step = min(piece.count - piece.start, left)
            parts.append(_sliced(ring.batch(piece.slot, piece.count), piece.start, step))
            piece.start += step
            left -= step
            if piece.start == piece.count:
                spent.append(pieces.pop(0).slot)
        return _concat(parts, torch), torch.cat([ids for _, ids in parts]), spent

    def _flush_release(self) -> None:
        if self._release and self._socket is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._socket.send(encode("release", slots=self._release))
            self._held.difference_update(self._release)
            self._release = []

    # ----------------------------------------------------------------- failures
    def _check_producer(self) -> None:
        if not process_alive(self.producer_pid, self.producer_create_time):
            raise _ProducerLost(f"the producer for {self.name!r} (pid {self.producer_pid}) died")

    def _reconnect(self, why: str) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        wait = self.resume_s if self.resume_s is not None else (30.0 if self.managed else 0.0)
        deadline = time.monotonic() + wait
        info_path = self.home.loader_paths(self.name)[2]
        while time.monotonic() < deadline:
            info = read_info(info_path)
            pid = int(info.get("pid", 0)) if info else 0
            if info and pid != self.producer_pid and process_alive(pid, info.get("create_time")):
                if info.get("preparing"):  # it comes back after its pre-pass: wait for it
                    deadline = max(deadline, time.monotonic() + PREPARING_POLL_S)
                    time.sleep(0.1)
                    continue
                if info.get("identity") != self.identity:
                    raise LoaderError(
                        f"{why}; the producer now running for {self.name!r} (pid {pid}) has "
                        "other settings (dataset, batch size, seed or shuffle), so this consumer "
                        "cannot resume its epoch from it"
                    )
                self._connect(info, resume=True)
                return
            time.sleep(0.1)
        raise LoaderError(
            f"{why}; this consumer cannot go on. "
            + (
                f"No producer came back within {wait:.0f} s."
                if wait
                else "Restart it (`gpudesk loader serve ...`) and rerun, or run under gpudesk, "
                "which restarts producers and lets consumers resume their epoch."
            )
        )

    def close(self) -> None:
        if self._socket is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._socket.send(encode("bye"))
            self._socket.close()
            self._socket = None

    def __enter__(self) -> SharedLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # ------------------------------------------------------------------- local
    def _local_dataset(self) -> Any:
        if self._local is None:
            from gpudesk.loader.producer import load_factory

            assert self.factory is not None
            self._local = load_factory(self.factory)(**self.factory_kwargs)
        return self._local

    def _iter_local(self) -> Iterator[Any]:
        """The same epochs as a producer with this seed would give, from a local DataLoader."""
        import torch
        from torch.utils.data import DataLoader

        dataset = self._local_dataset()
        length = len(dataset)
        order = (
            torch.randperm(
                length,
                generator=torch.Generator().manual_seed(self.seed * 1_000_003 + self._local_epoch),
            ).tolist()
            if self.shuffle
            else list(range(length))
        )
        self._local_epoch += 1
        loader = DataLoader(
            dataset, batch_size=self.batch_size or 64, sampler=order, num_workers=self.workers
        )
        start = 0
        for batch in loader:
            size = len(batch[0]) if isinstance(batch, (tuple, list)) else len(batch)
            ids = torch.tensor(order[start : start + size])
            start += size
            self.last_ids = ids
            yield (batch, ids) if self.with_ids else batch


class _ProducerLost(Exception):
    """Internal: the producer went away while a batch was awaited."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _sliced(batch_ids: tuple[Any, Any], start: int, count: int) -> tuple[Any, Any]:
    batch, ids = batch_ids
    return _map(batch, lambda t: t[start : start + count]), ids[start : start + count]


def _map(value: Any, fn: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_map(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map(v, fn) for k, v in value.items()}
    return fn(value)


def _concat(parts: list[tuple[Any, Any]], torch: Any) -> Any:
    batches = [b for b, _ in parts]
    first = batches[0]
    if isinstance(first, tuple):
        return tuple(_concat([(b[i], None) for b in batches], torch) for i in range(len(first)))
    if isinstance(first, dict):
        return {k: _concat([(b[k], None) for b in batches], torch) for k in first}
    return torch.cat(batches)
