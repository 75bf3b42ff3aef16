"""The shared data loader end to end: real producers (`gpudesk loader serve`), real consumer
processes (loader_consumer.py), every sample checked by its id and its bytes.

The dataset is gpudesk.workloads.synthetic: sample i is (a float32 tensor filled with i, label i),
so a consumer can tell which samples it got and that their data arrived intact. The expected
shuffle is computed here from the documented formula (epoch e visits randperm(len, generator
seeded with seed * 1_000_003 + e)), not from gpudesk's code.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from clock_step import (
    STEP_S,
    after_the_step,
    btime_seen_by,
    needs_namespaces,
    real_btime,
    skip_if_refused,
    stepped_proc_stat,
)
from conftest import wait_for
from loader_consumer import consume

from gpudesk.loader import LoaderError, SharedLoader, staging
from gpudesk.loader import consumer as shared_consumer
from gpudesk.loader.protocol import EXIT_FINAL, read_info
from gpudesk.loader.status import collect
from gpudesk.paths import Home

GPUDESK = [sys.executable, "-m", "gpudesk"]
CONSUMER = Path(__file__).with_name("loader_consumer.py")
FACTORY = "gpudesk.workloads.synthetic:make_dataset"


def canonical(size: int, seed: int, epoch: int) -> list[int]:
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(size, generator=generator).tolist()


def assert_exactly_once(ids: list[int], size: int, what: str = "an epoch") -> None:
    duplicates = sorted({i for i in ids if ids.count(i) > 1}) if len(ids) != len(set(ids)) else []
    missing = sorted(set(range(size)) - set(ids))
    assert not duplicates and not missing and len(ids) == size, (
        f"{what}: {len(ids)} ids, duplicates {duplicates[:10]}, missing {missing[:10]}"
    )


def expected_sizes(size: int, batch: int) -> list[int]:
    return [batch] * (size // batch) + ([size % batch] if size % batch else [])


def batch_indices(ids: list[int], order: list[int], per: int) -> list[int]:
    """Which producer batch of `order` each `per` ids of `ids` are (they must be one whole)."""
    where = {sample: position // per for position, sample in enumerate(order)}
    out = []
    for start in range(0, len(ids), per):
        chunk = ids[start : start + per]
        index = where[chunk[0]]
        assert chunk == order[index * per : (index + 1) * per], f"ids {chunk} are not one batch"
        out.append(index)
    return out


def assert_whole_batches_of(ids: list[int], order: list[int], per: int) -> None:
    """A consumer's first epoch is the epoch's order cut in the producer's batches, each batch
    once; they come in that order only from where it joined: what it missed before came as
    make-ups, in between."""
    indices = batch_indices(ids, order, per)
    assert sorted(indices) == list(range(-(-len(order) // per))), indices


def assert_no_new_shm(before: set[str], pids: set[int]) -> None:
    """Nothing this test's processes made is left in /dev/shm (the ring is a memfd: it never
    shows there). Other processes on the machine may come and go: an entry counts when it
    stays, is a file (the loader and torch make no folder there; the suite's tmpfs tests, on
    other workers, make theirs: gpudesk-punch-…, gdst-…) and is not named after a process of
    someone else's: a staging mirror (gpudesk-mirror-PID-…) counts when PID is one of ours,
    as other workers' producers staging in /dev/shm make theirs."""

    def ours(entry: str) -> bool:
        if os.path.isdir(os.path.join("/dev/shm", entry)):
            return False
        if entry.startswith(staging.SHM_PREFIX):
            maker = staging.mirror_maker(entry)
            return maker is None or maker in pids
        numbers = {int(part) for part in entry.replace("-", "_").split("_") if part.isdigit()}
        return not numbers or bool(numbers & pids) or "gpudesk" in entry

    def leftover() -> set[str]:
        return {e for e in set(os.listdir("/dev/shm")) - before if ours(e)}

    with contextlib.suppress(AssertionError):
        wait_for(lambda: not leftover(), 1.0)
    assert leftover() == set()


# ---------------------------------------------------------------------------------- processes
class Producer:
    """`log`: what it said on stderr (errors and warnings); `out`: on stdout (run by hand: the
    line once it serves, the line as it stops)."""

    def __init__(self, proc: subprocess.Popen, home: Home, name: str, log: Path, out: Path) -> None:
        self.proc, self.home, self.name, self.log, self.out = proc, home, name, log, out
        self.children: list[psutil.Process] = []

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(
                f"the producer exited ({self.proc.returncode}): {self.log.read_text()}"
            )
        info = read_info(self.home.loader_paths(self.name)[2])
        return info is not None and info.pid == self.pid

    def wait_ready(self, timeout: float = 30.0) -> Producer:
        wait_for(self.ready, timeout, what=f"producer {self.name} to be ready")
        with contextlib.suppress(psutil.Error):
            self.children = psutil.Process(self.pid).children(recursive=True)
        return self

    def status(self) -> dict[str, Any]:
        entries = collect(self.name, self.home)
        assert len(entries) == 1 and "error" not in entries[0], entries
        return entries[0]

    def consumers(self) -> dict[int, dict[str, Any]]:
        return {c["pid"]: c for c in self.status()["consumers"]}

    def stop(self) -> int:
        """SIGTERM, as a user stops it: it must exit, and its workers with it."""
        with contextlib.suppress(psutil.Error):
            self.children = psutil.Process(self.pid).children(recursive=True)
        self.proc.terminate()
        code = self.proc.wait(15)
        wait_for(
            lambda: not [c for c in self.children if _alive(c)],
            15,
            what="the producer's worker processes to exit",
        )
        return code

    def kill(self) -> None:
        with contextlib.suppress(psutil.Error):
            self.children = psutil.Process(self.pid).children(recursive=True)
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(10)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class _Recorded:
    """What a consumer reported (see loader_consumer.py), for either kind of consumer."""

    def _events(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self._events() if kind is None or e["event"] == kind]

    def batches(self) -> int:
        return len(self.events("batch"))

    def epochs(self) -> list[dict[str, Any]]:
        return self.events("epoch")

    def _stuck(self, timeout: float) -> AssertionError:
        return AssertionError(
            f"a consumer did not finish in {timeout:g}s; it got "
            f"{self.batches()} batches, {len(self.epochs())} epochs; "
            f"{self.events()[-2:]}"
        )


class Consumer(_Recorded):
    """A consumer process: loader_consumer.py."""

    def __init__(self, proc: subprocess.Popen, out: Path, start_file: Path | None) -> None:
        self.proc, self.out, self.start_file = proc, out, start_file

    @property
    def pid(self) -> int:
        return self.proc.pid

    def go(self) -> float:
        """Let a gated consumer connect (once it has imported torch); returns when."""
        wait_for(lambda: self.events("started"), 30, what="the consumer process to start")
        assert self.start_file is not None
        now = time.time()
        self.start_file.touch()
        return now

    def _events(self) -> list[dict[str, Any]]:
        found = []
        with contextlib.suppress(FileNotFoundError):
            for line in self.out.read_text().splitlines():
                try:
                    found.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # a line being written
        return found

    def finish(self, timeout: float = 30.0, code: int = 0) -> list[dict[str, Any]]:
        try:
            got = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise self._stuck(timeout) from None
        log = self.out.with_suffix(".log")
        assert got == code, f"consumer exit {got}: {self.events()[-3:]} " + (
            log.read_text()[-3000:] if log.exists() else ""
        )
        return self.epochs()


class ThreadConsumer(_Recorded):
    """A consumer in a thread of the test process, recording as loader_consumer.py does."""

    def __init__(
        self,
        home: Home,
        name: str,
        batch: int,
        epochs: int,
        delay: float,
        resume_s: float | None,
        pause_file: Path | None,
        pause_from: int,
    ) -> None:
        self.home, self.name, self.batch, self.resume_s = home, name, batch, resume_s
        self.options = {
            "epochs": epochs,
            "delay": delay,
            "pause_from": pause_from,
            "pause_file": str(pause_file) if pause_file else None,
        }
        self.recorded: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.pid = os.getpid()

    def go(self) -> float:
        now = time.time()
        self.thread.start()
        return now

    def _write(self, **fields: Any) -> None:
        with self.lock:
            self.recorded.append(fields)

    def _events(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.recorded)

    def _run(self) -> None:
        try:
            loader = SharedLoader(
                self.name,
                batch_size=self.batch or None,
                with_ids=True,
                fallback=False,
                resume_s=self.resume_s,
                home=self.home.root,
            )
            consume(loader, self._write, **self.options)
        except LoaderError as exc:
            if not self.events("error"):
                self._write(event="error", message=str(exc), since_last_s=None)
        except BaseException:
            self._write(event="crash", traceback=traceback.format_exc())

    def finish(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise self._stuck(timeout)
        assert self.events()[-1]["event"] == "done", self.events()[-2:]
        return self.epochs()


class Loaders:
    """Starts a test's producers and consumers, and makes sure none outlives it."""

    def __init__(self, home: Home, tmp_path: Path) -> None:
        self.home, self.tmp = home, tmp_path
        self.procs: list[subprocess.Popen] = []
        self.producers: list[Producer] = []
        self.count = 0

    def _spawn(
        self,
        argv: list[str],
        home: Home,
        log: Path,
        env: dict[str, str] | None = None,
        session: bool = False,
        out: Path | None = None,
    ) -> subprocess.Popen:
        """`argv` started with its stderr in `log`, and its stdout in `out` (None: in `log`)."""
        env = {**os.environ, "GPUDESK_HOME": str(home.root), **(env or {})}
        with open(log, "w") as sink, open(out or os.devnull, "w") as out_sink:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdout=sink if out is None else out_sink,
                stderr=subprocess.STDOUT if out is None else sink,
                stdin=subprocess.DEVNULL,
                start_new_session=session,
            )
        self.procs.append(proc)
        return proc

    def serve(
        self,
        name: str = "syn",
        *,
        home: Home | None = None,
        size: int = 200,
        batch: int = 8,
        workers: int = 0,
        seed: int = 0,
        slots: int = 16,
        shape: tuple[int, ...] = (2,),
        cost_ms: float = 0.0,
        wait_ms: float = 0.0,
        wait: bool = True,
        idle_exit: float = 30.0,
        selection: str | None = None,
        dataset: tuple[str, dict[str, Any]] | None = None,
        extra: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        session: bool = False,
    ) -> Producer:
        """A producer of the synthetic dataset (size, shape, cost_ms: CPU-s per sample,
        wait_ms: a sleep per sample, for a producer that is slow without using the CPU), or of
        `dataset`: a factory and its arguments; `session`: in a session (and process group) of
        its own."""
        home = home or self.home
        self.count += 1
        slow = {"wait_ms": wait_ms} if wait_ms else {}
        factory, args = dataset or (
            FACTORY,
            {"size": size, "shape": list(shape), "cost_ms": cost_ms, **slow},
        )
        argv = [
            *GPUDESK,
            "loader",
            "serve",
            name,
            "--dataset",
            factory,
            *[part for k, v in args.items() for part in ("--arg", f"{k}={json.dumps(v)}")],
            "--batch-size",
            str(batch),
            "--workers",
            str(workers),
            "--seed",
            str(seed),
            "--slots",
            str(slots),
            "--idle-exit",
            str(idle_exit),
        ]
        if selection:
            argv += ["--selection", selection]
        argv += extra
        log, out = self.tmp / f"producer{self.count}.log", self.tmp / f"producer{self.count}.out"
        proc = self._spawn(argv, home, log, env, session, out)
        producer = Producer(proc, home, name, log, out)
        self.producers.append(producer)
        return producer.wait_ready() if wait else producer

    def consumer(
        self,
        name: str = "syn",
        *,
        batch: int = 0,
        epochs: int = 1,
        delay: float = 0.0,
        resume_s: float | None = None,
        pause_file: Path | None = None,
        pause_from: int = 0,
        gated: bool = False,
        hold_hello: Path | None = None,
        fallback: dict[str, Any] | None = None,
        wrap: tuple[str, ...] = (),
    ) -> Consumer:
        """A consumer process; `gated`: it connects only when told to (`go`); `hold_hello`: it
        waits while that file exists between finding its producer and saying hello; `fallback`: the
        factory's arguments where it may read locally; `wrap`: what runs it (its argv's prefix)."""
        self.count += 1
        out = self.tmp / f"consumer{self.count}.jsonl"
        start_file = self.tmp / f"go{self.count}" if gated else None
        argv = [
            *wrap,
            sys.executable,
            str(CONSUMER),
            name,
            "--out",
            str(out),
            "--batch-size",
            str(batch),
            "--epochs",
            str(epochs),
            "--delay",
            str(delay),
        ]
        if resume_s is not None:
            argv += ["--resume-s", str(resume_s)]
        if pause_file is not None:
            argv += ["--pause-file", str(pause_file), "--pause-from", str(pause_from)]
        if start_file is not None:
            argv += ["--start-file", str(start_file)]
        if hold_hello is not None:
            argv += ["--hold-hello", str(hold_hello)]
        if fallback is not None:
            argv += ["--fallback", json.dumps(fallback)]
        return Consumer(self._spawn(argv, self.home, out.with_suffix(".log")), out, start_file)

    def thread(
        self,
        name: str = "syn",
        *,
        batch: int = 0,
        epochs: int = 1,
        delay: float = 0.0,
        resume_s: float | None = None,
        pause_file: Path | None = None,
        pause_from: int = 0,
        gated: bool = False,
    ) -> ThreadConsumer:
        """A consumer in a thread here: cheaper than a process, where a test needs no more."""
        consumer = ThreadConsumer(
            self.home, name, batch, epochs, delay, resume_s, pause_file, pause_from
        )
        if not gated:
            consumer.go()
        return consumer

    def close(self) -> None:
        for producer in self.producers:
            for child in producer.children:
                with contextlib.suppress(psutil.Error):
                    child.kill()
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)


@pytest.fixture
def loaders(home: Home, tmp_path: Path) -> Iterator[Loaders]:
    launcher = Loaders(home, tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()


class SharedProducers:
    """Producers that the tests of a module only read from, each started once, on first use (a
    producer is a torch process: about 2 CPU-s to start), each named "syn" in a home of its own.
    A test opens its own loaders and closes them. Used by a module-scoped fixture, with the
    module in an xdist group of its own, so that its tests run on one worker."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: dict[str, tuple[Loaders, Producer | None]] = {}

    def home_for(self, key: str, **settings: Any) -> Home:
        """The home of the producer `key` (`Loaders.serve(**settings)`, the first call's),
        once it has no consumer left and no slot in use (the test before closed its loaders).
        A test finds it as a fresh one but for its stream's position, which its consumers join
        wherever it is, as any consumer may. One that died is started again."""
        if key not in self.started:
            (self.root / key).mkdir()
            self.started[key] = (Loaders(Home(self.root / key / "home"), self.root / key), None)
        launcher, producer = self.started[key]
        if producer is None or producer.proc.poll() is not None:
            producer = launcher.serve(**{"idle_exit": 3600.0, **settings})
            self.started[key] = (launcher, producer)
        wait_for(
            lambda: not (status := producer.status())["consumers"] and not status["slots_used"],
            30,
            what=f"producer {key} to have no consumer left",
        )
        return producer.home

    def close(self) -> None:
        for launcher, _ in self.started.values():
            launcher.close()


def local_epochs(home: Home, size: int, seed: int, batch: int, epochs: int) -> list[list[int]]:
    """The epochs of the local fallback (no producer) for the same dataset and seed."""
    loader = SharedLoader(
        "nothere",
        batch_size=batch,
        factory=FACTORY,
        factory_kwargs={"size": size, "shape": [2]},
        seed=seed,
        fallback=True,
        with_ids=True,
        home=home.root,
    )
    assert loader.mode == "local"
    out = []
    for _ in range(epochs):
        ids: list[int] = []
        for (features, labels), batch_ids in loader:
            assert torch.equal(labels, batch_ids)
            assert bool((features == batch_ids.float().view(-1, 1)).all())
            ids.extend(batch_ids.tolist())
        out.append(ids)
    return out


def first_epoch_ids(home: Home, name: str) -> list[int]:
    with SharedLoader(name, with_ids=True, fallback=False, home=home.root) as loader:
        return [i for _, ids in loader for i in ids.tolist()]


# -------------------------------------------------------------------------------------- tests
# Two consumers told to connect at one moment while the first epoch streams: a test on the other
# core can delay one past that epoch (seen once under pytest-xdist: stream epochs [1, 2, 3]).
@pytest.mark.slow(14)
@pytest.mark.serial
def test_every_consumer_gets_every_sample_once_per_epoch_in_the_seeds_order(
    loaders: Loaders, home: Home, tmp_path: Path
) -> None:
    size, batch, seed, epochs = 200, 8, 3, 3
    per_epoch = -(-size // batch)
    other = Home(tmp_path / "other")
    producer = loaders.serve(size=size, batch=batch, workers=1, seed=seed, wait=False)
    # Two more producers in a fresh home, starting meanwhile: the same seed, and another.
    twin = loaders.serve("twin", home=other, size=size, batch=batch, seed=seed, wait=False)
    reseeded = loaders.serve(
        "reseeded", home=other, size=size, batch=batch, seed=seed + 1, wait=False
    )
    # A consumer process and one in a thread here, told to connect at the same moment; a
    # little slow, so that the first to connect is still in the first epoch when the other
    # comes.
    first = loaders.consumer(epochs=epochs, delay=0.01, gated=True)
    second = loaders.thread(epochs=epochs, delay=0.01, gated=True)
    producer.wait_ready()
    first.go()
    second.go()

    results = [c.finish(30) for c in (first, second)]
    for epochs_seen in results:
        assert [e["epoch"] for e in epochs_seen] == list(range(epochs))
        for e in epochs_seen:
            assert_exactly_once(e["ids"], size, f"epoch {e['epoch']}")
            assert e["data_ok"], "a sample's data did not match its id"
            assert e["views"] == e["batches"] == per_epoch  # the producer's batches: all views
    # One shuffle for everyone. After a consumer's first epoch, each is exactly its epoch's
    # order. The first to connect had its first epoch whole from the stream too; the other,
    # unless it came before the first batch went out, got what it had missed as make-ups, in
    # between: its first epoch is the same batches, in another order. One that came only once
    # the stream's first epoch had wholly gone out (a loaded machine starts a process late)
    # starts at the stream's next epoch, and its epochs follow on from there.
    streams = [[e["stream_epoch"] for e in epochs_seen] for epochs_seen in results]
    for stream in streams:
        assert stream == list(range(stream[0], stream[0] + epochs)), streams
    assert min(stream[0] for stream in streams) == 0, streams
    # Each epoch is its stream epoch's batches. A consumer reads them in that order unless one
    # had to be made again for it (it fell further behind than the ring keeps, which a loaded
    # machine may cause): then that one comes when it is made.
    remade = producer.status()["makeups_produced"]
    for epochs_seen in results:
        for seen in epochs_seen:
            order = canonical(size, seed, seen["stream_epoch"])
            assert_whole_batches_of(seen["ids"], order, batch)
            if not remade:
                assert seen["ids"] == order
    order0 = canonical(size, seed, 0)

    # The same seed elsewhere gives the same order; another seed another; so does the
    # local fallback, with no producer at all.
    twin.wait_ready()
    reseeded.wait_ready()
    assert first_epoch_ids(other, "twin") == order0
    reseeded_ids = first_epoch_ids(other, "reseeded")
    assert sorted(reseeded_ids) == list(range(size)) and reseeded_ids != order0
    assert local_epochs(home, size, seed, batch, 2) == [order0, canonical(size, seed, 1)]
    for p in (producer, twin, reseeded):
        assert p.stop() == 0


@pytest.mark.slow(8)
def test_a_consumer_joining_mid_epoch_starts_at_once_and_gets_what_it_missed(
    loaders: Loaders,
) -> None:
    size, batch = 400, 8  # 50 batches an epoch
    per_epoch = size // batch
    producer = loaders.serve(size=size, batch=batch, workers=1)
    steady = loaders.thread(epochs=2, delay=0.02)
    early, late = loaders.thread(epochs=2, gated=True), loaders.thread(epochs=2, gated=True)

    def steady_at(index: int) -> bool:
        consumers = producer.status()["consumers"]  # the steady one joined first
        position = consumers[0]["position"] if consumers else None
        return position is not None and position[0] == 0 and position[1] >= index

    def first_batch_soon(consumer: Consumer | ThreadConsumer, go: float) -> None:
        wait_for(lambda: consumer.batches() >= 1, 5, what="the joiner's first batch")
        assert consumer.events("batch")[0]["t"] - go < 2.0

    wait_for(lambda: steady_at(8), 15, what="the steady consumer to be 8 batches in")
    first_batch_soon(early, early.go())
    # One that joins in the second half of the epoch: most of its epoch is behind the stream.
    wait_for(lambda: steady_at(30), 15, what="the steady consumer to be 30 batches in")
    first_batch_soon(late, late.go())

    # The joiners read faster than the steady one, which therefore falls behind them: every
    # consumer still reads each of its epochs whole, each batch once. What one missed it got
    # from the ring while it was there, else made again for it; never more than what the
    # joiners' first epochs and the steady one's lag need.
    for joiner in (early, late):
        epochs_seen = joiner.finish(30)
        assert len(epochs_seen) == 2
        for e in epochs_seen:
            assert_exactly_once(e["ids"], size, f"a joiner's epoch {e['epoch']}")
            assert e["data_ok"] and e["views"] == e["batches"]
        first, then = (e["stream_epoch"] for e in epochs_seen)
        assert then == first + 1
        assert_whole_batches_of(epochs_seen[0]["ids"], canonical(size, 0, first), batch)
        assert_whole_batches_of(epochs_seen[1]["ids"], canonical(size, 0, then), batch)
    for e in steady.finish(30):
        assert_whole_batches_of(e["ids"], canonical(size, 0, e["stream_epoch"]), batch)
        assert e["data_ok"]
    status = producer.status()
    assert status["makeups_produced"] <= 3 * per_epoch, status
    assert producer.stop() == 0


@pytest.mark.slow(9)
def test_a_consumer_joining_at_the_end_of_an_epoch_with_a_small_ring_does_not_stall(
    loaders: Loaders,
) -> None:
    # Many workers keep many batches of the next epoch pulled ahead; a joiner is given those
    # (they hold slots it cannot release before its first epoch ends) before its make-ups.
    size, batch, slots = 400, 8, 4
    per_epoch = size // batch
    producer = loaders.serve(size=size, batch=batch, workers=3, slots=slots)
    steady = loaders.thread(epochs=2, delay=0.02)

    def steady_near_the_end() -> bool:
        consumers = producer.status()["consumers"]
        position = consumers[0]["position"] if consumers else None
        return position is not None and tuple(position) >= (0, per_epoch - 3)

    wait_for(steady_near_the_end, 15, what="the steady consumer to near the end of its epoch")
    joiner = loaders.thread(epochs=2)
    for consumer in (joiner, steady):
        epochs_seen = consumer.finish(15)
        assert len(epochs_seen) == 2
        for e in epochs_seen:
            assert_exactly_once(e["ids"], size, f"epoch {e['epoch']}")
            assert e["data_ok"]
    assert producer.stop() == 0


@pytest.mark.slow(6)
def test_consumers_with_other_batch_sizes_get_views_where_they_can(loaders: Loaders) -> None:
    size = 100  # 12 full producer batches of 8, then one of 4
    producer = loaders.serve(size=size, batch=8, workers=1)
    consumers = {b: loaders.thread(batch=b, epochs=2) for b in (4, 16, 5)}
    for b, consumer in consumers.items():
        epochs_seen = consumer.finish(30)
        assert len(epochs_seen) == 2
        for e in epochs_seen:
            assert_exactly_once(e["ids"], size, f"batch {b}, epoch {e['epoch']}")
            assert e["data_ok"], f"batch {b}: a sample's data did not match its id"
            assert e["sizes"] == expected_sizes(size, b)
        views = sum(e["views"] for e in epochs_seen)
        batches = sum(e["batches"] for e in epochs_seen)
        if b == 4:
            assert views == batches  # halves of slots: never a copy
        elif b == 16:
            assert views >= 1  # two adjacent slots, in order: one view
    assert producer.stop() == 0


@pytest.mark.slow(8)
def test_a_killed_consumer_releases_its_slots_and_the_others_go_on(
    loaders: Loaders, tmp_path: Path
) -> None:
    shm_before = set(os.listdir("/dev/shm"))
    size, slots = 400, 8
    pause = tmp_path / "pause"
    pause.touch()
    producer = loaders.serve(size=size, batch=8, workers=1, slots=slots, wait=False)
    victim = loaders.consumer(epochs=2, pause_file=pause, pause_from=3)
    producer.wait_ready()

    # The victim holds its 4th batch, mid-epoch, and what it was given beyond it: its share of
    # the ring, no more. A consumer that comes now goes on past it.
    wait_for(lambda: victim.batches() >= 4, 20, what="the victim to be paused mid-epoch")
    survivor = loaders.thread(epochs=2)
    wait_for(lambda: survivor.batches() >= 10, 10, what="the survivor to read past the victim")
    assert victim.batches() == 4  # still paused
    held = producer.consumers()[victim.pid]["held_slots"]
    assert 1 <= held <= 3, held

    os.kill(victim.pid, signal.SIGKILL)
    killed = time.monotonic()
    wait_for(
        lambda: victim.pid not in producer.consumers(),
        2,
        what="the dead consumer to leave the status",
    )
    assert time.monotonic() - killed < 1.5
    victim.proc.wait(5)

    epochs_seen = survivor.finish(20)
    assert len(epochs_seen) == 2
    for e in epochs_seen:
        assert_exactly_once(e["ids"], size, "the survivor's epoch")
        assert e["data_ok"]
    wait_for(lambda: producer.status()["consumers"] == [], 5, what="no consumers")
    assert producer.status()["slots_used"] == 0
    assert producer.stop() == 0
    assert_no_new_shm(shm_before, {producer.pid, victim.pid, os.getpid()})


def test_a_synthetic_dataset_is_slow_for_wait_ms_without_the_cpu_and_busy_for_cost_ms() -> None:
    """The tests' slow producers sleep (wait_ms) where a slow producer is the point, and spend
    the CPU (cost_ms) where decoding's CPU is: each does what it says, and not the other."""
    from gpudesk.workloads.synthetic import make_dataset

    for dataset, waits, busy in (
        (make_dataset(size=4, wait_ms=60.0), True, False),
        (make_dataset(size=4, cost_ms=60.0), True, True),
        (make_dataset(size=4), False, False),
    ):
        dataset[0]  # torch's first call, not counted
        wall, cpu = time.monotonic(), time.process_time()
        features, label = dataset[3]
        wall, cpu = time.monotonic() - wall, time.process_time() - cpu
        assert (features == 3).all() and int(label) == 3
        assert (cpu >= 0.06) == busy, (wall, cpu)
        assert wall >= 0.06 or not waits, (wall, cpu)  # (a busy machine may stretch any wall)


@pytest.mark.slow(12)
def test_make_ups_queued_for_a_consumer_that_leaves_are_made_for_one_that_lacks_them(
    loaders: Loaders, home: Home
) -> None:
    """A consumer that joined mid-epoch lacks what the stream passed; what of it was queued as
    another's make-ups it does not order itself (it is coming). When that other one leaves
    before they are made, they are its own to order: it once waited for ever for them (seen
    as a resumed loader hanging: the consumer its constructor made left as it resumed)."""
    size, batch = 96, 8  # 12 batches an epoch
    # 0.24 s a batch, slept (the producer is slow, not busy: it leaves the CPU to the suite)
    settings: dict[str, Any] = {"size": size, "batch": batch, "wait_ms": 30.0}

    def loader(batch_size: int = batch) -> SharedLoader:
        return SharedLoader("syn", batch_size, with_ids=True, fallback=False, home=home.root)

    # The stream some way into epoch 0, then the producer killed and restarted: the new one
    # goes on from there with an empty ring, so what the stream passed is made again for
    # whoever joins, as make-ups, a few at a time (as many as it has room for).
    first = loaders.serve(**settings)
    with loader() as reader:
        for count, _ in enumerate(reader, 1):
            if count == 6:
                break
    info_path = home.loader_paths("syn")[2]
    wait_for(lambda: (((i := read_info(info_path)) and i.stream_next) or (0, 0)) >= (0, 6), 10)
    first.kill()
    loaders.serve(**settings)
    # Batches of 3 slots: room for 4 make-ups at once, queued. Made one a pull, turn about with
    # the stream, they are still queued when the joiner says hello and when the other leaves.
    other = loader(3 * batch)
    joiner = loader()
    other.close()

    ids: list[int] = []

    def read_epoch() -> None:
        for _, batch_ids in joiner:
            ids.extend(batch_ids.tolist())

    reading = threading.Thread(target=read_epoch, daemon=True)
    reading.start()
    reading.join(30)
    assert not reading.is_alive(), f"the joiner waits for ever, {len(ids)} of {size} samples in"
    assert_exactly_once(ids, size, "the joiner's epoch")
    joiner.close()


@pytest.mark.slow(5)
def test_a_consumer_says_what_it_waits_for_when_its_live_producer_sends_nothing(
    loaders: Loaders,
    home: Home,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A producer that lives and sends nothing (here: stopped) does not leave the script waiting
    silently: after STALL_NOTE_S (120 s; 1 s here) it says once what it waits for. It is a note,
    not an error (a batch may take that long): the producer going on, it reads on."""
    monkeypatch.setattr(shared_consumer, "STALL_NOTE_S", 1.0)
    size = 64
    producer = loaders.serve(size=size, batch=8)
    loader = SharedLoader("syn", with_ids=True, fallback=False, home=home.root)
    os.kill(producer.pid, signal.SIGSTOP)
    ids: list[int] = []

    def read_epoch() -> None:
        for _, batch_ids in loader:
            ids.extend(batch_ids.tolist())

    reading = threading.Thread(target=read_epoch, daemon=True)
    said: list[str] = []
    try:
        reading.start()
        wait_for(
            lambda: said.append(capfd.readouterr().err) or "from its producer" in "".join(said),
            15,
            what="the consumer's note",
        )
    finally:
        os.kill(producer.pid, signal.SIGCONT)
    reading.join(15)
    assert not reading.is_alive()
    assert_exactly_once(ids, size, "the epoch read across the stall")
    loader.close()
    note = "".join(said) + capfd.readouterr().err
    assert note.count("from its producer") == 1, note
    assert f"nothing from its producer (pid {producer.pid}, alive) for 1 s" in note, note
    assert "of the 8 batches of the producer's epoch 0" in note
    assert "`gpudesk loader status syn`" in note


@pytest.mark.slow(15)
@needs_namespaces
def test_a_consumer_that_reads_a_stepped_clock_keeps_its_producer(
    loaders: Loaders, tmp_path: Path
) -> None:
    """A consumer started after a wall-clock step (its /proc/stat's `btime` STEP_S later:
    tests/clock_step.py) reads a producer started before it. It finds the producer by its info
    file, and its checks of the producer between batches hold, so it reads every epoch. With
    the producer named by psutil's create_time, its start looked STEP_S seconds off to the
    consumer: a producer that had exited."""
    size = 96
    fake = stepped_proc_stat(tmp_path)
    skip_if_refused(fake)
    pause = tmp_path / "pause"
    pause.touch()
    producer = loaders.serve(size=size, batch=8)
    consumer = loaders.consumer(
        epochs=2, pause_file=pause, pause_from=3, wrap=tuple(after_the_step(fake))
    )
    wait_for(lambda: consumer.batches() >= 4, 30, what="the consumer to read, then pause")
    # it reads the stepped btime, and its producer the real one: the test is what it says it is
    assert btime_seen_by(consumer.pid) in (None, real_btime() + STEP_S)
    assert consumer.pid in producer.consumers()
    pause.unlink()
    epochs = consumer.finish(60)
    assert len(epochs) == 2
    for epoch in epochs:
        assert_exactly_once(epoch["ids"], size, f"epoch {epoch['epoch']}")
        assert epoch["data_ok"]
    assert not consumer.events("error")


def test_a_dead_producer_is_reported_at_once_or_a_restarted_one_resumed(loaders: Loaders) -> None:
    size, batch = 200, 8
    # A slow dataset (24 ms a batch): the consumers are always waiting for the producer. It
    # sleeps (wait_ms): spinning (cost_ms), its three producers spent ~1.5 CPU-s on a wait.
    settings: dict[str, Any] = {"size": size, "batch": batch, "wait_ms": 3.0}
    producer = loaders.serve(**settings, wait=False)
    quitter = loaders.consumer(epochs=3, resume_s=0)
    producer.wait_ready()
    wait_for(lambda: quitter.events("ready"), 20, what="the consumer process to connect")
    # Batches of 5 from slots of 8: when the producer dies it has part of a batch left, and
    # after the restart it must skip what it had handed out of it.
    # They wait up to 90 s for a producer to come back: beside two busy loops and two more
    # test workers, a restarted producer took over 20 s to come up.
    odd = loaders.thread(batch=5, epochs=2, resume_s=90)
    wholes = loaders.thread(epochs=2, resume_s=90)
    wait_for(
        lambda: min(c.batches() for c in (quitter, odd, wholes)) >= 3,
        20,
        what="the consumers to be going",
    )
    producer.kill()
    killed, killed_at = time.monotonic(), time.time()
    got = {c: c.batches() for c in (odd, wholes)}
    assert not odd.epochs() and not wholes.epochs()  # killed mid-epoch

    # Without resume_s, the consumer says at once that the producer died, and what to do: it
    # checks the producer's process every POLL_MS (0.2 s) while it waits for a batch, which
    # without that check it would wait for forever. "At once" is when it said so (its error's
    # time stamp), leaving room for a loaded machine: 5 s, 25 polls. Its exit after that (torch
    # torn down on a busy core) is only waited for: beside two busy loops it took 5.5 s.
    quitter.proc.wait(60)
    at_once = 5.0
    assert quitter.proc.returncode == 3
    [error] = quitter.events("error")
    assert error["t"] - killed_at < at_once, (error["t"] - killed_at, time.monotonic() - killed)
    assert "died" in error["message"] and "'syn'" in error["message"], error
    assert "gpudesk loader serve" in error["message"]
    assert error["since_last_s"] < at_once

    # With it, consumers wait for a new producer and finish their epochs exactly once.
    restarted = loaders.serve(**settings)
    for consumer, consumer_batch in ((odd, 5), (wholes, 8)):
        epochs_seen = consumer.finish(120)
        assert consumer.batches() > got[consumer]
        assert len(epochs_seen) == 2
        for e in epochs_seen:
            assert_exactly_once(e["ids"], size, f"epoch {e['epoch']} across the restart")
            assert e["data_ok"]
            assert e["sizes"] == expected_sizes(size, consumer_batch)
        assert not consumer.events("error")

    # A producer that comes back with other settings (here the seed) would give other samples
    # under the same batch numbers: a consumer must not resume its epoch from it.
    # It waits up to 90 s for one, as above.
    stranded = loaders.thread(resume_s=90)
    wait_for(lambda: stranded.batches() >= 3, 20, what="a consumer of the restarted producer")
    restarted.kill()
    other = loaders.serve(**settings, seed=1)
    wait_for(lambda: stranded.events("error"), 90, what="the consumer to give up")
    [error] = stranded.events("error")
    assert "other settings" in error["message"], error
    assert other.stop() == 0


def test_batches_are_views_of_the_shared_ring(loaders: Loaders) -> None:
    """Each batch is read in place through a (private, ring.py) mapping of the whole ring:
    its tensors are views of that mapping, not copies."""
    size = 100
    producer = loaders.serve(size=size, batch=8, shape=(3, 2))
    for batch_size in (None, 2):  # the producer's batch, and a fraction of it
        with SharedLoader("syn", batch_size=batch_size, with_ids=True, fallback=False) as loader:
            assert loader.mode == "shared"
            ids_seen = []
            for (features, labels), ids in loader:
                mapping = ids.untyped_storage()
                assert mapping.nbytes() == loader.ring.size  # the whole ring, mapped
                start, end = mapping.data_ptr(), mapping.data_ptr() + mapping.nbytes()
                for tensor in (features, labels, ids):
                    assert loader.ring.holds(tensor)
                    assert tensor.untyped_storage().data_ptr() == start
                    assert start <= tensor.data_ptr()
                    assert tensor.data_ptr() + tensor.numel() * tensor.element_size() <= end
                assert features.shape[1:] == (3, 2)
                assert len(ids) == (batch_size or 8) or ids_seen  # a short batch only at the end
                assert torch.equal(labels, ids)
                assert bool((features == ids.float().view(-1, 1, 1)).all())
                ids_seen.extend(ids.tolist())
            assert_exactly_once(ids_seen, size, f"batch size {batch_size}")
    assert producer.stop() == 0


@pytest.mark.slow(7)
def test_a_paused_consumer_holds_only_its_share_and_the_others_go_on(
    loaders: Loaders, tmp_path: Path
) -> None:
    """The ring's look-back is bounded: a consumer that stops reading keeps the few batches it
    was given and the few kept for it, no more, and the others do not wait for it. When it
    reads again it gets every batch of its epoch once: what the ring still has, and the rest
    made again for it."""
    size, slots = 800, 8  # 100 batches an epoch
    pause = tmp_path / "pause"
    producer = loaders.serve(size=size, batch=8, slots=slots)
    slow = loaders.thread(delay=0.01, pause_file=pause)
    fast = loaders.thread(epochs=2, delay=0.01)

    def both_streaming() -> bool:
        consumers = producer.status()["consumers"]
        return len(consumers) == 2 and all(c["delivered"] for c in consumers)

    wait_for(both_streaming, 10, what="both consumers to be reading")
    pause.touch()
    for e in fast.finish(30):  # two whole epochs while the slow one holds its batch
        assert_exactly_once(e["ids"], size)
        assert e["data_ok"]
    assert not slow.epochs()
    # the fast consumer has closed; the producer learns it from its socket, a moment later
    wait_for(
        lambda: len(producer.status()["consumers"]) == 1, 10, what="the fast consumer to leave"
    )
    status = producer.status()
    [held] = [c["held_slots"] for c in status["consumers"]]
    assert 1 <= held <= 3 and status["slots_used"] == held, status
    # What it holds and what is kept for it: a few batches whatever the others read meanwhile.
    assert status["slots"] <= 2 + 1 + 2 * 2 * 3, status

    pause.unlink()
    [epoch] = slow.finish(30)
    assert_exactly_once(epoch["ids"], size)
    assert epoch["data_ok"]
    # The ring did not keep all it missed: most of its epoch was made a second time.
    assert producer.status()["produced"] > 2 * size // 8 + size // 8 // 2
    assert producer.stop() == 0


def test_no_producer_and_bad_names_raise_loader_errors(home: Home) -> None:
    with pytest.raises(LoaderError, match="no shared loader 'nope' is running") as info:
        SharedLoader("nope")
    assert "gpudesk loader serve" in str(info.value)
    with pytest.raises(LoaderError, match="no shared loader"):
        SharedLoader("nope", factory=FACTORY, fallback=False)
    for bad in ("", "../up", "has space", "x" * 41, "-dash"):
        with pytest.raises(LoaderError, match="is not a loader name"):
            SharedLoader(bad)


def test_loader_commands_fail_cleanly(home: Home) -> None:
    def run(*args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [*GPUDESK, "loader", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    # A valid name whose socket path would be too long for a Unix socket in this home.
    assert len(str(home.loader_paths("n" * 40)[0])) > 107
    runs = {
        "module": run("serve", "x", "--dataset", "no.such.module:f"),
        "name": run("serve", "bad name", "--dataset", FACTORY),
        "long": run("serve", "n" * 40, "--dataset", FACTORY, "--idle-exit", "0.1"),
        "status": run("status", "--json"),
    }
    results = {}
    for what, proc in runs.items():
        out, error = proc.communicate(timeout=60)
        results[what] = (proc.returncode, out, error)
    for what, (code, _, error) in results.items():
        assert "Traceback" not in error, f"{what}: {error}"
        assert code == 0 or (error.startswith("error:") and "\n\n" not in error.strip()), error

    # Settings that cannot work: final (EXIT_FINAL, the engine does not start it again)
    code, _, error = results["module"]
    assert code == EXIT_FINAL and "no.such.module" in error
    code, _, error = results["name"]  # typed by a person: a usage error (the engine's: final)
    assert code == 2 and "not a loader name" in error
    code, _, error = results["long"]
    assert code == EXIT_FINAL and "cannot open its socket" in error, error
    assert "a dataset (loader) name of at most" in error and "GPUDESK_HOME" in error
    code, out, _ = results["status"]
    # Run beside them, it may already see the info files the final failures left, each with
    # the reason the command gave.
    left = {"x": results["module"][2], "n" * 40: results["long"][2]}
    assert code == 0, out
    for entry in json.loads(out)["loaders"]:
        reason = left[entry["name"]].removeprefix("error: ").strip()
        assert entry == {"name": entry["name"], "error": f"its producer failed: {reason}"}


def test_status_shows_consumers_and_a_second_producer_is_refused(
    loaders: Loaders, tmp_path: Path
) -> None:
    pause = tmp_path / "pause"
    pause.touch()
    size, batch, slots = 200, 8, 4
    per_epoch = size // batch
    # Two producers for one name started at once: one runs, the other says so and exits.
    pair = [
        loaders.serve(size=size, batch=batch, workers=2, slots=slots, wait=False) for _ in range(2)
    ]
    wait_for(
        lambda: any(p.proc.poll() is not None for p in pair),
        30,
        what="one of two producers for one name to give up",
    )
    [loser] = [p for p in pair if p.proc.poll() is not None]
    [producer] = [p for p in pair if p is not loser]
    assert loser.proc.returncode != 0
    refusal = loser.log.read_text()
    assert "already runs" in refusal and "Traceback" not in refusal, refusal
    producer.wait_ready()
    # And one started while one runs.
    second = subprocess.Popen(
        [*GPUDESK, "loader", "serve", "syn", "--dataset", FACTORY],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    loaders.procs.append(second)
    # It holds its third batch of its second epoch.
    consumer = loaders.thread(epochs=3, pause_file=pause, pause_from=per_epoch + 2)
    wait_for(lambda: consumer.batches() >= per_epoch + 3, 20, what="the consumer to pause")

    result = subprocess.run(
        [*GPUDESK, "loader", "status", "--json"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    [entry] = json.loads(result.stdout)["loaders"]
    assert entry["name"] == "syn" and entry["pid"] == producer.pid
    assert entry["slots"] >= slots and 1 <= entry["slots_used"] <= entry["slots"]
    assert entry["cpu_s"] > 0 and entry["produced"] > per_epoch
    assert entry["worker_processes"] == 2
    # Its decode workers run at the producer's own priority: lowered, they lost their share of
    # the cores to any other work on the machine (issue 16).
    workers = psutil.Process(producer.pid).children()
    assert len(workers) == 2
    assert {w.nice() for w in workers} == {psutil.Process(producer.pid).nice()}
    [seen] = entry["consumers"]
    assert seen["pid"] == consumer.pid
    assert seen["epoch"] == 1  # it is in its second epoch
    assert seen["position"][0] == 1 and seen["position"][1] >= 2
    assert seen["batches_per_s"] > 0 and seen["held_slots"] >= 1
    text = subprocess.run(
        [*GPUDESK, "loader", "status"], capture_output=True, text=True, timeout=30
    ).stdout
    assert (
        f"consumer pid {consumer.pid}" in text
        and f"slots {entry['slots_used']}/{entry['slots']}" in text
    )

    _, error = second.communicate(timeout=60)
    assert second.returncode != 0
    assert "already runs" in error and "Traceback" not in error, error
    assert producer.ready()  # the first one is untouched

    pause.unlink()
    epochs_seen = consumer.finish(30)
    assert len(epochs_seen) == 3
    for e in epochs_seen:
        assert_exactly_once(e["ids"], size)
    wait_for(lambda: producer.status()["consumers"] == [], 5, what="the consumer to leave")
    assert producer.status()["slots_used"] == 0
    assert producer.stop() == 0
    assert not producer.home.loader_paths("syn")[2].exists()  # a clean stop leaves nothing


def test_a_producer_serves_only_its_selection_every_epoch(loaders: Loaders, home: Home) -> None:
    """`--selection random-25`: each epoch is exactly the kept quarter, each sample once, in a
    fresh order; the kept samples are the cache entry's; a second producer reuses it."""
    from gpudesk.selection.apply import select
    from gpudesk.selection.cache import SelectionCache
    from gpudesk.workloads.synthetic import make_dataset

    size, batch = 200, 8
    loaders.serve(size=size, batch=batch, seed=5, selection="random-25")
    with SharedLoader("syn", with_ids=True, fallback=False, home=home.root) as loader:
        assert loader.dataset_len == 50
        epochs = []
        for _ in range(2):
            epochs.append([i for _, ids in loader for i in ids.tolist()])
    cache = SelectionCache(home.selection_dir)
    expected = select(make_dataset(size, (2,)), "random-25", cache, seed=5)
    assert expected.selection is not None and expected.selection.reused
    kept = expected.indices.tolist()
    for ids in epochs:
        assert sorted(ids) == kept
    assert epochs[0] != epochs[1]  # reshuffled each epoch
    (status,) = collect("syn", home=home)
    assert status["selection"]["preset"] == "random-25" and status["dataset_len"] == 50


def test_a_job_told_its_selection_reads_locally_what_its_producer_serves(
    loaders: Loaders, home: Home, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A Slurm job has no producer; `gpudesk run --on slurm` tells it its data selection
    (GPUDESK_SELECTION). Its fallback then reads, epoch by epoch and batch by batch, what a
    producer of that selection serves, from the entry that producer cached; a value that is not
    what `gpudesk run` writes fails the loader in one sentence; one about another dataset is
    not this loader's."""
    from gpudesk.core.datasets import DatasetSpec, selection_env
    from gpudesk.core.local_selection import ENV_SELECTION

    args = {"size": 200, "shape": [2], "cost_ms": 0.0}
    loaders.serve(size=200, batch=8, seed=5, selection="random-25")
    with SharedLoader("syn", with_ids=True, fallback=False, home=home.root) as loader:
        served = [[ids.tolist() for _, ids in loader] for _ in range(2)]
    spec = DatasetSpec("syn.random-25", FACTORY, args, batch_size=8, seed=5, selection="random-25")
    monkeypatch.setenv(ENV_SELECTION, selection_env("elsewhere", spec))
    capsys.readouterr()
    with SharedLoader("elsewhere", 8, seed=5, with_ids=True, home=home.root) as loader:
        assert loader.mode == "local" and len(loader) == 7  # 50 samples, 8 a batch
        local = [[ids.tolist() for _, ids in loader] for _ in range(2)]
    assert local == served
    said = capsys.readouterr().err
    assert (
        "the shared loader 'elsewhere' has no producer here: reading its data selection "
        "random-25 locally, 50 of 200 samples (from the selection cache)"
    ) in said, said
    # about another dataset: this loader reads its own factory's whole dataset
    kwargs = {"factory": FACTORY, "factory_kwargs": args, "with_ids": True, "home": home.root}
    with SharedLoader("another", 8, **kwargs) as loader:
        assert len(loader) == 25
    for value, why in (("{", "is not JSON"), ("[]", "is not an object of 'dataset' and 'served'")):
        monkeypatch.setenv(ENV_SELECTION, value)
        with pytest.raises(LoaderError) as refused:
            SharedLoader("elsewhere", 8, **kwargs)
        assert str(refused.value) == f"the shared loader 'elsewhere': {ENV_SELECTION} {why}"


def test_an_rs2_producer_serves_a_new_part_every_epoch(loaders: Loaders, home: Home) -> None:
    size = 120
    loaders.serve(size=size, batch=10, seed=1, selection="rs2-25")
    with SharedLoader("syn", with_ids=True, fallback=False, home=home.root) as loader:
        epochs = [sorted(i for _, ids in loader for i in ids.tolist()) for _ in range(4)]
    assert all(len(e) == 30 for e in epochs)
    assert len({i for e in epochs for i in e}) == size  # 4 epochs of 25 % cover everything


@pytest.mark.slow(13)
def test_consumers_wait_for_a_producer_preparing_its_selection(
    loaders: Loaders, home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    """A selection's pre-pass reads every sample before the producer serves (here 100 samples
    at 30 ms each, slept): the producer says it is preparing, and a consumer that finds it so
    waits for it instead of failing at once. It keeps 10 % of them: each sample served costs its
    30 ms again, and the pre-pass alone is the wait."""
    loaders.serve(size=100, batch=10, wait_ms=30, selection="random-10", wait=False)
    wait_for(
        lambda: (i := read_info(home.loader_paths("syn")[2])) and i.preparing,
        30,
        what="the producer to say it is preparing",
    )
    (status,) = collect("syn", home=home)
    assert status["preparing"] == "data selection random-10"
    with SharedLoader("syn", with_ids=True, fallback=False, home=home.root) as loader:
        ids = [i for _, batch_ids in loader for i in batch_ids.tolist()]
    assert len(ids) == len(set(ids)) == 10
    assert "is preparing data selection random-10" in capsys.readouterr().err


def test_a_batch_written_in_place_by_one_consumer_is_not_what_another_reads(
    loaders: Loaders,
) -> None:
    """Scripts change batches in place (`x.sub_(mean)`, augmentations): one job's change must
    not reach another job reading the same batch, nor the same job's next batch in that slot."""
    producer = loaders.serve(size=64, batch=8, shape=(3,), slots=4)
    with (
        SharedLoader("syn", with_ids=True, fallback=False) as mine,
        SharedLoader("syn", with_ids=True, fallback=False) as theirs,
    ):
        assert mine.mode == theirs.mode == "shared"
        seen = 0
        for ((features, labels), ids), ((their_features, _), their_ids) in zip(
            mine, theirs, strict=True
        ):
            assert torch.equal(ids, their_ids)
            assert bool((features == ids.float().view(-1, 1)).all()), "a slot's old copy"
            features.fill_(-1.0)  # in place, in this job only
            labels.zero_()
            assert bool((their_features == their_ids.float().view(-1, 1)).all())
            seen += len(ids)
        assert seen == 64
    assert producer.stop() == 0
