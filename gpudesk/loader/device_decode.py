"""Decoding on the producer's GPU: a dataset served with `device = "cuda"` that can decode there.

A producer's DataLoader workers decode on the CPU: every sample's JPEG through Pillow, about 0.2
to 0.4 ms of a core each (docs/hardware-validation.md: one H200's nvJPEG did the decoding of 6
to 12 cores). A dataset that can decode a batch on a GPU says so by offering two methods:

    dataset.encoded_view()               -> a dataset of the same length and order whose samples
                                            keep their encoded form (JPEG bytes as a uint8
                                            tensor, with the rest of the sample as it is)
    dataset.decode_batch(samples, device) -> those samples decoded on `device` (tensors there)

With `device = "cuda"` and such a dataset, the producer's workers fetch the encoded samples
(cheap: reading bytes) and the producer decodes each batch on its GPU (`decode_batch`), under
the batch's seed (fetch.batch_seed), so its random augmentations are the batch's own wherever
and whenever it is made, as on the CPU path. The decoded batch is then laid into the ring (one
device-to-host copy, for the look-back and for consumers on other GPUs) and staged into the
GPU mirror straight from the decoded tensors (staging.py): consumers on the producer's GPU read
it there, without a host-to-device copy of the decoded pixels at all.

Decoded on a GPU, pixels are not bit-identical to Pillow's (nvJPEG's IDCT and upsampling round
differently: up to 15 levels on an H200). A dataset's GPU augmentations are its own code and
need not match its CPU ones either; `gpudesk.workloads.images` says what it does.

Where the producer does not stage on a GPU (no CUDA, `device = "cpu"` or "auto"), the workers
decode as before. With the test staging (`GPUDESK_LOADER_STAGING=shm`) the producer decodes
on the CPU through the same path, so the machinery is tested without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpudesk.loader.batch import Packed, pack
from gpudesk.loader.fetch import Key, Request, Source, seeded

if TYPE_CHECKING:
    import torch


def offers_decoding(dataset: Any) -> bool:
    return callable(getattr(dataset, "encoded_view", None)) and callable(
        getattr(dataset, "decode_batch", None)
    )


@dataclass
class Encoded:
    """A batch as a worker hands it over on this path: its samples still encoded."""

    key: Key
    indices: tuple[int, ...]
    seed: int
    samples: list[Any]


class EncodedSource(Source):
    """The producer DataLoader's source when the producer decodes: fetches, never decodes."""

    def __getitems__(self, request: Request) -> Encoded:
        return Encoded(request.key, request.indices, request.seed, self.fetch(request))


def passthrough_encoded(batch: Encoded) -> Encoded:
    """The producer DataLoader's collate_fn on this path."""
    return batch


class DeviceDecoder:
    """The producer's side: a fetched batch of encoded samples, decoded on `device` and packed
    (its fields loose, on the device, for the producer to place and stage)."""

    def __init__(self, dataset: Any, device: torch.device) -> None:
        self.dataset = dataset
        self.device = device
        self.batches = 0
        self.samples = 0

    def source(self) -> EncodedSource:
        return EncodedSource(self.dataset.encoded_view())

    def finish(self, batch: Encoded) -> Packed:
        # Seeded as a worker's fetch is (fetch.seeded): the batch's augmentations are its own.
        with seeded(batch.seed, restore=False):
            decoded = self.dataset.decode_batch(batch.samples, self.device)
        self.batches += 1
        self.samples += len(decoded)
        return pack(batch.key, list(decoded), list(batch.indices), None)

    def describe(self) -> dict[str, Any]:
        return {"device": str(self.device), "batches": self.batches, "samples": self.samples}


def decoder_for(dataset: Any, device: str) -> DeviceDecoder | None:
    """The producer's decoder, where its dataset offers decoding and it stages on a GPU (or
    in the test staging, on the CPU); None: its workers decode, as without it."""
    from gpudesk.loader.staging import staging_kind

    if device != "cuda" or not offers_decoding(dataset):
        return None
    import torch

    kind = staging_kind(device)
    if kind == "shm":
        return DeviceDecoder(dataset, torch.device("cpu"))
    if not torch.cuda.is_available():
        return None
    return DeviceDecoder(dataset, torch.device("cuda", torch.cuda.current_device()))
