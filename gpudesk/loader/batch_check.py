"""A batch's description as a producer sent it, checked whole before a consumer reads a byte.

On a station the producer is its owner's process and the consumers are the other members'
jobs: a description that does not add up would end their jobs with a traceback (a KeyError, a
ValueError, a RuntimeError from a misaligned view, a UnicodeDecodeError), or have them read
past the batch. `checked_meta` accepts exactly what `batch.pack` makes:

- numbers: `int`, `float`, `bool` fields are int64, float64, bool, one value a sample;
- strings: `str` fields are uint8, one run of bytes a sample (ragged);
- arrays: `ndarray` fields are of a dtype NumPy has;
- tensors: `tensor` fields are of any dtype but the quantized and sub-byte ones;
- every field lies at an offset aligned for its dtype, its bytes exactly what its shapes hold;
- the sample ids are the last field, int64, one a sample;
- the sample's structure names every other field once, in order (`batch._describe`), in
  tuples, lists and dicts with str or int keys, at most MAX_STRUCTURE_DEPTH deep.

Whether the bytes lie inside the ring the consumer checks as it maps them (`Ring.ensure`).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

import msgspec

from gpudesk.loader.batch import BatchMeta, FieldMeta

MAX_STRUCTURE_DEPTH = 64  # a sample nested deeper than this is not one a dataset returns
NUMBERS = {"int": "int64", "float": "float64", "bool": "bool"}  # batch._as_tensors
# torch dtypes NumPy has (torch.from_numpy takes these, and .numpy() gives them back)
NUMPY_DTYPES = frozenset(
    {"bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64"}
    | {"float16", "float32", "float64", "complex64", "complex128"}
)
# quantized (qint8, quint4x2, ...) and sub-byte (bits8, uint1, int4, ...) dtypes: no tensor of
# them is a plain view of bytes
NOT_VIEWABLE = re.compile(r"q.*|bits.*|u?int[1-7]")


class Announced(msgspec.Struct, frozen=True):
    """A producer's batch message (producer.py `_give`), as the welcome is read
    (`handshake.Welcome`): a field of another type is a ValidationError."""

    slot: Annotated[int, msgspec.Meta(ge=0)]
    key: tuple[int, int]  # (epoch, batch)
    meta: list[Any]  # checked_meta's
    gen: int = 0  # the staged mirror's generation (staging.py)
    mirror: dict[str, Any] | None = None  # the mirror's handle, where it grew


def announced(message: dict[str, Any]) -> tuple[Announced, BatchMeta]:
    """A batch message and its batch's description, checked whole; ValueError saying what
    does not add up."""
    try:
        said = msgspec.convert(message, Announced)
    except msgspec.ValidationError as exc:
        raise ValueError(str(exc)) from None
    return said, checked_meta(said.meta)


def checked_meta(data: Any) -> BatchMeta:
    """`data` (a batch message's `meta`) as a BatchMeta; ValueError saying what does not add
    up."""
    try:
        meta = BatchMeta.from_wire(data)
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise ValueError(f"not a batch's description ({exc})") from None
    if meta.count < 0 or not meta.fields:
        raise ValueError(f"a batch of {meta.count} samples in {len(meta.fields)} fields")
    for number, field in enumerate(meta.fields):
        _check_field(field, meta.count, number)
    ids = meta.fields[-1]
    if ids.kind != "tensor" or ids.dtype != "int64" or ids.shape != ():
        raise ValueError("its last field is not the samples' ids")
    named: list[int] = []
    _leaves(meta.structure, named, depth=0)
    if named != list(range(len(meta.fields) - 1)):
        raise ValueError(f"a sample's structure names fields {named[:8]}, not each field once")
    return meta


def _check_field(field: FieldMeta, count: int, number: int) -> None:
    import torch

    where = f"field {number} ({field.kind}, {field.dtype})"
    dtype = getattr(torch, field.dtype, None) if field.dtype.isidentifier() else None
    if not isinstance(dtype, torch.dtype) or NOT_VIEWABLE.fullmatch(field.dtype):
        raise ValueError(f"{where}: not a dtype a batch is read as")
    if field.kind in NUMBERS:
        fits = field.dtype == NUMBERS[field.kind] and field.shape == ()
    elif field.kind == "str":
        fits = field.dtype == "uint8" and field.shapes is not None
    elif field.kind == "ndarray":
        fits = field.dtype in NUMPY_DTYPES
    else:
        fits = field.kind == "tensor"
    if not fits:
        raise ValueError(f"{where}: not a field a batch's samples make")
    if field.offset < 0 or field.offset % field.itemsize or field.nbytes < 0:
        raise ValueError(f"{where}: {field.nbytes} bytes at {field.offset}")
    if field.shape is not None:
        if any(n < 0 for n in field.shape):
            raise ValueError(f"{where}: a negative size")
        held = count * math.prod(field.shape)
    elif field.shapes is not None and len(field.shapes) == count:
        if any(n < 0 for shape in field.shapes for n in shape):
            raise ValueError(f"{where}: a negative size")
        held = sum(math.prod(shape) for shape in field.shapes)
    else:
        raise ValueError(f"{where}: no shape for each of its {count} samples")
    if held * field.itemsize != field.nbytes:
        raise ValueError(f"{where}: {field.nbytes} bytes, not what its shapes hold")


def _leaves(structure: Any, named: list[int], depth: int) -> None:
    """The field numbers `structure` names, depth first, into `named`; ValueError where it is
    not a sample's structure (`batch._describe`'s form)."""
    if depth > MAX_STRUCTURE_DEPTH:
        raise ValueError("a sample's structure nested too deep")
    if type(structure) is int:
        named.append(structure)
        return
    if not (isinstance(structure, list) and len(structure) == 2):
        raise ValueError("a sample's structure of another form")
    kind, inner = structure
    if kind in ("tuple", "list") and isinstance(inner, list):
        for part in inner:
            _leaves(part, named, depth + 1)
    elif kind == "dict" and isinstance(inner, list):
        for entry in inner:
            if not (isinstance(entry, list) and len(entry) == 2 and type(entry[0]) in (str, int)):
                raise ValueError("a sample's dict of another form")
            _leaves(entry[1], named, depth + 1)
    else:
        raise ValueError(f"a sample's structure of kind {kind!r}")
