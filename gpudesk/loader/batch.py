"""A batch of samples in the shared ring: how it is described, laid in, and read back out.

A sample is a tensor, a NumPy array, an int, float, bool or str, or a tuple, list or dict of
them, nested. Its leaves, in order, are its *fields*; the samples of one batch must share a
structure. Field `f` of a batch lies in one region of the ring:

- **uniform**: every sample's leaf has the same shape and dtype. The leaves are stored stacked,
  `[n, *shape]`, which is what torch's `default_collate` makes of them, so a consumer without a
  `collate_fn` gets a view of the ring.
- **ragged**: the shapes differ (text, detection targets). The leaves are stored back to back,
  each sample's shape in the metadata; a consumer hands views of them to its `collate_fn`.

Python numbers are stored as a tensor of the dtype `default_collate` gives them (int64, float64,
bool), strings as their UTF-8 bytes. The sample ids (int64) follow as a last field. What travels
in a control message is only `BatchMeta`: per field its kind, dtype, offset and shape(s), and the
structure. The data itself is only ever in the ring, and is never pickled.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

KINDS = ("tensor", "ndarray", "int", "float", "bool", "str")
Shape = tuple[int, ...]


class BatchError(Exception):
    """Samples that cannot be laid into the ring (the message says why and what to do)."""


@dataclass(frozen=True)
class FieldMeta:
    kind: str  # one of KINDS
    dtype: str  # torch dtype name without "torch.", e.g. "uint8"
    offset: int  # where its bytes start in the ring; -1 while not placed there yet
    shape: Shape | None  # every sample's shape, when uniform
    shapes: tuple[Shape, ...] | None  # each sample's shape, when ragged
    nbytes: int

    @property
    def uniform(self) -> bool:
        return self.shape is not None

    @property
    def itemsize(self) -> int:
        return _itemsize(self.dtype)

    def to_wire(self) -> list[Any]:
        return [
            self.kind,
            self.dtype,
            self.offset,
            None if self.shape is None else list(self.shape),
            None if self.shapes is None else [list(s) for s in self.shapes],
            self.nbytes,
        ]

    @classmethod
    def from_wire(cls, data: list[Any]) -> FieldMeta:
        kind, dtype, offset, shape, shapes, nbytes = data
        return cls(
            str(kind),
            str(dtype),
            int(offset),
            None if shape is None else tuple(int(s) for s in shape),
            None if shapes is None else tuple(tuple(int(x) for x in s) for s in shapes),
            int(nbytes),
        )


@dataclass(frozen=True)
class BatchMeta:
    """What a consumer needs to find a batch in the ring: small enough for a control message."""

    count: int  # samples
    structure: Any  # a sample's structure over its field numbers (see `_describe`)
    fields: tuple[FieldMeta, ...]  # a sample's leaves, then the ids

    @property
    def nbytes(self) -> int:
        return sum(f.nbytes for f in self.fields)

    def placed(self, index: int, offset: int) -> BatchMeta:
        fields = list(self.fields)
        fields[index] = replace(fields[index], offset=offset)
        return replace(self, fields=tuple(fields))

    def to_wire(self) -> list[Any]:
        return [self.count, self.structure, [f.to_wire() for f in self.fields]]

    @classmethod
    def from_wire(cls, data: list[Any]) -> BatchMeta:
        count, structure, fields = data
        return cls(int(count), structure, tuple(FieldMeta.from_wire(f) for f in fields))


@dataclass
class Packed:
    """A batch as a worker hands it to the producer: where it wrote each field, and the fields
    it could not write into the ring (no slot, or the slot's region too small) as tensors for
    the producer to place."""

    key: tuple[int, int]
    meta: BatchMeta
    loose: dict[int, torch.Tensor]


@functools.cache
def _itemsize(dtype: str) -> int:
    import torch

    return int(torch.empty((), dtype=getattr(torch, dtype)).element_size())


# ------------------------------------------------------------------------------ structure
def _describe(sample: Any, leaves: list[Any]) -> Any:
    """The structure of a sample: a field number for a leaf, ["tuple"|"list", [...]] or
    ["dict", [[key, ...], ...]]; its leaves appended to `leaves` in order."""
    import numpy as np
    import torch

    if isinstance(sample, (torch.Tensor, np.ndarray, bool, int, float, str)):
        leaves.append(sample)
        return len(leaves) - 1
    if isinstance(sample, tuple):
        return ["tuple", [_describe(v, leaves) for v in sample]]
    if isinstance(sample, list):
        return ["list", [_describe(v, leaves) for v in sample]]
    if isinstance(sample, dict):
        for key in sample:
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raise BatchError(
                    f"a sample's dict has the key {key!r}: a shared loader carries dicts with "
                    "str or int keys only"
                )
        return ["dict", [[k, _describe(v, leaves)] for k, v in sample.items()]]
    raise BatchError(
        f"a sample holds a {type(sample).__name__}: a shared loader carries tensors, NumPy "
        "arrays, numbers and strings, in tuples, lists or dicts; convert it in the dataset"
    )


def _kind(leaf: Any) -> str:
    import numpy as np
    import torch

    if isinstance(leaf, torch.Tensor):
        return "tensor"
    if isinstance(leaf, np.ndarray):
        return "ndarray"
    if isinstance(leaf, bool):
        return "bool"
    if isinstance(leaf, int):
        return "int"
    if isinstance(leaf, float):
        return "float"
    return "str"


def _as_tensors(kind: str, leaves: list[Any]) -> list[torch.Tensor] | torch.Tensor:
    """A field's leaves as tensors (numbers: one tensor of them all)."""
    import numpy as np
    import torch

    if kind == "tensor":
        return [t.detach() for t in leaves]
    if kind == "ndarray":
        try:
            return [torch.from_numpy(np.ascontiguousarray(a)) for a in leaves]
        except TypeError as exc:
            raise BatchError(f"a sample holds a NumPy array torch cannot take: {exc}") from None
    if kind == "str":
        # Through a buffer, not a list of its bytes as Python ints (an object per character).
        return [torch.from_numpy(np.frombuffer(bytearray(s.encode()), np.uint8)) for s in leaves]
    dtype = {"int": torch.int64, "float": torch.float64, "bool": torch.bool}[kind]
    return torch.tensor(leaves, dtype=dtype)


# --------------------------------------------------------------------------------- packing
# (field, nbytes) -> (offset, the uint8 view of the ring there), or None: keep it loose
Place = Callable[[int, int], "tuple[int, torch.Tensor] | None"]


def pack(key: tuple[int, int], samples: list[Any], ids: list[int], place: Place | None) -> Packed:
    """Lay a batch's samples into the ring: `place(field, nbytes)` gives where to write field
    `field`, or None (then that field is returned as a tensor, for the producer to place)."""
    import torch

    if not samples:
        raise BatchError("an empty batch")
    structures = []
    columns: list[list[Any]] = []
    for sample in samples:
        leaves: list[Any] = []
        structures.append(_describe(sample, leaves))
        if not columns:
            columns = [[] for _ in leaves]
        if len(leaves) != len(columns) or structures[-1] != structures[0]:
            raise BatchError(
                "the samples of one batch have different structures (tuples, lists or dicts "
                "of other lengths or keys): a shared loader needs one structure per batch"
            )
        for column, leaf in zip(columns, leaves, strict=True):
            column.append(leaf)
    columns.append([torch.tensor(ids, dtype=torch.int64)])  # the ids: one uniform field
    fields: list[FieldMeta] = []
    loose: dict[int, torch.Tensor] = {}
    for index, column in enumerate(columns):
        last = index == len(columns) - 1
        kind = "tensor" if last else _kind(column[0])
        if any(_kind(leaf) != kind for leaf in column):
            raise BatchError(
                f"field {index} of a batch's samples mixes {kind} with "
                f"{next(_kind(leaf) for leaf in column if _kind(leaf) != kind)}"
            )
        tensors = column[0] if last else _as_tensors(kind, column)
        if isinstance(tensors, torch.Tensor):  # numbers (or the ids): already one tensor
            shape: Shape | None = ()
            shapes = None
            dtype = tensors.dtype
            nbytes = tensors.numel() * tensors.element_size()
        else:
            dtype = tensors[0].dtype
            if any(t.dtype != dtype for t in tensors):
                raise BatchError(
                    f"field {index} of a batch's samples has dtypes "
                    f"{sorted({str(t.dtype) for t in tensors})}: one dtype per field, please"
                )
            first = tuple(tensors[0].shape)
            if kind != "str" and all(tuple(t.shape) == first for t in tensors):
                shape, shapes = first, None
            else:
                shape, shapes = None, tuple(tuple(t.shape) for t in tensors)
            nbytes = sum(t.numel() for t in tensors) * tensors[0].element_size()
        name = str(dtype).removeprefix("torch.")
        where = place(index, nbytes) if place is not None else None
        if where is None:
            loose[index] = _gather(tensors, shape)
            offset = -1
        else:
            offset, target = where
            _write(target, tensors, shape, dtype)
        fields.append(FieldMeta(kind, name, offset, shape, shapes, nbytes))
    return Packed(key, BatchMeta(len(samples), structures[0], tuple(fields)), loose)


def _gather(tensors: list[torch.Tensor] | torch.Tensor, shape: Shape | None) -> torch.Tensor:
    """A field's data as one contiguous tensor (stacked, or ragged leaves back to back)."""
    import torch

    if isinstance(tensors, torch.Tensor):
        return tensors.contiguous()
    if shape is not None:
        return torch.stack(tensors)
    return torch.cat([t.reshape(-1) for t in tensors]) if tensors else torch.empty(0)


def _write(
    target: torch.Tensor,
    tensors: list[torch.Tensor] | torch.Tensor,
    shape: Shape | None,
    dtype: torch.dtype,
) -> None:
    """Write a field into the ring bytes `target` (exactly its size)."""
    typed = target.view(dtype)
    if not isinstance(tensors, list):
        typed.copy_(tensors.reshape(-1))
        return
    import torch

    if shape is not None:
        torch.stack(tensors, out=typed.view(len(tensors), *shape))
        return
    position = 0
    for tensor in tensors:
        count = tensor.numel()
        typed[position : position + count].view(tensor.shape).copy_(tensor)
        position += count


# ------------------------------------------------------------------------------- reading
@dataclass
class Piece:
    """Samples `start .. count` of a batch in the ring, not yet handed to the user."""

    slot: int
    meta: BatchMeta
    start: int
    count: int  # samples in the batch
    index: int  # the batch within its epoch
    gen: int = 0  # the staged mirror's generation holding it (staging.py); 0: only the host ring

    @property
    def left(self) -> int:
        return self.count - self.start


def _typed(base: torch.Tensor, field: FieldMeta) -> torch.Tensor:
    import torch

    return base[field.offset : field.offset + field.nbytes].view(getattr(torch, field.dtype))


def _rows(base: torch.Tensor, field: FieldMeta, start: int, count: int) -> torch.Tensor:
    """Samples start .. start + count of a uniform field: a view of the ring."""
    assert field.shape is not None
    per = math.prod(field.shape)
    typed = _typed(base, field)
    return typed[start * per : (start + count) * per].view(count, *field.shape)


def _column(base: torch.Tensor, field: FieldMeta, start: int, count: int) -> list[Any]:
    """Samples start .. start + count of a field, each leaf as the dataset returned it (tensors
    and arrays are views of the ring; numbers and strings are Python values). The field's data
    is looked up once for the run, not once per sample."""
    if field.uniform:
        rows = _rows(base, field, start, count)
        if field.kind == "tensor":
            return list(rows.unbind(0))
        if field.kind == "ndarray":
            return [row.numpy() for row in rows.unbind(0)]
        return rows.tolist()  # numbers: what .item() gives, for the whole run at once
    assert field.shapes is not None
    shapes = field.shapes[start : start + count]
    sizes = [math.prod(s) for s in shapes]
    first = sum(math.prod(s) for s in field.shapes[:start])
    parts = _typed(base, field)[first : first + sum(sizes)].split(sizes)
    if field.kind == "str":
        # the producer wrote UTF-8 (pack); a member's producer might not: never a traceback
        return [bytes(part.numpy()).decode(errors="replace") for part in parts]
    views = [part.view(shape) for part, shape in zip(parts, shapes, strict=True)]
    return views if field.kind == "tensor" else [v.numpy() for v in views]


def _build(structure: Any, leaves: list[Any], seq: Callable[[list[Any], str], Any]) -> Any:
    if isinstance(structure, int):
        return leaves[structure]
    kind, inner = structure
    if kind == "dict":
        return {k: _build(s, leaves, seq) for k, s in inner}
    return seq([_build(s, leaves, seq) for s in inner], kind)


def _as_sample(items: list[Any], kind: str) -> Any:
    return tuple(items) if kind == "tuple" else items


def _tensor_source(
    base: torch.Tensor, staged: torch.Tensor | None, field: FieldMeta
) -> torch.Tensor:
    """Where a field's leaves are read from: the staged mirror (on the GPU) for tensors, the
    host ring for what becomes Python values or NumPy arrays."""
    return staged if staged is not None and field.kind == "tensor" else base


def samples(
    base: torch.Tensor, pieces: list[tuple[Piece, int, int]], staged: torch.Tensor | None = None
) -> list[Any]:
    """The samples of (piece, start, count) runs, each rebuilt as the dataset returned it;
    tensor leaves are views of `staged` when given (a mirror of the ring with the same
    offsets, `staging.py`)."""
    out = []
    for piece, start, count in pieces:
        columns = [
            _column(_tensor_source(base, staged, f), f, start, count)
            for f in piece.meta.fields[:-1]
        ]
        for sample in range(count):
            leaves = [column[sample] for column in columns]
            out.append(_build(piece.meta.structure, leaves, _as_sample))
    return out


def ids(base: torch.Tensor, pieces: list[tuple[Piece, int, int]]) -> torch.Tensor:
    """The sample ids of (piece, start, count) runs: a view when they are one run."""
    import torch

    columns = [_rows(base, p.meta.fields[-1], s, n) for p, s, n in pieces]
    return columns[0] if len(columns) == 1 else torch.cat(columns)


def collate(
    base: torch.Tensor, pieces: list[tuple[Piece, int, int]], staged: torch.Tensor | None = None
) -> tuple[Any, int]:
    """The samples of (piece, start, count) runs as torch's `default_collate` would batch them:
    uniform fields as views of the ring (across adjacent runs too), else copies. With `staged`
    (the ring's mirror on a GPU) every field that collates to a tensor is read from there.
    Returns the batch and how many of its fields are copies."""
    import torch
    from torch.utils.data import default_collate

    first = pieces[0][0].meta
    if any(p.meta.structure != first.structure for p, _, _ in pieces):
        # batches of other structures: let default_collate say so
        return default_collate(samples(base, pieces, staged)), 1
    whole = staged if staged is not None else base  # where collated tensors are read
    columns: list[Any] = []
    copies = 0
    for index, field in enumerate(first.fields[:-1]):
        runs = [(p.meta.fields[index], s, n) for p, s, n in pieces]
        same = all(
            f.uniform and f.kind == field.kind and f.dtype == field.dtype and f.shape == field.shape
            for f, _, _ in runs
        )
        if field.kind == "str":
            columns.append([leaf for f, s, n in runs for leaf in _column(base, f, s, n)])
        elif same:
            column = _joined(whole, runs)
            if column is None:
                column = torch.cat([_rows(whole, f, s, n) for f, s, n in runs])
                copies += 1
            columns.append(column)
        else:  # ragged: what default_collate does with them (it raises for unequal shapes)
            source = _tensor_source(base, staged, field)
            columns.append(
                default_collate([leaf for f, s, n in runs for leaf in _column(source, f, s, n)])
            )
            copies += 1
    return _build(first.structure, columns, lambda items, _kind: items), copies


def _joined(base: torch.Tensor, runs: list[tuple[FieldMeta, int, int]]) -> torch.Tensor | None:
    """One view over runs of a uniform field that lie back to back in the ring, else None."""
    field, start, _ = runs[0]
    assert field.shape is not None
    row = math.prod(field.shape) * field.itemsize
    begin = field.offset + start * row
    end = begin
    for f, s, n in runs:
        if f.offset + s * row != end:
            return None
        end += n * row
    total = sum(n for _, _, n in runs)
    import torch

    return base[begin:end].view(getattr(torch, field.dtype)).view(total, *field.shape)
