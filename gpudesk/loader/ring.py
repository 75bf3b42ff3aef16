"""The ring: one anonymous shared-memory segment that holds every batch of a producer.

The producer creates it with `memfd_create`, so it has no name in `/dev/shm` and disappears with
the last process that maps it, even after a SIGKILL. Consumers receive its file descriptor over a
Unix socket (`SCM_RIGHTS`); the producer's DataLoader workers open it as
`/proc/<producer>/fd/<n>`. All of them map the same pages: a batch is written once, in place, by
the worker that decoded it, and read in place by every consumer. It is never copied to them or
pickled, only described (`batch.BatchMeta`).

The segment only grows. The producer carves regions out of its end (`allocate`); a process whose
mapping is shorter than a batch it is told about maps it again (`ensure`). Mappings made before
stay valid (a memfd that grows keeps its pages), so views handed out earlier stay good. Which
regions make up which slot is the producer's business; the ring only holds bytes.
"""

from __future__ import annotations

import mmap
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

ALIGN = 64  # every region starts on a cache line, so a view of any dtype is aligned


class Ring:
    def __init__(self, fd: int, size: int, owner: bool = False) -> None:
        self.fd = fd
        self.owner = owner  # the producer: it may grow the segment
        self.size = 0  # bytes mapped
        self.end = size  # bytes in the segment, as far as this process knows
        self.base: torch.Tensor | None = None  # the mapping as one uint8 tensor
        if size:
            self.ensure(size)

    @classmethod
    def create(cls, name: str = "gpudesk-ring") -> Ring:
        """A new, empty segment (the producer's)."""
        return cls(os.memfd_create(name, os.MFD_CLOEXEC), 0, owner=True)

    @classmethod
    def attach(cls, fd: int, size: int) -> Ring:
        """A segment whose descriptor was received (a consumer's); keeps `fd` open, to map
        more of it as it grows."""
        return cls(fd, size)

    @classmethod
    def open(cls, pid: int, fd: int) -> Ring:
        """The segment of process `pid`, where it has descriptor `fd` (a DataLoader worker of
        the producer, forked or spawned)."""
        own = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)
        return cls(own, os.fstat(own).st_size)

    def ensure(self, size: int) -> None:
        """Map at least `size` bytes of the segment."""
        if size <= self.size:
            return
        import torch

        size = max(size, os.fstat(self.fd).st_size)
        mapping = mmap.mmap(self.fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        # The old mapping lives on in the views taken from it, and goes with the last of them.
        self.base = torch.frombuffer(mapping, dtype=torch.uint8)
        self.size = size
        self.end = max(self.end, size)

    def allocate(self, nbytes: int) -> int:
        """A new region of `nbytes` at the end of the segment (the producer only)."""
        assert self.owner, "only the producer grows the ring"
        offset = (self.end + ALIGN - 1) // ALIGN * ALIGN
        end = offset + max(nbytes, 1)
        os.ftruncate(self.fd, end)  # tmpfs: pages are taken only as they are written
        self.end = end
        self.ensure(end)
        return offset

    def view(self, offset: int, nbytes: int) -> torch.Tensor:
        """The bytes `offset .. offset + nbytes` as a uint8 view of the mapping."""
        self.ensure(offset + nbytes)
        assert self.base is not None
        return self.base[offset : offset + nbytes]

    def holds(self, tensor: torch.Tensor) -> bool:
        """Whether `tensor` is a view of this ring's current mapping."""
        return self.base is not None and (
            tensor.untyped_storage().data_ptr() == self.base.untyped_storage().data_ptr()
        )

    def close(self) -> None:
        """Close the descriptor; the mapping goes with the last view of it."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
