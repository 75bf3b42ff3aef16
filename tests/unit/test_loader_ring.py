"""The shared loader's slot ring, in one process: its layout, how batches are taken apart and put
back together, what a write puts where, and how a consumer assembles batches from slots."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
import torch

from gpudesk.loader.consumer import SharedLoader, _Piece
from gpudesk.loader.ring import ALIGN, Layout, Ring, RingError, flatten, plan_layout, unflatten


def sample_batch(ids: list[int], shape: tuple[int, ...] = (3,)) -> tuple[torch.Tensor, ...]:
    """(features filled with each sample's id, labels = ids), as the synthetic dataset's."""
    features = torch.stack([torch.full(shape, float(i)) for i in ids])
    return features, torch.tensor(ids, dtype=torch.int64)


@pytest.fixture
def ring() -> Iterator[Ring]:
    ring = Ring.create(plan_layout(sample_batch(list(range(8))), batch_size=8, slots=6))
    yield ring
    os.close(ring.fd)


def write(ring: Ring, slot: int, ids: list[int]) -> None:
    tensors, _ = flatten(sample_batch(ids))
    assert ring.write(slot, tensors, torch.tensor(ids)) == len(ids)


def test_layout_round_trips_through_json() -> None:
    batch = {
        "image": torch.zeros(4, 3, 5, 5, dtype=torch.uint8),
        "meta": (torch.zeros(4, dtype=torch.int32), [torch.zeros(4, 2)]),
    }
    layout = plan_layout(batch, batch_size=4, slots=5)
    again = Layout.from_dict(json.loads(json.dumps(layout.to_dict())))
    assert (again.slots, again.batch_size, again.size) == (5, 4, layout.size)
    assert again.fields == layout.fields
    assert [f.dtype for f in again.fields] == ["uint8", "int32", "float32", "int64"]
    assert again.fields[0].sample_shape == (3, 5, 5) and again.fields[-1].sample_shape == ()
    assert all(f.offset % ALIGN == 0 for f in again.fields)
    assert again.batch_bytes == 4 * (75 + 4 + 8 + 8)
    # The structure survives JSON's lists: it rebuilds the same nesting.
    tensors, _ = flatten(batch)
    rebuilt = unflatten(again.structure, tensors)
    assert set(rebuilt) == {"image", "meta"} and rebuilt["image"] is tensors[0]
    assert rebuilt["meta"][0] is tensors[1] and rebuilt["meta"][1][0] is tensors[2]
    assert Layout.from_dict(json.loads(json.dumps(again.to_dict()))) == again


def test_flatten_and_unflatten_tuples_lists_and_dicts() -> None:
    a, b, c = torch.zeros(2), torch.ones(2), torch.full((2,), 2.0)
    tensors, structure = flatten((a, {"x": b, "y": [c]}))
    assert len(tensors) == 3 and all(t is u for t, u in zip(tensors, [a, b, c], strict=True))
    rebuilt = unflatten(structure, tensors)
    assert isinstance(rebuilt, tuple) and rebuilt[0] is a
    assert rebuilt[1]["x"] is b and rebuilt[1]["y"][0] is c  # a list comes back a tuple
    tensors, structure = flatten(a)
    assert unflatten(structure, tensors) is a
    with pytest.raises(RingError, match=r"only tensors .* found str"):
        flatten((a, "label"))


def test_a_batch_written_by_one_mapping_is_read_by_another(ring: Ring) -> None:
    write(ring, 2, [10, 11, 12, 13, 14, 15, 16, 17])
    write(ring, 3, [20, 21, 22])  # a short, last batch
    other = Ring.attach(ring.layout, os.dup(ring.fd))
    try:
        (features, labels), ids = other.batch(2, 8)
        assert ids.tolist() == labels.tolist() == list(range(10, 18))
        assert torch.equal(features, sample_batch(list(range(10, 18)))[0])
        (features, labels), ids = other.batch(3, 3)
        assert ids.tolist() == [20, 21, 22] and features[:, 0].tolist() == [20.0, 21.0, 22.0]
        # The same pages: a write through one mapping shows through the other.
        write(ring, 2, [30] * 8)
        assert other.batch(2, 8)[1].tolist() == [30] * 8
        assert features.untyped_storage().data_ptr() == other.base.untyped_storage().data_ptr()
    finally:
        os.close(other.fd)


def test_a_batch_that_does_not_fit_the_layout_is_refused_clearly(ring: Ring) -> None:
    features, labels = sample_batch(list(range(8)), shape=(4,))
    with pytest.raises(RingError, match=r"shape \(8, 4\).*\(8, 3\) float32.*fixed shape"):
        ring.write(0, [features, labels], labels.clone())
    features, labels = sample_batch(list(range(8)))
    with pytest.raises(RingError, match="dtype float64"):
        ring.write(0, [features.double(), labels], labels.clone())
    with pytest.raises(RingError, match="does not fit a slot of 8"):
        ring.write(
            0,
            [torch.zeros(9, 3), torch.zeros(9, dtype=torch.int64)],
            torch.zeros(9, dtype=torch.int64),
        )
    with pytest.raises(RingError, match="has 1 tensors; the first had 2"):
        ring.write(0, [features], labels)
    with pytest.raises(RingError, match="batch size"):
        plan_layout((torch.zeros(8, 3), torch.zeros(7)), batch_size=8, slots=4)


def test_adjacent_slots_are_one_contiguous_view(ring: Ring) -> None:
    write(ring, 3, list(range(0, 8)))
    write(ring, 4, list(range(8, 16)))
    (features, labels), ids = ring.batch(3, 16, slots=2)
    assert ids.tolist() == labels.tolist() == list(range(16))
    assert features.is_contiguous() and features.shape == (16, 3)
    assert torch.equal(features, sample_batch(list(range(16)))[0])
    first, _ = ring.batch(3, 8)
    second, _ = ring.batch(4, 8)
    assert features.data_ptr() == first[0].data_ptr()
    assert second[0].data_ptr() == first[0].data_ptr() + 8 * 3 * 4  # right after slot 3's


def assembler(ring: Ring) -> SharedLoader:
    """A SharedLoader with just what `_assemble` uses (no producer)."""
    loader = SharedLoader.__new__(SharedLoader)
    loader.ring, loader.producer_batch = ring, ring.layout.batch_size
    return loader


def test_assembling_across_adjacent_slots_is_a_view_of_the_ring(ring: Ring) -> None:
    write(ring, 1, list(range(0, 8)))
    write(ring, 2, list(range(8, 16)))
    pieces = [_Piece(1, 0, 8, 0), _Piece(2, 0, 8, 1)]
    (features, _labels), ids, spent = assembler(ring)._assemble(pieces, 12, torch)
    assert ids.tolist() == list(range(12)) and spent == [1]
    assert features.untyped_storage().data_ptr() == ring.base.untyped_storage().data_ptr()
    assert pieces == [_Piece(2, 4, 8, 1)]


def test_assembling_never_reuses_samples_already_handed_out(ring: Ring) -> None:
    # After a producer restart, a batch half handed out comes back with its start past the
    # handed-out samples; when it lies right after another whole slot, a view of both slots
    # would hand those samples out again (and lose as many at its end).
    write(ring, 1, list(range(0, 8)))
    write(ring, 2, list(range(8, 16)))
    pieces = [_Piece(1, 0, 8, 0), _Piece(2, 4, 8, 1)]
    (features, labels), ids, spent = assembler(ring)._assemble(pieces, 12, torch)
    assert ids.tolist() == [*range(8), *range(12, 16)]
    assert labels.tolist() == ids.tolist() and features[:, 0].tolist() == ids.float().tolist()
    assert spent == [1, 2] and pieces == []
