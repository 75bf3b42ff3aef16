"""One copy to the GPU for every consumer on it: a dataset's `device = "cuda"`.

Without it every consumer copies every batch from the shared ring to its GPU itself: N consumers
of one GPU move each batch over the bus N times. With it the producer keeps a *mirror* of the
ring on its GPU: once a batch is in its slot, the producer copies the slot's fields to the same
offsets of the mirror (one host-to-device copy), waits for that copy, and only then announces
the batch. Consumers on that GPU open the mirror once through CUDA IPC and read each batch's
tensors there, as views; a slot of the mirror is rewritten only when its host slot is, so the
ring's slot lifetimes (who holds which slot) govern both. Consumers on another GPU, or whose
CUDA cannot open the handle, read the host ring as before (`why` says why), so the choice is
per consumer and never breaks a job.

Measured on an H200 (docs/hardware-validation.md, 2026-11-30, `bench/gpu_dataplane.py`): with
4 consumers of one GPU the bus carried 1.1 × each batch instead of 4.3 ×; CUDA IPC worked
between MPS clients of one daemon; at 0.88 MB batches under MPS the hand-off cost more than the
copies it saved (0.77 ×), at 4.8 MB it gained 1.30 × (1.93 × under MPS). `device = "auto"`
therefore stages only batches of at least AUTO_MIN_BATCH_BYTES, a threshold between the two
sizes measured (the measurement, not a fit: where between them the break-even lies is not
known). MIG was not measured (no GPU in MIG mode was lent): a consumer on another instance than
the producer's sees another UUID, and one whose open fails gets the host ring as well.

The mirror only grows, as the ring does: a larger one is allocated (twice the size at least),
the old one copied into it, and consumers are handed the new one with their next batch (its
generation). Old mirrors are kept until the producer exits, because consumers may still hold
views of them.

`kind = "shm"` stages into a second host buffer shared by name (torch's shared-memory files)
instead of a GPU: the same protocol, generations and consumer code without a GPU, so that the
machinery is tested on CPU machines (`GPUDESK_LOADER_STAGING=shm`, for tests and diagnosis).
"""

from __future__ import annotations

import base64
import contextlib
import logging
import mmap
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpudesk.core.datasets import DEVICES
from gpudesk.loader.batch import BatchMeta
from gpudesk.loader.protocol import process_alive

if TYPE_CHECKING:
    import torch

log = logging.getLogger("gpudesk.loader")

__all__ = ["DEVICES", "DeviceMirror", "MirrorHandle", "Staging", "StagingUnavailable"]

ENV_STAGING = "GPUDESK_LOADER_STAGING"  # "shm": stage on a host buffer (tests, diagnosis)
# Between the measured 0.88 MB (IPC no better: 0.99 ×, 0.77 × under MPS) and 4.8 MB (1.30 ×,
# 1.93 × under MPS); an assumption inside that measured interval, see the module docstring.
AUTO_MIN_BATCH_BYTES = 2 * 2**20
SHM_DIR = "/dev/shm"
SHM_PREFIX = "gpudesk-mirror-"  # kind "shm": gpudesk-mirror-PID-TOKEN-GENERATION
GROWTH = 2  # a mirror that must grow becomes at least this many times larger


class StagingUnavailable(Exception):
    """The mirror cannot be made or opened here; the message says why (for `loader status`)."""


@dataclass(frozen=True)
class MirrorHandle:
    """What a consumer needs to open a mirror: small, plain, sent in a control message."""

    kind: str  # "cuda" or "shm"
    gen: int  # the mirror's generation (it grows by replacement)
    gpu_uuid: str | None  # the producer's GPU, for a consumer to find it among its own
    parts: tuple[Any, ...]  # the storage's sharing tuple, bytes as base64 strings

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "gen": self.gen,
            "gpu_uuid": self.gpu_uuid,
            "parts": list(self.parts),
        }

    @classmethod
    def from_wire(cls, data: Any) -> MirrorHandle:
        if not isinstance(data, dict) or data.get("kind") not in ("cuda", "shm"):
            raise StagingUnavailable("the producer sent a malformed mirror handle")
        parts = data.get("parts")
        if not isinstance(parts, list):
            raise StagingUnavailable("the producer sent a mirror handle without its parts")
        return cls(str(data["kind"]), int(data.get("gen", 0)), data.get("gpu_uuid"), tuple(parts))


def _wire_parts(parts: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        {"b64": base64.b64encode(p).decode()} if isinstance(p, bytes) else p for p in parts
    )


def _local_parts(parts: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        base64.b64decode(p["b64"]) if isinstance(p, dict) and "b64" in p else p for p in parts
    )


def gpu_uuid(index: int) -> str:
    import torch

    return str(torch.cuda.get_device_properties(index).uuid)


def staging_kind(device: str) -> str | None:
    """What a producer asked for `device` stages on: "cuda", "shm" (tests) or None."""
    if device == "cpu":
        return None
    if os.environ.get(ENV_STAGING) == "shm":
        return "shm"
    return "cuda"


class DeviceMirror:
    """The producer's side: the mirror, staging each placed batch into it."""

    def __init__(self, kind: str) -> None:
        import torch

        self.kind = kind
        self.gen = 0
        self.buffers: list[torch.Tensor] = []  # every generation: consumers may hold views
        self.handle: MirrorHandle | None = None
        self.bytes_staged = 0
        self.batches_staged = 0
        self.uuid: str | None = None
        self.stream: Any = None
        self.shm_names: list[str] = []  # kind "shm": its segments, removed by `close`
        self.token = secrets.token_hex(4)  # in its segments' names (`cover`)
        # The ring's mappings page-locked for the copies (cudaHostRegister): a copy from
        # pageable memory goes through the driver's bounce buffer and, one batch after another,
        # bounded the stream (H200, 2026-11-30: ~900 batches/s of 4.8 MB). Kept referenced so
        # a mapping is never unmapped while registered.
        self.pinned: dict[int, torch.Tensor] = {}
        self.pin_failed: str | None = None
        if kind == "cuda":
            if not torch.cuda.is_available():
                raise StagingUnavailable("the producer sees no CUDA device")
            index = torch.cuda.current_device()
            self.device = torch.device("cuda", index)
            self.uuid = gpu_uuid(index)
            self.stream = torch.cuda.Stream(self.device)
        else:
            self.device = torch.device("cpu")

    @property
    def size(self) -> int:
        return int(self.buffers[-1].numel()) if self.buffers else 0

    def cover(self, nbytes: int) -> None:
        """A mirror of at least `nbytes` (the ring's size); a new generation if it grew."""
        if nbytes <= self.size:
            return
        import torch

        size = max(nbytes, GROWTH * self.size)
        if self.kind == "shm":
            if not self.gen:
                remove_stale_segments()
            # the pid, for the sweep; a token, so that a segment a killed producer of the same
            # pid left behind (pids are reused) is never in the way
            name = f"{SHM_PREFIX}{os.getpid()}-{self.token}-{self.gen + 1}"
            new = _map_shm(name, size, create=True)
            self.shm_names.append(name)
            parts: tuple[Any, ...] = (name, size)
        else:
            new = torch.empty(size, dtype=torch.uint8, device=self.device)
        if self.buffers:
            new[: self.size].copy_(self.buffers[-1])
        if self.kind == "cuda":
            torch.cuda.synchronize(self.device)
            parts = new.untyped_storage()._share_cuda_()
        self.buffers.append(new)
        self.gen += 1
        self.handle = MirrorHandle(self.kind, self.gen, self.uuid, _wire_parts(parts))
        log.info("staging mirror generation %d: %.1f MiB on %s", self.gen, size / 2**20, self.kind)

    def stage(
        self,
        host: torch.Tensor,
        meta: BatchMeta,
        ring_size: int,
        on_device: Mapping[int, torch.Tensor] | None = None,
    ) -> None:
        """Copy a placed batch's fields from the host ring to the mirror, and wait for it: the
        batch is announced only after this returns. A field the producer already holds on the
        mirror's device (`on_device`: decoded there, device_decode.py) is copied from there."""
        import torch

        self.cover(ring_size)
        mirror = self.buffers[-1]
        if self.kind == "cuda":
            self._pin(host)
            with torch.cuda.stream(self.stream):
                for index, field in enumerate(meta.fields):
                    end = field.offset + field.nbytes
                    held = (on_device or {}).get(index)
                    if held is not None and held.device == mirror.device:
                        source = held.reshape(-1).view(torch.uint8)
                    else:
                        source = host[field.offset : end]
                    mirror[field.offset : end].copy_(source, non_blocking=True)
            self.stream.synchronize()
        else:
            for field in meta.fields:
                end = field.offset + field.nbytes
                mirror[field.offset : end].copy_(host[field.offset : end])
        self.bytes_staged += meta.nbytes
        self.batches_staged += 1

    def _pin(self, host: torch.Tensor) -> None:
        """Page-lock a mapping of the ring once (a ring that grows is mapped again)."""
        if host.data_ptr() in self.pinned or self.pin_failed:
            return
        import torch

        try:
            error = torch.cuda.cudart().cudaHostRegister(host.data_ptr(), host.numel(), 0)
            failed = int(error) != 0
        except (RuntimeError, AttributeError, TypeError) as exc:
            error, failed = exc, True
        if failed:  # the copies still work, from pageable memory
            self.pin_failed = f"cudaHostRegister: {error}"
            log.warning("staging copies from pageable memory (%s)", self.pin_failed)
            return
        self.pinned[host.data_ptr()] = host

    def close(self) -> None:
        """Remove the "shm" segments' names (mappings live on with their views)."""
        for name in self.shm_names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{SHM_DIR}/{name}")
        self.shm_names.clear()

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "gpu_uuid": self.uuid,
            "generation": self.gen,
            "mirror_bytes": self.size,
            "batches_staged": self.batches_staged,
            "bytes_staged": self.bytes_staged,
            "source": "pageable" if self.pin_failed or not self.pinned else "page-locked",
        }


def open_mirror(handle: MirrorHandle) -> torch.Tensor:
    """The consumer's side: the mirror as one uint8 tensor on this process's device for it;
    StagingUnavailable when this process cannot read it there."""
    import torch

    parts = _local_parts(handle.parts)
    try:
        if handle.kind == "shm":
            name, size = parts
            return _map_shm(str(name), int(size), create=False)
        index = _local_index(handle.gpu_uuid)
        device = torch.device("cuda", index)
        # The producer's device number in the handle is its own; CUDA opens it on ours.
        storage = torch.UntypedStorage._new_shared_cuda(index, *parts[1:])
    except StagingUnavailable:
        raise
    except (RuntimeError, TypeError, ValueError, OSError) as exc:
        raise StagingUnavailable(f"could not open the producer's mirror: {exc}") from None
    base = torch.empty(0, dtype=torch.uint8, device=device)
    return base.set_(storage, 0, (storage.nbytes(),), (1,))


def mirror_maker(name: str) -> int | None:
    """The pid of the producer that made the mirror segment named `name` in SHM_DIR
    (gpudesk-mirror-PID-…), or None when `name` is not one."""
    if not name.startswith(SHM_PREFIX):
        return None
    pid = name[len(SHM_PREFIX) :].split("-", 1)[0]
    return int(pid) if pid.isdigit() else None


def remove_stale_segments() -> list[str]:
    """Remove the "shm" segments a producer of this user left when it was killed (its `close`
    never ran): those whose producer's pid is gone. Another user's are not ours to touch (and
    /dev/shm's sticky bit would refuse), nor is anything but a regular file. The names removed."""
    removed: list[str] = []
    uid = os.getuid()
    try:
        entries = list(os.scandir(SHM_DIR))
    except OSError:
        return removed
    for entry in entries:
        pid = mirror_maker(entry.name)
        if pid is None:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if info.st_uid != uid or not stat.S_ISREG(info.st_mode):
            continue
        if process_alive(pid):
            continue
        with contextlib.suppress(OSError):
            os.unlink(f"{SHM_DIR}/{entry.name}")
            removed.append(entry.name)
    return removed


def _map_shm(name: str, size: int, create: bool) -> torch.Tensor:
    """A named shared-memory segment as one uint8 tensor (kind "shm": tests, diagnosis)."""
    import torch

    if "/" in name or not name.startswith(SHM_PREFIX):
        raise StagingUnavailable(f"{name!r} is not a staging segment's name")
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = os.open(f"{SHM_DIR}/{name}", flags, 0o600)
    try:
        if create:
            os.ftruncate(fd, size)
        elif os.fstat(fd).st_size < size:
            raise StagingUnavailable(f"the staging segment {name} is shorter than announced")
        mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    return torch.frombuffer(mapping, dtype=torch.uint8)


def _local_index(uuid: str | None) -> int:
    """This process's index of the producer's GPU (its CUDA_VISIBLE_DEVICES renumbers them)."""
    import torch

    if not torch.cuda.is_available():
        raise StagingUnavailable("this process sees no CUDA device")
    for index in range(torch.cuda.device_count()):
        if gpu_uuid(index) == uuid:
            return index
    raise StagingUnavailable(f"the producer's GPU ({uuid}) is not one this process sees")


class Staging:
    """The producer's side as a whole: whether it stages (decided on its first batch, by its
    `device` and, for "auto", the batch's size), the mirror, and what it tells consumers."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.mirror: DeviceMirror | None = None
        self.decided = device == "cpu"
        self.why: str | None = "the dataset is served with device = cpu" if self.decided else None

    def stage(
        self,
        host: torch.Tensor,
        meta: BatchMeta,
        ring_size: int,
        on_device: Mapping[int, torch.Tensor] | None = None,
    ) -> int:
        """Stage a placed batch; its generation in the mirror, 0 when it is not staged (its
        consumers read it from the host ring)."""
        if not self.decided:
            self._decide(meta)
        if self.mirror is None:
            return 0
        try:
            self.mirror.stage(host, meta, ring_size, on_device)
        except RuntimeError as exc:  # out of GPU memory, a GPU gone: the host ring goes on
            self.why = f"staging stopped: {exc}"
            log.warning("%s; consumers read the host ring from now on", self.why)
            self.mirror = None
            return 0
        return self.mirror.gen

    def _decide(self, meta: BatchMeta) -> None:
        self.decided = True
        if self.device == "auto" and meta.nbytes < AUTO_MIN_BATCH_BYTES:
            self.why = (
                f"device = auto: a batch of {meta.nbytes / 2**20:.2f} MiB is below "
                f"{AUTO_MIN_BATCH_BYTES / 2**20:.0f} MiB, where one staged copy was measured "
                "no faster than each consumer's own"
            )
            return
        kind = staging_kind(self.device)
        assert kind is not None
        try:
            self.mirror = DeviceMirror(kind)
        except StagingUnavailable as exc:
            self.why = str(exc)
            log.warning("not staging batches on a GPU: %s", exc)

    def welcome(self) -> dict[str, Any]:
        handle = self.mirror.handle if self.mirror is not None else None
        return {
            "staging": handle.to_wire() if handle is not None else None,
            "staging_off": self.why,
        }

    def batch_fields(self, gen: int, consumer_gen: int) -> tuple[dict[str, Any], int]:
        """What a batch message of generation `gen` carries for a consumer that has the mirror
        of `consumer_gen`: the new handle when it grew. Returns the fields and the consumer's
        generation after it."""
        if not gen:
            return {}, consumer_gen
        handle = self.mirror.handle if self.mirror is not None else None
        if handle is not None and consumer_gen < handle.gen:
            return {"gen": gen, "mirror": handle.to_wire()}, handle.gen
        return {"gen": gen}, consumer_gen

    def close(self) -> None:
        if self.mirror is not None:
            self.mirror.close()

    def describe(self) -> dict[str, Any]:
        if self.mirror is not None:
            return {"device": self.device, **self.mirror.describe()}
        return {"device": self.device, "kind": None, "why": self.why}
