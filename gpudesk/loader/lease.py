"""Batch lifetimes in a consumer: a ring slot goes back to the producer only once no tensor of a
batch that reads it is alive here.

A batch handed out is made of views of the ring (and of the staged mirror, `staging.py`). Views
of one big tensor share its storage, so a storage cannot tell which batch a tensor belongs to.
Each batch is therefore read through tensors of its own: `owned_view` wraps the mapping in a
small owner object and builds a tensor on it (through NumPy's array interface on the host,
CUDA's on a GPU), and torch keeps that owner alive for exactly as long as any tensor made from
it: the batch's fields, views of them, NumPy arrays of them, a prefetcher's reference. When the
last goes, the owner dies and its `weakref.finalize` queues the batch (`Leases.died`).
Finalizers may run in any thread (the garbage collector's, a DataLoader thread's), so they only
append to a deque; the consumer's own loop turns that into releases (`Leases.collect`) and says
them to the producer, on its next step.

A slot is counted once for the piece of it still waiting to be read and once for every batch
alive that reads it (a batch may span adjacent slots, and a slot may be shared by two batches
when the consumer's batch size is not the producer's); it is released when the count is zero.

The producer lends a consumer at most `need + LOOKAHEAD` slots (`ConsumerState.cap`, sent in
`welcome` as `lease`). A consumer that keeps more batches alive than that leaves no room for the
next: `stuck_message` says so, and what to do, instead of waiting for ever. With
`copy_when_held=True` the consumer instead reads a batch out into private memory
(`private_runs`) when handing it out as views would leave no room for the next one.
"""

from __future__ import annotations

import math
import weakref
from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpudesk.loader.batch import Piece
from gpudesk.loader.ring import ALIGN

if TYPE_CHECKING:
    import torch

Run = tuple[Piece, int, int]


class _Owner:
    """Exposes a uint8 tensor's memory to NumPy or CUDA's array interface; torch keeps it (and
    through it the mapping) alive for as long as any tensor built on it."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor
        spec: dict[str, Any] = {
            "shape": (int(tensor.numel()),),
            "typestr": "|u1",
            "data": (int(tensor.data_ptr()), False),
            "version": 3,
        }
        if tensor.is_cuda:
            # Version 2 names no stream: the producer synchronised its copy before it
            # announced the batch, so there is nothing to wait for.
            self.__cuda_array_interface__ = {**spec, "version": 2}
        else:
            self.__array_interface__ = spec


def owned_view(base: torch.Tensor) -> tuple[torch.Tensor, object]:
    """A tensor over the same memory as `base` (a 1-D uint8 mapping) with a storage of its own,
    and the object whose death says that no tensor of it is alive any more."""
    import numpy as np
    import torch

    owner = _Owner(base)
    if base.is_cuda:
        view = torch.as_tensor(owner, device=base.device)
    else:
        view = torch.from_numpy(np.asarray(owner))
    return view, owner


class Leases:
    """Which slots this consumer holds, and why: pieces waiting, batches alive."""

    def __init__(self) -> None:
        self.refs: dict[int, int] = {}  # slot -> the piece waiting (1) + batches alive reading it
        self.batches: dict[int, tuple[int, tuple[int, ...]]] = {}  # lease -> (owners, slots)
        self.died: deque[tuple[int, int]] = deque()  # (connection, lease), from finalizers
        self.connection = 0
        self.serial = 0

    def reset(self) -> None:
        """A new connection: the slots of the ring read before are none of the new producer's
        (batches of it still alive keep their mapping, and nothing else)."""
        self.connection += 1
        self.refs.clear()
        self.batches.clear()
        self.died.clear()

    def hold(self, slot: int) -> None:
        """A batch received into `slot`, waiting to be read."""
        self.refs[slot] = self.refs.get(slot, 0) + 1

    def spent(self, slots: list[int]) -> list[int]:
        """Pieces read to their end (or let go): the slots now free to release."""
        return [slot for slot in slots if self._drop(slot)]

    def lend(self, slots: list[int], owners: list[object]) -> None:
        """A batch handed out over `slots`, alive while any of `owners` is."""
        if not slots:
            return
        self.serial += 1
        lease = self.serial
        unique = tuple(dict.fromkeys(slots))
        for slot in unique:
            self.refs[slot] = self.refs.get(slot, 0) + 1
        self.batches[lease] = (len(owners), unique)
        for owner in owners:
            done = weakref.finalize(owner, self.died.append, (self.connection, lease))
            done.atexit = False  # at exit nothing is released: the producer sees us go

    def collect(self) -> list[int]:
        """Slots free to release since the last call: those of batches whose last view died."""
        free = []
        while self.died:
            connection, lease = self.died.popleft()
            if connection != self.connection or lease not in self.batches:
                continue  # a batch of a ring read before a reconnection
            owners, slots = self.batches[lease]
            if owners > 1:
                self.batches[lease] = (owners - 1, slots)
                continue
            del self.batches[lease]
            free += [slot for slot in slots if self._drop(slot)]
        return free

    def _drop(self, slot: int) -> bool:
        left = self.refs.get(slot, 0) - 1
        if left > 0:
            self.refs[slot] = left
            return False
        self.refs.pop(slot, None)
        return True

    def lent(self) -> set[int]:
        """Slots read by batches alive."""
        return {slot for _, slots in self.batches.values() for slot in slots}

    def alive(self) -> int:
        return len(self.batches)


def stuck_message(name: str, alive: int, held: int, limit: int) -> str:
    return (
        f"the shared loader {name!r} cannot hand out its next batch: this consumer keeps "
        f"{alive} batch{'es' if alive != 1 else ''} alive, in {held} of the {limit} ring slots "
        "its producer lends it, and a slot is reused only once no tensor of its batch is alive "
        "(batches are views of the shared ring, never silently overwritten). Keep fewer "
        "batches alive at once (a one-batch-ahead prefetcher fits), copy the ones you keep "
        "with `.clone()`, or pass copy_when_held=True to SharedLoader to get private copies "
        "once the limit is reached (a copy per batch kept, as a DataLoader makes)"
    )


def private_runs(
    runs: list[Run], base: torch.Tensor, staged: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None, list[Run]]:
    """The runs' batches copied out of the ring (and the mirror) into private memory, laid out
    field by field with the same field of consecutive batches back to back, so the batch is
    assembled from them exactly as from the ring (one view across adjacent batches)."""
    import torch

    pieces = list({id(piece): piece for piece, _, _ in runs}.values())  # distinct, in order
    offsets: dict[int, list[int]] = {id(piece): [] for piece in pieces}
    end = 0
    for index in range(max(len(piece.meta.fields) for piece in pieces)):
        end = math.ceil(end / ALIGN) * ALIGN
        for piece in pieces:
            if index < len(piece.meta.fields):
                offsets[id(piece)].append(end)
                end += piece.meta.fields[index].nbytes
    host = torch.empty(max(end, 1), dtype=torch.uint8)
    mirror = None if staged is None else torch.empty_like(host, device=staged.device)
    moved: dict[int, Piece] = {}
    for piece in pieces:
        fields = []
        for field, offset in zip(piece.meta.fields, offsets[id(piece)], strict=True):
            source = slice(field.offset, field.offset + field.nbytes)
            host[offset : offset + field.nbytes].copy_(base[source])
            if mirror is not None and staged is not None:
                mirror[offset : offset + field.nbytes].copy_(staged[source])
            fields.append(replace(field, offset=offset))
        meta = replace(piece.meta, fields=tuple(fields))
        moved[id(piece)] = replace(piece, meta=meta)
    return host, mirror, [(moved[id(piece)], start, count) for piece, start, count in runs]


def no_room_after(
    leases: Leases, used: list[int], waiting: set[int], need: int, limit: int
) -> bool:
    """Whether handing out a batch over `used` as views would leave too little of the lease for
    the next batch (`need` slots, some of them maybe among the `waiting` pieces) if no batch
    alive died meanwhile."""
    kept = leases.lent() | set(used)
    return len(kept - waiting) + need > limit


def lease_info(lease: int | None, batch_size: int, per_slot: int) -> tuple[int, int]:
    """(need, limit) for this consumer: the limit as the producer's welcome says it (`lease`; a
    producer from before it did lends the same, by the same rule)."""
    from gpudesk.loader.consumer_state import LOOKAHEAD, need_slots

    need = need_slots(batch_size, per_slot)
    return need, lease or need + LOOKAHEAD
