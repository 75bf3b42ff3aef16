"""Data-selection preset names: `METHOD-PERCENT` or `METHOD-PERCENT-perclass`, the methods
there are, and their check. Without numpy: the job and dataset specs (gpudesk.core) check a
preset's name with it; how an ordering becomes the kept subset is gpudesk.selection.presets."""

from __future__ import annotations

import re
from dataclasses import dataclass

CHEAP_METHODS = ("full", "random", "stratified", "rs2")
SCORED_METHODS = ("loss", "el2n", "coverage", "dedup", "less")
PROXY_METHODS = ("loss", "el2n", "coverage", "less")  # train a classifier: need labels
METHODS = CHEAP_METHODS + SCORED_METHODS

# What each method computes (and its source), and what its pre-pass costs
# (`gpudesk select presets`; docs/selection.md has the details).
ABOUT: dict[str, tuple[str, str]] = {
    "full": ("every sample", "none"),
    "random": ("a seeded random permutation; the first P %", "one permutation"),
    "stratified": (
        "a seeded permutation taken per class (or per stratum: the dataset's "
        "selection_strata, else sample-size buckets) up to proportional quotas",
        "one permutation",
    ),
    "rs2": (
        "a new P % every epoch, the next part of a random permutation, every sample "
        "once before any twice (RS2, Okanovic et al., 2023)",
        "none: drawn as each epoch starts",
    ),
    "loss": (
        "the hardest P % by cross-entropy, averaged over the 4 of 5 cross-fitted proxies "
        "(trained 20 epochs) that trained on each sample, after putting the hardest 10 % "
        "last (Paul et al., 2021; Zheng et al., 2023); reports the proxies' held-out accuracy",
        "5 proxy trainings (the model build_model picks for the samples' shape) + forward passes",
    ),
    "el2n": (
        "the hardest P % as loss does, scored by EL2N, |softmax(f(x)) - onehot(y)| "
        "(Paul et al., 2021)",
        "as loss",
    ),
    "coverage": (
        "the first P % of a k-center order: farthest-point traversal of one proxy's "
        "embeddings within k-means clusters of ~4096, merged by share (Sener & Savarese, "
        "2018)",
        "1 proxy training + forward + k-means + O(m^2 d) per cluster of m",
    ),
    "dedup": (
        "a random P % of the samples that are not near-duplicates (random-P's order, the "
        "near-duplicates moved last); a sample whose centred input has cosine >= 0.98 to "
        "an earlier kept one is a near-duplicate, counted and listed (after SemDeDup, Abbas "
        "et al., 2023). On data without near-duplicates this is exactly random-P",
        "no model: block-wise cosine similarities, O(n m d) for clusters of m",
    ),
    "less": (
        "LESS (Xia et al., 2024): per-sample gradients over every parameter at 4 warm-up "
        "checkpoints, Adam-preconditioned, projected to 8192 dims; the top P % by the max over "
        "the target's classes of the mean cosine to the target's gradients",
        "Adam warm-up on 5 % for 4 epochs + 4 per-sample gradient passes + a projection "
        "(dominant, O(n x params x 8192)); needs a target set",
    ),
}
# how a scored method's subset is taken (`gpudesk select presets` prints it last)
QUOTAS_NOTE = (
    "A scored preset keeps the top P % of its ordering, whatever classes that holds; "
    "add -perclass (e.g. el2n-25-perclass) for per-class quotas in proportion to the "
    "class sizes."
)
PER_CLASS_SUFFIX = "perclass"
PRESET = re.compile(
    rf"^(?P<method>[a-z0-9]+)(?:-(?P<percent>\d{{1,3}}))?(?P<per_class>-{PER_CLASS_SUFFIX})?$"
)


class PresetError(ValueError):
    """A preset name that does not parse or names no method."""


@dataclass(frozen=True)
class Preset:
    method: str
    percent: int  # of the dataset kept, 1..100
    per_class: bool = False  # `-perclass`: a scored method taken with per-class quotas

    @property
    def name(self) -> str:
        if self.method == "full":
            return "full"
        suffix = f"-{PER_CLASS_SUFFIX}" if self.per_class else ""
        return f"{self.method}-{self.percent}{suffix}"

    @property
    def quotas(self) -> bool:
        """Whether the subset is taken per class (stratified always is)."""
        return self.method == "stratified" or self.per_class

    @property
    def fraction(self) -> float:
        return self.percent / 100.0


def parse_preset(text: str) -> Preset:
    found = PRESET.match(text.strip().lower()) if isinstance(text, str) else None
    if not found:
        raise PresetError(
            f"{text!r} is not a selection preset: write METHOD-PERCENT, e.g. "
            f"random-25, or METHOD-PERCENT-{PER_CLASS_SUFFIX} for per-class quotas "
            f"(methods: {', '.join(METHODS)})"
        )
    method, percent, per_class = found["method"], found["percent"], bool(found["per_class"])
    if method not in METHODS:
        raise PresetError(
            f"unknown selection method {method!r} in {text!r}; known: {', '.join(METHODS)}"
        )
    if method == "full":
        if percent not in (None, "100") or per_class:
            raise PresetError(f"{text!r}: `full` keeps everything; write full")
        return Preset("full", 100)
    if percent is None:
        raise PresetError(f"{text!r}: say how much to keep, e.g. {method}-25")
    value = int(percent)
    if not 1 <= value <= 100:
        raise PresetError(f"{text!r}: the percent must be 1 to 100")
    if per_class and method not in SCORED_METHODS:
        raise PresetError(f"{text!r}: {_PER_CLASS_REFUSED[method].format(percent=value)}")
    return Preset(method, value, per_class)


# why `-perclass` does not apply to a cheap method (what to write instead)


_PER_CLASS_REFUSED = {
    "random": "random with per-class quotas is stratified: write stratified-{percent}",
    "stratified": "stratified is always per class: write stratified-{percent}",
    "rs2": "rs2 draws a plain random part every epoch, without quotas: write rs2-{percent}",
}
