"""Data selection: fingerprints, preset names, exact fractions and quotas, determinism, a cache
that never serves a damaged entry, and the scored presets (el2n, dedup, less). On the digits
data that ships with scikit-learn (real handwritten digits, not synthetic)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import Run, refuses
from test_less import narrow_projection  # noqa: F401  (a fixture; same folder: on sys.path)

from gpudesk.loader.batch_plan import BatchPlan
from gpudesk.paths import Home
from gpudesk.selection.cache import Cost, Entry, SelectionCache, cache_key
from gpudesk.selection.fingerprint import fingerprint
from gpudesk.selection.prepass import SCORED, Target, prepare
from gpudesk.selection.preset_names import Preset, PresetError, parse_preset
from gpudesk.selection.presets import class_quotas, keep_count, rs2_subset, take
from gpudesk.workloads.data import load_digits

# its module-scoped fixture is made once: the module stays on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_selection")


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    return load_digits()


def as_dataset(images: np.ndarray, labels: np.ndarray) -> list[tuple[np.ndarray, int]]:
    return [(images[i], int(labels[i])) for i in range(len(labels))]


# ------------------------------------------------------------------ fingerprints
def test_fingerprint_ignores_order_and_sees_one_changed_sample(digits) -> None:
    images, labels = digits
    base = fingerprint(as_dataset(images, labels))
    order = np.random.default_rng(7).permutation(len(labels))
    assert fingerprint(as_dataset(images[order], labels[order])) == base
    changed = images.copy()
    changed[100, 5] += 1 / 16
    assert fingerprint(as_dataset(changed, labels)) != base
    relabelled = labels.copy()
    relabelled[100] = (relabelled[100] + 1) % 10
    assert fingerprint(as_dataset(images, relabelled)) != base
    assert fingerprint(as_dataset(images[:-1], labels[:-1])) != base


def test_fingerprint_reads_torch_tensors_like_arrays(digits) -> None:
    torch = pytest.importorskip("torch")
    images, labels = digits
    as_arrays = as_dataset(images[:50], labels[:50])
    as_tensors = [(torch.from_numpy(x), y) for x, y in as_arrays]
    assert fingerprint(as_tensors) == fingerprint(as_arrays)


# ------------------------------------------------------------------ preset names
@pytest.mark.parametrize(
    ("text", "method", "percent"),
    [
        ("random-25", "random", 25),
        ("Stratified-10", "stratified", 10),
        ("full", "full", 100),
        ("el2n-25", "el2n", 25),
        ("rs2-50", "rs2", 50),
        ("full-100", "full", 100),
        ("less-25-perclass", "less", 25),
        ("EL2N-10-PerClass", "el2n", 10),
    ],
)
def test_preset_names_parse(text: str, method: str, percent: int) -> None:
    preset = parse_preset(text)
    assert (preset.method, preset.percent) == (method, percent)
    assert preset.per_class == text.lower().endswith("-perclass")
    # the canonical name parses back to the same preset
    assert parse_preset(preset.name) == preset
    assert preset.quotas == (preset.per_class or method == "stratified")


def test_per_class_names_round_trip_and_stay_valid_loader_names() -> None:
    from gpudesk.core.datasets import NAME, DatasetSpec
    from gpudesk.core.jobs import check_selection

    assert parse_preset("less-25-perclass").name == "less-25-perclass"
    assert parse_preset("less-25").name == "less-25"
    assert check_selection("EL2N-25-perclass") == "el2n-25-perclass"
    spec = DatasetSpec("a-dataset-with-a-rather-long-name", "gpudesk.workloads.data:make_digits")
    variant = spec.variant("stratified-100")
    assert NAME.match(variant.name) and variant.name.endswith(".stratified-100")
    variant = spec.variant("el2n-100-perclass")
    assert NAME.match(variant.name) and variant.name.endswith("-100-perclass")


@pytest.mark.parametrize(
    "text",
    [
        "random",
        "random-0",
        "random-101",
        "magic-25",
        "full-50",
        "random-25%",
        "",
        "el2n-25-perclas",
        "el2n-perclass",
        "full-perclass",
    ],
)
def test_bad_preset_names_say_what_to_write(text: str) -> None:
    with pytest.raises(
        PresetError, match=r"random-25|how much to keep|1 to 100|keeps everything|unknown"
    ) as err:
        parse_preset(text)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("text", "advice"),
    [
        ("random-25-perclass", "write stratified-25"),
        ("stratified-25-perclass", "always per class: write stratified-25"),
        ("rs2-25-perclass", "write rs2-25"),
    ],
)
def test_per_class_on_a_cheap_method_says_what_to_write(text: str, advice: str) -> None:
    with pytest.raises(PresetError, match=advice):
        parse_preset(text)


# ------------------------------------------------------------------ fractions and quotas
@pytest.mark.parametrize("percent", [1, 10, 25, 33, 50, 99, 100])
def test_fractions_are_exact(digits, percent: int) -> None:
    _, labels = digits
    n = len(labels)
    order = np.random.default_rng(0).permutation(n)
    for stratified in (None, labels):
        kept = take(order, percent, stratified)
        assert len(kept) == keep_count(n, percent) == max(1, round(n * percent / 100))
        assert len(set(kept.tolist())) == len(kept)


def test_stratified_quotas_follow_class_sizes(digits) -> None:
    _, labels = digits
    kept = take(np.random.default_rng(1).permutation(len(labels)), 25, labels)
    quotas = class_quotas(labels, len(kept))
    counts = {
        int(c): int(k) for c, k in zip(*np.unique(labels[kept], return_counts=True), strict=True)
    }
    assert counts == quotas
    sizes = dict(zip(*np.unique(labels, return_counts=True), strict=True))
    for label, quota in quotas.items():
        assert abs(quota - sizes[label] * len(kept) / len(labels)) < 1.0
    assert class_quotas(np.array([0, 0, 0, 1]), 2) == {0: 2, 1: 0}


def test_rs2_sees_every_sample_before_any_twice() -> None:
    n, percent = 100, 25
    first_cycle = np.concatenate([rs2_subset(n, percent, seed=3, epoch=e) for e in range(4)])
    assert sorted(first_cycle.tolist()) == list(range(n))
    assert not np.array_equal(rs2_subset(n, percent, 3, 0), rs2_subset(n, percent, 3, 1))
    assert np.array_equal(rs2_subset(n, percent, 3, 5), rs2_subset(n, percent, 3, 5))


# ------------------------------------------------------------------ pre-pass and cache
def test_selection_is_deterministic_and_a_cached_one_equals_a_fresh_one(
    digits, tmp_path: Path
) -> None:
    images, labels = digits
    digest = fingerprint(as_dataset(images, labels))
    fresh = prepare(
        Preset("stratified", 25), labels, digest, SelectionCache(tmp_path / "a"), seed=4
    )
    again = prepare(
        Preset("stratified", 25), labels, digest, SelectionCache(tmp_path / "b"), seed=4
    )
    assert not fresh.reused and not again.reused
    assert np.array_equal(fresh.indices, again.indices)
    cache = SelectionCache(tmp_path / "a")
    cached = prepare(Preset("stratified", 25), labels, digest, cache, seed=4, used_by="job 7")
    assert cached.reused and np.array_equal(cached.indices, fresh.indices)
    other_seed = prepare(Preset("stratified", 25), labels, digest, cache, seed=5)
    assert not np.array_equal(other_seed.indices, fresh.indices)
    # any fraction of a cached method is free: 10 % comes from the same entry
    ten = prepare(Preset("stratified", 10), labels, digest, cache, seed=4)
    assert ten.reused and ten.key == fresh.key and set(ten.indices) <= set(fresh.indices)
    assert cache.load(fresh.key).reused_by == ["job 7"]


def test_cache_keys_are_stable_and_separate_what_differs() -> None:
    key = cache_key("fp1-abc", "el2n", {"epochs": 2, "seed": 0}, "mlp")
    assert key == cache_key("fp1-abc", "el2n", {"seed": 0, "epochs": 2}, "mlp")
    assert key != cache_key("fp1-abd", "el2n", {"epochs": 2, "seed": 0}, "mlp")
    assert key != cache_key("fp1-abc", "el2n", {"epochs": 3, "seed": 0}, "mlp")
    assert key != cache_key("fp1-abc", "el2n", {"epochs": 2, "seed": 0}, "cnn")


@pytest.mark.parametrize(
    "damage", ["flip a byte", "truncate", "drop the meta", "bad json", "nested json"]
)
def test_a_damaged_entry_is_detected_moved_aside_and_recomputed(
    digits, tmp_path: Path, damage: str
) -> None:
    _, labels = digits
    cache = SelectionCache(tmp_path / "sel")
    first = prepare(Preset("random", 25), labels, "fp1-digits", cache, seed=0)
    folder = tmp_path / "sel" / first.key
    order_file, meta = folder / "order.npy", folder / "meta.json"
    if damage == "flip a byte":
        data = bytearray(order_file.read_bytes())
        data[-3] ^= 0xFF
        order_file.write_bytes(bytes(data))
    elif damage == "truncate":
        order_file.write_bytes(order_file.read_bytes()[:40])
    elif damage == "drop the meta":
        os.remove(meta)
    elif damage == "nested json":  # past the stack: a RecursionError, not a ValueError
        meta.write_text("[" * 100_000 + "]" * 100_000)
    else:
        meta.write_text("{not json")
    assert cache.load(first.key) is None
    assert cache.problems and "damaged" in cache.problems[0]
    assert any(".corrupt-" in p.name for p in (tmp_path / "sel").iterdir())
    again = prepare(Preset("random", 25), labels, "fp1-digits", cache, seed=0)
    assert not again.reused and np.array_equal(again.indices, first.indices)
    assert cache.load(first.key) is not None


def test_entries_list_and_clear(tmp_path: Path) -> None:
    cache = SelectionCache(tmp_path / "sel")
    assert cache.entries() == [] and cache.clear() == 0
    for seed in (1, 2):
        cache.store(
            Entry(
                key=cache_key("fp", "random", {"seed": seed}),
                fingerprint="fp",
                method="random",
                params={"seed": seed},
                proxy=None,
                order=np.arange(5),
                labels=None,
                cost=Cost(0.1, 0.1),
                created_at=1.0,
            )
        )
    assert {e.params["seed"] for e in cache.entries()} == {1, 2}
    assert cache.clear() == 2 and cache.entries() == []


def test_a_cache_entry_for_another_size_is_refused(tmp_path: Path) -> None:
    cache = SelectionCache(tmp_path / "sel")
    prepare(Preset("random", 50), np.zeros(10, dtype=np.int64), "fp", cache)
    with pytest.raises(PresetError, match="orders 10 samples"):
        prepare(Preset("random", 50), np.zeros(12, dtype=np.int64), "fp", cache)


# ------------------------------------------------------------------ the CLI
def test_select_commands_compute_reuse_list_show_and_clear(home: Home, gpudesk: Run) -> None:
    code, out, err = gpudesk(
        "select", "run", "gpudesk.workloads.data:make_digits", "--preset", "stratified-25", "--json"
    )
    assert code == 0, err
    first = json.loads(out)
    assert (first["kept"], first["of"], first["reused"]) == (449, 1797, False)
    code, out, _ = gpudesk(
        "select", "run", "gpudesk.workloads.data:make_digits", "--preset", "stratified-10"
    )
    assert code == 0 and "reused from the cache" in out and "keeps 180 of 1797" in out
    code, out, _ = gpudesk("select", "list", "--json")
    (entry,) = json.loads(out)["entries"]
    assert entry["key"] == first["key"] and entry["method"] == "stratified"
    code, out, _ = gpudesk("select", "show", first["key"])
    assert code == 0 and "stratified" in out
    code, out, _ = gpudesk("select", "clear")
    assert code == 0 and "removed 1" in out
    code, _, err = gpudesk("select", "show", first["key"])
    assert code == 1 and "no selection cache entry" in err


def test_select_run_computes_a_dedup_preset(home: Home, gpudesk: Run) -> None:
    code, out, err = gpudesk(
        "select", "run", "gpudesk.workloads.data:make_digits", "--preset", "dedup-10", "--json"
    )
    assert code == 0, err
    result = json.loads(out)
    assert (result["kept"], result["of"], result["reused"]) == (180, 1797, False)
    assert isinstance(result["notes"]["near_duplicates"], int)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("gpudesk.workloads.data:make_digits", "--preset", "random"), "random-25"),
        (("no.such.module:f", "--preset", "random-25"), "cannot import"),
        (("gpudesk.workloads.data:make_digits", "--preset", "less-25"), "selection target"),
        (("digits", "--preset", "random-25"), "MODULE:FACTORY"),
        (
            ("digits", "--preset", "random-25", "--profile", "profiles/quickstart.toml"),
            "no [datasets.digits] table",
        ),
    ],
)
def test_select_run_errors_are_one_clear_paragraph(
    home: Home, gpudesk: Run, args: tuple[str, ...], message: str
) -> None:
    code, out, err = gpudesk("select", "run", *args)
    assert code in (1, 2) and message in err and "Traceback" not in err + out


# ------------------------------------------------------------------ scored presets
@pytest.fixture(scope="module")
def digit_features(digits) -> tuple[np.ndarray, np.ndarray, str]:
    """(proxy features, labels, fingerprint) of the digits."""
    from gpudesk.selection.scoring import features

    images, labels = digits
    dataset = as_dataset(images, labels)
    inputs, feature_labels = features(dataset)
    assert np.array_equal(feature_labels, labels)
    return inputs, labels, fingerprint(dataset)


@pytest.fixture(scope="module")
def few_digits(digits) -> tuple[np.ndarray, np.ndarray]:
    """The first 400 digits (every class about 40 times): enough for what a test checks of
    less-P's plumbing, whose pre-pass costs in proportion to the samples (~6 s for all)."""
    images, labels = digits
    return images[:400], labels[:400]


@pytest.fixture(scope="module")
def few_digit_features(few_digits) -> tuple[np.ndarray, np.ndarray, str]:
    """(proxy features, labels, fingerprint) of `few_digits`."""
    from gpudesk.selection.scoring import features

    images, labels = few_digits
    dataset = as_dataset(images, labels)
    return features(dataset)[0], labels, fingerprint(dataset)


def digit_target(digits, rows: slice = slice(0, 200)) -> Target:
    """A selection target of digits samples (a stand-in for a task's validation set)."""
    images, labels = digits
    part = as_dataset(images[rows], labels[rows])
    return Target(inputs=images[rows], labels=labels[rows], fingerprint=fingerprint(part))


@pytest.mark.slow(14)
@pytest.mark.usefixtures("narrow_projection")
def test_scored_subsets_are_the_top_of_the_ordering_or_per_class_when_asked(
    few_digits, few_digit_features, tmp_path: Path
) -> None:
    inputs, labels, digest = few_digit_features
    cache = SelectionCache(tmp_path / "sel")
    for method in SCORED:
        target = digit_target(few_digits) if method == "less" else None
        top = prepare(
            Preset(method, 25), labels, digest, cache, seed=0, inputs=inputs, target=target
        )
        per_class = prepare(
            Preset(method, 25, per_class=True),
            labels,
            digest,
            cache,
            seed=0,
            inputs=inputs,
            target=target,
        )
        # one cache entry serves both: the quotas are applied when the subset is taken
        assert per_class.reused and per_class.key == top.key, method
        entry = cache.load(top.key)
        assert entry is not None
        assert np.array_equal(top.indices, np.sort(entry.order[: keep_count(len(labels), 25)]))
        assert len(top.indices) == len(per_class.indices) == keep_count(len(labels), 25)
        counts = dict(zip(*np.unique(labels[per_class.indices], return_counts=True), strict=True))
        assert counts == class_quotas(labels, len(per_class.indices)), method


# ------------------------------------------------------------------ coverage
@pytest.mark.slow(6)
def test_coverage_is_exact_deterministic_and_seeded(digit_features, tmp_path: Path) -> None:
    from gpudesk.selection.coverage import coverage

    inputs, labels, digest = digit_features
    first = coverage(inputs, labels, seed=3, shape=(64,))
    assert sorted(first.order.tolist()) == list(range(len(labels)))
    assert np.array_equal(coverage(inputs, labels, seed=3, shape=(64,)).order, first.order)
    assert not np.array_equal(coverage(inputs, labels, seed=4, shape=(64,)).order, first.order)
    chosen = prepare(
        Preset("coverage", 25),
        labels,
        digest,
        SelectionCache(tmp_path / "a"),
        seed=3,
        inputs=inputs,
    )
    assert len(chosen.indices) == keep_count(len(labels), 25)
    assert np.array_equal(chosen.indices, take(first.order, 25))
    assert chosen.notes == {} and chosen.duplicates is None


def test_coverage_puts_each_exact_copy_after_every_distinct_sample(digit_features) -> None:
    from gpudesk.selection.coverage import coverage

    inputs, labels, _ = digit_features
    originals = np.arange(5, len(labels), 97)  # 19 samples, copied to the end of the data
    copies = len(labels) + np.arange(len(originals))
    data = np.concatenate([inputs, inputs[originals]])
    result = coverage(data, np.concatenate([labels, labels[originals]]), seed=0, shape=(64,))
    position = np.empty(len(data), dtype=np.int64)
    position[result.order] = np.arange(len(data))
    assert (position[copies] > position[originals]).all()
    assert position[copies].min() >= len(labels)


def test_coverage_10_percent_covers_every_class(digit_features, tmp_path: Path) -> None:
    inputs, labels, digest = digit_features
    for seed in (0, 1):
        ten = prepare(
            Preset("coverage", 10),
            labels,
            digest,
            SelectionCache(tmp_path / "sel"),
            seed=seed,
            inputs=inputs,
        )
        assert set(labels[ten.indices].tolist()) == set(range(10))


def test_coverage_merges_clusters_in_proportion_to_their_size(digit_features) -> None:
    from gpudesk.selection.coverage import coverage_ordering
    from gpudesk.selection.scoring import proxy_outputs, train_proxy

    inputs, labels, _ = digit_features
    embeddings = proxy_outputs(train_proxy(inputs, labels, (64,), seed=0), inputs)[0]
    result = coverage_ordering(embeddings, seed=0, cluster_size=300)  # k = ceil(1797 / 300) = 6
    sizes = np.bincount(result.clusters)
    assert len(sizes) > 1 and sizes.sum() == len(labels) and sizes.max() <= 600
    assert sorted(result.order.tolist()) == list(range(len(labels)))
    taken = np.zeros(len(sizes))
    for length, index in enumerate(result.order, start=1):
        taken[result.clusters[index]] += 1
        assert np.abs(taken - length * sizes / len(labels)).max() <= 1.0
    # within a cluster, the order is farthest-point: its second sample is the farthest from
    # its first
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    for cluster in range(len(sizes)):
        members = result.order[result.clusters[result.order] == cluster]
        distances = 1 - unit[members] @ unit[members[0]]
        assert distances[1] == pytest.approx(distances.max(), abs=1e-6)
    again = coverage_ordering(embeddings, seed=0, cluster_size=300)
    assert np.array_equal(again.order, result.order)


# ------------------------------------------------------------------ less
@pytest.mark.slow(18)
@pytest.mark.usefixtures("narrow_projection")
def test_less_needs_a_target_and_is_deterministic(
    few_digits, few_digit_features, tmp_path: Path
) -> None:
    from gpudesk.selection.targeted import less

    inputs, labels, digest = few_digit_features
    cache = SelectionCache(tmp_path / "sel")
    with pytest.raises(PresetError, match="less-25 ranks samples by similarity to a target"):
        prepare(Preset("less", 25), labels, digest, cache, seed=0, inputs=inputs)
    target = digit_target(few_digits)
    first = prepare(Preset("less", 25), labels, digest, cache, seed=0, inputs=inputs, target=target)
    order, _ = less(inputs, labels, target, seed=0, shape=(64,))
    assert sorted(order.tolist()) == list(range(len(labels)))
    # deterministic: the pre-pass's own run ordered every sample as this second run did
    entry = cache.load(first.key)
    assert entry is not None and np.array_equal(entry.order, order)
    assert np.array_equal(first.indices, take(order, 25))
    assert not np.array_equal(less(inputs, labels, target, seed=1, shape=(64,))[0], order)
    with pytest.raises(PresetError, match="features"):
        prepare(
            Preset("less", 25),
            labels,
            digest,
            cache,
            inputs=inputs,
            target=Target(inputs[:5, :10], labels[:5], "fp-narrow"),
        )


@pytest.mark.slow(10)
@pytest.mark.usefixtures("narrow_projection")
def test_less_key_follows_the_target(few_digits, few_digit_features, tmp_path: Path) -> None:
    inputs, labels, digest = few_digit_features
    cache = SelectionCache(tmp_path / "sel")
    one = prepare(
        Preset("less", 25),
        labels,
        digest,
        cache,
        inputs=inputs,
        target=digit_target(few_digits, slice(0, 200)),
    )
    other = prepare(
        Preset("less", 25),
        labels,
        digest,
        cache,
        inputs=inputs,
        target=digit_target(few_digits, slice(200, 400)),
    )
    assert one.key != other.key and not other.reused
    assert not np.array_equal(one.indices, other.indices)
    same = prepare(
        Preset("less", 25),
        labels,
        digest,
        cache,
        inputs=inputs,
        target=digit_target(few_digits, slice(0, 200)),
    )
    assert same.reused and same.key == one.key


@pytest.mark.slow(7)
@pytest.mark.parametrize("method", ["coverage", "dedup", "less"])
@pytest.mark.usefixtures("narrow_projection")
def test_a_cached_scored_selection_equals_a_fresh_one(
    few_digits, few_digit_features, tmp_path: Path, method: str
) -> None:
    inputs, labels, digest = few_digit_features
    target = digit_target(few_digits) if method == "less" else None
    cache = SelectionCache(tmp_path / "a")
    fresh = prepare(Preset(method, 25), labels, digest, cache, seed=2, inputs=inputs, target=target)
    cached = prepare(
        Preset(method, 25),
        labels,
        digest,
        SelectionCache(tmp_path / "a"),
        seed=2,
        inputs=inputs,
        target=target,
        used_by="job 3",
    )
    elsewhere = prepare(
        Preset(method, 25),
        labels,
        digest,
        SelectionCache(tmp_path / "b"),
        seed=2,
        inputs=inputs,
        target=target,
    )
    assert not fresh.reused and cached.reused and not elsewhere.reused
    assert np.array_equal(cached.indices, fresh.indices)
    assert np.array_equal(elsewhere.indices, fresh.indices)
    # the notes say what the pre-pass did; less's also time its stages, which differ per run
    untimed = [
        {k: v for k, v in s.notes.items() if k != "timings_s"} for s in (fresh, cached, elsewhere)
    ]
    assert untimed[0] == untimed[1] == untimed[2]
    if method == "dedup":
        assert fresh.duplicates is not None and cached.duplicates is not None
        assert np.array_equal(cached.duplicates, fresh.duplicates)
        assert cached.notes == {"near_duplicates": len(fresh.duplicates)}
    assert cached.cost == fresh.cost and fresh.cost.wall_s > 0
    ten = prepare(Preset(method, 10), labels, digest, cache, seed=2, inputs=inputs, target=target)
    assert ten.reused and ten.key == fresh.key
    assert cache.load(fresh.key).reused_by == ["job 3"]


def test_select_presets_says_what_each_method_computes_and_costs(gpudesk: Run) -> None:
    from gpudesk.selection.preset_names import METHODS

    code, out, _ = gpudesk("select", "presets", "--json")
    assert code == 0
    rows = json.loads(out)["presets"]
    assert [r["method"] for r in rows] == list(METHODS)
    assert all(r["computes"] and r["cost"] for r in rows)
    assert "-perclass" in json.loads(out)["quotas"]
    code, out, _ = gpudesk("select", "presets")
    assert code == 0 and "dedup-P" in out and "coverage-P" in out and "needs a target set" in out
    assert "exactly random-P" in " ".join(out.split()) and "-perclass" in out


def test_any_seed_a_profile_takes_selects_and_shuffles(
    home: Home, gpudesk_cmd: list[str], tmp_path: Path
) -> None:
    """A seed is a 64-bit integer, as a profile's [datasets] seed is: a negative one selects
    (NumPy's generators take none, and the pre-pass died in a traceback), a large one shuffles
    the loader's epochs (seed × 1,000,003 overflowed torch's), one beyond is a usage error."""
    select = [*gpudesk_cmd, "select", "run", "gpudesk.workloads.data:make_digits"]
    for seed in ("-1", str(-(2**63))):
        ran = subprocess.run(
            [*select, "--preset", "random-25", "--seed", seed, "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0 and json.loads(ran.stdout)["kept"] == 449, ran.stderr
    beyond = subprocess.run(
        [*select, "--preset", "random-25", "--seed", str(2**63)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert beyond.returncode == 2 and "--seed" in refuses(beyond)
    for seed in (2**63 - 1, -(2**63)):
        assert sorted(BatchPlan(100, 10, seed, shuffle=True).order(3)) == list(range(100))
    # a seed that already worked keeps its order
    import torch

    expected = torch.randperm(50, generator=torch.Generator().manual_seed(7 * 1_000_003 + 2))
    assert BatchPlan(50, 10, 7, shuffle=True).order(2) == expected.tolist()
