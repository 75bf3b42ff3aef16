"""A dataset's content fingerprint: the same samples in any order give the same fingerprint;
changing one sample (or its label) gives another."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

FINGERPRINT_VERSION = "fp1"


def sample_digest(sample: Any) -> bytes:
    """A digest of one sample: a tensor or array, a number, a string, or a tuple/list/dict of
    them (a torch tensor is read through numpy)."""
    digest = hashlib.sha256()
    _feed(digest, sample)
    return digest.digest()


def _feed(digest: Any, value: Any) -> None:
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value)
        digest.update(f"a{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    elif isinstance(value, (tuple, list)):
        digest.update(f"s{len(value)}".encode())
        for item in value:
            _feed(digest, item)
    elif isinstance(value, dict):
        digest.update(f"m{len(value)}".encode())
        for key in sorted(value, key=str):
            digest.update(str(key).encode())
            _feed(digest, value[key])
    elif isinstance(value, (bool, int, float, str, bytes, np.generic)):
        digest.update(f"v{type(value).__name__}:{value!r}".encode())
    else:
        raise TypeError(f"cannot fingerprint a sample part of type {type(value).__name__}")


def fingerprint_digests(digests: Iterable[bytes]) -> str:
    """The order-independent fingerprint of a dataset's sample digests."""
    ordered = sorted(digests)
    total = hashlib.sha256(f"{FINGERPRINT_VERSION}:{len(ordered)}:".encode())
    for item in ordered:
        total.update(item)
    return f"{FINGERPRINT_VERSION}-{total.hexdigest()[:32]}"


def fingerprint(dataset: Sequence[Any]) -> str:
    """Fingerprint a map-style dataset (anything with len() and [i])."""
    return fingerprint_digests(sample_digest(dataset[i]) for i in range(len(dataset)))
