"""The producer's slots: which batch each part of the ring holds, and who still reads it.

A slot is a set of regions of the ring, one per field of a batch (`batch.py`). For a dataset of
fixed-shape samples the first batch lays every slot out field by field, so that the same field of
adjacent slots is contiguous and a consumer reading two slots at once gets one view. A field that
outgrows its region (variable-size samples) gets a larger one at the end of the ring, twice the
old size at least, so a slot is moved only a few times.

A slot is in one of these states:
- reserved: a request for a batch is in flight and its worker writes there (`reserve`);
- held: consumers were given its batch and have not released it (`refs`);
- pinned: its batch was made and consumers that still need it could not take it yet (each
  consumer keeps only its few latest pins: a consumer far behind cannot hog the ring);
- free: none of those. Its batch stays readable until the slot is reserved again, which is
  the ring's look-back: a consumer that fell behind gets it from here instead of a new decode.
Free slots are reused oldest first (round robin), which also keeps batches adjacent in order.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from dataclasses import field as dataclass_field

from gpudesk.loader.batch import BatchMeta, Packed
from gpudesk.loader.fetch import Key
from gpudesk.loader.ring import Ring

RAGGED_HEADROOM = 2  # a variable-size field's first regions: this many times its first batch


@dataclass
class Slot:
    refs: int = 0  # consumers holding it
    reserved: bool = False
    pinned: set[bytes] = dataclass_field(default_factory=set)  # consumers it is kept for
    key: Key | None = None  # the batch it holds
    meta: BatchMeta | None = None

    @property
    def free(self) -> bool:
        return not (self.refs or self.reserved or self.pinned)


class SlotTable:
    def __init__(self, ring: Ring, count: int, batch_size: int) -> None:
        self.ring = ring
        self.batch_size = batch_size
        self.slots: list[Slot] = []
        self.regions: list[list[tuple[int, int]]] = []  # per slot, per field: (offset, capacity)
        self.template: list[int] = []  # per field: the capacity a new slot gets
        self.where: dict[Key, int] = {}  # batch -> the slot holding it
        self.pins: dict[bytes, deque[int]] = {}  # per consumer: slots kept for it, oldest first
        self.next = 0  # where the round robin goes on
        self.bytes_written = 0  # into the ring, by workers and by the producer
        self.bytes_copied = 0  # of that, what the producer copied (fields a worker could not)
        self.grow(count)

    def grow(self, count: int) -> None:
        """At least `count` slots (new ones are laid out like the first)."""
        added = range(len(self.slots), count)
        self.slots += [Slot() for _ in added]
        self.regions += [[] for _ in added]
        self._allocate(added)

    def _allocate(self, slots: range) -> None:
        """Regions for `slots` (which have none), field by field, each field's regions in one
        block: so the same field of adjacent slots is contiguous."""
        if not slots:
            return
        for capacity in self.template:
            start = self.ring.allocate(capacity * len(slots))
            for number, slot in enumerate(slots):
                self.regions[slot].append((start + number * capacity, capacity))

    # ------------------------------------------------------------------------- states
    def reserve(self) -> int | None:
        """A free slot for a batch about to be made (its old batch is forgotten), or None."""
        slot = self._free()
        if slot is not None:
            self._forget(slot)
            self.slots[slot].reserved = True
        return slot

    def take_free(self) -> int | None:
        """A free slot for a batch made without one, or None."""
        slot = self._free()
        if slot is not None:
            self._forget(slot)
        return slot

    def _free(self) -> int | None:
        count = len(self.slots)
        for offset in range(count):
            slot = (self.next + offset) % count
            if self.slots[slot].free:
                self.next = (slot + 1) % count
                return slot
        return None

    def _forget(self, slot: int) -> None:
        state = self.slots[slot]
        if state.key is not None and self.where.get(state.key) == slot:
            del self.where[state.key]
        state.key, state.meta = None, None

    def pin(self, slot: int, owner: bytes, limit: int) -> None:
        """Keep a batch for a consumer that still needs it; past `limit` pins for that consumer
        its oldest goes back to being merely in the look-back."""
        self.slots[slot].pinned.add(owner)
        pins = self.pins.setdefault(owner, deque())
        pins.append(slot)
        while len(pins) > limit:
            self.slots[pins.popleft()].pinned.discard(owner)

    def unpin(self, slot: int, owner: bytes) -> None:
        pinned = self.slots[slot].pinned
        if owner in pinned:
            pinned.discard(owner)
            self.pins[owner].remove(slot)

    def unpin_all(self, owner: bytes) -> None:
        for slot in self.pins.pop(owner, ()):
            self.slots[slot].pinned.discard(owner)

    def used(self) -> int:
        return sum(1 for s in self.slots if s.refs)

    @property
    def slot_bytes(self) -> int:
        return sum(self.template)

    # ---------------------------------------------------------------------- regions
    def request_regions(self, slot: int) -> tuple[tuple[int, int], ...]:
        return tuple(self.regions[slot])

    def place(self, slot: int, packed: Packed) -> BatchMeta:
        """Record a made batch in `slot`, copying in the fields its worker could not write."""
        import torch

        meta = packed.meta
        if not self.template:
            self._lay_out(meta)
        for index, field in enumerate(meta.fields):
            if field.offset >= 0:
                continue
            offset = self._region(slot, index, field.nbytes)
            data = packed.loose[index].reshape(-1).view(torch.uint8)
            self.ring.view(offset, field.nbytes).copy_(data)
            self.bytes_copied += field.nbytes
            meta = meta.placed(index, offset)
        self.bytes_written += meta.nbytes
        state = self.slots[slot]
        state.reserved = False
        state.key, state.meta = packed.key, meta
        self.where[packed.key] = slot
        return meta

    def _lay_out(self, meta: BatchMeta) -> None:
        """Size every slot from the first batch: exactly for fixed-shape fields, with headroom
        for variable-size ones."""
        for field in meta.fields:
            full = math.ceil(field.nbytes * self.batch_size / meta.count)
            capacity = full if field.uniform else RAGGED_HEADROOM * full
            # A whole number of its items: the next slot's region is aligned for them too.
            size = field.itemsize
            self.template.append(max(size, (capacity + size - 1) // size * size))
        self._allocate(range(len(self.slots)))

    def _region(self, slot: int, index: int, nbytes: int) -> int:
        regions = self.regions[slot]
        if index < len(regions) and regions[index][1] >= nbytes:
            return regions[index][0]
        old = regions[index][1] if index < len(regions) else 0
        capacity = max(nbytes, RAGGED_HEADROOM * old)  # a region of its own: ALIGNed
        region = (self.ring.allocate(capacity), capacity)
        while len(regions) <= index:
            regions.append((0, 0))
        regions[index] = region
        while len(self.template) <= index:
            self.template.append(0)
        self.template[index] = max(self.template[index], capacity)
        return region[0]
