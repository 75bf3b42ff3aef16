"""`gpudesk select show KEY --json --percent P` lists the kept sample indices, so anyone can check a
selection: here against what a real shared loader (`gpudesk loader serve ... --selection`)
served a consumer, sample by sample, in the dataset's own positions."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Run, short_home, wait_for

from gpudesk.loader import SharedLoader
from gpudesk.loader.protocol import read_info
from gpudesk.paths import Home
from gpudesk.workloads.data import make_digits

FACTORY = "gpudesk.workloads.data:make_digits"


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    """conftest's `home` at a short path, for the loaders' sockets (conftest.short_home)."""
    with short_home("gd-show-", monkeypatch) as home:
        yield home


@contextlib.contextmanager
def serving(home: Home, name: str, selection: str, seed: int, log: Path) -> Iterator[None]:
    """A producer of the digits' training split of split_seed 1 under `selection`."""
    argv = [
        sys.executable,
        "-m",
        "gpudesk",
        "loader",
        "serve",
        name,
        "--dataset",
        FACTORY,
        "--arg",
        'split="train"',
        "--arg",
        "split_seed=1",
        "--batch-size",
        "50",
        "--workers",
        "0",
        "--seed",
        str(seed),
        "--selection",
        selection,
        "--idle-exit",
        "30",
    ]
    env = {**os.environ, "GPUDESK_HOME": str(home.root)}
    with open(log, "w") as sink:
        proc = subprocess.Popen(argv, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:

        def ready() -> bool:
            assert proc.poll() is None, log.read_text()
            info = read_info(home.loader_paths(name)[2])
            return info is not None and info.pid == proc.pid

        wait_for(ready, 60, what=f"loader {name}")
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def served(home: Home, name: str) -> list[int]:
    """The dataset positions one epoch of the loader serves."""
    with SharedLoader(name, with_ids=True, fallback=False, home=home.root) as loader:
        return [i for _, ids in loader for i in ids.tolist()]


def entry_key(gpudesk: Run, method: str) -> str:
    code, out, err = gpudesk("select", "list", "--json")
    assert code == 0, err
    (key,) = [e["key"] for e in json.loads(out)["entries"] if e["method"] == method]
    return str(key)


@pytest.mark.slow(16)
@pytest.mark.timeout(300)
def test_show_lists_the_samples_the_loader_served(home: Home, gpudesk: Run, tmp_path: Path) -> None:
    data = make_digits("train", 1)
    with serving(home, "dg", "el2n-25", 3, tmp_path / "el2n.log"):
        trained = served(home, "dg")
    key = entry_key(gpudesk, "el2n")

    code, out, err = gpudesk("select", "show", key, "--percent", "25", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["preset"] == "el2n-25"
    assert shown["kept"] == sorted(trained)  # what the loader trained on, position by position
    assert len(shown["kept"]) == 347 == round(0.25 * len(data))
    assert shown["positions"]["factory"] == FACTORY
    assert shown["positions"]["kwargs"] == {"split": "train", "split_seed": 1}
    # the class mix of those positions in the dataset itself, and of the whole split
    mix = Counter(int(data.labels[i]) for i in shown["kept"])
    assert {int(k): v for k, v in shown["kept_per_class"].items()} == dict(sorted(mix.items()))
    whole = Counter(int(label) for label in data.labels)
    assert {int(k): v for k, v in shown["per_class"].items()} == dict(sorted(whole.items()))
    # --preset says the same; without either, the whole ordering in dataset positions
    code, out, _ = gpudesk("select", "show", key, "--preset", "el2n-25", "--json")
    assert json.loads(out)["kept"] == shown["kept"]
    code, out, _ = gpudesk("select", "show", key, "--json")
    ordering = json.loads(out)["ordering"]
    assert sorted(ordering) == list(range(len(data))) and "kept" not in json.loads(out)
    # the text view: the class mix at that percent against the data's
    code, out, _ = gpudesk("select", "show", key, "--percent", "25")
    assert code == 0 and "el2n-25      keeps 347 of 1388 (--json lists them)" in out
    assert "CLASS" in out and "el2n-25 keeps" in out and "share vs data" in out
    for args, message in [
        (("--percent", "25", "--preset", "el2n-25"), "not both"),
        (("--preset", "random-25"), "an ordering by el2n; random-25 is another method"),
        (("--percent", "0"), "--percent"),
    ]:
        code, _, err = gpudesk("select", "show", key, *args)
        assert code == 2 and message in err and "Traceback" not in err, err

    # a random entry stores no labels: its kept indices, and it says why there is no class mix
    with serving(home, "dr", "random-10", 0, tmp_path / "random.log"):
        trained = served(home, "dr")
    key = entry_key(gpudesk, "random")
    code, out, err = gpudesk("select", "show", key, "--percent", "10", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["kept"] == sorted(trained) and shown["kept_per_class"] is None
    assert shown["labels"] == "none: a random entry stores no labels, so no class mix"
    code, out, _ = gpudesk("select", "show", key, "--percent", "10")
    assert "classes      none: a random entry stores no labels" in out


def test_without_a_dataset_index_show_gives_canonical_places_and_says_so(
    home: Home, gpudesk: Run
) -> None:
    from gpudesk.selection.apply import select
    from gpudesk.selection.cache import SelectionCache
    from gpudesk.selection.fingerprint import sample_digest

    data = make_digits("val", 0)
    cache = SelectionCache(home.selection_dir)
    chosen = select(data, "stratified-25", cache, seed=4)  # no identity: no dataset index
    assert chosen.selection is not None and chosen.selection.key is not None
    code, out, err = gpudesk("select", "show", chosen.selection.key, "--percent", "25", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["positions"]["factory"] is None
    assert "canonical places" in shown["positions"]["note"]
    # canonical place c is the c-th sample in digest order
    canon = sorted(range(len(data)), key=lambda i: sample_digest(data[i]))
    assert sorted(canon[c] for c in shown["kept"]) == chosen.indices.tolist()
