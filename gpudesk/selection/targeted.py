"""The `less-P` preset: the LESS recipe (Xia et al., 2024, "LESS: Selecting Influential Data for
Targeted Instruction Tuning", arXiv 2402.04333; reference code github.com/princeton-nlp/LESS) at
small scale, on the model `models.build_model` gives for the samples' shape (an MLP for vectors,
a small CNN for images) instead of LoRA adapters on an LLM.

What it computes, for training samples z and a target set (samples of the task to serve):

1. Warm-up: train the model with Adam on a seeded random `WARMUP_FRACTION` of the training data
   for `WARMUP_EPOCHS` epochs (a linear learning-rate schedule with warm-up, as LESS's trainer),
   keeping a checkpoint after each epoch: the parameters and Adam's first and second moments.
   The target never trains it.
2. At each checkpoint i, the per-sample gradient of the cross-entropy over all trainable
   parameters (`gradients.per_sample_gradients`), in chunks of at most `GRADIENT_CHUNK_BYTES`.
3. Training samples: the gradient Adam-preconditioned from the checkpoint's moments,
   Gamma_i(z) = m' / sqrt(v' + eps) (`gradients.adam_preconditioned`). Target samples: the plain
   gradient g_i(t) (LESS takes SGD gradients for the validation set).
4. Both projected to `PROJECTION_DIM` dimensions by the same seeded Rademacher projection,
   generated block by block (`gradients.RademacherProjection`), and L2-normalised.
5. score(z) = max over the target's classes c (LESS's subtasks) of
   sum_i eta_i * mean over the targets t of class c of cos(Gamma_i(z), g_i(t)), where eta_i is
   the mean learning rate of epoch i, normalised to sum to 1 (LESS's checkpoint weights). The
   mean cosine to a class is the dot product with the mean of its normalised target features,
   so the target side costs one vector per class and checkpoint. A checkpoint of weight 0 (an epoch
   whose learning rate was 0 throughout: a warm-up of one step an epoch) adds nothing to the
   scores, and its steps 2-4 are skipped.
6. The ordering: descending score (top-k), ties broken by a seeded permutation. No coverage
   bins, no pruning; per-class quotas, when asked, are applied later (`presets.take`).

The seed changes the warm-up part, the initialisation and the projection.

Cost: the warm-up (`WARMUP_EPOCHS` epochs on `WARMUP_FRACTION` of the data), then per
checkpoint one per-sample backward pass over the training and target samples and a projection
of P -> `PROJECTION_DIM` per sample, where P is the model's parameter count:
O(WARMUP_EPOCHS * (n + m) * P * PROJECTION_DIM) multiply-adds, the dominant term. Memory stays
O(chunk * P + PROJECTION_BLOCK_ROWS * PROJECTION_DIM): neither the gradients of all samples nor
the whole projection matrix is ever held.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpudesk import optimizers
from gpudesk.selection import gradients, models, scoring
from gpudesk.selection.preset_names import PresetError

# LESS's warm-up: "PERCENTAGE=0.05" of the training data (README, "Warmup training"; the paper's
# step 1 trains on a random 5 % for N = 4 epochs) with "--num_train_epochs 4" and
# "--save_strategy epoch" (less/scripts/train/base_training_args.sh): four checkpoints, one per
# epoch. Assumption: never fewer samples than classes, for tiny data sets.
WARMUP_FRACTION = 0.05
WARMUP_EPOCHS = 4
# base_training_args.sh: "--per_device_train_batch_size 1 --gradient_accumulation_steps 32",
# an effective batch of 32 samples per Adam step.
WARMUP_BATCH = 32
# base_training_args.sh: "--lr_scheduler_type linear --warmup_ratio 0.03" (Hugging Face's
# linear schedule: up from 0 over ceil(3 % of the steps), then down towards 0).
WARMUP_RATIO = 0.03
# Assumption: Adam's default rate (Kingma & Ba, 2015; torch's default). LESS's 2e-5 is for LoRA
# adapters on a pretrained LLM; these small models start from a random initialisation, and at
# 2e-5 a few dozen steps would leave them where they started.
WARMUP_LR = 1e-3
# README: "We use 8192 as our default projection dimension" (the paper's main results).
PROJECTION_DIM = 8192
# Assumption (memory): a chunk's per-sample gradients and projected features take at most
# 48 MiB together, e.g. 360 samples of the 26,698-parameter CNN. With vmap's working memory and
# one projection block, the pre-pass of 4,000 28x28 samples peaked at 505 MB resident (torch and
# its CNN kernels are ~330 MB of it); 32 MiB measured 464 MB and 64 MiB 503 MB on 1,000. Larger
# chunks generate the projection fewer times (once per chunk and checkpoint). The scores do not
# depend on it (beyond float rounding).
GRADIENT_CHUNK_BYTES = 48 * 2**20
WARMUP_STREAM = 0x3A9  # mixed with the seed for the warm-up part and its batch order
TIE_STREAM = 0x71E  # mixed with the seed for breaking equal scores
RECIPE = "less-v2"  # names this recipe in the cache key (v1: the last-layer proxy score)


@dataclass(frozen=True)
class Target:
    """The samples a `less` selection should serve: flattened inputs float32 [m, d] (as
    `scoring.features` gives), integer labels int64 [m], and the target's content fingerprint
    (part of the cache key)."""

    inputs: np.ndarray
    labels: np.ndarray
    fingerprint: str


@dataclass(frozen=True)
class Checkpoint:
    """The warm-up's state after one epoch: parameter values {name: tensor}, Adam's flattened
    moments (float32 [P], in the parameters' order) and the epoch's mean learning rate."""

    params: dict[str, Any]
    exp_avg: Any
    exp_avg_sq: Any
    mean_lr: float


@dataclass(frozen=True)
class Warmup:
    model: Any  # the architecture (its final values are the last checkpoint's)
    checkpoints: list[Checkpoint]
    part: np.ndarray  # the training samples it trained on
    steps: int
    accuracy: float | None  # on the training samples outside `part` (None when there are none)


@dataclass(frozen=True)
class LessScores:
    values: np.ndarray  # float64 [n], higher = more like the target
    notes: dict[str, Any]  # JSON-able: what the pre-pass did and how long each stage took


def key_params() -> dict[str, Any]:
    """The recipe's constants, part of the cache key: a change to any is a new entry."""
    return {
        "recipe": RECIPE,
        "warmup_fraction": WARMUP_FRACTION,
        "warmup_epochs": WARMUP_EPOCHS,
        "warmup_batch": WARMUP_BATCH,
        "warmup_lr": WARMUP_LR,
        "warmup_ratio": WARMUP_RATIO,
        "adam": [gradients.ADAM_BETA1, gradients.ADAM_BETA2, gradients.ADAM_EPS],
        "projection": "rademacher",
        "projection_dim": PROJECTION_DIM,
    }


def less(
    inputs: np.ndarray, labels: np.ndarray, target: Target, seed: int, shape: tuple[int, ...]
) -> tuple[np.ndarray, dict[str, Any]]:
    """(the ordering of the training samples, most wanted first: descending LESS score, and the
    pre-pass's notes). See the module doc."""
    scores = less_scores(inputs, labels, target, seed, shape)
    return top_k_ordering(scores.values, seed), scores.notes


def top_k_ordering(scores: np.ndarray, seed: int) -> np.ndarray:
    """Indices by descending score; equal scores in a seeded random order."""
    tie = np.random.default_rng((seed, TIE_STREAM)).permutation(len(scores))
    return np.lexsort((tie, -np.asarray(scores, dtype=np.float64))).astype(np.int64)


def less_scores(
    inputs: np.ndarray, labels: np.ndarray, target: Target, seed: int, shape: tuple[int, ...]
) -> LessScores:
    """Each training sample's LESS score (see the module doc) and the pre-pass's notes."""
    import torch

    labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    inputs = np.ascontiguousarray(inputs, dtype=np.float32).reshape(len(labels), -1)
    _check_shape(shape, inputs.shape[1])
    target_inputs, target_labels = _checked_target(target, inputs.shape[1])
    classes = int(labels.max()) + 1
    if int(target_labels.max()) >= classes:
        raise PresetError(
            f"the selection target has label {int(target_labels.max())}; the "
            f"training data has labels 0..{classes - 1} only"
        )
    started = time.perf_counter()
    warmup = warm_up(inputs, labels, classes, seed, shape)
    warmup_s = time.perf_counter() - started

    rows = gradients.parameter_count(warmup.model)
    projection = gradients.RademacherProjection(rows, PROJECTION_DIM, seed)
    chunk = max(1, GRADIENT_CHUNK_BYTES // (4 * (rows + PROJECTION_DIM)))
    weights = checkpoint_weights([c.mean_lr for c in warmup.checkpoints])
    target_classes, class_of, class_count = np.unique(
        target_labels, return_inverse=True, return_counts=True
    )
    target_class = torch.from_numpy(class_of.astype(np.int64))
    class_sizes = torch.from_numpy(class_count.astype(np.float64))
    x, y = torch.from_numpy(inputs), torch.from_numpy(labels)
    tx, ty = torch.from_numpy(target_inputs), torch.from_numpy(target_labels)
    times = gradients.StageTimes()
    scores = torch.zeros((len(labels), len(target_classes)), dtype=torch.float64)
    for checkpoint, weight in zip(warmup.checkpoints, weights, strict=True):
        if weight == 0.0:
            continue  # it adds nothing to the scores (an epoch at learning rate 0): not computed
        # the target side: plain gradients, one mean normalised feature per target class
        sums = torch.zeros((len(target_classes), PROJECTION_DIM), dtype=torch.float64)
        for s in _chunks(len(target_labels), chunk):
            aim = _features(warmup.model, checkpoint, tx[s], ty[s], projection, False, times)
            sums.index_add_(0, target_class[s], aim.double())
        means = (sums / class_sizes[:, None]).float()
        for s in _chunks(len(labels), chunk):
            train = _features(warmup.model, checkpoint, x[s], y[s], projection, True, times)
            scores[s] += weight * (train @ means.T).double()
    values = scores.max(dim=1).values.numpy()
    notes = {
        "model": models.model_name(shape, classes),
        "parameters": rows,
        "warmup_samples": len(warmup.part),
        "warmup_epochs": WARMUP_EPOCHS,
        "warmup_steps": warmup.steps,
        "warmup_accuracy": None if warmup.accuracy is None else round(warmup.accuracy, 4),
        "checkpoint_weights": [round(w, 6) for w in weights],
        "projection_dim": PROJECTION_DIM,
        "target_samples": len(target_labels),
        "target_classes": [int(c) for c in target_classes],
        "timings_s": {
            "warmup": round(warmup_s, 3),
            "gradients": round(times.gradients, 3),
            "projection": round(times.projection, 3),
        },
    }
    return LessScores(values=values.astype(np.float64), notes=notes)


def warm_up(
    inputs: np.ndarray, labels: np.ndarray, classes: int, seed: int, shape: tuple[int, ...]
) -> Warmup:
    """Train a fresh model (seeded) with Adam on a seeded random `WARMUP_FRACTION` of the
    training data for `WARMUP_EPOCHS` epochs; a checkpoint after each epoch."""
    import torch

    n = len(labels)
    generator = np.random.default_rng((seed, WARMUP_STREAM))
    size = min(n, max(classes, round(n * WARMUP_FRACTION)))
    part = np.sort(generator.permutation(n)[:size])
    model = models.build_model(shape, classes, seed)
    params = list(gradients.trainable_parameters(model))
    named = dict(model.named_parameters())
    optimizer = optimizers.Adam(
        [named[name] for name in params],
        lr=WARMUP_LR,
        betas=(gradients.ADAM_BETA1, gradients.ADAM_BETA2),
        eps=gradients.ADAM_EPS,
    )
    per_epoch = math.ceil(size / WARMUP_BATCH)
    rates = learning_rates(per_epoch * WARMUP_EPOCHS)
    x, y = torch.from_numpy(inputs), torch.from_numpy(labels)
    checkpoints, step = [], 0
    model.train()
    for epoch in range(WARMUP_EPOCHS):
        order = part[generator.permutation(size)]
        for start in range(0, size, WARMUP_BATCH):
            batch = torch.from_numpy(order[start : start + WARMUP_BATCH])
            for group in optimizer.param_groups:
                group["lr"] = float(rates[step])
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            optimizer.step()
            step += 1
        exp_avg, exp_avg_sq = gradients.flat_moments(optimizer)
        epoch_rates = rates[epoch * per_epoch : (epoch + 1) * per_epoch]
        checkpoints.append(
            Checkpoint(
                params={name: named[name].detach().clone() for name in params},
                exp_avg=exp_avg,
                exp_avg_sq=exp_avg_sq,
                mean_lr=float(np.mean(epoch_rates)),
            )
        )
    model.eval()
    rest = np.setdiff1d(np.arange(n), part)
    accuracy = None
    if len(rest):  # on the samples it did not train on, as the proxies' accuracy is measured
        warmed = scoring.Proxy(model=model, classes=classes, shape=shape, seed=seed)
        _, right = scoring.sample_scores(warmed, inputs[rest], labels[rest], "loss")
        accuracy = float(right.mean())
    return Warmup(model=model, checkpoints=checkpoints, part=part, steps=step, accuracy=accuracy)


def learning_rates(steps: int) -> np.ndarray:
    """float64 [steps]: the rate of each Adam step under Hugging Face's linear schedule with
    warm-up (LESS's trainer): up from 0 over ceil(WARMUP_RATIO * steps) steps, then linearly
    down towards 0 at `steps`."""
    warm = math.ceil(steps * WARMUP_RATIO)
    step = np.arange(steps, dtype=np.float64)
    up = step / max(1, warm)
    down = np.maximum(0.0, (steps - step) / max(1, steps - warm))
    return WARMUP_LR * np.where(step < warm, up, down)


def checkpoint_weights(mean_rates: list[float]) -> list[float]:
    """eta_i: each epoch's mean learning rate, normalised to sum to 1 (LESS's `matching.py`
    renormalises its checkpoint weights); equal weights if every rate is 0."""
    total = float(sum(mean_rates))
    if total <= 0:
        return [1.0 / len(mean_rates)] * len(mean_rates)
    return [float(rate) / total for rate in mean_rates]


def _features(
    model: Any,
    checkpoint: Checkpoint,
    inputs: Any,
    labels: Any,
    projection: gradients.RademacherProjection,
    adam: bool,
    times: gradients.StageTimes,
) -> Any:
    """float32 [b, PROJECTION_DIM]: the projected, L2-normalised gradient features of the
    samples at `checkpoint`, Adam-preconditioned by its moments when `adam`."""
    moments = (checkpoint.exp_avg, checkpoint.exp_avg_sq) if adam else None
    projected = gradients.projected_gradients(
        model, checkpoint.params, inputs, labels, projection, moments, times
    )
    return gradients.l2_normalised(projected)


def _chunks(n: int, size: int) -> list[slice]:
    return [slice(start, min(n, start + size)) for start in range(0, n, size)]


def _check_shape(shape: tuple[int, ...], width: int) -> None:
    if not shape or math.prod(shape) != width:
        raise PresetError(
            f"the samples have {width} features, but their shape is given as {tuple(shape)}"
        )


def _checked_target(target: Target, width: int) -> tuple[np.ndarray, np.ndarray]:
    labels = np.asarray(target.labels, dtype=np.int64).reshape(-1)
    if len(labels) == 0:
        raise PresetError("the selection target is empty: give it at least one sample")
    if len(target.inputs) != len(labels):
        raise PresetError(
            f"the selection target has {len(target.inputs)} samples and {len(labels)} labels"
        )
    inputs = np.ascontiguousarray(target.inputs, dtype=np.float32).reshape(len(labels), -1)
    if inputs.shape[1] != width:
        raise PresetError(
            f"the selection target's samples have {inputs.shape[1]} features, "
            f"the dataset's have {width}"
        )
    if int(labels.min()) < 0:
        raise PresetError("the selection target has a negative label")
    return inputs, labels
