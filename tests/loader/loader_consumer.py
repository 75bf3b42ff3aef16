"""A consumer of a shared loader for tests/loader/test_loader.py, run as its own process.

    python loader_consumer.py NAME --out FILE [--batch-size B] [--epochs E] [--delay S]
                              [--resume-s S] [--pause-file PATH [--pause-from N]]
                              [--start-file PATH] [--wait-s S] [--hold-hello PATH]
                              [--fallback JSON]

It imports torch, waits (up to --wait-s) for the file --start-file if one is named (so a test can
start it ahead and have it connect at a chosen moment) and for the producer's info file, then
iterates `--epochs` epochs of `SharedLoader(NAME, with_ids=True)` over
`gpudesk.workloads.synthetic` data (with --fallback, its factory's keyword arguments: the local
fallback is allowed) and writes JSON lines to FILE (flushed as they happen):

    {"event": "started"}                                       torch imported
    {"event": "connecting", "t"}                               just before it connects
    {"event": "ready", "pid", "mode", "producer_batch"}
    {"event": "batch", "epoch", "index", "n", "t"}           one per batch, when it arrives
    {"event": "epoch", "epoch", "stream_epoch", "ids", "sizes", "batches", "views", "data_ok"}
    {"event": "done"}                                          and exit 0
    {"event": "error", "message", "since_last_s", "t"}         a LoaderError: exit 3

`stream_epoch` is the producer's epoch that this one follows (a consumer that joins late starts
in a later one; its order is that epoch's); `views` counts batches whose every tensor (features,
labels, ids) lies in the ring's shared memory; `data_ok` says every sample's features were
filled with its id and its label is its id.
While the file --pause-file exists, the consumer holds the batch it just got (from the
--pause-from'th batch on, counted over all epochs from 0). While the file --hold-hello exists,
the SharedLoader waits between finding its producer (its info file read, the producer alive)
and saying hello to it, where a slow start (`import torch`) holds a real one: a test makes the
producer stop in that moment (`{"event": "holding", "pid"}` says it found it). The test also
runs `consume` in threads of its own process, for consumers that need not be processes of their
own.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpudesk.loader.protocol import ProducerInfo

Write = Callable[..., None]
FACTORY = "gpudesk.workloads.synthetic:make_dataset"  # with --fallback, read locally


def consume(
    loader: Any,
    write: Write,
    epochs: int = 1,
    delay: float = 0.0,
    pause_file: str | None = None,
    pause_from: int = 0,
) -> None:
    """Iterate `epochs` epochs of a SharedLoader made with with_ids=True, reporting to `write`;
    a LoaderError is reported and raised."""
    import torch

    from gpudesk.loader import LoaderError

    last = time.monotonic()
    try:
        write(
            event="ready",
            pid=os.getpid(),
            mode=loader.mode,
            producer_batch=getattr(loader, "producer_batch", None),
        )
        seen = 0
        for epoch in range(epochs):
            stream_epoch = loader.epoch if loader.mode == "shared" else loader._local_epoch
            ids_seen: list[int] = []
            sizes: list[int] = []
            views = 0
            data_ok = True
            for index, ((features, labels), ids) in enumerate(loader):
                last = time.monotonic()
                write(event="batch", epoch=epoch, index=index, n=int(ids.shape[0]), t=time.time())
                expected = ids.to(torch.float32).view(-1, *([1] * (features.dim() - 1)))
                if not (torch.equal(labels, ids) and bool((features == expected).all())):
                    data_ok = False
                if loader.mode == "shared" and all(
                    loader.ring.holds(t) for t in (features, labels, ids)
                ):
                    views += 1
                ids_seen.extend(ids.tolist())
                sizes.append(int(ids.shape[0]))
                if pause_file and seen >= pause_from:
                    while os.path.exists(pause_file):
                        time.sleep(0.005)
                seen += 1
                if delay:
                    time.sleep(delay)
            write(
                event="epoch",
                epoch=epoch,
                stream_epoch=stream_epoch,
                ids=ids_seen,
                sizes=sizes,
                batches=len(sizes),
                views=views,
                data_ok=data_ok,
            )
        loader.close()
    except LoaderError as exc:
        write(event="error", message=str(exc), since_last_s=time.monotonic() - last, t=time.time())
        raise
    write(event="done")


def wait_for_producer(name: str, timeout: float) -> None:
    from gpudesk.loader.protocol import read_info, recorded_runs
    from gpudesk.paths import Home

    info_path = Home.from_env().loader_paths(name)[2]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = read_info(info_path)
        if info and recorded_runs(info):
            return
        time.sleep(0.01)


def hold_hello(loader_class: Any, path: str, write: Write) -> None:
    """Make `loader_class` wait while `path` exists before it connects (see --hold-hello)."""
    connect = loader_class._connect

    def held(self: Any, info: ProducerInfo, resume: bool) -> None:
        write(event="holding", pid=info.pid)
        while os.path.exists(path):
            time.sleep(0.005)
        connect(self, info, resume)

    loader_class._connect = held


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch-size", type=int, default=0, help="0: the producer's")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds per batch")
    parser.add_argument("--resume-s", type=float, default=None)
    parser.add_argument("--pause-file", default=None)
    parser.add_argument("--pause-from", type=int, default=0)
    parser.add_argument("--start-file", default=None)
    parser.add_argument("--wait-s", type=float, default=30.0)
    parser.add_argument("--hold-hello", default=None)
    parser.add_argument("--fallback", default=None, help="the factory's kwargs, JSON")
    args = parser.parse_args(argv)

    import torch  # noqa: F401 - before "started": what makes a consumer slow to start

    from gpudesk.loader import LoaderError, SharedLoader

    with open(args.out, "a") as out:

        def write(**fields: Any) -> None:
            out.write(json.dumps(fields) + "\n")
            out.flush()

        write(event="started")
        if args.hold_hello:
            hold_hello(SharedLoader, args.hold_hello, write)
        if args.start_file:
            deadline = time.monotonic() + args.wait_s
            while not os.path.exists(args.start_file) and time.monotonic() < deadline:
                time.sleep(0.005)
        wait_for_producer(args.name, args.wait_s)
        write(event="connecting", t=time.time())
        try:
            loader = SharedLoader(
                args.name,
                batch_size=args.batch_size or None,
                with_ids=True,
                fallback=args.fallback is not None,
                factory=FACTORY,
                factory_kwargs=json.loads(args.fallback or "{}"),
                resume_s=args.resume_s,
            )
        except LoaderError as exc:
            write(event="error", message=str(exc), since_last_s=None)
            return 3
        try:
            consume(loader, write, args.epochs, args.delay, args.pause_file, args.pause_from)
        except LoaderError:
            return 3  # consume() reported it
    return 0


if __name__ == "__main__":
    from gpudesk.quick_exit import run_and_leave  # torch not torn down: ~0.4 CPU-s

    run_and_leave(main)
