"""Shared data loader benchmark: N collocated consumers of one image dataset, three ways.

    python bench/loader.py [--consumers 1,2,4] [--workers 2] [--batch-size 32] [--batches 240]
                           [--size 1024] [--image-px 96] [--json] [--skip-tensorsocket]
                           [--repeats 1] [--ts-producer-batch P] [--timeout 180] [--json-out F]
                           [--consumer-work mean|touch] [--configs independent,gpudesk,...]
                           [--device cpu|cuda] [--no-pin-memory] [--no-join]

Every consumer reads `--batches` batches of `gpudesk.workloads.images:make_dataset(size,
image_px)` (a JPEG decode + augmentation per sample, ~2 ms of CPU), does `images.float().mean()`
with each one (so the loader, not compute, sets the pace) and runs concurrently with the others.
For each N in `--consumers`, one configuration at a time, each in fresh processes:

- independent:  N consumers, each with its own DataLoader(batch_size, shuffle=True,
                num_workers=W, persistent_workers=True);
- gpudesk:      one `gpudesk loader serve` producer (W workers, same batch size) and N
                `SharedLoader` consumers;
- tensorsocket: one TensorSocket 0.0.5 `TensorProducer` over the same DataLoader (its default
                producer_batch_size, 8, unless `--ts-producer-batch`; 0.0.5 crashes with 1)
                and N `TensorConsumer`s, when it imports (`pip install --no-deps
                tensorsocket==0.0.5 tornado`: it needs tornado), unless `--skip-tensorsocket`.
                Its consumers keep draining after their last counted batch until all are done:
                its producer waits 10 s for the acknowledgement of a consumer that left.

`--configs` chooses among them (default all three; `--skip-tensorsocket` still drops it).

`--device cuda`: every consumer uses its batches on `cuda:0`, as a training script does: each
tensor of the batch goes `.to("cuda:0", non_blocking=True)`, the work (`--consumer-work`) runs
on the GPU tensor, and the consumer waits for the GPU (`torch.cuda.synchronize`) before its next
batch, so a step's time holds the copy and the work. Pinning: the independent DataLoaders get
`pin_memory=True`, as GPU training scripts (torch's ImageNet example among them) set them up;
their pin-memory thread's CPU is in the CPU-s, and its copy in "bytes moved" (`pinned_bytes`).
`--no-pin-memory` turns that off. `SharedLoader` has no such option: its batches are views of
the producer's shared memory, not page-locked, so their copy to the GPU goes from pageable
memory (CUDA stages it, and `.to(non_blocking=True)` returns once the batch is staged), the
same as an unpinned DataLoader's. Each consumer makes its CUDA context before it reports ready
(start-up, left out of CPU-s like the imports). TensorSocket is not run with cuda (it would
hand GPU batches from its producer over CUDA IPC, which this benchmark's producer does not
do). Without a GPU torch can use, `--device cuda` stops with one line and exit status 2 before
starting anything.

The dataset cache is built once before anything is timed. Every process (producer included)
first imports what it needs, reports its own CPU time so far, and waits; all start together on
one signal (gpudesk consumers then wait for the producer's info file, as a job started beside
it would). Consumers and the TensorSocket producer run torch with one thread (the gpudesk
producer sets that itself). `--repeats R` runs everything R times, interleaved, and the table
shows per-figure medians (all runs are in the JSON). The GPUDESK_HOME is a temporary folder.

Measured, per configuration:

- CPU-s: user + system time of every process: consumers, producer, and every DataLoader worker.
  The launcher's `getrusage(RUSAGE_CHILDREN)` before and after the configuration (every process
  is its child or was reaped by one: DataLoader workers are joined by their parent), minus each
  process's own CPU at the moment it was ready (starting Python and importing torch, which a
  training script pays with any loader). "all" keeps that startup in. A psutil sampler
  (every 0.2 s, max per pid over the run) cross-checks it; it can only read less.
- batches/s per consumer: (batches - 1) / (its last batch's time - its first batch's time),
  mean and min over consumers; wall: signal to the last consumer's last batch (so it
  includes building the loaders: the producer's dataset, workers and first batch).
- bytes moved per delivered batch, as a multiple of the batch's own bytes (images + labels):
  every batch a DataLoader worker collated (into shared memory, once) and handed to its
  parent, counted in that parent by wrapping the DataLoader iterator's `__next__`; plus for
  gpudesk the producer's copies into the ring (`bytes_written` from `loader status`, sample
  ids included); plus for
  TensorSocket what its producer copies (`cat` of the loader batches into a producer batch,
  the copy into its tensor pool, `share_memory_` moves), the pickled payloads it sends, and
  the pickled bytes each consumer receives and unpickles (a lower bound: the socket copies in
  the kernel are not counted). Divided by the batches consumers received.
  `status_x` is gpudesk's own figure: (batch bytes x produced + bytes_written) / deliveries.
- hand-off latency: consumer receive time - the producer's `time.time()` when it sent the
  batch message, where the message carries one (`"t"` in gpudesk's batch message; for
  TensorSocket the benchmark stamps each payload just before it is pickled and reads it after
  it is unpickled in the consumer's receive thread: one figure per payload, which holds up to
  8 batches). Where it is not carried: "n/a". For gpudesk it counts the batches a consumer was
  waiting for (its socket had nothing when `next()` began, so the first batch message it then
  decodes arrived while it waited); a batch that was already in its socket measures how long
  the consumer took to come back for it, not the hand-off, and goes to `queued_ms` in the
  JSON. TensorSocket's receive thread is always waiting, so all of its payloads count.
- next() ready: the wall time of each consumer `next()` that found its batch already waiting
  (gpudesk: a message was readable on its socket; TensorSocket: its receive buffer was not
  empty; DataLoader: the next result was cached or its result pipe was readable, a heuristic),
  i.e. the consumer's own cost of receiving and mapping (or unpickling) a batch.
- CPU-s per batch: CPU-s / the batches delivered to consumers (the table shows ms).
- with `--device cuda`, per consumer, then the mean over the configuration's consumers:
  host-to-device bytes per batch (the nbytes of every tensor `.to()` copied to the GPU);
  GPU memory at the end of its run (the CPU that reading it takes is left out of CPU-s):
  `torch.cuda.max_memory_allocated()`,
  `torch.cuda.memory_reserved()`, and what the driver counts for its pid (NVML's running
  compute processes, so the CUDA context included; null where NVML does not list it, as from
  another PID namespace). All of these are null with `--device cpu` (H2D bytes: 0).

The JSON records `device`, `torch` (its version) and `gpu` (torch.cuda.get_device_name; null
on cpu).

Targets at N = 4: gpudesk CPU-s <= 0.30 x independent; gpudesk batches/s per consumer (mean) >=
independent's; bytes moved per delivered batch <= 1.05 x independent's; hand-off p50 <= 1 ms
(the "t" latency when the producer sends one, else next() ready).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import psutil

CONFIGS = ("independent", "gpudesk", "tensorsocket")
LOADER_NAME = "bench"
SEED = 0
SLOTS = 16
READY_TIMEOUT_S = 120.0
SAMPLE_EVERY_S = 0.2


# ============================================================================ helpers (all)
def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def wait_go() -> float:
    """Block until the launcher writes "go" on stdin; the time it came."""
    pending = b""
    while b"go" not in pending:
        chunk = os.read(0, 4096)
        if not chunk:
            os._exit(0)  # the launcher went away
        pending += chunk
    return time.time()


def tensor_bytes(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(tensor_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    return 0


# ============================================================================ the device side
# What a training script does with each batch: move its tensors to the device, use them there.
GPU_FIELDS = ("gpu_driver_bytes", "gpu_torch_max_allocated_bytes", "gpu_torch_reserved_bytes")
# ... and, per configuration, their means over the consumers in MiB
GPU_MIB_KEYS = ("gpu_mib_driver", "gpu_mib_torch_max_allocated", "gpu_mib_torch_reserved")


def to_device(batch: Any, device: str) -> tuple[Any, int]:
    """`batch` with every tensor moved by `.to(device, non_blocking=True)`, as a training script
    moves it, and the bytes that crossed to another device (a tensor already there is not
    copied, so is not counted: 0 on "cpu")."""
    import torch

    target = torch.device(device)
    moved = 0

    def move(value: Any) -> Any:
        nonlocal moved
        if isinstance(value, torch.Tensor):
            if value.device != target:
                moved += value.nbytes
            return value.to(target, non_blocking=True)
        if isinstance(value, (tuple, list)):
            return type(value)(move(v) for v in value)
        if isinstance(value, dict):
            return {k: move(v) for k, v in value.items()}
        return value

    return move(batch), moved


def consume(batch: Any, device: str, work: str) -> tuple[float, int]:
    """One consumer step: the batch moved to `device`, its work done there ("mean" stands for a
    training step's use of the images; "touch" reads one value, to see the hand-off without the
    consumers' own work competing for the cores), and the device waited for, so the step's time
    includes the copy and the work. The work's value and the bytes moved."""
    import torch

    on_device, moved = to_device(batch, device)
    images = on_device[0]
    value = images.float().mean() if work == "mean" else images.reshape(-1)[0]
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return float(value), moved


def driver_gpu_bytes(pid: int, nvml: Any = None) -> int | None:
    """The GPU memory NVML counts for process `pid` (over every GPU), in bytes; None where NVML
    cannot be read, does not list the process (another PID namespace, MPS) or cannot tell its
    memory. `nvml`: a pynvml-like module (tests pass a fake); by default pynvml."""
    from gpudesk.hw.telemetry.nvml import NvmlBackend

    backend = NvmlBackend(module=nvml)
    try:
        backend.open()
        used = [
            proc.used_memory_mib
            for gpu in backend.read().gpus
            for proc in gpu.processes
            if proc.pid == pid
        ]
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            backend.close()
    if not used or any(mib is None for mib in used):
        return None
    return round(sum(mib for mib in used if mib is not None) * 2**20)


def gpu_memory(device: str, nvml: Any = None) -> dict[str, int | None]:
    """This process's GPU memory now, for GPU_FIELDS: the driver's figure (CUDA context
    included) and torch's caching allocator's peak allocated and reserved bytes. All None when
    `device` is not a CUDA device."""
    import torch

    if torch.device(device).type != "cuda":
        return dict.fromkeys(GPU_FIELDS)
    return {
        "gpu_driver_bytes": driver_gpu_bytes(os.getpid(), nvml),
        "gpu_torch_max_allocated_bytes": torch.cuda.max_memory_allocated(device),
        "gpu_torch_reserved_bytes": torch.cuda.memory_reserved(device),
    }


# ============================================================================ roles
# Each process of a configuration is this file run with --role: it imports, writes
# `<name>.ready.json` with its CPU so far, then (consumers) waits for "go" on stdin.


class Collated:
    """Counts the batches DataLoader workers collated and handed to this process."""

    batches = 0
    bytes = 0

    @classmethod
    def install(cls) -> None:
        from torch.utils.data import dataloader

        base = dataloader._BaseDataLoaderIter
        original = base.__next__

        def counted(self: Any) -> Any:
            data = original(self)
            cls.batches += 1
            cls.bytes += tensor_bytes(data)
            return data

        base.__next__ = counted  # type: ignore[method-assign]

    @classmethod
    def as_dict(cls) -> dict[str, int]:
        return {"collated_batches": cls.batches, "collated_bytes": cls.bytes}


def role_consumer(spec: dict[str, Any]) -> None:
    import torch

    kind = spec["config"]
    out = Path(spec["dir"])
    name = spec["name"]
    stats: dict[str, Any] = {
        "latency_ms": [],
        "queued_ms": [],
        "no_t": 0,
        "recv_bytes": 0,
        "deliveries": 0,
        "awaiting": False,
    }
    lock = threading.Lock()
    if kind == "independent":
        from torch.utils.data import DataLoader

        from gpudesk.workloads.images import make_dataset
    elif kind == "gpudesk":
        import gpudesk.loader.consumer as shared
        from gpudesk.loader import SharedLoader

        decode = shared.decode

        def timed_decode(raw: bytes) -> dict[str, Any]:
            now = time.time()
            message = decode(raw)
            if message.get("type") == "batch":
                if isinstance(message.get("t"), (int, float)):
                    # The first batch message a blocked next() gets is a hand-off; one that
                    # was already waiting in the socket measures the consumer's own pace.
                    bucket = "latency_ms" if stats["awaiting"] else "queued_ms"
                    stats[bucket].append((now - message["t"]) * 1000)
                    stats["awaiting"] = False
                else:
                    stats["no_t"] += 1
            return message

        shared.decode = timed_decode
    else:
        import pickle

        import zmq
        from tensorsocket import TensorConsumer

        def recv_pyobj(self: Any, flags: int = 0) -> Any:
            raw = self.recv(flags)
            obj = pickle.loads(raw)
            now = time.time()
            stamp = obj.pop("__bench_t", None) if isinstance(obj, dict) else None
            with lock:
                stats["recv_bytes"] += len(raw)
                if stamp is not None:
                    stats["latency_ms"].append((now - stamp) * 1000)
            return obj

        zmq.Socket.recv_pyobj = recv_pyobj  # type: ignore[method-assign]
    Collated.install()
    torch.set_num_threads(1)
    go = threading.Event()
    result: dict[str, Any] = {}

    def final() -> None:
        with lock:
            data = {
                **result,
                "deliveries": stats["deliveries"],
                "recv_bytes": stats["recv_bytes"],
                "cpu_end_s": own_cpu(),
                **Collated.as_dict(),
            }
        write_json(out / f"{name}.final.json", data)

    def stdin_reader() -> None:
        # os.read, not sys.stdin: a thread blocked in sys.stdin holds its lock, and a forked
        # DataLoader worker, which closes sys.stdin first thing, would wait for it forever.
        pending = b""
        while chunk := os.read(0, 4096):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip() == b"go":
                    go.set()
                elif line.strip() == b"quit":
                    final()
                    os._exit(0)
        if not go.is_set() or kind == "tensorsocket":
            os._exit(0)  # the launcher went away

    threading.Thread(target=stdin_reader, daemon=True).start()
    device = spec.get("device", "cpu")
    if device != "cpu":
        # The CUDA context, as a training script makes it (its model) before its first batch:
        # start-up, like the imports, left out of the loader's CPU-s.
        torch.zeros(1, device=device)
        torch.cuda.synchronize(device)
    write_json(out / f"{name}.ready.json", {"pid": os.getpid(), "cpu_s": own_cpu()})
    go.wait()
    t_go = time.time()

    if kind == "independent":
        dataset = make_dataset(
            size=spec["size"], image_px=spec["image_px"], seed=SEED, cache_dir=spec["cache"]
        )
        workers = spec["workers"]
        loader: Any = DataLoader(
            dataset,
            batch_size=spec["batch_size"],
            shuffle=True,
            num_workers=workers,
            persistent_workers=workers > 0,
            pin_memory=spec.get("pin_memory", False),
        )
        torch.manual_seed(SEED + spec["index"])

        def new_epoch() -> Any:
            return iter(loader)

        def ready(it: Any) -> bool | None:
            try:
                cached = len(it._task_info.get(it._rcvd_idx, ())) == 2
                return cached or bool(it._data_queue._reader.poll(0))
            except Exception:
                return None
    elif kind == "gpudesk":
        # The producer starts at the same signal: wait for it as a job started beside it would.
        from gpudesk.loader.protocol import read_info, recorded_runs
        from gpudesk.paths import Home

        info_path = Home.from_env().loader_paths(spec["loader_name"])[2]
        while not ((info := read_info(info_path)) and recorded_runs(info)):
            time.sleep(0.01)
        loader = SharedLoader(spec["loader_name"], batch_size=spec["batch_size"])

        def new_epoch() -> Any:
            return iter(loader)

        def ready(it: Any) -> bool | None:
            sock = getattr(loader, "_socket", None)
            return None if sock is None else bool(sock.poll(0))
    else:
        ports = spec["ports"]
        loader = TensorConsumer(
            port=ports[0],
            ack_port=ports[1],
            heart_ports=(ports[2], ports[3]),
            batch_size=spec["batch_size"],
        )

        def new_epoch() -> Any:
            return iter(loader)

        def ready(it: Any) -> bool | None:
            return loader.buffer.qsize() > 0

    times: list[float] = []
    next_ready_ms: list[float] = []
    next_all_ms: list[float] = []
    batch_bytes = 0
    views = 0
    checksum = 0.0
    h2d_bytes = 0
    it = new_epoch()
    while len(times) < spec["batches"]:
        waiting = ready(it)
        stats["awaiting"] = waiting is False
        start = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            it = new_epoch()
            continue
        took = (time.perf_counter() - start) * 1000
        images = batch[0]
        value, moved = consume(batch, device, spec.get("work", "mean"))
        checksum += value
        h2d_bytes += moved
        times.append(time.time())
        with lock:
            stats["deliveries"] += 1
        next_all_ms.append(took)
        if len(times) == spec.get("mark"):  # the launcher starts a joiner now
            write_json(out / f"{name}.mark.json", {"t": time.time()})
        if spec.get("sleep_ms"):  # a slow training step
            time.sleep(spec["sleep_ms"] / 1000)
        if waiting:
            next_ready_ms.append(took)
        if not batch_bytes:
            batch_bytes = tensor_bytes(tuple(batch[:2]))
        if kind == "gpudesk":
            views += loader.ring.holds(images)
    t_done = time.time()
    probe_start = own_cpu()
    memory = gpu_memory(device)
    result.update(
        {
            **memory,
            # reading it (NVML's start included) is the benchmark's, not the loader's, CPU
            "probe_cpu_s": own_cpu() - probe_start,
            "h2d_bytes": h2d_bytes,
            "pid": os.getpid(),
            "t_go": t_go,
            "t_first": times[0],
            "t_last": times[-1],
            "t_done": t_done,
            "batches": len(times),
            "batch_bytes": batch_bytes,
            "next_ready_ms": next_ready_ms,
            "next_all_ms": next_all_ms,
            "times": times if spec.get("mark") or spec.get("sleep_ms") else [],
            "ready_known": waiting is not None,
            "latency_ms": list(stats["latency_ms"]),
            "queued_ms": list(stats["queued_ms"]),
            "no_t": stats["no_t"],
            "views": views,
            "checksum": checksum,
        }
    )
    if kind == "tensorsocket":
        # Keep draining until every consumer is done: TensorSocket waits up to 10 s for the
        # acknowledgement of a consumer that left, which would stall the others.
        write_json(out / f"{name}.result.json", {**result, "deliveries": stats["deliveries"]})
        while True:
            try:
                next(it)
                with lock:
                    stats["deliveries"] += 1
            except StopIteration:
                it = new_epoch()
    if kind == "gpudesk":
        it.close()
        loader.close()
    else:
        it._shutdown_workers()  # joins them, so their CPU is in this RUSAGE_CHILDREN
    result["children_cpu_s"] = children_cpu()
    write_json(out / f"{name}.result.json", {**result, "deliveries": stats["deliveries"]})
    final()
    sys.stdout.flush()
    os._exit(0)


def role_gpudesk_producer(spec: dict[str, Any]) -> None:
    """`gpudesk loader serve`, in this process, after the imports it makes anyway."""
    import torch  # noqa: F401
    import typer  # noqa: F401
    import zmq  # noqa: F401

    import gpudesk.cli.main
    import gpudesk.loader.producer
    import gpudesk.workloads.images

    Collated.install()
    out = Path(spec["dir"])
    write_json(out / "producer.ready.json", {"pid": os.getpid(), "cpu_s": own_cpu()})
    wait_go()
    argv = [
        "loader",
        "serve",
        spec["loader_name"],
        "--dataset",
        "gpudesk.workloads.images:make_dataset",
        "--arg",
        f"size={spec['size']}",
        "--arg",
        f"image_px={spec['image_px']}",
        "--arg",
        f"cache_dir={spec['cache']}",
        "--batch-size",
        str(spec["batch_size"]),
        "--workers",
        str(spec["workers"]),
        "--seed",
        str(SEED),
        "--slots",
        str(SLOTS),
        "--idle-exit",
        "60",
    ]
    code: Any = 0
    try:
        gpudesk.cli.main.main(argv)
    except SystemExit as exc:
        code = exc.code
    finally:
        write_json(
            out / "producer.final.json",
            {"code": code, "cpu_end_s": own_cpu(), **Collated.as_dict()},
        )


class _Stop(Exception):
    pass


def role_ts_producer(spec: dict[str, Any]) -> None:
    import multiprocessing
    import pickle

    import tensorsocket.producer as tsp
    import torch
    import zmq
    from torch.utils.data import DataLoader

    from gpudesk.workloads.images import make_dataset

    out = Path(spec["dir"])
    counts = {
        "cat_bytes": 0,
        "pool_copy_bytes": 0,
        "share_bytes": 0,
        "sent_bytes": 0,
        "payloads": 0,
    }
    stopped: dict[str, str] = {}  # "error": why the producer stopped, when it failed
    collate = tsp.collate

    def counted_collate(batches: list) -> tuple:
        data = collate(batches)
        counts["cat_bytes"] += tensor_bytes(data)
        return data

    tsp.collate = counted_collate
    overwrite = tsp.TensorPool._overwrite_data

    def counted_overwrite(self: Any, destination: tuple, source: tuple) -> tuple:
        counts["pool_copy_bytes"] += tensor_bytes(source)
        return overwrite(self, destination, source)

    tsp.TensorPool._overwrite_data = counted_overwrite
    from_tensor = tsp.TensorPayload._from_tensor

    def counted_from_tensor(self: Any, tensor: Any) -> dict:
        storage = tensor.untyped_storage()
        if not tensor.is_cuda and not storage.is_shared():
            counts["share_bytes"] += storage.nbytes()  # share_memory_() copies it
        return from_tensor(self, tensor)

    tsp.TensorPayload._from_tensor = counted_from_tensor

    def send_pyobj(
        self: Any, obj: Any, flags: int = 0, protocol: int = pickle.DEFAULT_PROTOCOL, **kwargs: Any
    ) -> Any:
        if isinstance(obj, dict):
            obj["__bench_t"] = time.time()
        raw = pickle.dumps(obj, protocol)
        counts["sent_bytes"] += len(raw)
        counts["payloads"] += 1
        return self.send(raw, flags=flags, **kwargs)

    zmq.Socket.send_pyobj = send_pyobj  # type: ignore[method-assign]
    Collated.install()
    torch.set_num_threads(1)
    write_json(out / "producer.ready.json", {"pid": os.getpid(), "cpu_s": own_cpu()})
    wait_go()

    def stop(_signum: int, _frame: object) -> None:
        raise _Stop

    signal.signal(signal.SIGTERM, stop)
    dataset = make_dataset(
        size=spec["size"], image_px=spec["image_px"], seed=SEED, cache_dir=spec["cache"]
    )
    workers = spec["workers"]
    torch.manual_seed(SEED)
    loader = DataLoader(
        dataset,
        batch_size=spec["batch_size"],
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
    )
    ports = spec["ports"]
    kwargs: dict[str, Any] = {}
    if spec.get("ts_producer_batch"):
        kwargs["producer_batch_size"] = spec["ts_producer_batch"]
    producer: Any = None
    try:
        producer = tsp.TensorProducer(
            loader, port=ports[0], ack_port=ports[1], heart_ports=(ports[2], ports[3]), **kwargs
        )
        write_json(
            out / "producer.serving.json", {"producer_batch_size": producer.producer_batch_size}
        )
        while True:
            for _ in producer:
                pass
    except _Stop:
        pass
    except Exception as exc:
        traceback.print_exc()
        stopped["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with contextlib.suppress(Exception):
            producer.data_loader_iter._shutdown_workers()
        for child in multiprocessing.active_children():
            child.join(5)
        write_json(
            out / "producer.final.json",
            {"cpu_end_s": own_cpu(), **counts, **stopped, **Collated.as_dict()},
        )
        sys.stdout.flush()
        os._exit(0)


# ============================================================================ launcher
class Sampler(threading.Thread):
    """Every process below the launcher, sampled for CPU time; the max per process is kept."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.cpu: dict[tuple[int, float], float] = {}
        self.procs: dict[tuple[int, float], psutil.Process] = {}
        self.stopping = threading.Event()

    def sample(self) -> None:
        for proc in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                key = (proc.pid, proc.create_time())
                times = proc.cpu_times()
                self.cpu[key] = max(self.cpu.get(key, 0.0), times.user + times.system)
                self.procs[key] = proc

    def run(self) -> None:
        while not self.stopping.wait(SAMPLE_EVERY_S):
            self.sample()

    def stop(self) -> None:
        self.stopping.set()
        self.join()

    def alive(self) -> list[psutil.Process]:
        left = []
        for (_pid, created), proc in self.procs.items():
            with contextlib.suppress(psutil.Error):
                if (
                    proc.is_running()
                    and abs(proc.create_time() - created) < 0.01
                    and proc.status() != psutil.STATUS_ZOMBIE
                ):
                    left.append(proc)
        return left


def free_ports(count: int) -> list[int]:
    socks = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        socks.append(sock)
    ports = [s.getsockname()[1] for s in socks]
    for sock in socks:
        sock.close()
    return ports


def wait_for(
    check: Any, timeout: float, what: str, procs: dict[str, subprocess.Popen], finished: Any = None
) -> None:
    """Poll `check` until true; a process that exits first (without being `finished`) is an
    error."""
    deadline = time.monotonic() + timeout
    while not check():
        for name, proc in procs.items():
            if proc.poll() is not None and not (finished and finished(name)) and not check():
                raise RuntimeError(f"{name} exited with {proc.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def log_tail(path: Path, lines: int = 8) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def run_config(
    kind: str,
    n: int,
    args: argparse.Namespace,
    root: Path,
    home: Path,
    cache: Path,
    repeat: int = 0,
    join: bool = False,
) -> dict[str, Any]:
    """One configuration with N consumers; `join`: the join scenario (N = 2: a fast consumer,
    and a slow one that starts when the fast one is half an epoch in)."""
    from gpudesk.loader.status import collect
    from gpudesk.paths import Home

    folder = root / f"{kind}-{n}-{repeat}{'-join' if join else ''}"
    folder.mkdir()
    env = {**os.environ, "GPUDESK_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    spec = {
        "config": kind,
        "dir": str(folder),
        "size": args.size,
        "image_px": args.image_px,
        "batch_size": args.batch_size,
        "workers": args.workers,
        "batches": args.batches,
        "work": args.consumer_work,
        "cache": str(cache),
        "loader_name": f"{LOADER_NAME}-{n}-{repeat}{'-join' if join else ''}",
        "ts_producer_batch": args.ts_producer_batch,
        "device": args.device,
        "pin_memory": pins_memory(kind, args),
    }
    if kind == "tensorsocket":
        spec["ports"] = free_ports(4)
    procs: dict[str, subprocess.Popen] = {}
    logs: dict[str, Path] = {}

    def launch(role: str, name: str, **extra: Any) -> None:
        logs[name] = folder / f"{name}.log"
        with open(logs[name], "wb") as log:
            procs[name] = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--role",
                    role,
                    "--spec",
                    json.dumps({**spec, "name": name, **extra}),
                ],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=folder,
            )

    sampler = Sampler()
    before = children_cpu()
    t_launch = time.time()
    sampler.start()
    entry: dict[str, Any] = {
        "n": n,
        "config": kind,
        "repeat": repeat,
        "scenario": "join" if join else "steady",
        "device": args.device,
        "pin_memory": spec["pin_memory"],
    }
    status: dict[str, Any] = {}
    consumers = [f"consumer-{i}" for i in range(n)]
    try:
        if kind == "gpudesk":
            launch("gpudesk-producer", "producer")
        elif kind == "tensorsocket":
            launch("ts-producer", "producer")
        per_epoch = -(-args.size // args.batch_size)
        for index, name in enumerate(consumers):
            extra: dict[str, Any] = {}
            if join and index == 0:
                extra = {"mark": per_epoch + per_epoch // 2}  # mid-epoch, in its second epoch
            elif join:
                extra = {"sleep_ms": args.join_step_ms, "batches": args.join_batches}
            launch("consumer", name, index=index, **extra)
        wait_for(
            lambda: all((folder / f"{p}.ready.json").exists() for p in procs),
            READY_TIMEOUT_S,
            "every process to be ready",
            procs,
        )
        t_go = time.time()
        later = consumers[1:] if join else []

        def go(name: str) -> None:
            stdin = procs[name].stdin
            assert stdin is not None
            stdin.write(b"go\n")
            stdin.flush()

        for name in procs:  # producer and consumers start together
            if name not in later:
                go(name)
        if later:  # the joiner: once the first consumer is half an epoch in
            wait_for(
                lambda: (folder / f"{consumers[0]}.mark.json").exists(),
                args.timeout,
                "the first consumer to be mid-epoch",
                procs,
            )
            for name in later:
                go(name)
        wait_for(
            lambda: all((folder / f"{c}.result.json").exists() for c in consumers),
            args.timeout,
            "every consumer to finish",
            procs,
            finished=lambda c: (folder / f"{c}.result.json").exists(),
        )
        if kind == "tensorsocket":
            for name in consumers:
                stdin = procs[name].stdin
                if stdin is not None:  # started with stdin=PIPE
                    with contextlib.suppress(OSError):
                        stdin.write(b"quit\n")
                        stdin.flush()
        for name in consumers:
            procs[name].wait(timeout=30)
        if kind == "gpudesk":
            found = collect(spec["loader_name"], Home(home))
            status = found[0] if found else {}
        entry["ok"] = True
    except Exception as exc:
        entry["ok"] = False
        entry["error"] = f"{type(exc).__name__}: {exc}"
        entry["logs"] = {name: log_tail(path) for name, path in logs.items()}
        final = read_json(folder / "producer.final.json") or {}
        if final.get("error"):
            entry["error"] += f" (producer: {final['error']})"
        t_go = time.time()
    finally:
        if "producer" in procs and procs["producer"].poll() is None:
            procs["producer"].send_signal(signal.SIGTERM)
            try:
                procs["producer"].wait(timeout=20)
            except subprocess.TimeoutExpired:
                entry["producer_killed"] = True
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdin:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
        sampler.sample()
        sampler.stop()
        leaked = sampler.alive()
        for proc in leaked:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        entry["leaked_processes"] = len(leaked)
    after = children_cpu()
    if not entry["ok"]:
        return entry

    ready = {name: read_json(folder / f"{name}.ready.json") or {} for name in procs}
    results = [read_json(folder / f"{c}.result.json") or {} for c in consumers]
    finals = {name: read_json(folder / f"{name}.final.json") or {} for name in procs}
    startup_cpu = sum(r.get("cpu_s", 0.0) for r in ready.values())
    probe_cpu = sum(r.get("probe_cpu_s", 0.0) for r in results)
    cpu_all = after - before
    entry["cpu_s"] = round(cpu_all - startup_cpu - probe_cpu, 2)
    entry["cpu_s_all"] = round(cpu_all, 2)
    entry["cpu_s_psutil"] = round(sum(sampler.cpu.values()) - startup_cpu - probe_cpu, 2)
    entry["processes"] = len(sampler.cpu)
    if "producer" in procs:
        entry["producer_startup_cpu_s"] = round(ready["producer"].get("cpu_s", 0.0), 2)
    rates = [(r["batches"] - 1) / (r["t_last"] - r["t_first"]) for r in results]
    entry["batches_per_s_mean"] = round(statistics.fmean(rates), 2)
    entry["batches_per_s_min"] = round(min(rates), 2)
    entry["wall_s"] = round(max(r["t_last"] for r in results) - t_go, 2)
    entry["startup_s"] = round(t_go - t_launch, 2)
    entry["first_batch_s"] = round(max(r["t_first"] for r in results) - t_go, 2)

    batch_bytes = results[0]["batch_bytes"]
    deliveries = sum(
        f.get("deliveries", 0) for name, f in finals.items() if name.startswith("consumer")
    )
    collated = sum(f.get("collated_bytes", 0) for f in finals.values())
    moved = collated
    detail: dict[str, Any] = {"collated_bytes": collated}
    if spec["pin_memory"]:
        # the consumers' pin-memory threads copy every batch their workers collated once more
        pinned = sum(
            f.get("collated_bytes", 0) for name, f in finals.items() if name.startswith("consumer")
        )
        moved += pinned
        detail["pinned_bytes"] = pinned
    if kind == "gpudesk":
        moved += status.get("bytes_written", 0)
        detail["bytes_written"] = status.get("bytes_written")
        detail["produced"] = status.get("produced")
        detail["makeups_produced"] = status.get("makeups_produced")
        detail["collated_batches"] = finals["producer"].get("collated_batches")
        detail["status_cpu_s"] = status.get("cpu_s")
        detail["views"] = sum(r["views"] for r in results)
        if status.get("produced") is not None:
            entry["status_x"] = round(
                (batch_bytes * status["produced"] + status.get("bytes_written", 0))
                / deliveries
                / batch_bytes,
                3,
            )
    elif kind == "tensorsocket":
        producer = finals["producer"]
        received = sum(f.get("recv_bytes", 0) for f in finals.values())
        for key in ("cat_bytes", "pool_copy_bytes", "share_bytes", "sent_bytes"):
            moved += producer.get(key, 0)
            detail[key] = producer.get(key)
        moved += received
        detail["received_bytes"] = received
        detail["payloads"] = producer.get("payloads")
        detail["collated_batches"] = producer.get("collated_batches")
        serving = read_json(folder / "producer.serving.json") or {}
        detail["producer_batch_size"] = serving.get("producer_batch_size")
    entry["deliveries"] = deliveries
    entry["cpu_s_per_batch"] = round(entry["cpu_s"] / deliveries, 5)
    entry.update(device_figures(results))
    entry["per_consumer"] = [
        {key: r[key] for key in ("pid", "batches", "h2d_bytes", *GPU_FIELDS)} for r in results
    ]
    entry["batch_bytes"] = batch_bytes
    entry["moved_x"] = round(moved / deliveries / batch_bytes, 3)
    entry["bytes"] = detail

    latency = [x for r in results for x in r["latency_ms"]]
    queued = [x for r in results for x in r.get("queued_ms", [])]
    if queued:
        entry["queued_ms"] = {
            "p50": round(percentile(queued, 50), 3),
            "p99": round(percentile(queued, 99), 3),
            "count": len(queued),
        }
    if latency:
        entry["handoff_ms"] = {
            "p50": round(percentile(latency, 50), 3),
            "p99": round(percentile(latency, 99), 3),
            "count": len(latency),
        }
    else:
        entry["handoff_ms"] = None
        if kind == "gpudesk":
            entry["handoff_note"] = (
                f"not available: the producer's batch messages carry no "
                f"'t' ({sum(r['no_t'] for r in results)} without)"
            )
    ready_ms = [x for r in results for x in r["next_ready_ms"]]
    all_ms = [x for r in results for x in r["next_all_ms"]]
    entry["next_ready_ms"] = (
        {
            "p50": round(percentile(ready_ms, 50), 3),
            "p99": round(percentile(ready_ms, 99), 3),
            "count": len(ready_ms),
        }
        if ready_ms
        else None
    )
    entry["next_all_ms_p50"] = round(percentile(all_ms, 50), 3)
    if join:
        entry["join"] = joined(results)
    return entry


def pins_memory(kind: str, args: argparse.Namespace) -> bool:
    """Whether this configuration's loader pins its batches: the independent DataLoaders on
    cuda, as GPU training scripts set them up (unless --no-pin-memory). SharedLoader batches
    are views of the ring's shared memory, which is not pinned."""
    return kind == "independent" and args.device != "cpu" and not args.no_pin_memory


def mean_or_none(values: list[int | float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known and len(known) == len(values) else None


def device_figures(results: list[dict[str, Any]]) -> dict[str, float | None]:
    """Means over the consumers: host-to-device bytes per counted batch, and GPU memory in MiB
    (None where a consumer's figure is unknown, and on cpu)."""
    h2d = mean_or_none([r["h2d_bytes"] / r["batches"] for r in results])
    figures: dict[str, float | None] = {"h2d_bytes_per_batch": None if h2d is None else round(h2d)}
    for field, key in zip(GPU_FIELDS, GPU_MIB_KEYS, strict=True):
        mib = mean_or_none([None if r[field] is None else r[field] / 2**20 for r in results])
        figures[key] = None if mib is None else round(mib, 1)
    return figures


def joined(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The join scenario's figures: how long the fast consumer's next() waited while the slow
    one was reading (from its first batch to its last), and each one's pace."""
    fast, slow = results
    start, end = slow["t_first"], slow["t_last"]
    during = [
        ms
        for t, ms in zip(fast["times"], fast["next_all_ms"], strict=True)
        if start <= t <= end + ms / 1000
    ]
    waits = fast["next_all_ms"][1:]  # the first one includes building the loader
    return {
        "fast_max_wait_ms": round(max(waits), 1),
        "fast_max_wait_while_slow_ms": round(max(during), 1) if during else None,
        "fast_p99_wait_ms": round(percentile(waits, 99), 1),
        "batches_while_slow": len(during),
        "fast_batches_per_s": round((fast["batches"] - 1) / (fast["t_last"] - fast["t_first"]), 2),
        "slow_batches_per_s": round((slow["batches"] - 1) / (end - start), 2),
    }


MEDIAN_KEYS = (
    "cpu_s",
    "cpu_s_all",
    "cpu_s_psutil",
    "batches_per_s_mean",
    "batches_per_s_min",
    "wall_s",
    "moved_x",
    "status_x",
    "producer_startup_cpu_s",
    "cpu_s_per_batch",
    "h2d_bytes_per_batch",
    *GPU_MIB_KEYS,
)


JOIN_KEYS = (
    "fast_max_wait_ms",
    "fast_max_wait_while_slow_ms",
    "fast_p99_wait_ms",
    "batches_while_slow",
    "fast_batches_per_s",
    "slow_batches_per_s",
)


def combine(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (scenario, N, configuration): the median of each figure over its repeats
    (the join scenario's worst wait: the largest over them)."""
    rows = []
    keys = sorted({(r["scenario"], r["n"], CONFIGS.index(r["config"])) for r in runs})
    for scenario, n, index in sorted(keys, key=lambda k: (k[0] == "join", k[1], k[2])):
        mine = [
            r
            for r in runs
            if r["scenario"] == scenario and r["n"] == n and r["config"] == CONFIGS[index]
        ]
        good = [r for r in mine if r.get("ok")]
        row: dict[str, Any] = {
            "scenario": scenario,
            "n": n,
            "config": CONFIGS[index],
            "repeats": len(mine),
            "ok": bool(good),
        }
        if not good:
            row["error"] = mine[0].get("error")
            rows.append(row)
            continue
        for key in MEDIAN_KEYS:
            values = [r[key] for r in good if r.get(key) is not None]
            if values:
                row[key] = round(statistics.median(values), 5 if key == "cpu_s_per_batch" else 3)
            elif key in GPU_MIB_KEYS:
                row[key] = None  # not on a GPU, or not known
        for key in ("handoff_ms", "queued_ms", "next_ready_ms"):
            found = [r[key] for r in good if r.get(key)]
            row[key] = (
                {q: round(statistics.median(f[q] for f in found), 3) for q in ("p50", "p99")}
                if found
                else None
            )
        if scenario == "join":
            row["join"] = {}
            for key in JOIN_KEYS:
                values = [r["join"][key] for r in good if r["join"].get(key) is not None]
                if values:
                    worst = key.startswith("fast_max")
                    row["join"][key] = max(values) if worst else statistics.median(values)
        row["leaked_processes"] = sum(r.get("leaked_processes", 0) for r in mine)
        row["failed_repeats"] = len(mine) - len(good)
        note = next((r["handoff_note"] for r in good if r.get("handoff_note")), None)
        if note:
            row["handoff_note"] = note
        rows.append(row)
    return rows


def tensorsocket_available() -> tuple[bool, str]:
    try:
        import tensorsocket
    except Exception as exc:
        return False, f"import failed: {type(exc).__name__}: {exc}"
    version = getattr(tensorsocket, "__version__", "?")
    return True, f"tensorsocket {version}"


def chosen_configs(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[list[str], str]:
    """The configurations to run, in CONFIGS' order, and what became of TensorSocket."""
    asked = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in asked if c not in CONFIGS]
    if unknown or not asked:
        parser.error(
            f"--configs takes a comma-separated list of {', '.join(CONFIGS)}, "
            f"found {args.configs!r}"
        )
    configs = [c for c in CONFIGS if c in asked]
    ts_note = "not asked for (--configs)"  # the JSON's "tensorsocket": what became of it
    if "tensorsocket" in configs:
        if args.skip_tensorsocket:
            ts_note = "skipped (--skip-tensorsocket)"
        elif args.device != "cpu":
            ts_note = (
                "skipped: not supported with --device cuda (TensorSocket hands GPU batches "
                "from its producer over CUDA IPC; this benchmark's producer keeps them on the host)"
            )
        else:
            ok, ts_note = tensorsocket_available()
            if ok:
                return configs, ts_note
        configs.remove("tensorsocket")
    if not configs:
        parser.error(f"no configuration left to run: tensorsocket {ts_note}")
    return configs, ts_note


def _row(rows: list[dict[str, Any]], scenario: str, n: int, config: str) -> dict[str, Any] | None:
    for r in rows:
        if (r["scenario"], r["n"], r["config"]) == (scenario, n, config) and r.get("ok"):
            return r
    return None


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 16's targets (findings 13 and 14), then the earlier ones at N = 4 (issue 5)."""
    out: list[dict[str, Any]] = []

    def check(name: str, passed: bool | None, detail: str, issue: str = "16") -> None:
        out.append({"target": name, "pass": passed, "detail": detail, "issue": issue})

    def missing(name: str, issue: str = "16") -> None:
        check(name, None, "not measured in this run (its configurations were not asked for)", issue)

    base, ours = _row(rows, "steady", 1, "independent"), _row(rows, "steady", 1, "gpudesk")
    name = "N = 1: gpudesk CPU-s <= 1.05 x independent"
    if base and ours:
        ratio = ours["cpu_s"] / base["cpu_s"]
        check(name, ratio <= 1.05, f"{ours['cpu_s']:.2f} vs {base['cpu_s']:.2f}: {ratio:.3f} x")
        ratio = ours["batches_per_s_mean"] / base["batches_per_s_mean"]
        check(
            "N = 1: gpudesk batches/s >= 0.95 x independent",
            ratio >= 0.95,
            f"{ours['batches_per_s_mean']:.2f} vs {base['batches_per_s_mean']:.2f}: {ratio:.3f} x",
        )
    else:
        missing(name)
        missing("N = 1: gpudesk batches/s >= 0.95 x independent")
    base, ours = _row(rows, "steady", 4, "independent"), _row(rows, "steady", 4, "gpudesk")
    name = "N = 4: gpudesk CPU-s <= 0.30 x independent"
    if base and ours:
        ratio = ours["cpu_s"] / base["cpu_s"]
        check(name, ratio <= 0.30, f"{ours['cpu_s']:.2f} vs {base['cpu_s']:.2f}: {ratio:.3f} x")
    else:
        missing(name)
    joiner = _row(rows, "join", 2, "gpudesk")
    name = "join: the fast consumer never waits > 1 s for a slow one joining mid-epoch"
    if joiner:
        figures = joiner["join"]
        worst = max(
            v
            for v in (figures.get("fast_max_wait_ms"), figures.get("fast_max_wait_while_slow_ms"))
            if v is not None
        )
        alone = _row(rows, "join", 2, "independent")
        check(
            name,
            worst <= 1000,
            f"longest next() {worst:.0f} ms (while the slow one read: "
            f"{figures.get('fast_max_wait_while_slow_ms')} ms over "
            f"{figures.get('batches_while_slow')} batches)"
            + (
                f"; independent loaders: {alone['join']['fast_max_wait_ms']:.0f} ms"
                if alone
                else ""
            ),
        )
    else:
        missing(name)

    base, ours = _row(rows, "steady", 4, "independent"), _row(rows, "steady", 4, "gpudesk")
    if not base or not ours:
        return out
    check(
        "N = 4: gpudesk batches/s per consumer >= independent",
        ours["batches_per_s_mean"] >= base["batches_per_s_mean"],
        f"mean {ours['batches_per_s_mean']:.2f} (min {ours['batches_per_s_min']:.2f}) vs "
        f"{base['batches_per_s_mean']:.2f}",
        "5",
    )
    limit = 1.05 * base["moved_x"]
    check(
        "N = 4: gpudesk bytes moved per delivered batch <= 1.05 x independent",
        ours["moved_x"] <= limit,
        f"{ours['moved_x']:.3f}x vs {limit:.3f}x",
        "5",
    )
    if ours.get("handoff_ms"):
        p50, source = ours["handoff_ms"]["p50"], "hand-off ('t' in batch message)"
    elif ours.get("next_ready_ms"):
        p50, source = ours["next_ready_ms"]["p50"], "next() of a waiting batch (no 't')"
    else:
        p50, source = float("inf"), "nothing measured"
    check("N = 4: gpudesk hand-off p50 <= 1 ms", p50 <= 1.0, f"{p50:.3f} ms, {source}", "5")
    return out


def progress(entry: dict[str, Any], args: argparse.Namespace) -> None:
    if not args.json:
        print(
            f"  ... {entry['scenario']} N={entry['n']} {entry['config']} "
            f"(run {entry['repeat'] + 1}/{args.repeats}): "
            f"{'ok' if entry.get('ok') else entry.get('error')}",
            file=sys.stderr,
            flush=True,
        )


def gpu_cells(row: dict[str, Any]) -> str:
    """The table's device columns for one row."""
    h2d = row.get("h2d_bytes_per_batch")
    mib = " / ".join("n/a" if row.get(key) is None else f"{row[key]:.0f}" for key in GPU_MIB_KEYS)
    return f" {'n/a' if h2d is None else f'{h2d / 2**20:.2f}'} | {mib} |"


def fmt_pair(value: dict[str, Any] | None) -> str:
    return "n/a" if not value else f"{value['p50']:.3f}/{value['p99']:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--consumers", default="1,2,4", help="comma-separated N values")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=240, help="per consumer")
    parser.add_argument("--size", type=int, default=1024, help="dataset samples")
    parser.add_argument("--image-px", type=int, default=96)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--json-out", metavar="FILE", help="also write the JSON to FILE")
    parser.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help=f"comma-separated configurations to run, of {', '.join(CONFIGS)} (default: all)",
    )
    parser.add_argument("--skip-tensorsocket", action="store_true")
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where consumers use their batches: cpu (default), or cuda:0 (each batch moved "
        "there with .to(non_blocking=True), its work done there, the GPU waited for)",
    )
    parser.add_argument(
        "--no-pin-memory",
        action="store_true",
        help="with --device cuda: the independent DataLoaders do not pin their batches",
    )
    parser.add_argument(
        "--no-join", action="store_true", help="skip the join scenario (a slow consumer joining)"
    )
    parser.add_argument(
        "--join-step-ms",
        type=float,
        default=100.0,
        help="the slow joiner's training step: it sleeps this long after each batch",
    )
    parser.add_argument(
        "--join-batches", type=int, default=40, help="batches the slow joiner reads"
    )
    parser.add_argument(
        "--consumer-work",
        choices=("mean", "touch"),
        default="mean",
        help="what a consumer does with each batch: images.float().mean() "
        "(default), or read one value (isolates the hand-off)",
    )
    parser.add_argument(
        "--ts-producer-batch",
        type=int,
        default=None,
        help="TensorSocket's producer_batch_size (default: its own, 8)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run everything this many times; the table shows medians",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=180.0,
        help="seconds for one configuration's consumers to finish",
    )
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        spec = json.loads(args.spec)
        {
            "consumer": role_consumer,
            "gpudesk-producer": role_gpudesk_producer,
            "ts-producer": role_ts_producer,
        }[args.role](spec)
        return
    counts = [int(c) for c in args.consumers.split(",") if c.strip()]
    configs, ts_note = chosen_configs(parser, args)

    import torch

    if args.device == "cuda":
        args.device = "cuda:0"
        if not torch.cuda.is_available():
            print(
                f"bench/loader.py: --device cuda needs a GPU that torch can use, and torch "
                f"{torch.__version__} finds none (torch.cuda.is_available() is False).",
                file=sys.stderr,
            )
            sys.exit(2)

    from gpudesk.workloads.images import make_dataset

    root = Path(tempfile.mkdtemp(prefix="gpudesk-bench-loader-"))
    runs: list[dict[str, Any]] = []
    try:
        home = root / "home"
        cache = root / "cache"
        started = time.monotonic()
        make_dataset(size=args.size, image_px=args.image_px, seed=SEED, cache_dir=str(cache))
        for repeat in range(args.repeats):
            for n in counts:
                for kind in configs:
                    runs.append(run_config(kind, n, args, root, home, cache, repeat))
                    progress(runs[-1], args)
            if not args.no_join:
                for kind in configs:
                    runs.append(run_config(kind, 2, args, root, home, cache, repeat, join=True))
                    progress(runs[-1], args)
        total_s = time.monotonic() - started
    finally:
        if os.environ.get("BENCH_LOADER_KEEP"):
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    rows = combine(runs)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB, "
        f"Python {platform.python_version()}, torch {torch.__version__}",
        "device": args.device,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(args.device) if args.device != "cpu" else None,
        "params": {
            "consumers": counts,
            "workers": args.workers,
            "batch_size": args.batch_size,
            "batches": args.batches,
            "size": args.size,
            "image_px": args.image_px,
            "consumer_work": args.consumer_work,
            "configs": configs,
            "pin_memory": pins_memory("independent", args),
            "seed": SEED,
            "slots": SLOTS,
            "ts_producer_batch": args.ts_producer_batch,
            "join_step_ms": args.join_step_ms,
            "join_batches": args.join_batches,
        },
        "tensorsocket": ts_note,
        "repeats": args.repeats,
        "results": rows,
        "targets": targets(rows),
        "runs": runs,
        "total_s": round(total_s, 1),
    }
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
    if args.json:
        print(json.dumps(result, indent=2))
        return
    p = result["params"]
    print(f"{result['date']}  {result['machine']}")
    print(
        f"images {p['size']} samples x {p['image_px']} px, batch {p['batch_size']}, "
        f"{p['workers']} workers, {p['batches']} batches per consumer; "
        f"{ts_note if ts_note.startswith('tensorsocket') else 'tensorsocket ' + ts_note}; "
        f"{'median of ' + str(args.repeats) + ' runs' if args.repeats > 1 else '1 run'}"
    )
    print()
    on_gpu = args.device != "cpu"
    if on_gpu:
        print(
            f"device {args.device}: {result['gpu']}; pinned DataLoader batches: {p['pin_memory']}"
        )
    gpu_header = " H2D MiB / batch | GPU MiB per consumer: driver / torch peak / reserved |"
    print(
        "| N | config | CPU-s | x independent | (all) | CPU-ms / batch "
        "| batches/s per consumer | x independent | wall s | bytes moved | hand-off p50 / p99 ms |"
        + (gpu_header if on_gpu else "")
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if on_gpu else ""))
    for r in rows:
        if r["scenario"] != "steady":
            continue
        if not r.get("ok"):
            print(f"| {r['n']} | {r['config']} | FAILED: {r.get('error')} |")
            continue
        base = _row(rows, "steady", r["n"], "independent")
        cpu_x = f"{r['cpu_s'] / base['cpu_s']:.3f}" if base else "n/a"
        rate_x = f"{r['batches_per_s_mean'] / base['batches_per_s_mean']:.3f}" if base else "n/a"
        handoff = r["handoff_ms"]
        print(
            f"| {r['n']} | {r['config']} | {r['cpu_s']:.2f} | {cpu_x} | {r['cpu_s_all']:.2f} "
            f"| {r['cpu_s_per_batch'] * 1000:.2f} "
            f"| {r['batches_per_s_mean']:.1f} | {rate_x} | {r['wall_s']:.2f} "
            f"| {r['moved_x']:.2f}x | "
            + (f"{handoff['p50']:.2f} / {handoff['p99']:.1f}" if handoff else "n/a")
            + " |"
            + (gpu_cells(r) if on_gpu else "")
        )
    joins = [r for r in rows if r["scenario"] == "join"]
    if joins:
        print()
        print(
            f"Join: a fast consumer reads {p['batches']} batches; when it is half an epoch "
            f"into its second epoch a slow one ({p['join_step_ms']:.0f} ms a step) joins and "
            f"reads {p['join_batches']}."
        )
        print(
            "| config | fast: longest next() ms | ... while the slow one read | p99 ms "
            "| fast batches/s | slow batches/s |"
        )
        print("|---|---|---|---|---|---|")
        for r in joins:
            if not r.get("ok"):
                print(f"| {r['config']} | FAILED: {r.get('error')} |")
                continue
            j = r["join"]
            print(
                f"| {r['config']} | {j['fast_max_wait_ms']:.0f} "
                f"| {j.get('fast_max_wait_while_slow_ms')} ({j.get('batches_while_slow')} batches) "
                f"| {j['fast_p99_wait_ms']:.1f} | {j['fast_batches_per_s']:.1f} "
                f"| {j['slow_batches_per_s']:.1f} |"
            )
    print()
    print(
        "CPU-s: all processes after their imports; (all): with Python start + imports. "
        "CPU-ms / batch: CPU-s / delivered batches. "
        "bytes moved: bytes written/copied in host memory per delivered batch, x the batch's "
        "bytes. "
        "hand-off: batches the consumer was waiting for. Join waits: the worst over the runs."
    )
    if on_gpu:
        print(
            "H2D: bytes each consumer copied to the GPU per batch. GPU MiB: the consumer's "
            "memory as the driver counts it (NVML; its CUDA context included), "
            "torch.cuda.max_memory_allocated and memory_reserved; means over the consumers."
        )
    for r in rows:
        label = f"{r['scenario']} N={r['n']} {r['config']}"
        if r.get("leaked_processes"):
            print(f"warning: {label} left {r['leaked_processes']} processes (killed)")
        if r.get("failed_repeats"):
            print(
                f"warning: {label}: {r['failed_repeats']} of {r['repeats']} runs failed "
                "(see --json)"
            )
        if r.get("handoff_note"):
            print(f"{label} hand-off: {r['handoff_note']}")
    print()
    print("targets:")
    for t in result["targets"]:
        verdict = "NOT RUN" if t["pass"] is None else "PASS" if t["pass"] else "FAIL"
        print(f"  {verdict}  {t['target']}: {t['detail']}")
    print(f"total {result['total_s']:.0f} s")


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
