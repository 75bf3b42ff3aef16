"""Where a `SharedLoader` is in its epoch, for a job that restarts from a checkpoint
(`state_dict()` / `load_state_dict()`).

Under a producer a consumer's epoch is a set of the producer's batches, read in the order they
come (`producer.py`), so where it is, is *which* of them it has handed out whole, and how far into
each one it has begun: the same thing a consumer tells a restarted producer in its hello
(`resume`), and that is how a resumed loader asks for the rest of its epoch. Locally the batches
come in the plan's order, so where it is, is how many it has yielded.

A state is for the mode it was taken in: batches of a producer are not the fallback's batches
(their size is the producer's), so loading one into the other is refused with the reason.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpudesk.loader.protocol import LoaderError, ProducerInfo

if TYPE_CHECKING:
    from gpudesk.loader.consumer import SharedLoader

VERSION = 1


@dataclass
class ResumeState:
    """A loader's place in its epoch. `done` and `begun` are the producer's batches (shared
    mode); `yielded` counts this loader's batches of the epoch (both modes)."""

    mode: str  # "shared" or "local"
    name: str
    epoch: int  # the epoch being read (the producer's, under one), or the next one
    batch_size: int  # this loader's
    per_batch: int  # the producer's batch size (shared), this loader's plan's (local)
    length: int  # samples of an epoch
    shard: tuple[int, int] | None
    yielded: int = 0
    done: list[int] = field(default_factory=list)  # batches wholly handed out
    begun: dict[int, int] = field(default_factory=dict)  # batch -> samples of it handed out
    epoch_offset: int | None = None  # the stream's epoch minus the script's (set_epoch)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "mode": self.mode,
            "name": self.name,
            "epoch": self.epoch,
            "batch_size": self.batch_size,
            "per_batch": self.per_batch,
            "length": self.length,
            "shard": list(self.shard) if self.shard else None,
            "yielded": self.yielded,
            "done": sorted(self.done),
            "begun": {str(k): v for k, v in sorted(self.begun.items())},
            "epoch_offset": self.epoch_offset,
        }

    @classmethod
    def from_dict(cls, state: Any) -> ResumeState:
        try:
            if int(state["version"]) != VERSION:
                raise ValueError(f"version {state['version']}, this gpudesk reads {VERSION}")
            shard = state["shard"]
            return cls(
                mode=str(state["mode"]),
                name=str(state["name"]),
                epoch=int(state["epoch"]),
                batch_size=int(state["batch_size"]),
                per_batch=int(state["per_batch"]),
                length=int(state["length"]),
                shard=(int(shard[0]), int(shard[1])) if shard else None,
                yielded=int(state["yielded"]),
                done=[int(j) for j in state["done"]],
                begun={int(k): int(v) for k, v in state["begun"].items()},
                epoch_offset=None if state["epoch_offset"] is None else int(state["epoch_offset"]),
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise LoaderError(
                f"not a SharedLoader state_dict ({type(exc).__name__}: {exc}): pass what "
                "state_dict() returned, as saved in the checkpoint"
            ) from None

    def check(self, mode: str, name: str, **settings: Any) -> None:
        """Refuse a state another loader (or mode, or settings) took: its batches are not ours."""
        if mode != self.mode:
            raise LoaderError(
                f"this state_dict was taken {self._mode_words(self.mode)} and this loader "
                f"reads {self._mode_words(mode)}: their batches differ (the producer's batch "
                "size is not the fallback's), so it cannot resume that epoch. Resume it in the "
                "mode it was taken in, or start the epoch afresh (do not load the state)"
            )
        theirs = {"name": self.name, **{k: getattr(self, k) for k in settings}}
        ours = {"name": name, **settings}
        differ = [f"{k} {theirs[k]!r} there, {v!r} here" for k, v in ours.items() if v != theirs[k]]
        if differ:
            raise LoaderError(
                "this state_dict is of a loader with other settings ("
                + "; ".join(differ)
                + "), so its place in the epoch means other samples here: make the loader "
                "with the settings it was saved with"
            )

    @staticmethod
    def _mode_words(mode: str) -> str:
        return "from a producer" if mode == "shared" else "locally (no producer)"


def take(loader: SharedLoader) -> ResumeState:
    """The loader's place in its epoch now."""
    state = ResumeState(
        loader.mode,
        loader.name,
        loader.epoch,
        loader.batch_size or 64,
        _per_batch(loader),
        loader._epoch_length(),
        _shard(loader),
        epoch_offset=loader.contract.epoch_offset,
    )
    if loader.mode == "local":
        state.epoch, state.yielded = loader._local_reading or (
            loader._local_epoch,
            loader._local_start,
        )
        return state
    epoch = loader.epoch
    # Received and not wholly handed out: asked for again on resuming.
    live = {p.index for p in loader._pieces} | {p.index for p in loader._pending.get(epoch, [])}
    state.done = sorted(loader._received.get(epoch, set()) - live)
    state.begun = {p.index: p.start for p in loader._pieces if p.start}
    state.yielded = loader._yielded
    return state


def restore(loader: SharedLoader, state_dict: Any) -> None:
    """Put the loader where `state_dict` says: its next iteration yields the rest of that epoch."""
    from gpudesk.loader.protocol import final_failure

    state = ResumeState.from_dict(state_dict)
    state.check(
        loader.mode,
        loader.name,
        batch_size=loader.batch_size or 64,
        per_batch=_per_batch(loader),
        length=loader._epoch_length(),
        shard=_shard(loader),
    )
    loader.contract.epoch_offset = state.epoch_offset
    if loader.mode == "local":
        loader._local_epoch, loader._local_start = state.epoch, state.yielded
        return
    info = loader._running_producer(0.0)
    if info is None or final_failure(info) is not None:
        raise LoaderError(f"cannot resume: {loader._no_producer(0.0, info)}")
    rejoin(loader, info, state.epoch, set(state.done), state.begun)
    loader._yielded = state.yielded


def rejoin(
    loader: SharedLoader, info: ProducerInfo, epoch: int, done: set[int], begun: dict[int, int]
) -> None:
    """Say hello again as from `epoch`, having `done` of it and `begun` some of its batches: the
    producer gives the rest, as it does to a consumer after its own restart (`reconnect.py`)."""
    loader.close()  # bye: the slots it was given go back at once; batches handed out stay mapped
    loader._pending.clear()
    loader._received = defaultdict(set, {epoch: set(done)})
    loader._skip = dict(begun)
    loader._release, loader._pieces, loader._yielded = [], [], 0
    loader.epoch = epoch
    loader._connect(info, resume=True)


def join_ranks(loader: SharedLoader, info: ProducerInfo | None) -> None:
    """The ranks of a process group start at the same producer epoch (else their shares would be
    of different epochs); and where their batch counts would differ, say so."""
    from gpudesk.loader.contract import agree_on_epoch, resolve_shard

    if loader.contract.shard == resolve_shard(None):  # the shard is the process group's
        welcomed = loader.epoch if loader.mode == "shared" else 0
        epoch = agree_on_epoch(welcomed, loader.mode)
        if loader.mode == "shared" and epoch != loader.epoch and info is not None:
            rejoin(loader, info, epoch, set(), {})
        loader.contract.joined = (welcomed, epoch)
    why = loader.contract.uneven(loader._epoch_length(), loader.batch_size or 64)
    if why:
        warnings.warn(why, RuntimeWarning, stacklevel=3)


def _per_batch(loader: SharedLoader) -> int:
    return loader._plan_batch() if loader.mode == "local" else loader.producer_batch


def _shard(loader: SharedLoader) -> tuple[int, int] | None:
    shard = loader.contract.shard
    return (shard.rank, shard.world) if shard else None
