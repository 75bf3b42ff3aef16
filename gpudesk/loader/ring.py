"""The slot ring: one anonymous shared-memory segment holding a fixed number of batch slots.

The producer creates it with `memfd_create`, so it has no name in `/dev/shm` and disappears with
the last process that maps it, even after a SIGKILL. Consumers receive its file descriptor over a
Unix socket (`SCM_RIGHTS`) and map the same pages: a batch is never copied or pickled on its way
to them, only described (slot, sample count, epoch).

The layout is by field, not by slot: field `f` of every slot lies in one region, slot after slot.
So the same field of two adjacent slots is contiguous, and a consumer whose batch is a multiple of
the producer's can take a view across slots instead of concatenating.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

ALIGN = 64  # every field region starts on a cache line, so any dtype view is aligned
IDS_FIELD = "__ids__"  # the sample indices of each batch, written by the producer


class RingError(Exception):
    """A batch does not match the ring (its shapes changed, or it is too large)."""


@dataclass(frozen=True)
class Field:
    dtype: str  # torch dtype name without "torch.", e.g. "uint8"
    sample_shape: tuple[int, ...]
    itemsize: int
    offset: int  # where this field's region starts

    @property
    def sample_bytes(self) -> int:
        count = 1
        for size in self.sample_shape:
            count *= size
        return count * self.itemsize


@dataclass(frozen=True)
class Layout:
    """How batches are laid out: enough for a consumer to map the ring by itself."""

    slots: int
    batch_size: int  # samples per slot (the producer's batch size)
    structure: Any  # how to rebuild the collated batch from the field list (see `flatten`)
    fields: tuple[Field, ...]  # the batch's tensors, then the sample ids
    size: int  # bytes

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["fields"] = [asdict(f) for f in self.fields]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Layout:
        fields = tuple(
            Field(f["dtype"], tuple(f["sample_shape"]), f["itemsize"], f["offset"])
            for f in data["fields"]
        )
        return cls(
            data["slots"], data["batch_size"], _tuplify(data["structure"]), fields, data["size"]
        )

    @property
    def batch_bytes(self) -> int:
        """Bytes of one full batch, ids included."""
        return sum(f.sample_bytes for f in self.fields) * self.batch_size


def _tuplify(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tuplify(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuplify(v) for k, v in value.items()}
    return value


def flatten(batch: Any) -> tuple[list[torch.Tensor], Any]:
    """A collated batch (a tensor, or tuples/lists/dicts of them) as a list of tensors and the
    structure to rebuild it: an int is a position in the list."""
    import torch

    tensors: list[torch.Tensor] = []

    def walk(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            tensors.append(value)
            return len(tensors) - 1
        if isinstance(value, (tuple, list)):
            return ["seq", [walk(v) for v in value]]
        if isinstance(value, dict):
            return ["map", {str(k): walk(v) for k, v in value.items()}]
        raise RingError(
            f"a batch may hold only tensors (in tuples, lists or dicts), found "
            f"{type(value).__name__}; convert it in the dataset or its collate_fn"
        )

    return tensors, walk(batch)


def unflatten(structure: Any, tensors: list[Any]) -> Any:
    if isinstance(structure, int):
        return tensors[structure]
    kind, inner = structure
    if kind == "seq":
        return tuple(unflatten(s, tensors) for s in inner)
    return {k: unflatten(s, tensors) for k, s in inner.items()}


def plan_layout(batch: Any, batch_size: int, slots: int) -> Layout:
    """The layout for batches shaped like `batch` (a full one), `slots` of them."""
    import torch

    tensors, structure = flatten(batch)
    fields = []
    offset = 0
    for tensor in [*tensors, torch.empty(batch_size, dtype=torch.int64)]:
        if tensor.dim() == 0 or tensor.shape[0] != batch_size:
            raise RingError(
                f"every tensor of a batch must have the batch size ({batch_size}) "
                f"as its first dimension, found shape {tuple(tensor.shape)}"
            )
        field = Field(
            str(tensor.dtype).removeprefix("torch."),
            tuple(tensor.shape[1:]),
            tensor.element_size(),
            offset,
        )
        fields.append(field)
        offset += _aligned(field.sample_bytes * batch_size * slots)
    return Layout(slots, batch_size, structure, tuple(fields), max(offset, ALIGN))


def _aligned(size: int) -> int:
    return (size + ALIGN - 1) // ALIGN * ALIGN


class Ring:
    """A mapped ring. `Ring.create` makes a new one (producer); `Ring.attach` maps one whose
    descriptor was received (consumer)."""

    def __init__(self, layout: Layout, fd: int) -> None:
        import torch

        self.layout = layout
        self.fd = fd
        self._map = mmap.mmap(fd, layout.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        # One tensor over the whole segment: every batch is a view of its storage.
        self.base = torch.frombuffer(self._map, dtype=torch.uint8)
        self._dtypes = [getattr(torch, f.dtype) for f in layout.fields]

    @classmethod
    def create(cls, layout: Layout, name: str = "gpudesk-ring") -> Ring:
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, layout.size)  # tmpfs: pages are taken as they are written
        except OSError:
            os.close(fd)
            raise
        return cls(layout, fd)

    @classmethod
    def attach(cls, layout: Layout, fd: int) -> Ring:
        return cls(layout, fd)

    def field(
        self, slot: int, index: int, count: int | None = None, slots: int = 1
    ) -> torch.Tensor:
        """Field `index` of `slots` adjacent slots starting at `slot` (first `count` samples): a
        view of the shared memory."""
        layout = self.layout
        field = layout.fields[index]
        samples = layout.batch_size * slots if count is None else count
        start = field.offset + slot * layout.batch_size * field.sample_bytes
        view = self.base[start : start + samples * field.sample_bytes]
        return view.view(self._dtypes[index]).view(samples, *field.sample_shape)

    def write(self, slot: int, tensors: list[torch.Tensor], ids: torch.Tensor) -> int:
        """Copy one batch into a slot (the one copy the producer makes); returns its size."""
        layout = self.layout
        count = int(ids.shape[0])
        if len(tensors) != len(layout.fields) - 1:
            raise RingError(
                f"this batch has {len(tensors)} tensors; the first had {len(layout.fields) - 1}"
            )
        if count > layout.batch_size:
            raise RingError(
                f"a batch of {count} samples does not fit a slot of {layout.batch_size}"
            )
        for index, tensor in enumerate([*tensors, ids]):
            field = layout.fields[index]
            if (
                tuple(tensor.shape[1:]) != field.sample_shape
                or tensor.shape[0] != count
                or str(tensor.dtype).removeprefix("torch.") != field.dtype
            ):
                raise RingError(
                    f"batch tensor {index} has shape {tuple(tensor.shape)} and dtype "
                    f"{str(tensor.dtype).removeprefix('torch.')}; the ring was laid out for "
                    f"({count}, {', '.join(map(str, field.sample_shape))}) {field.dtype}. A "
                    "shared loader needs samples of a fixed shape (resize or pad them in the "
                    "dataset)"
                )
            self.field(slot, index, count).copy_(tensor)
        return count

    def batch(self, slot: int, count: int, slots: int = 1) -> tuple[Any, torch.Tensor]:
        """The batch in a slot (or adjacent slots) as the dataset's collate made it, and ids."""
        fields = [self.field(slot, i, count, slots) for i in range(len(self.layout.fields))]
        return unflatten(self.layout.structure, fields[:-1]), fields[-1]
