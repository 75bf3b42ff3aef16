"""Per-sample gradient features, as LESS builds them (Xia et al., 2024, "LESS: Selecting
Influential Data for Targeted Instruction Tuning", arXiv 2402.04333; reference code
github.com/princeton-nlp/LESS, `less/data_selection/collect_grad_reps.py`):

- `per_sample_gradients`: the gradient of each sample's cross-entropy with respect to every
  trainable parameter of a model (torch.func: vmap over grad of a functional_call, so a chunk
  of samples costs one batched backward pass);
- `adam_preconditioned`: the update direction Adam would take for that gradient from a
  checkpoint's moments (LESS's `obtain_gradients_with_adam`);
- `RademacherProjection`: a seeded random projection with +-1 entries to a fixed dimension
  (LESS uses TRAK's projector with `ProjectionType.rademacher`), generated block by block so
  the whole matrix is never held;
- `projected_gradients`: the three together for a chunk of samples, one parameter and one
  block of the projection at a time;
- `l2_normalised`: rows scaled to unit length (LESS's `merge_and_normalize_info`), so a dot
  product of features is a cosine similarity.

LESS casts the gradients to float16 before projecting (to save GPU memory); here everything
stays float32, which CPUs multiply faster.

Every function imports torch inside, so importing this module stays cheap.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpudesk import optimizers

# Adam's constants in LESS's `obtain_gradients_with_adam` (the Hugging Face AdamW defaults its
# warm-up trained with).
ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.999
ADAM_EPS = 1e-8
# Rows of the projection matrix generated at a time: 512 x 8,192 float32 is 16 MiB.
# Assumption (memory), not a LESS constant; the result does not depend on it.
PROJECTION_BLOCK_ROWS = 512
# Samples one vmap call batches: its working memory is ~0.25 MB a sample for the 28x28 CNN.
# Assumption (memory), not a LESS constant; the result does not depend on it.
VMAP_CHUNK = 128
PROJECTION_STREAM = 0x1E55  # mixed with the seed, so the projection is not the warm-up's stream


def trainable_parameters(model: Any) -> dict[str, Any]:
    """{name: detached tensor} of the model's trainable parameters, in `named_parameters` order
    (the order every flattened gradient and moment vector here uses)."""
    return {name: p.detach() for name, p in model.named_parameters() if p.requires_grad}


def parameter_count(model: Any) -> int:
    return sum(int(p.numel()) for p in trainable_parameters(model).values())


def per_sample_gradients(
    model: Any, params: dict[str, Any], inputs: Any, labels: Any
) -> dict[str, Any]:
    """{name: float32 [b, *shape]}: sample i's gradient of cross-entropy(model(inputs[i]),
    labels[i]) with respect to each of `params` (named as `trainable_parameters` names them).

    `model` gives the architecture and its buffers; `params` the values to differentiate at
    (e.g. a checkpoint's). The loss of one sample is its own: no batch mean couples samples."""
    import torch
    from torch.func import functional_call, grad, vmap

    buffers = {name: b.detach() for name, b in model.named_buffers()}

    def loss(values: dict[str, Any], x: Any, y: Any) -> Any:
        logits = functional_call(model, (values, buffers), (x.unsqueeze(0),))
        return torch.nn.functional.cross_entropy(logits, y.unsqueeze(0))

    batched = vmap(grad(loss), in_dims=(None, 0, 0))
    out = {name: p.new_empty((len(labels), *p.shape)) for name, p in params.items()}
    # vmap's working memory grows with the samples it batches (a CNN's per-sample activations
    # and their gradients): batch at most VMAP_CHUNK samples at a time
    for start in range(0, len(labels), VMAP_CHUNK):
        stop = start + VMAP_CHUNK
        for name, values in batched(params, inputs[start:stop], labels[start:stop]).items():
            out[name][start:stop] = values
    return out


def flattened(parts: dict[str, Any]) -> Any:
    """float32 [b, P]: per-parameter per-sample gradients side by side, in their order."""
    import torch

    return torch.cat([g.reshape(g.shape[0], -1) for g in parts.values()], dim=1)


@dataclass
class StageTimes:
    """Seconds spent computing gradients (with the Adam transform) and projecting them."""

    gradients: float = 0.0
    projection: float = 0.0


def projected_gradients(
    model: Any,
    params: dict[str, Any],
    inputs: Any,
    labels: Any,
    projection: RademacherProjection,
    moments: tuple[Any, Any] | None = None,
    times: StageTimes | None = None,
) -> Any:
    """float32 [b, projection.dim]: the samples' per-sample gradients at `params`,
    Adam-preconditioned when `moments` (exp_avg, exp_avg_sq, flattened) is given, times the
    projection. One parameter at a time, so the preconditioned copy is never made whole."""
    import torch

    times = times if times is not None else StageTimes()
    started = time.perf_counter()
    parts = per_sample_gradients(model, params, inputs, labels)
    times.gradients += time.perf_counter() - started
    out = torch.zeros((len(labels), projection.dim), dtype=torch.float32)
    transform = None
    if moments is not None:
        first, second = moments

        def transform(piece: Any, low: int, high: int) -> Any:
            return adam_preconditioned(piece, first[low:high], second[low:high])

    offset = 0
    for name in list(parts):
        flat = parts.pop(name).reshape(len(labels), -1)
        projection.accumulate(out, flat, offset, transform, times)
        offset += flat.shape[1]
    return out


def flat_moments(optimizer: optimizers.Adam) -> tuple[Any, Any]:
    """(exp_avg, exp_avg_sq), each float32 [P]: an Adam optimizer's first and second moments
    of its parameters, flattened in their order (zeros for a parameter not stepped yet)."""
    import torch

    firsts, seconds = [], []
    for i, p in enumerate(optimizer.params):
        first, second = optimizer.moments(i) or (torch.zeros_like(p), torch.zeros_like(p))
        firsts.append(first.detach().reshape(-1).clone())
        seconds.append(second.detach().reshape(-1).clone())
    return torch.cat(firsts), torch.cat(seconds)


def adam_preconditioned(gradients: Any, exp_avg: Any, exp_avg_sq: Any) -> Any:
    """float32 [b, P]: Gamma = m' / sqrt(v' + eps) with m' = beta1 m + (1 - beta1) g and
    v' = beta2 v + (1 - beta2) g^2, one row per sample's gradient g, from a checkpoint's moments
    m, v (the moments of the same coordinates). As LESS's `obtain_gradients_with_adam`: eps
    inside the square root, no bias correction. Overwrites `gradients` (computed in place)."""
    second = gradients.square().mul_(1.0 - ADAM_BETA2).add_(exp_avg_sq, alpha=ADAM_BETA2)
    first = gradients.mul_(1.0 - ADAM_BETA1).add_(exp_avg, alpha=ADAM_BETA1)
    return first.div_(second.add_(ADAM_EPS).sqrt_())


class RademacherProjection:
    """A seeded [rows, dim] matrix of independent +-1/sqrt(dim) entries (Rademacher, as LESS's
    TRAK projector; the 1/sqrt(dim) makes it preserve inner products in expectation,
    Johnson-Lindenstrauss). Row block j (`PROJECTION_BLOCK_ROWS` rows) is drawn from its own
    generator keyed by (seed, stream, j), so any block is reproduced alone and the projection of
    a sample does not depend on how samples are chunked. Memory: one block at a time."""

    def __init__(self, rows: int, dim: int, seed: int) -> None:
        if rows < 1 or dim < 1:
            raise ValueError(f"a projection needs rows and dim >= 1, got {rows} x {dim}")
        self.rows, self.dim, self.seed = rows, dim, seed

    @property
    def blocks(self) -> int:
        return math.ceil(self.rows / PROJECTION_BLOCK_ROWS)

    def block(self, index: int) -> Any:
        """float32 [rows of block `index`, dim]: that block of the matrix."""
        import torch

        start = index * PROJECTION_BLOCK_ROWS
        count = min(PROJECTION_BLOCK_ROWS, self.rows - start)
        generator = np.random.default_rng((self.seed, PROJECTION_STREAM, index))
        raw = np.frombuffer(generator.bytes(math.ceil(count * self.dim / 8)), dtype=np.uint8)
        # each random byte becomes its 8 bits as +-1/sqrt(dim) floats, by table look-up (one
        # pass over the block: 5x faster than unpacking the bits and scaling them)
        signs = np.take(_sign_table(self.dim), raw, axis=0).reshape(-1)[: count * self.dim]
        return torch.from_numpy(signs.reshape(count, self.dim))

    def project(self, features: Any) -> Any:
        """float32 [b, dim]: `features` (float32 [b, rows]) times the matrix."""
        import torch

        if features.shape[1] != self.rows:
            raise ValueError(f"features have {features.shape[1]} columns, expected {self.rows}")
        out = torch.zeros((features.shape[0], self.dim), dtype=torch.float32)
        self.accumulate(out, features, 0)
        return out

    def accumulate(
        self,
        out: Any,
        features: Any,
        offset: int,
        transform: Callable[[Any, int, int], Any] | None = None,
        times: StageTimes | None = None,
    ) -> None:
        """out += transform(features) @ (the matrix's rows offset .. offset + width), in place:
        the projection of coordinates offset.. of a longer vector (one parameter's part of a
        gradient). `out` float32 [b, dim], `features` float32 [b, width]. `transform(piece,
        low, high)` rewrites the columns of coordinates low..high before they are projected
        (LESS's Adam step), one block at a time, so its temporaries are [b, a block's rows],
        never the size of a whole parameter's gradients. `times` adds the seconds spent in
        `transform` to its gradients and the rest (making blocks, multiplying) to projection."""
        mark = time.perf_counter()
        for low, high, rows in self.row_blocks(offset, offset + features.shape[1]):
            generated = time.perf_counter()  # making the block is projection time
            piece = features[:, low - offset : high - offset]
            if transform is not None:
                piece = transform(piece, low, high)
            projecting = time.perf_counter()
            out.addmm_(piece, rows)
            done = time.perf_counter()
            if times is not None:
                times.gradients += projecting - generated
                times.projection += (generated - mark) + (done - projecting)
            mark = done

    def row_blocks(self, start: int, stop: int) -> Iterator[tuple[int, int, Any]]:
        """(low, high, the matrix's rows low..high) covering rows start..stop, one block at a
        time (a block straddling `start` or `stop` is generated whole and sliced)."""
        if start < 0 or stop > self.rows or start > stop:
            raise ValueError(f"rows {start}..{stop} are outside the projection's {self.rows}")
        for index in range(start // PROJECTION_BLOCK_ROWS, math.ceil(stop / PROJECTION_BLOCK_ROWS)):
            first = index * PROJECTION_BLOCK_ROWS
            low, high = max(start, first), min(stop, first + PROJECTION_BLOCK_ROWS)
            yield low, high, self.block(index)[low - first : high - first]


@functools.lru_cache(maxsize=4)
def _sign_table(dim: int) -> np.ndarray:
    """float32 [256, 8]: row b holds the bits of byte b, most significant first, as
    -1/sqrt(dim) (bit 0) or +1/sqrt(dim) (bit 1)."""
    bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1)
    scale = 1.0 / math.sqrt(dim)
    return np.where(bits == 1, scale, -scale).astype(np.float32)


def l2_normalised(features: Any) -> Any:
    """Each row divided by its L2 norm (a zero row stays zero)."""
    norms = features.norm(dim=1, keepdim=True)
    return features / norms.clamp_min(1e-30)
