"""The ring: one anonymous shared-memory segment that holds every batch of a producer.

The producer creates it with `memfd_create`, so it has no name in `/dev/shm` and disappears with
the last process that maps it, even after a SIGKILL. Consumers receive a file descriptor of it
over a Unix socket (`SCM_RIGHTS`); the producer's DataLoader workers open it as
`/proc/<producer>/fd/<n>`. All of them map the same pages: a batch is written once, in place, by
the worker that decoded it, and read in place by every consumer. It is never copied to them or
pickled, only described (`batch.BatchMeta`).

Only the producer's user writes the ring. A consumer is handed a read-only descriptor
(`reader_fd`), and the segment's mode is 0600, so that another member cannot open it again for
writing through `/proc/self/fd`; it is sealed against shrinking (`F_SEAL_SHRINK`), so that no
one can shrink it under a consumer's mapping (a SIGBUS when read). A consumer reads each batch
through a private copy-on-write mapping (`batch_base`): a script that changes its batch in place
(`x.sub_(mean)`) changes its own copy of those pages only, never the batch another job reads;
and a batch whose pages this process wrote before (an earlier batch of that slot, changed in
place) is read through a fresh mapping, never through the stale copies. Where the kernel will
not commit a private writable mapping of the ring's size (`vm.overcommit_memory=2` charges it
whole), the consumer maps it read-only and hands out copies (`copies`).

The segment only grows. The producer carves regions out of its end (`allocate`); a process whose
mapping is shorter than a batch it is told about maps it again (`ensure`). Mappings made before
stay valid (a memfd that grows keeps its pages), so views handed out earlier stay good. Which
regions make up which slot is the producer's business; the ring only holds bytes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import mmap
import os
import stat
import warnings
import weakref
from typing import TYPE_CHECKING

from gpudesk.loader.protocol import LoaderError

if TYPE_CHECKING:
    import torch

log = logging.getLogger("gpudesk.loader")

ALIGN = 64  # every region starts on a cache line, so a view of any dtype is aligned
# /proc/PID/pagemap's bits (Linux's Documentation/admin-guide/mm/pagemap.rst)
_FILE_PAGE = 1 << 61  # a page of the file (or shared anonymous), not a private copy
_PAGE_THERE = (1 << 63) | (1 << 62)  # present, or swapped out


class Ring:
    def __init__(self, fd: int, size: int, owner: bool = False) -> None:
        self.fd = fd
        self.owner = owner  # the producer: it may grow the segment
        self.worker = False  # a producer's worker: it writes batches in place
        self.size = 0  # bytes mapped
        self.end = size  # bytes in the segment, as far as this process knows
        self.base: torch.Tensor | None = None  # the mapping as one uint8 tensor
        self.reader_fd = -1  # the producer's read-only descriptor, handed to consumers
        self.mapped: dict[int, object] = {}  # this process's mappings alive, by address
        # A consumer that may not commit a private mapping of the ring's size maps it
        # read-only and hands out copies (`_map`)
        self.copies = False
        self._pagemap = (-1, -1)  # (pid, descriptor of its /proc/PID/pagemap), opened once
        if size:
            self.ensure(size)

    @classmethod
    def create(cls, name: str = "gpudesk-ring") -> Ring:
        """A new, empty segment (the producer's): 0600, never shrinking, with a read-only
        descriptor of it for consumers."""
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        # memfd_create makes it 0777: another user handed a read-only descriptor could open
        # it again through /proc/self/fd to write (its owner still may: her own jobs)
        os.fchmod(fd, 0o600)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        ring = cls(fd, 0, owner=True)
        try:
            ring.reader_fd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            ring.close()
            raise LoaderError(
                f"a producer opens its ring read-only for consumers through /proc/self/fd, "
                f"which this system does not give it ({exc}): mount /proc"
            ) from None
        return ring

    @classmethod
    def attach(cls, fd: int) -> Ring:
        """A segment whose descriptor was received (a consumer's); keeps `fd` open, to map
        more of it as it grows. LoaderError where it is not a producer's ring: a member's
        producer may hand over any descriptor."""
        try:
            info = os.fstat(fd)
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        except OSError:
            seals = 0
            info = None
        if info is None or not stat.S_ISREG(info.st_mode) or not seals & fcntl.F_SEAL_SHRINK:
            os.close(fd)
            raise LoaderError(
                "the producer handed over a descriptor that is not a shared ring sealed "
                "against shrinking (a memfd with F_SEAL_SHRINK): reading it could end this "
                "job with SIGBUS (a producer of an older gpudesk sends another one: restart it)"
            )
        try:
            return cls(fd, info.st_size)
        except LoaderError:
            os.close(fd)
            raise

    @classmethod
    def open(cls, pid: int, fd: int) -> Ring:
        """The segment of process `pid`, where it has descriptor `fd` (a DataLoader worker of
        the producer, forked or spawned)."""
        own = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)
        ring = cls(own, 0)
        ring.worker = True
        ring.ensure(os.fstat(own).st_size)
        return ring

    def ensure(self, size: int) -> None:
        """Map at least `size` bytes of the segment."""
        if size <= self.size:
            return
        length = os.fstat(self.fd).st_size
        if size > length:  # bytes past the end of a mapped file are a SIGBUS when read
            raise LoaderError(
                f"the producer named bytes up to {size:,} of its ring, which holds {length:,}"
            )
        self._map(length)
        self.end = max(self.end, length)

    def _map(self, size: int) -> None:
        """Map the first `size` bytes anew, as `base`. The old mapping lives on in the views
        taken from it, and goes with the last of them."""
        import torch

        shared = self.owner or self.worker
        # A consumer maps it privately (copy-on-write): its descriptor is read-only.
        flags = mmap.MAP_SHARED if shared else mmap.MAP_PRIVATE
        protection = mmap.PROT_READ | mmap.PROT_WRITE
        if self.copies:
            flags, protection = mmap.MAP_SHARED, mmap.PROT_READ
        try:
            mapping = mmap.mmap(self.fd, size, flags, protection)
        except OSError as exc:
            if shared or self.copies or exc.errno != errno.ENOMEM:
                raise LoaderError(
                    f"could not map the shared ring ({size:,} bytes): {exc}"
                ) from None
            # vm.overcommit_memory=2 charges a private writable mapping its whole size
            log.warning(
                "a private mapping of the shared ring (%s MiB) is more than the kernel lets "
                "this process commit (vm.overcommit_memory=2?): batches are private copies",
                size >> 20,
            )
            self.copies = True
            self._map(size)
            return
        with warnings.catch_warnings():  # read-only (copies): only ever copied out of
            warnings.simplefilter("ignore", UserWarning)
            self.base = torch.frombuffer(mapping, dtype=torch.uint8)
        self.size = size
        address = self.base.data_ptr()
        token = object()
        self.mapped[address] = token
        weakref.finalize(mapping, _forget, self.mapped, address, token)

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

    def batch_base(self, regions: list[tuple[int, int]]) -> torch.Tensor:
        """The mapping a consumer reads a batch over `regions` (offset, bytes) through: its
        current one while this process wrote none of those pages, else a fresh one, which
        becomes the current one. A page written through a private mapping is this process's
        copy from then on, and would hide what the producer writes there next; one written
        after the batch was handed out holds its bytes as they are, which the producer does
        not change while the batch is alive."""
        if self.copies:  # read-only: nothing was written, and batches are copied out
            assert self.base is not None
            return self.base
        try:
            clean = not self._written(regions)
        except OSError:  # no pagemap to ask (a /proc without it): a fresh mapping each batch
            clean = False
        if not clean:
            self._map(self.size)
        assert self.base is not None
        return self.base

    def _written(self, regions: list[tuple[int, int]]) -> bool:
        """Whether this process wrote any page of `regions` in its current mapping: such a
        page is an anonymous copy now, no longer the ring's (/proc/PID/pagemap: a page
        present or swapped out that is not a file page; Linux's
        Documentation/admin-guide/mm/pagemap.rst)."""
        import numpy as np

        assert self.base is not None
        if self._pagemap[0] != os.getpid():  # opened before a fork: the parent's
            inherited, self._pagemap = self._pagemap[1], (-1, -1)
            if inherited >= 0:
                with contextlib.suppress(OSError):
                    os.close(inherited)
            self._pagemap = (os.getpid(), os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC))
        address = self.base.data_ptr()
        for offset, nbytes in regions:
            if nbytes <= 0:
                continue
            first = (address + offset) // mmap.PAGESIZE
            last = (address + offset + nbytes - 1) // mmap.PAGESIZE
            raw = os.pread(self._pagemap[1], (last - first + 1) * 8, first * 8)
            entries = np.frombuffer(raw, dtype=np.uint64)
            there = (entries & np.uint64(_PAGE_THERE)) != 0
            copied = there & ((entries & np.uint64(_FILE_PAGE)) == 0)
            if bool(copied.any()):
                return True
        return False

    def holds(self, tensor: torch.Tensor) -> bool:
        """Whether `tensor` is a view of a mapping of this ring (not a copy)."""
        return tensor.untyped_storage().data_ptr() in self.mapped

    def close(self) -> None:
        """Close the descriptor; the mapping goes with the last view of it."""
        fds = (self.fd, self.reader_fd, self._pagemap[1])
        self.fd = self.reader_fd = -1
        self._pagemap = (-1, -1)
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)


def _forget(mapped: dict[int, object], address: int, token: object) -> None:
    """A mapping is gone: forget its address, unless a newer mapping has it by now."""
    if mapped.get(address) is token:
        del mapped[address]
