"""DataLoader's contract for `SharedLoader` (gpudesk/loader/contract.py, resume.py): drop_last,
a multi-GPU job's shard, pin_memory, set_epoch under a producer and state_dict, each with a real
producer (`gpudesk loader serve`) and in the local fallback; and a 2-rank DDP job (gloo on CPU)
with a 1-rank job on one producer, every sample once per epoch for each job.

The data are gpudesk.workloads.synthetic's: sample i is (a tensor filled with i, label i), so
every sample's id and bytes are checked.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import wait_for
from test_loader import FACTORY, Loaders, SharedProducers, assert_exactly_once, canonical

from gpudesk.loader import LoaderError, SharedLoader
from gpudesk.loader.contract import Contract, Shard
from gpudesk.paths import Home

DDP_JOB = Path(__file__).with_name("ddp_job.py")
SIZE = 203  # not a multiple of the batch sizes or of the ranks: every edge is taken


@pytest.fixture
def loaders(home: Home, tmp_path: Path) -> Iterator[Loaders]:
    launcher = Loaders(home, tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()


# The tests that read the module-scoped producers (`read_from`) run on one worker, one after
# another (--dist loadgroup): their producers are started once.
READERS = pytest.mark.xdist_group("test_loader_contract_readers")


@pytest.fixture(scope="module")
def producers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedProducers]:
    started = SharedProducers(tmp_path_factory.mktemp("producers"))
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
def read_from(producers: SharedProducers, monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """`read_from(size)`: this test's `shared` loaders read the module's producer of `size`
    samples in batches of 8, which tests that only read from it share (GPUDESK_HOME is its
    home); a consumer joins its stream wherever the tests before left it."""

    def use(size: int) -> None:
        home = producers.home_for(f"size-{size}", size=size, batch=8)
        monkeypatch.setenv("GPUDESK_HOME", str(home.root))

    return use


def local(batch: int, size: int = SIZE, **options: Any) -> SharedLoader:
    """A loader with no producer for its name: the local fallback."""
    loader = SharedLoader(
        "nobody-serves-this",
        batch,
        factory=FACTORY,
        factory_kwargs={"size": size, "shape": [2]},
        with_ids=True,
        **options,
    )
    assert loader.mode == "local"
    return loader


def shared(batch: int, **options: Any) -> SharedLoader:
    loader = SharedLoader("syn", batch, with_ids=True, fallback=False, **options)
    assert loader.mode == "shared"
    return loader


def read(loader: SharedLoader, most: int | None = None) -> list[list[int]]:
    """The ids of each batch of one epoch (or of its first `most` batches), every sample's
    bytes checked."""
    batches = []
    for (features, labels), ids in loader:
        assert torch.equal(labels, ids)
        assert bool((features == ids.float().view(-1, 1)).all())
        batches.append(ids.tolist())
        if most is not None and len(batches) == most:
            break
    return batches


def read_then_save(loader: SharedLoader, count: int) -> tuple[list[list[int]], dict[str, Any]]:
    """`count` batches, then the state a checkpoint saves, taken inside the loop (between two
    batches, as a training loop saves): then the job stops."""
    batches: list[list[int]] = []
    state: dict[str, Any] = {}
    for (_, _), ids in loader:
        batches.append(ids.tolist())
        if len(batches) == count:
            state = saved(loader.state_dict())
            break
    return batches, state


def flat(batches: list[list[int]]) -> list[int]:
    return [i for batch in batches for i in batch]


# ------------------------------------------------------------------------------------ units
def test_a_shard_of_every_batch_is_a_run_and_the_ranks_partition_the_epoch() -> None:
    for length in (1, 7, 64, 203):
        for per_batch in (1, 3, 8, 64):
            for world in (2, 3, 4):
                taken: list[int] = []
                for rank in range(world):
                    shard = Shard(rank, world)
                    mine = 0
                    for j in range(-(-length // per_batch)):
                        count = min(per_batch, length - j * per_batch)
                        a, c = shard.share(j * per_batch, count)
                        assert 0 <= a <= c <= count
                        taken += [j * per_batch + i for i in range(a, c)]
                        mine += c - a
                    # as many as DistributedSampler (unpadded) gives the rank
                    assert mine == len(range(rank, length, world)) == shard.samples(length)
                assert sorted(taken) == list(range(length)), (length, per_batch, world)


def test_batch_counts_and_drop_last() -> None:
    assert Contract(False, None, False).batches(203, 8) == 26
    assert Contract(True, None, False).batches(203, 8) == 25
    # 2 ranks of 101 and 102: 26 batches of 4 each; drop_last cuts both to 101 // 4
    assert Contract(False, Shard(0, 2), False).batches(203, 4) == 26
    assert Contract(True, Shard(1, 2), False).batches(203, 4) == 25
    # 10 samples, 3 ranks, batch 3: ranks of 4, 3, 3 samples: 2, 1, 1 batches
    assert Contract(False, Shard(0, 3), False).uneven(10, 3) is not None
    assert Contract(True, Shard(0, 3), False).uneven(10, 3) is None
    assert Contract(False, Shard(0, 2), False).uneven(203, 4) is None


# -------------------------------------------------------------------------------- drop_last
@READERS
@pytest.mark.parametrize("batch", [8, 12])
def test_drop_last_with_a_producer_and_locally(
    read_from: Callable[[int], None], batch: int
) -> None:
    read_from(SIZE)
    full = SIZE // batch
    for loader in (shared(batch, drop_last=True), local(batch, drop_last=True)):
        batches = read(loader)
        assert len(loader) == len(batches) == full, loader.mode
        assert {len(b) for b in batches} == {batch}, loader.mode
        ids = flat(batches)
        assert len(set(ids)) == len(ids) == full * batch
        loader.close()
    # without it, the last, shorter batch comes too
    loader = shared(batch)
    batches = read(loader)
    assert len(loader) == len(batches) == full + 1 and len(batches[-1]) == SIZE % batch
    assert_exactly_once(flat(batches), SIZE)
    loader.close()


# ------------------------------------------------------------------------------------ shard
def read_ranks(loaders_: list[SharedLoader]) -> list[list[list[int]]]:
    """An epoch of each rank's loader, read at once in threads (as ranks read together)."""
    out: list[list[list[int]]] = [[] for _ in loaders_]
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            out[k] = read(loaders_[k])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(loaders_))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    return out


@pytest.mark.parametrize("drop_last", [False, True])
def test_each_rank_gets_its_share_of_every_batch(loaders: Loaders, drop_last: bool) -> None:
    """Two ranks, batch 4 each, on a producer of batch 8: each takes its half of every batch
    (views, no copy); together every sample once. The fallback gives each rank the same set
    (its plan's batch is the job's, 4 x 2 = the producer's 8)."""
    loaders.serve(size=SIZE, batch=8, cost_ms=0.2)
    ranks = [shared(4, shard=(r, 2), drop_last=drop_last) for r in range(2)]
    assert ranks[0].epoch == ranks[1].epoch == 0
    got = read_ranks(ranks)
    fallback = [local(4, shard=(r, 2), drop_last=drop_last) for r in range(2)]
    got_local = [read(loader) for loader in fallback]
    for r in range(2):
        assert len(got[r]) == len(ranks[r]) == len(got_local[r]) == len(fallback[r])
        assert max(len(b) for b in got[r]) == 4
        assert set(flat(got[r])) == set(flat(got_local[r])), r
        assert len(flat(got[r])) == len(set(flat(got[r])))
    both = flat(got[0]) + flat(got[1])
    if drop_last:  # every rank 203 // 2 // 4 = 25 full batches
        assert len(got[0]) == len(got[1]) == 25 and len(set(both)) == len(both) == 200
    else:
        assert_exactly_once(both, SIZE, "the two ranks' epoch")
        assert [len(flat(g)) for g in got] == [102, 101]
    for loader in ranks + fallback:
        loader.close()


def test_a_shard_is_kept_across_a_producer_restart(loaders: Loaders) -> None:
    """A rank reading batches of 3 (its share of the producer's 8s) when its producer is killed
    mid-epoch resumes from the restarted one: exactly its share of that epoch, nothing twice."""
    # slow (sleeping: wait_ms), so that the kill finds the producer mid-epoch
    settings: dict[str, Any] = {"size": SIZE, "batch": 8, "wait_ms": 1.0}
    producer = loaders.serve(**settings)
    loader = shared(3, shard=(1, 2), resume_s=30)
    epoch = loader.epoch
    order = canonical(SIZE, 0, epoch)
    shard = Shard(1, 2)
    runs = [shard.share(j * 8, min(8, SIZE - j * 8)) for j in range(-(-SIZE // 8))]
    expected = [order[j * 8 + i] for j, (a, c) in enumerate(runs) for i in range(a, c)]
    ids: list[int] = []
    for (features, _), batch_ids in loader:
        assert bool((features == batch_ids.float().view(-1, 1)).all())
        ids += batch_ids.tolist()
        if len(ids) == 4 * 3:
            producer.kill()
            loaders.serve(**settings)
    assert loader.epoch == epoch + 1
    assert len(ids) == len(set(ids)) and sorted(ids) == sorted(expected)
    loader.close()


def test_bad_shard_is_one_clear_error() -> None:
    with pytest.raises(LoaderError, match="rank must be in 0"):
        local(4, shard=(2, 2))
    with pytest.raises(LoaderError, match="two integers"):
        local(4, shard=("a", 2))  # type: ignore[arg-type]


def test_ranks_whose_batch_counts_differ_are_told(loaders: Loaders) -> None:
    with pytest.warns(RuntimeWarning, match="drop_last=True"):
        local(3, size=10, shard=(0, 3))


# ------------------------------------------------------------------------------- pin_memory
@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU-only torch's behaviour")
@READERS
def test_pin_memory_without_cuda_says_so_and_hands_out_batches(
    read_from: Callable[[int], None],
) -> None:
    read_from(64)
    for make in (lambda: shared(8, pin_memory=True), lambda: local(8, 64, pin_memory=True)):
        with pytest.warns(UserWarning, match="no CUDA device"):
            loader = make()
        assert_exactly_once(flat(read(loader)), 64)
        loader.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinning needs a CUDA device")
@READERS
def test_pin_memory_hands_out_page_locked_batches(read_from: Callable[[int], None]) -> None:
    read_from(64)
    for loader in (shared(8, pin_memory=True, device="cpu"), local(8, 64, pin_memory=True)):
        pinned = 0
        for (features, labels), ids in loader:
            assert features.is_pinned() and labels.is_pinned(), loader.mode
            assert bool((features == ids.float().view(-1, 1)).all())
            pinned += 1
        assert pinned == 8
        loader.close()


# -------------------------------------------------------------------------------- set_epoch
def test_set_epoch_under_a_producer_is_checked(loaders: Loaders) -> None:
    loaders.serve(size=64, batch=8)
    loader = shared(8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # following the stream: no warning
        for epoch in range(2):
            loader.set_epoch(epoch)
            assert_exactly_once(flat(read(loader)), 64)
    with pytest.warns(RuntimeWarning, match="the producer's epoch 2"):
        loader.set_epoch(5)  # the script skips epochs: the stream does not
    loader.close()


# ------------------------------------------------------------------------------- state_dict
def saved(state: dict[str, Any]) -> dict[str, Any]:
    """The state as a checkpoint keeps it: through torch.save and torch.load."""
    buffer = io.BytesIO()
    torch.save({"loader": state}, buffer)
    buffer.seek(0)
    return dict(torch.load(buffer, weights_only=True)["loader"])


@READERS
@pytest.mark.parametrize(
    ("batch", "options"),
    [(12, {}), (8, {"drop_last": True}), (4, {"shard": (1, 2)})],
    ids=["12-of-8", "drop_last", "shard"],
)
def test_resume_mid_epoch(
    read_from: Callable[[int], None], batch: int, options: dict[str, Any]
) -> None:
    """A job reads 5 batches, checkpoints and 'restarts' (a new loader): the resumed one yields
    exactly the rest of that epoch, with a producer and locally; then whole epochs again."""
    read_from(SIZE)
    for make in (shared, local):
        first = make(batch, **options)
        whole = len(first)
        stream_epoch = first.epoch
        before, state = read_then_save(first, 5)
        first.close()
        again = make(batch, **options)
        again.load_state_dict(state)
        assert again.epoch == stream_epoch or again.mode == "local"
        after = read(again)
        assert len(before) + len(after) == whole, again.mode
        ids = flat(before) + flat(after)
        assert len(ids) == len(set(ids)), again.mode
        if not options:
            assert_exactly_once(ids, SIZE, f"the resumed epoch ({again.mode})")
        # the next epoch is whole
        assert len(read(again)) == whole
        again.close()


@READERS
def test_resume_at_the_end_of_an_epoch_yields_nothing_more(
    read_from: Callable[[int], None],
) -> None:
    read_from(64)
    for make in (shared, local):
        loader = make(8) if make is shared else local(8, 64)
        batches, state = read_then_save(loader, 8)
        assert len(batches) == 8
        loader.close()
        again = make(8) if make is shared else local(8, 64)
        again.load_state_dict(state)
        assert read(again) == []
        assert_exactly_once(flat(read(again)), 64, "the epoch after")
        again.close()


@READERS
def test_a_state_of_another_mode_or_loader_is_refused(read_from: Callable[[int], None]) -> None:
    read_from(SIZE)
    producer_state = shared(8).state_dict()
    with pytest.raises(LoaderError, match="taken from a producer"):
        local(8).load_state_dict(producer_state)
    with pytest.raises(LoaderError, match="batch_size 8 there, 12 here"):
        shared(12).load_state_dict(producer_state)
    with pytest.raises(LoaderError, match="not a SharedLoader state_dict"):
        shared(8).load_state_dict({"epoch": 3})


# ----------------------------------------------------------------------- DDP, the must-show
def run_jobs(
    loaders: Loaders,
    tmp_path: Path,
    home: Home,
    jobs: list[tuple[int, int, int, float | Path]],
) -> list[list[dict[str, Any]]]:
    """Run ddp_job.py processes, (rank, world, epochs, loader delay: seconds, or a file to wait
    for) each, all at once; the records of each, by epoch."""
    store = tmp_path / "store"
    procs = []
    for rank, world, epochs, delay in jobs:
        out = tmp_path / f"job-{world}-{rank}.jsonl"
        argv = [sys.executable, str(DDP_JOB), "syn", "--out", str(out), "--rank", str(rank)]
        argv += ["--world", str(world), "--store", str(store), "--epochs", str(epochs)]
        argv += ["--loader-after" if isinstance(delay, Path) else "--loader-delay", str(delay)]
        procs.append((loaders._spawn(argv, home, out.with_suffix(".log")), out))
    for proc, out in procs:
        try:
            code = proc.wait(300)
        except subprocess.TimeoutExpired:
            code = None
        assert code == 0, out.with_suffix(".log").read_text()[-3000:]
    return [[json.loads(x) for x in out.read_text().splitlines()] for _, out in procs]


def assert_each_job_once(
    rank0: list[dict[str, Any]],
    rank1: list[dict[str, Any]],
    single: list[dict[str, Any]],
    size: int,
) -> None:
    assert single[0]["shard"] is None
    assert_the_ranks_once(rank0, rank1, size)
    for epoch, one in enumerate(single):
        assert one["ok"]
        assert_exactly_once(one["ids"], size, f"the 1-rank job's epoch {epoch}")


def assert_the_ranks_once(
    rank0: list[dict[str, Any]], rank1: list[dict[str, Any]], size: int
) -> None:
    assert [r["shard"] for r in (rank0[0], rank1[0])] == [[0, 2], [1, 2]]
    for epoch, (a, b) in enumerate(zip(rank0, rank1, strict=True)):
        assert a["ok"] and b["ok"]
        assert a["stream_epoch"] == b["stream_epoch"], "the ranks read different epochs"
        assert a["steps"] == b["steps"] == a["len"] == b["len"] == -(-size // 2 // 4)
        assert not set(a["ids"]) & set(b["ids"])
        assert_exactly_once(a["ids"] + b["ids"], size, f"the DDP job's epoch {epoch}")


def test_a_ddp_job_and_a_one_rank_job_share_one_producer(
    loaders: Loaders, tmp_path: Path, home: Home
) -> None:
    """A 2-rank DDP job (gloo on CPU, every step all-reduces) and a 1-rank job read one
    producer; each rank's shard comes from torch.distributed. For two epochs: the two ranks
    together see every sample exactly once, and so does the 1-rank job."""
    size = 202  # 101 a rank; the producer's last batch has 2 samples
    producer = loaders.serve(size=size, batch=8, cost_ms=0.2, slots=16, idle_exit=300)
    rank0, rank1, single = run_jobs(
        loaders, tmp_path, home, [(0, 2, 2, 0), (1, 2, 2, 0), (0, 1, 2, 0)]
    )
    assert_each_job_once(rank0, rank1, single, size)
    assert len(rank0) == len(single) == 2
    assert producer.proc.poll() is None and len(loaders.producers) == 1
    # three consumers welcomed, and one more for a rank welcomed at an earlier epoch than the
    # other (on a loaded machine the stream can pass an epoch's end between their hellos): it
    # says hello again at the epoch the ranks agree on (resume.join_ranks)
    rejoined = sum(rank[0]["joined"][0] != rank[0]["joined"][1] for rank in (rank0, rank1))
    assert producer.status()["consumers_total"] == 3 + rejoined, (rank0[0], rank1[0])


def test_ranks_welcomed_at_different_epochs_start_at_the_same(
    loaders: Loaders, tmp_path: Path, home: Home
) -> None:
    """Rank 0 makes its loader, then another consumer starts reading, and rank 1 makes its
    loader only once that one has taken the stream past an epoch's end, so the ranks are
    welcomed at different epochs. They start at the latest (rank 0 says hello again for it) and
    still read every sample once."""
    size = 202
    # slow (0.4 s an epoch) by sleeping, not by spinning: the stream's pace is the point, and
    # spinning through its epochs cost ~2 CPU-s (docs/benchmarks.md, session 59)
    producer = loaders.serve(size=size, batch=8, wait_ms=2.0, slots=16, idle_exit=300)
    late = tmp_path / "rank1-may-start"
    # The other consumer only moves the stream on: a thread here, not a torch process of its
    # own. It joins in some epoch E and reads 4 epochs, so the stream makes E + 3: past `since`
    # below (E, or E + 1 if the stream went on before the status showed the reader).
    reader = loaders.thread(epochs=4, gated=True)

    def consumers(count: int) -> dict[str, Any] | None:
        status = producer.status()
        return status if len(status["consumers"]) >= count else None

    def in_turn() -> None:
        wait_for(lambda: consumers(1), 120, interval=0.05, what="rank 0 to be welcomed")
        reader.go()
        status = wait_for(lambda: consumers(2), 120, interval=0.05, what="the reader")
        since = status["stream"][0]
        wait_for(
            lambda: producer.status()["stream"][0] > since,
            120,
            interval=0.05,
            what="the stream to pass an epoch's end",
        )
        late.touch()

    opener = threading.Thread(target=in_turn, daemon=True)
    opener.start()
    rank0, rank1 = run_jobs(loaders, tmp_path, home, [(0, 2, 2, 0), (1, 2, 2, late)])
    opener.join(5)
    assert_the_ranks_once(rank0, rank1, size)
    reads = reader.finish(60)
    assert len(reads) == 4
    for epoch in reads:
        assert epoch["data_ok"]
        assert_exactly_once(epoch["ids"], size, f"the other consumer's epoch {epoch['epoch']}")
    welcomed = [rank0[0]["joined"][0], rank1[0]["joined"][0]]
    started = rank0[0]["joined"][1]
    assert welcomed[0] < welcomed[1], f"the stream did not pass an epoch: welcomed at {welcomed}"
    assert started == rank1[0]["joined"][1] == welcomed[1] == rank0[0]["stream_epoch"]
