"""`SharedLoader`: what a training script iterates instead of its DataLoader.

    from gpudesk.loader import SharedLoader
    loader = SharedLoader("images", batch_size=64,
                          factory="gpudesk.workloads.images:make_dataset")
    for epoch in range(epochs):
        loader.set_epoch(epoch)          # optional, as with a DataLoader's sampler
        for images, labels in loader:
            ...

With a producer running for the name (started by gpudesk for the profile's `[datasets.NAME]`, or
by `gpudesk loader serve`), the samples are in the producer's shared memory and a batch is made
of views of it: no copy, no pickling. Without one, and with `fallback=True` and a factory, it is a
plain local DataLoader over the same factory, with the same order and the same per-batch
randomness (`fetch.py`), so the script runs the same outside gpudesk.

`collate_fn` works as a DataLoader's: it gets the batch's samples (their tensors are views of the
shared memory) and makes the batch, so samples of varying size (text, detection) can be padded or
listed. Without one, the batch is what torch's `default_collate` makes, as views of the shared
memory where the samples have one shape.

Where the dataset is served with `device = "cuda"` and this process sees the producer's GPU,
batches come as CUDA tensors: views of the producer's staged mirror (`staging.py`), one
host-to-device copy for every job on that GPU; `device="cpu"` asks for host batches anyway, and
`data_path` says which this consumer reads ("staged", or "host: " and why).

A batch stays valid for as long as any tensor of it is alive: its ring slots go back to the
producer only then (`lease.py`). A consumer may keep a few batches alive at once (its lease:
two batches besides the one being read, at the producer's batch size); one that keeps more gets
a LoaderError saying so. Keep such batches with `.clone()`, or pass `copy_when_held=True` for
private copies beyond the lease (then `list(loader)` works as with a DataLoader).
Batch sizes that divide the producer's are views of its slots, multiples of it are views across
adjacent slots where they lie in order; any other size is assembled by copying.

DataLoader's `drop_last`, `pin_memory`, a multi-GPU job's `shard` (each rank its share of every
batch, `contract.py`), `set_epoch` and `state_dict()` (`resume.py`) work in both modes.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import zmq

from gpudesk.core.datasets import VARIANT_SEPARATOR
from gpudesk.loader.batch import BatchMeta, Piece, collate, ids, samples
from gpudesk.loader.batch_check import Announced, announced
from gpudesk.loader.contract import Contract, resolve_shard
from gpudesk.loader.handshake import PREPARING_POLL_S, connect, connect_first, leave
from gpudesk.loader.lease import (
    Leases,
    no_room_after,
    owned_view,
    private_runs,
    stuck_message,
)
from gpudesk.loader.local import epoch_length, told_selection
from gpudesk.loader.protocol import (
    ENV_DATASET,
    ENV_RESUME_S,
    LoaderError,
    ProducerInfo,
    check_name,
    decode,
    encode,
    final_failure,
    process_alive,
    read_info,
    recorded_runs,
    stopping_reason,
)
from gpudesk.loader.reconnect import resume_epoch
from gpudesk.loader.restarts import RestartNote, restart_note
from gpudesk.loader.ring import Ring
from gpudesk.loader.station_access import (
    checked_folder,
    engines_word,
    name_holder,
    said_not_started,
)
from gpudesk.paths import Home, UnsafePath

POLL_MS = 200  # while waiting for a batch, the producer's process is checked this often
START_WAIT_S = 60.0  # how long a job started with its producer waits for it to come up
# A live producer that sends nothing for this long is said to (once a wait): a batch may take
# that long to make, so it is a note, not an error; a script waiting silently for ever is worse.
STALL_NOTE_S = 120.0


class SharedLoader:
    # Set by the producer's welcome (handshake.connect): whom this consumer reads, and its stream.
    producer_pid: int
    producer_started: object  # process_start.runs() checks what the welcome gave
    managed: bool
    per_epoch: int
    dataset_len: int
    producer_batch: int
    identity: dict[str, Any] | None  # the producer's settings, as its info file says them
    # Said once on stderr while waiting (`_engines_word`): that a producer holds the name over
    # the engine's word that it did not start one; the engine's restart note last said.
    _passed_over: bool
    _note_said: RestartNote | None

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
        collate_fn: Callable[[list[Any]], Any] | None = None,
        home: str | os.PathLike[str] | None = None,
        resume_s: float | None = None,
        device: str = "auto",
        drop_last: bool = False,
        shard: tuple[int, int] | None = None,
        pin_memory: bool = False,
        copy_when_held: bool = False,
    ) -> None:
        self.name = check_name(name)
        self.contract = Contract(drop_last, resolve_shard(shard), pin_memory)
        served = os.environ.get(ENV_DATASET)
        if served and served.startswith(f"{name}{VARIANT_SEPARATOR}"):
            # The engine serves this job a variant of the dataset it asked for (the dataset
            # under another data selection, `NAME.PRESET`): read that one.
            self.name = name = served
        self.batch_size = batch_size
        self.factory, self.factory_kwargs = factory, dict(factory_kwargs or {})
        self.workers, self.seed, self.shuffle = workers, seed, shuffle
        self.with_ids = with_ids
        self.collate_fn = collate_fn
        self.home = Home.from_env(home)
        env_resume = os.environ.get(ENV_RESUME_S)
        self.resume_s = (
            resume_s if resume_s is not None else float(env_resume) if env_resume else None
        )
        self.mode = "shared"
        self.last_ids: Any = None
        self._local: Any = None
        # a Slurm job's data selection, for the fallback (its factory then the pre-pass's)
        self._told = told_selection(name)
        self._local_subset: Any = None  # the selection the fallback applies, once it read it
        self._local_epoch = 0  # the fallback's next epoch (set_epoch changes it)
        self._local_reading: tuple[int, int] | None = None  # its epoch read now, batches yielded
        self.epoch = 0  # the producer epoch being read; set by the hello reply
        self._socket: zmq.Socket | None = None
        self._received: dict[int, set[int]] = defaultdict(set)  # epoch -> batches received
        self._pending: dict[int, list[Piece]] = defaultdict(list)  # batches of later epochs
        self._held: set[int] = set()
        self._leases = Leases()  # why each held slot is held: a piece waiting, batches alive
        self.copy_when_held = copy_when_held
        self.copied_batches = 0  # handed out as private copies (copy_when_held)
        self._need, self.lease_limit = 1, 0  # set by the welcome
        self._release: list[int] = []
        self._skip: dict[int, int] = {}  # after a resume: samples of a batch already handed out
        self._pieces: list[Piece] = []  # of the epoch being read: received, not wholly handed out
        self._yielded = 0  # batches handed out of the epoch being read
        self._local_start = 0  # the fallback's batches of its next epoch already handed out
        self.ring: Ring | None = None
        self._passed_over, self._note_said = False, None  # what of the engine's word it said
        self._choose_device(device)
        # A job the engine started for this dataset had its producer started with it: wait for
        # the producer to come up (it builds the dataset and its first batch) before falling
        # back or giving up.
        wait = START_WAIT_S if os.environ.get(ENV_DATASET) == name else 0.0
        info, stopped = connect_first(self, wait)  # connected, unless None or failed
        failed = final_failure(info)
        if info is None or failed is not None:
            if not (fallback and (factory or self._told)):
                why = self._no_producer(wait, info)
                raise LoaderError(f"{stopped}; {why}" if stopped else why)
            if failed is not None or stopped:  # the job reads on, but unshared: say why
                print(f"{stopped or self._failed_producer(info)}; reading locally", file=sys.stderr)
            self.mode = "local"
        if self.contract.shard is not None:
            from gpudesk.loader.resume import join_ranks

            join_ranks(self, info)

    def _choose_device(self, device: str) -> None:
        if device not in ("auto", "cpu"):
            raise LoaderError(
                f"device={device!r}: expected 'auto' (batches on the GPU where the producer "
                "stages them there) or 'cpu' (always host batches)"
            )
        self.device = device
        self._mirror: Any = None  # the producer's staged mirror, opened (a uint8 tensor)
        self._mirror_gen = 0
        self.data_path = "host"  # "staged" once batches come from the mirror; else host: why

    def _no_producer(self, wait: float, info: ProducerInfo | None) -> str:
        """Why there is no producer to read, and what to do, in one paragraph."""
        fallback = ", and no local fallback was asked for (pass factory=... and fallback=True)"
        if info and info.not_started and not info.given_up:  # station_access.py
            return (
                f"{self._failed_producer(info)}. Fix that (or ask the station's admin to): the "
                f"engine tries again for the next job naming the dataset{fallback}"
            )
        if final_failure(info) is not None:
            again = (  # a station refuses `loader serve`; registering is its admin's
                "Fix that, then an admin starts it again by registering the dataset again "
                "(`sudo gpudesk loader register PROFILE`)"
                if self.home.is_system
                else "Fix that and start it again: under the engine by registering the dataset "
                "again (`gpudesk run` with its profile does), else with `gpudesk loader serve`"
            )
            return f"{self._failed_producer(info)}. {again}{fallback}"
        if (holder := name_holder(self.home, self.name)) is not None:  # one started, not ready
            return (
                f"the producer of the shared loader {self.name!r} (pid {holder}) holds its name "
                "but does not serve yet (it builds its dataset and its first batch)"
                + (f"; this consumer waited {wait:.0f} s for it" if wait else "")
                + f". Run this again once it serves (`gpudesk loader status`){fallback}"
            )
        start = (
            "the engine starts one for the jobs naming a dataset an admin registered (a "
            "profile's [datasets] table)"
            if self.home.is_system  # where `loader serve` is refused: the engine makes its folder
            else "start one with `gpudesk loader serve`, or name it in the profile's [datasets] "
            "table"
        )
        return (
            f"no shared loader {self.name!r} is running for {self.home.description}"
            + (
                f" (waited {wait:.0f} s for the one gpudesk started; see {self._log})"
                if wait
                else f" ({start})"
            )
            + fallback
        )

    @property
    def _log(self) -> str:
        """Where the engine's producer of this loader logs, for the user. A station's is in the
        state folder its engine was given, which only the engine's ping names (api/, which the
        loader does not use): named from that folder, which is not /var/lib/gpudesk on every
        station, and root's."""
        if self.home.is_system:
            return (
                f"loaders/{self.name}.log in the station's state folder (root's: an admin reads "
                "it; `gpudesk engine status` names the folder)"
            )
        return str(self.home.loader_log(self.name))

    def _failed_producer(self, info: ProducerInfo | None) -> str:
        """A producer's final failure (`final_failure`), for the user: the dataset, the reason,
        and the engine's log of it."""
        assert info is not None
        if info.not_started:  # what the engine said (station_access.engines_word)
            engine = "the station's engine" if self.home.is_system else "the engine"
            return (
                f"{engine} did not start the producer of the shared loader {self.name!r}: "
                f"{final_failure(info)}"
            )
        log = f" (its log: {self._log})" if info.managed else ""
        return (
            f"the producer of the shared loader {self.name!r} failed for good{log}, and is "
            f"not started again with the same settings: {final_failure(info)}"
        )

    def _running_producer(self, wait: float) -> ProducerInfo | None:
        """The info of the live producer for this name, waiting up to `wait` s for one, and for
        as long as a live one says it is preparing (a data selection's pre-pass); or, at once,
        the info of one that failed for good (`final_failure`), or what a station's engine said
        of one it did not start (`_engines_word`): waiting for it is in vain."""
        try:
            # never trust an info file in someone else's folder; on a station, one line when
            # the loader is not shared with this user
            checked_folder(self.home, self.name)
        except UnsafePath as exc:
            raise LoaderError(str(exc)) from None
        except FileNotFoundError:
            pass  # no producer yet; one may still come up while we wait
        info_path = self.home.loader_paths(self.name)[2]
        deadline = time.monotonic() + wait
        said = False
        while True:
            info = read_info(info_path)
            if final_failure(info) is not None:
                return info
            if stopping_reason(info):
                info = None  # it stops (handshake.py): none to read, but one may come up
            if info and recorded_runs(info):
                if not info.preparing:
                    return info
                if not said:
                    print(
                        f"waiting for the shared loader {self.name!r}: its producer (pid "
                        f"{info.pid}) is preparing {info.preparing}",
                        file=sys.stderr,
                        flush=True,
                    )
                    said = True
                deadline = max(deadline, time.monotonic() + PREPARING_POLL_S)
            elif refused := self._engines_word():
                return refused  # the engine did not start it: waiting for it is in vain
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)

    def _engines_word(self) -> ProducerInfo | None:
        """What the engine said of a producer it did not start or gave up (`engines_word`),
        unless another producer holds the name now (`name_holder`: one started by hand, coming
        up), which this consumer waits for instead, saying so once: the engine's word is true
        of the engine, but no longer why there is no producer to read. While the engine is
        restarting the producer, it says how that one went down, once a restart, and waits on."""
        said = engines_word(self.home, self.name)
        note = restart_note(said)
        if note is not None and note != self._note_said:
            self._note_said = note
            print(note.line(self.name), file=sys.stderr, flush=True)
        refused = said if said_not_started(said) else None
        holder = name_holder(self.home, self.name) if refused else None
        if refused is None or holder is None:
            return refused
        if not self._passed_over:
            self._passed_over = True
            print(
                f"waiting for the shared loader {self.name!r}: another producer (pid {holder}) "
                f"holds its name, although {self._failed_producer(refused)}",
                file=sys.stderr,
                flush=True,
            )
        return None

    # ------------------------------------------------------------- connecting
    def _connect(self, info: ProducerInfo, resume: bool) -> None:
        """Say hello to the producer `info` describes and take its welcome (`handshake.py`)."""
        connect(self, info, resume)

    def _open_mirror(self, offered: Any) -> None:
        """Open the mirror a handle names: at the welcome, and each time it grew (a batch
        message carries the new generation's handle; views of the old stay valid)."""
        from gpudesk.loader.staging import MirrorHandle, StagingUnavailable, open_mirror

        try:
            handle = MirrorHandle.from_wire(offered)
            self._mirror, self._mirror_gen = open_mirror(handle), handle.gen
            self.data_path = "staged"
        except StagingUnavailable as exc:
            self._mirror, self._mirror_gen = None, 0
            self.data_path = f"host: {exc}"
        except (
            KeyError,
            TypeError,
            ValueError,
            ArithmeticError,
        ) as exc:  # what a member's producer liked
            self._mirror, self._mirror_gen = None, 0
            self.data_path = f"host: the producer sent a mirror handle of another shape ({exc!r})"

    def _epoch_length(self) -> int:
        return epoch_length(self) if self.mode == "local" else self.dataset_len

    def __len__(self) -> int:
        return self.contract.batches(self._epoch_length(), self.batch_size or 64)

    # --------------------------------------------------------------- iterating
    def __iter__(self) -> Iterator[Any]:
        if self.mode == "local":
            yield from self._iter_local()
            return
        yield from self._iter_shared()

    def _iter_shared(self) -> Iterator[Any]:
        assert self.batch_size is not None
        want = self.batch_size
        epoch = self.epoch
        pieces: list[Piece] = []
        self._pieces = pieces
        self._take_pending(epoch, pieces)
        limit = self.contract.limit(self.dataset_len, want)
        try:
            while True:
                have = sum(p.left for p in pieces)
                finished = len(self._received[epoch]) >= self.per_epoch
                if limit is not None and self._yielded >= limit:
                    break  # drop_last: the rest of the epoch is not a batch on every rank
                if self.contract.yields(have, want, finished):
                    batch, batch_ids, spent = self._assemble(pieces, min(want, have))
                    self._release.extend(self._leases.spent(spent))
                    self.last_ids = batch_ids.clone()  # not a view: it would keep the batch
                    self._yielded += 1
                    batch = self.contract.pin(batch)
                    yield (batch, batch_ids) if self.with_ids else batch
                    del batch, batch_ids
                    # Asked for the next: the batches no longer alive are said at once, so the
                    # producer can hand this consumer its next batches into the room.
                    self._flush_release()
                    continue
                if finished:
                    break
                self._check_room()
                try:
                    self._receive(epoch, pieces)
                except _ProducerLost as lost:
                    resume_epoch(self, epoch, pieces, lost.why)
        finally:
            # Done, or the loop was left early: a new iteration starts the next epoch, and the
            # rest of this one is let go as it arrives.
            self._release.extend(self._leases.spent([p.slot for p in pieces]))
            self._flush_release()
            self._received.pop(epoch, None)
            self._pieces, self._yielded = [], 0
            self.epoch = epoch + 1

    def _take_pending(self, epoch: int, pieces: list[Piece]) -> None:
        for piece in sorted(self._pending.pop(epoch, []), key=lambda p: p.index):
            pieces.append(piece)

    def _receive(self, epoch: int, pieces: list[Piece]) -> None:
        """Wait for the next batch message; file it under its epoch."""
        sock = self._socket
        assert sock is not None
        self._flush_release()
        since, noted = time.monotonic(), False
        while not sock.poll(POLL_MS):
            self._check_producer()
            sock = self._socket
            assert sock is not None
            if not noted and time.monotonic() - since >= STALL_NOTE_S:
                noted = True
                self._note_stall(epoch, time.monotonic() - since)
        message = decode(sock.recv())
        kind = message["type"]
        if kind == "bye":
            raise _ProducerLost(message.get("message") or "the producer stopped")
        if kind != "batch":
            return
        said, meta = self._batch_of(message)
        slot, (key_epoch, index) = said.slot, said.key
        self._held.add(slot)
        if key_epoch < self.epoch or index in self._received[key_epoch]:
            self._release.append(slot)  # a batch it already has (a restarted producer)
            return
        self._leases.hold(slot)
        assert self.ring is not None
        self.ring.ensure(max(f.offset + f.nbytes for f in meta.fields))
        if said.mirror is not None and self._mirror is not None:
            self._open_mirror(said.mirror)
        gen = said.gen if self._mirror is not None else 0
        self._received[key_epoch].add(index)
        first, end = self.contract.run(index, self.producer_batch, meta.count)  # this rank's
        if first == end:
            self._release.append(slot)  # none of it is this rank's
        elif key_epoch == epoch:
            start = max(first, self._skip.pop(index, 0))
            _insert(pieces, Piece(slot, meta, start, end, index, gen))
        else:
            self._pending[key_epoch].append(Piece(slot, meta, first, end, index, gen))

    def _batch_of(self, message: dict[str, Any]) -> tuple[Announced, BatchMeta]:
        """A batch message and its description, checked (batch_check.py): on a station the
        producer is its owner's process, and one of another shape is a LoaderError saying
        so, not a traceback in another member's job."""
        try:
            return announced(message)
        except ValueError as exc:
            raise LoaderError(
                f"the producer for {self.name!r} (pid {self.producer_pid}) sent a batch this "
                f"consumer cannot read: {exc}"
            ) from None

    def _assemble(self, pieces: list[Piece], take: int) -> tuple[Any, Any, list[int]]:
        """`take` samples from the front of `pieces`, as the batch, its ids and the slots it
        used up. Without a collate_fn: `default_collate`'s batch, as views where the samples
        lie in one slot or in adjacent ones (else copies); with one: what it makes of them."""
        runs: list[tuple[Piece, int, int]] = []
        spent = []
        left = take
        while left:
            piece = pieces[0]
            step = min(piece.left, left)
            runs.append((piece, piece.start, step))
            piece.start += step
            left -= step
            if not piece.left:
                spent.append(pieces.pop(0).slot)
        assert self.ring is not None and self.ring.base is not None
        # The staged mirror when every run of the batch is staged there (a producer that
        # stopped staging, or a mirror this process could not open, leaves the host ring).
        staged = self._mirror if all(piece.gen for piece, _, _ in runs) else None
        # Read through tensors of this batch's own (lease.py): its slots are lent to it
        # until the last of them dies; or, at the lease's limit with copy_when_held, copied.
        used = list(dict.fromkeys(piece.slot for piece, _, _ in runs))
        waiting = {piece.slot for piece in pieces}
        owners: list[object] = []
        # Read through a private mapping of the ring in which this process wrote none of the
        # batch's pages (ring.py): a change in place stays in this process's copy of them.
        ring = self.ring.batch_base(
            [(f.offset, f.nbytes) for p, _, _ in runs for f in p.meta.fields]
        )
        if self.ring.copies or (
            self.copy_when_held
            and no_room_after(self._leases, used, waiting, self._need, self.lease_limit)
        ):
            base, staged, runs = private_runs(runs, ring, staged)
            self.copied_batches += 1
        else:
            base, owner = owned_view(ring)
            owners.append(owner)
            if staged is not None:
                staged, owner = owned_view(staged)
                owners.append(owner)
        if self.collate_fn is not None:
            batch = self.collate_fn(samples(base, runs, staged))
        else:
            batch, _copies = collate(base, runs, staged)
        batch_ids = ids(base, runs)
        self._leases.lend(used if owners else [], owners)
        return batch, batch_ids, spent

    def _check_room(self) -> None:
        """Before waiting for a batch: with every slot of its lease held (by batches kept
        alive), none could come. Say so rather than wait for ever."""
        self._flush_release()
        if len(self._held) < self.lease_limit:
            return
        gc.collect()  # batches kept only by reference cycles go now
        self._flush_release()
        if len(self._held) >= self.lease_limit:
            raise LoaderError(
                stuck_message(self.name, self._leases.alive(), len(self._held), self.lease_limit)
            )

    def _flush_release(self) -> None:
        self._release.extend(self._leases.collect())  # batches whose last view died
        if self._release and self._socket is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._socket.send(encode("release", slots=self._release))
            self._held.difference_update(self._release)
            self._release = []

    def _note_stall(self, epoch: int, waited: float) -> None:
        """Say what this consumer waits for from a live producer that has sent it nothing."""
        have = len(self._received[epoch])
        print(
            f"the shared loader {self.name!r}: nothing from its producer (pid "
            f"{self.producer_pid}, alive) for {waited:.0f} s; this consumer waits for "
            f"{self.per_epoch - have} more of the {self.per_epoch} batches of the producer's "
            f"epoch {epoch}. A batch may take that long to make; else `gpudesk loader status "
            f"{self.name}` shows what the producer does (its consumers, what each lacks)",
            file=sys.stderr,
            flush=True,
        )

    # ----------------------------------------------------------------- failures
    def _check_producer(self) -> None:
        if not process_alive(self.producer_pid, self.producer_started):
            raise _ProducerLost(f"the producer for {self.name!r} (pid {self.producer_pid}) died")

    def close(self) -> None:
        if self._socket is not None:
            leave(self._socket)
            self._socket = None
        if self.ring is not None:  # batches handed out stay mapped: only the descriptor goes
            self.ring.close()
            self.ring = None
        self._mirror = None  # the same: batches handed out keep what they view of it

    def __enter__(self) -> SharedLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # ------------------------------------------------------------------- local
    def _local_dataset(self) -> Any:
        from gpudesk.loader.local import dataset_of

        return dataset_of(self)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration reads, as a DataLoader's sampler's `set_epoch`.

        Without a producer it sets the fallback's epoch: its order and its per-batch randomness
        (a resumed epoch, `load_state_dict`, is kept when it is the one set). With one, the
        stream decides: a consumer reads the producer's epochs in turn from where it joined, and
        the producer tells the dataset each batch's epoch itself. The call is then a check: the
        first one ties the script's epochs to the stream's, and a later one that does not follow
        them (an epoch skipped or read twice) is warned about (`Contract.check_epoch`)."""
        if self.mode == "local":
            if int(epoch) != self._local_epoch:
                self._local_start = 0  # another epoch than the resumed one: from its start
            self._local_epoch = int(epoch)
        else:
            self.contract.check_epoch(int(epoch), self.epoch)

    # ------------------------------------------------------------------ resume
    def state_dict(self) -> dict[str, Any]:
        """Where this loader is in its epoch, to save with a checkpoint (`resume.py`)."""
        from gpudesk.loader.resume import take

        return take(self).to_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume the epoch `state_dict()` was taken in: the next iteration yields exactly the
        rest of it (under a producer: its batches not yet handed out, asked for again)."""
        from gpudesk.loader.resume import restore

        restore(self, state_dict)

    def _iter_local(self) -> Iterator[Any]:
        """The fallback's epoch: a local DataLoader over the producer's plan (`local.py`)."""
        from gpudesk.loader.local import iterate

        yield from iterate(self)

    def _plan_batch(self) -> int:
        return self.contract.plan_batch(self.batch_size or 64)


class _ProducerLost(Exception):
    """Internal: the producer went away while a batch was awaited."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _insert(pieces: list[Piece], piece: Piece) -> None:
    """File a batch among those waiting, in the epoch's order (one that came late, because it
    was made again, goes before later ones not yet begun)."""
    first = 1 if pieces and pieces[0].start else 0
    position = next(
        (i for i in range(first, len(pieces)) if pieces[i].index > piece.index), len(pieces)
    )
    pieces.insert(position, piece)
