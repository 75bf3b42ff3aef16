"""The shared loader's ring, in one process: how samples are laid into it (`batch.pack`), how
the producer sizes and places slots (`slots.SlotTable`), and how a consumer reads batches back
out of it, compared with what torch's own `default_collate` makes of the same samples."""

from __future__ import annotations

import errno
import gc
import mmap
import os
import random
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import default_collate

from gpudesk.loader.batch import (
    BatchError,
    BatchMeta,
    Packed,
    Piece,
    collate,
    ids,
    pack,
    samples,
)
from gpudesk.loader.consumer import SharedLoader
from gpudesk.loader.fetch import batch_seed, seeded
from gpudesk.loader.lease import Leases
from gpudesk.loader.protocol import LoaderError
from gpudesk.loader.ring import Ring
from gpudesk.loader.slots import SlotTable


def sample(i: int, shape: tuple[int, ...] = (3,)) -> tuple[torch.Tensor, int]:
    """(features filled with the sample's id, its id as a Python int), as a dataset returns."""
    return torch.full(shape, float(i)), i


@pytest.fixture
def table() -> Iterator[SlotTable]:
    ring = Ring.create()
    yield SlotTable(ring, 6, batch_size=8)
    ring.close()


def put(
    table: SlotTable, slot: int, key: tuple[int, int], batch: list[Any], ids: list[int]
) -> Piece:
    """Pack `batch` as a producer's worker would (into the slot's regions where they fit) and
    place it; the piece a consumer would get for it."""
    regions = table.request_regions(slot)

    def place(field: int, nbytes: int) -> tuple[int, torch.Tensor] | None:
        if field >= len(regions) or nbytes > regions[field][1]:
            return None
        return regions[field][0], table.ring.view(regions[field][0], nbytes)

    meta = table.place(slot, pack(key, batch, ids, place))
    return Piece(slot, BatchMeta.from_wire(meta.to_wire()), 0, meta.count, key[1])


def base(table: SlotTable) -> torch.Tensor:
    assert table.ring.base is not None
    return table.ring.base


def test_a_fixed_shape_batch_reads_back_as_default_collate_makes_it_and_as_views(
    table: SlotTable,
) -> None:
    batch = [
        ({"x": sample(i)[0], "n": np.full(2, i, dtype=np.int32)}, i, i / 2, i % 2 == 0)
        for i in range(8)
    ]
    piece = put(table, 0, (0, 0), batch, list(range(8)))
    got, copies = collate(base(table), [(piece, 0, 8)])
    want = default_collate(batch)
    assert copies == 0 and isinstance(got, list) and isinstance(want, list)
    assert torch.equal(got[0]["x"], want[0]["x"]) and torch.equal(got[0]["n"], want[0]["n"])
    for mine, torchs in zip(got[1:], want[1:], strict=True):
        assert mine.dtype == torchs.dtype and torch.equal(mine, torchs)  # int64, float64, bool
    for tensor in (got[0]["x"], got[0]["n"], got[1], got[2], got[3]):
        assert tensor.untyped_storage().data_ptr() == base(table).untyped_storage().data_ptr()
    # Part of a batch is a view of part of it; the samples come back as the dataset made them.
    part, _ = collate(base(table), [(piece, 2, 3)])
    assert part[1].tolist() == [2, 3, 4]
    [again] = samples(base(table), [(piece, 5, 1)])
    assert isinstance(again, tuple) and again[1:] == (5, 2.5, False)
    assert torch.equal(again[0]["x"], sample(5)[0]) and again[0]["n"].tolist() == [5, 5]
    assert ids(base(table), [(piece, 0, 8)]).tolist() == list(range(8))


def test_variable_size_samples_read_back_whole_and_a_batch_outgrowing_its_slot_moves(
    table: SlotTable,
) -> None:
    def text(i: int, length: int) -> tuple[torch.Tensor, str]:
        return torch.arange(length, dtype=torch.int64) + i, f"sample {i}" * (length % 3)

    first = [text(i, 1 + i % 4) for i in range(8)]
    piece = put(table, 1, (0, 0), first, list(range(8)))
    back = samples(base(table), [(piece, 0, 8)])
    assert [b[1] for b in back] == [f[1] for f in first]
    assert all(torch.equal(b[0], f[0]) for b, f in zip(back, first, strict=True))
    # default_collate cannot stack them, and neither can a consumer without a collate_fn.
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate(first)
    with pytest.raises(RuntimeError, match="equal size"):
        collate(base(table), [(piece, 0, 8)])
    # Far longer samples than the first batch's do not fit the slot: the producer places them
    # in a new region at the end of the ring, and the slot keeps it.
    before = table.request_regions(1)[0]
    long = [text(i, 500 + i) for i in range(8)]
    piece = put(table, 1, (0, 1), long, list(range(8)))
    moved = table.request_regions(1)[0]
    assert moved[0] > before[0] and moved[1] >= sum(500 + i for i in range(8)) * 8
    assert table.bytes_copied > 0
    back = samples(base(table), [(piece, 0, 8)])
    assert all(torch.equal(b[0], f[0]) for b, f in zip(back, long, strict=True))


def test_samples_of_one_batch_must_share_a_structure_and_carry_only_what_the_ring_can() -> None:
    with pytest.raises(BatchError, match="different structures"):
        pack((0, 0), [(torch.zeros(2), 1), (torch.zeros(2),)], [0, 1], None)
    with pytest.raises(BatchError, match="carries tensors, NumPy arrays, numbers and strings"):
        pack((0, 0), [(torch.zeros(2), object())], [0], None)
    with pytest.raises(BatchError, match="one dtype per field"):
        pack((0, 0), [torch.zeros(2), torch.zeros(2, dtype=torch.float64)], [0, 1], None)
    # Without a slot every field comes back loose, for the producer to place: nothing is lost.
    packed = pack((0, 0), [sample(0), sample(1)], [0, 1], None)
    assert isinstance(packed, Packed) and sorted(packed.loose) == [0, 1, 2]
    assert all(f.offset == -1 for f in packed.meta.fields)


def test_the_first_batch_lays_slots_out_field_by_field_so_adjacent_slots_are_one_view(
    table: SlotTable,
) -> None:
    first = put(table, 3, (0, 0), [sample(i) for i in range(8)], list(range(8)))
    second = put(table, 4, (0, 1), [sample(i) for i in range(8, 16)], list(range(8, 16)))
    # Each field's regions start aligned for its items (float32 features, int64 ids).
    assert all(offset % 8 == 0 for regions in table.regions for offset, _ in regions)
    batch, copies = collate(base(table), [(first, 0, 8), (second, 0, 8)])
    assert copies == 0 and batch[1].tolist() == list(range(16))
    assert batch[0].is_contiguous() and torch.equal(batch[0][:, 0], torch.arange(16.0))
    # A run that does not start where the one before ends is copied, never misread: after a
    # producer restart a half-used batch comes back with its start past what was handed out.
    batch, copies = collate(base(table), [(first, 0, 8), (second, 4, 4)])
    assert copies == 2 and batch[1].tolist() == [*range(8), *range(12, 16)]
    assert batch[0][:, 0].tolist() == [float(i) for i in [*range(8), *range(12, 16)]]


def test_a_second_mapping_sees_the_same_pages_and_growing_keeps_old_views(table: SlotTable) -> None:
    piece = put(table, 0, (0, 0), [sample(i) for i in range(8)], list(range(8)))
    other = Ring.attach(os.dup(table.ring.reader_fd))
    try:
        assert other.base is not None
        view, _ = collate(other.base, [(piece, 0, 8)])
        assert view[1].tolist() == list(range(8))
        put(table, 0, (0, 1), [sample(i) for i in range(20, 28)], list(range(20, 28)))
        assert view[1].tolist() == list(range(20, 28))  # the same pages
        table.ring.allocate(1 << 20)  # the producer grows the ring...
        other.ensure(table.ring.end)  # ...and a consumer maps it again
        assert view[1].tolist() == list(range(20, 28))  # what it read before is still good
        assert other.base is not None and other.size >= table.ring.end
        assert view[1].untyped_storage().data_ptr() != other.base.untyped_storage().data_ptr()
    finally:
        other.close()


def test_slots_in_use_are_never_reused_and_pins_are_kept_per_consumer(table: SlotTable) -> None:
    put(table, 0, (0, 0), [sample(i) for i in range(8)], list(range(8)))
    table.slots[0].refs = 1  # given to a consumer
    table.pin(1, b"a", limit=1)
    table.pin(2, b"a", limit=1)  # a's second pin: its first goes back to the look-back
    table.pin(3, b"b", limit=1)
    reserved = [table.reserve() for _ in range(4)]
    assert sorted(r for r in reserved if r is not None) == [1, 4, 5]
    assert reserved[-1] is None  # nothing free: the producer places that batch later
    assert table.where == {(0, 0): 0}  # the held batch is still there for late readers
    table.unpin_all(b"a")
    assert table.reserve() == 2


def test_batch_seeds_are_fixed_per_batch_and_a_training_process_keeps_its_random_state() -> None:
    assert batch_seed(0, 1, 2) == batch_seed(0, 1, 2)
    assert len({batch_seed(s, e, j) for s in (0, 1) for e in (0, 1) for j in (0, 1)}) == 8
    torch.manual_seed(7)
    random.seed(7)
    np.random.seed(7)
    expected = (torch.rand(1), random.random(), np.random.rand())
    torch.manual_seed(7)
    random.seed(7)
    np.random.seed(7)
    with seeded(batch_seed(0, 0, 0), restore=True):
        drawn = (torch.rand(1), random.random(), np.random.rand())
    with seeded(batch_seed(0, 0, 0), restore=True):
        assert (torch.rand(1), random.random(), np.random.rand()) == drawn
    assert (torch.rand(1), random.random(), np.random.rand()) == expected


def assembler(table: SlotTable, collate_fn: Any = None) -> SharedLoader:
    """A SharedLoader with just what `_assemble` uses (no producer)."""
    loader = SharedLoader.__new__(SharedLoader)
    loader.ring, loader.collate_fn = table.ring, collate_fn
    loader.copy_when_held, loader._leases, loader.copied_batches = False, Leases(), 0
    return loader


def test_assembling_takes_samples_across_slots_once_and_hands_them_to_a_collate_fn(
    table: SlotTable,
) -> None:
    pieces = [
        put(table, 1, (0, 0), [sample(i) for i in range(8)], list(range(8))),
        put(table, 2, (0, 1), [sample(i) for i in range(8, 16)], list(range(8, 16))),
    ]
    batch, batch_ids, spent = assembler(table)._assemble(pieces, 12)
    assert batch_ids.tolist() == batch[1].tolist() == list(range(12)) and spent == [1]
    assert table.ring.holds(batch[0])  # a view: of the batch's own mapping of the ring
    assert len(pieces) == 1 and pieces[0].start == 4
    seen: list[list[Any]] = []
    batch, batch_ids, spent = assembler(table, lambda s: seen.append(s) or len(s))._assemble(
        pieces, 4
    )
    assert batch == 4 and batch_ids.tolist() == list(range(12, 16)) and spent == [2]
    assert [s[1] for s in seen[0]] == list(range(12, 16))
    assert all(table.ring.holds(s[0]) for s in seen[0])


def test_a_consumer_gets_a_read_only_descriptor_of_a_0600_segment_that_cannot_shrink(
    table: SlotTable,
) -> None:
    put(table, 0, (0, 0), [sample(i) for i in range(8)], list(range(8)))
    ring = table.ring
    assert stat.S_IMODE(os.fstat(ring.fd).st_mode) == 0o600  # memfd_create makes it 0777
    assert os.fstat(ring.reader_fd).st_ino == os.fstat(ring.fd).st_ino
    with pytest.raises(PermissionError):
        mmap.mmap(ring.reader_fd, 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    with pytest.raises(OSError):
        os.pwrite(ring.reader_fd, b"x", 0)
    with pytest.raises(PermissionError):  # F_SEAL_SHRINK: not even by the producer
        os.ftruncate(ring.fd, 0)
    ring.allocate(1 << 16)  # growing is how it works


def test_a_consumer_refuses_what_is_not_a_sealed_ring_and_bytes_past_its_end(
    table: SlotTable, tmp_path: Path
) -> None:
    """A member's producer hands over the descriptor: a plain file, a pipe or a memfd that can
    shrink would end a job with SIGBUS when read past its end; refused in one line."""
    plain = tmp_path / "plain"
    plain.write_bytes(b"\0" * 4096)
    unsealed = os.memfd_create("unsealed")
    os.ftruncate(unsealed, 4096)
    read_end, write_end = os.pipe()
    os.close(write_end)
    for fd in (os.open(plain, os.O_RDONLY), unsealed, read_end):
        with pytest.raises(LoaderError, match="not a shared ring sealed against shrinking"):
            Ring.attach(fd)
        with pytest.raises(OSError):
            os.fstat(fd)  # closed by the refusal
    consumer = Ring.attach(os.dup(table.ring.reader_fd))
    try:
        with pytest.raises(LoaderError, match="named bytes up to"):
            consumer.ensure(table.ring.end + 1)
    finally:
        consumer.close()


def regions(piece: Piece) -> list[tuple[int, int]]:
    return [(f.offset, f.nbytes) for f in piece.meta.fields]


def test_a_batch_changed_in_place_changes_only_this_process_copy_of_its_pages(
    table: SlotTable,
) -> None:
    """Slots 0 and 1 share pages here (their regions are a few bytes): slot 1's next batch is
    read through a fresh mapping once slot 0's batch was changed in place, and the batch that
    was changed keeps its change."""
    first = put(table, 0, (0, 0), [sample(i) for i in range(8)], list(range(8)))
    neighbour = put(table, 1, (0, 1), [sample(i) for i in range(8, 16)], list(range(8, 16)))
    mine = Ring.attach(os.dup(table.ring.reader_fd))  # this job
    theirs = Ring.attach(os.dup(table.ring.reader_fd))  # another job on the same producer
    try:
        mapping = mine.batch_base(regions(first))
        assert mine.batch_base(regions(neighbour)) is mapping  # nothing written: the same one
        batch, _ = collate(mapping, [(first, 0, 8)])
        batch[0].fill_(-1.0)  # a script's `x.sub_(mean)`
        assert mine.holds(batch[0]) and bool(batch[0].eq(-1.0).all())
        want = [[float(i)] * 3 for i in range(8)]
        assert collate(theirs.batch_base(regions(first)), [(first, 0, 8)])[0][0].tolist() == want
        assert collate(base(table), [(first, 0, 8)])[0][0].tolist() == want  # the ring's own
        # The producer reuses slot 1, whose pages this job's write copied: read anew.
        neighbour = put(table, 1, (0, 2), [sample(i) for i in range(20, 28)], list(range(20, 28)))
        fresh = mine.batch_base(regions(neighbour))
        assert fresh is not mapping
        assert collate(fresh, [(neighbour, 0, 8)])[0][1].tolist() == list(range(20, 28))
        assert bool(batch[0].eq(-1.0).all())  # the changed batch keeps its change
        del batch, mapping
        gc.collect()
        assert list(mine.mapped) == [fresh.data_ptr()]  # the written mapping went with its batch
    finally:
        mine.close()
        theirs.close()


def test_a_consumer_that_may_not_commit_a_private_mapping_hands_out_copies(
    table: SlotTable, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """vm.overcommit_memory=2 charges a private writable mapping the ring's whole size: where
    the kernel refuses it (ENOMEM), the ring is mapped read-only and batches are copies."""
    piece = put(table, 0, (0, 0), [sample(i) for i in range(8)], list(range(8)))
    real = mmap.mmap

    def strict(fd: int, length: int, flags: int, prot: int) -> mmap.mmap:
        if flags & mmap.MAP_PRIVATE and prot & mmap.PROT_WRITE:
            raise OSError(errno.ENOMEM, "Cannot allocate memory")
        return real(fd, length, flags, prot)

    monkeypatch.setattr(mmap, "mmap", strict)
    consumer = Ring.attach(os.dup(table.ring.reader_fd))
    try:
        assert consumer.copies
        assert "batches are private copies" in caplog.text
        loader = assembler(table)
        loader.ring = consumer
        batch, batch_ids, _ = loader._assemble([piece], 8)
        assert batch_ids.tolist() == list(range(8))
        assert not consumer.holds(batch[0]) and loader.copied_batches == 1  # a copy
        batch[0].fill_(-1.0)
        assert collate(base(table), [(piece, 0, 8)])[0][0][:, 0].tolist() == list(range(8))
    finally:
        consumer.close()


def test_without_pagemap_every_batch_is_read_through_a_fresh_mapping(
    table: SlotTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = put(table, 0, (0, 0), [sample(i) for i in range(8)], list(range(8)))

    def no_pagemap(self: Ring, regions: list[tuple[int, int]]) -> bool:
        raise FileNotFoundError(2, "No such file or directory", "/proc/self/pagemap")

    monkeypatch.setattr(Ring, "_written", no_pagemap)
    consumer = Ring.attach(os.dup(table.ring.reader_fd))
    try:
        mapping = consumer.batch_base(regions(first))
        batch, _ = collate(mapping, [(first, 0, 8)])
        batch[1].zero_()  # the ids, changed in place
        first = put(table, 0, (0, 1), [sample(i) for i in range(20, 28)], list(range(20, 28)))
        fresh = consumer.batch_base(regions(first))
        assert fresh is not mapping
        assert collate(fresh, [(first, 0, 8)])[0][1].tolist() == list(range(20, 28))
    finally:
        consumer.close()
