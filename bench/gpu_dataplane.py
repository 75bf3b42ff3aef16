"""GPU data plane probe: one host batch staged once on the GPU for N consumers, and GPU JPEG decode.

    python bench/gpu_dataplane.py --out DIR [--device cuda|cpu] [--only ipc,decode]
                                  [--seconds 6] [--consumers 4] [--mps] [--start-mps] [--small]

A prototype measurement outside the product: the shared loader (gpudesk/loader/) hands each
consumer a host batch and every consumer copies it to the GPU itself (N copies for N consumers
on one GPU). The planned `device = "cuda"` dataset stages each batch once on the GPU and hands it
to every consumer on that GPU by CUDA IPC. This script measures whether and how that works and
what it costs, so the feature is built on measured facts.

Each section runs in a process of its own with its own time limit (its process group is killed
on overrun and the section recorded as timed out); a section that fails is recorded with its
error and the next one runs. DIR/gpu_dataplane.json is rewritten after every section, so a run
cut short keeps what it saw. Read-only: nothing here changes the compute mode, MIG mode, clocks,
power limits or persistence. `--start-mps` starts gpudesk's own MPS daemon in a temporary folder
and always quits it.

- `ipc`: one producer and `--consumers` consumers (torch.multiprocessing, spawn), all on cuda:0,
  uint8 batches (32, 3, 224, 224) and (32, 3, 96, 96), each batch one of a pool of 7 seeded
  random host batches (pinned on a GPU) with its int64 sum computed on the host. Two
  configurations, each for `--seconds` after a warm-up:
  `host-copy` (today's design): a ring of 4 shared-memory host slots (each consumer tries to
  page-lock its view with cudaHostRegister and records whether it could); every consumer copies
  the slot to the GPU itself, sums it there, compares, acks.
  `cuda-ipc` (the planned design): 4 GPU slots and 4 interprocess events, handed to each
  consumer once (tensors through the queue, events by their IPC handle); per batch the producer
  waits for every consumer's ack of the slot's previous batch, copies the pinned batch into the
  slot on a side stream, records the slot's event and sends (index, slot, sum); the consumer
  waits on the event on its stream, sums on the GPU, compares, acks. A mismatch means the
  lifetime protocol is wrong.
  Recorded per configuration: batches/s per consumer (min/median) and the producer's,
  host-to-device bytes per batch as issued, PCIe RX bytes per batch from NVML (GPM metric
  PCIE_RX_PER_SEC over the window, and nvmlDeviceGetPcieThroughput polled), hand-off latency
  (producer send -> consumer checked) p50/p99, the one-time open cost per consumer, GPU memory per
  consumer (torch's and the driver's per pid), CPU-s per process, mismatches, errors.
  `--mps` labels the results "mps" (the caller started an MPS daemon and set
  CUDA_MPS_PIPE_DIRECTORY); whether CUDA IPC works between MPS clients is one of the facts.
  On `--device cpu` the same processes and ring run with CPU tensors; `cuda-ipc` becomes "one
  shared CPU tensor ring passed through the queue", without events or NVML.
- `decode`: JPEGs made in memory with PIL (gradients plus noise, quality 90) at 96, 224 and 512
  px, 256 each: images/s for torchvision's CPU decode_jpeg one at a time and PIL decode + tensor,
  both with one thread (per core), and the GPU's batched decode_jpeg (batches of 32 and 256,
  synchronised, after a warm-up), the GPU path's host CPU-s per image, and the decoded pixels'
  max abs difference from the CPU decode on a few images. On the CPU the GPU rows are skipped.

`--small` shrinks batches, images and windows so the CPU rehearsal
(tests/loader/test_gpu_dataplane.py) takes seconds. Results go into
docs/hardware-validation.md by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import queue
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SECTIONS = ("ipc", "decode")
RING_SLOTS = 4
POOL = 7  # distinct host batches; coprime with RING_SLOTS so a slot's next batch always differs
WARMUP_S = 1.0
PCIE_POLL_S = 0.05


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- ipc: the processes ----------------------------------------------------------------------
def _host_pool(shape: tuple[int, ...], pin: bool) -> tuple[list[Any], list[int]]:
    import torch

    pool, sums = [], []
    for index in range(POOL):
        gen = torch.Generator().manual_seed(1000 + index)
        batch = torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen)
        if pin:
            batch = batch.pin_memory()
        pool.append(batch)
        sums.append(int(batch.sum(dtype=torch.int64)))
    return pool, sums


def producer_main(
    device: str, consumers: int, control: Any, commands: list[Any], acks: Any, results: Any
) -> None:
    """The producer: for each phase the orchestrator names, set up the ring, hand it to every
    consumer once, then on "go" fill it for the window and stop the consumers."""
    import torch

    torch.set_num_threads(1)
    cuda = device == "cuda"
    if cuda:
        torch.cuda.init()
    pools: dict[tuple[int, ...], tuple[list[Any], list[int]]] = {}
    while True:
        order = control.get()
        if order[0] == "exit":
            break
        _, config, shape, warmup_s, seconds, wait_acks = order
        report: dict[str, Any] = {"role": "producer", "pid": os.getpid(), "config": config}
        try:
            if shape not in pools:
                pools[shape] = _host_pool(shape, pin=cuda)
            report.update(
                _produce(
                    config,
                    cuda,
                    shape,
                    consumers,
                    pools[shape],
                    control,
                    commands,
                    acks,
                    warmup_s,
                    seconds,
                    wait_acks,
                )
            )
        except Exception:
            report["error"] = traceback.format_exc()[-3000:]
            for q in commands:  # release consumers still waiting for this phase
                q.put(("stop",))
        results.put(report)
    for q in commands:
        q.put(("exit",))


def _produce(
    config: str,
    cuda: bool,
    shape: tuple[int, ...],
    consumers: int,
    pool: tuple[list[Any], list[int]],
    control: Any,
    commands: list[Any],
    acks: Any,
    warmup_s: float,
    seconds: float,
    wait_acks: bool,
) -> dict[str, Any]:
    import torch

    batches, sums = pool
    events: list[Any] = []
    side = None
    if config == "cuda-ipc" and cuda:
        slots = [torch.empty(shape, dtype=torch.uint8, device="cuda:0") for _ in range(RING_SLOTS)]
        side = torch.cuda.Stream()
        events = [torch.cuda.Event(interprocess=True) for _ in range(RING_SLOTS)]
        for event in events:
            event.record(side)  # an IPC handle needs the event to exist on the device
        handles = [event.ipc_handle() for event in events]
    else:  # host-copy, or cuda-ipc on the CPU: one shared host ring
        slots = [torch.empty(shape, dtype=torch.uint8).share_memory_() for _ in range(RING_SLOTS)]
        handles = []
    for q in commands:
        q.put(("setup", config, slots, handles, time.monotonic()))
    order = control.get()  # ("go", at) once every consumer has opened the ring
    ready_cpu = _cpu_s()
    start = order[1]
    t0, t1 = start + warmup_s, start + warmup_s + seconds
    active = set(range(consumers))  # a consumer that failed says "bye" early and is let go
    byes = 0
    pending: list[set[int]] = [set() for _ in range(RING_SLOTS)]  # who owes an ack, per slot
    produced = in_window = 0
    index = 0
    while time.monotonic() < t1 and active:
        turn = index % RING_SLOTS
        # the self-test (not wait_acks) writes every batch into slot 0 while keeping the same
        # lag, so consumers still reading a batch see it overwritten by the next
        slot = turn if wait_acks else 0
        while pending[turn]:
            kind, cid, acked_index, _slot = acks.get(timeout=30)
            if kind == "ack":
                pending[acked_index % RING_SLOTS].discard(cid)
            else:
                byes += 1
                active.discard(cid)
                for owed in pending:
                    owed.discard(cid)
        batch = batches[index % POOL]
        if side is not None:
            with torch.cuda.stream(side):
                slots[slot].copy_(batch, non_blocking=True)
                events[slot].record(side)
        else:
            slots[slot].copy_(batch)
        pending[turn] = set(active)
        sent = time.monotonic()
        for q in commands:
            q.put(("batch", index, slot, sums[index % POOL], sent))
        produced += 1
        if t0 <= sent < t1:
            in_window += 1
        index += 1
    for q in commands:
        q.put(("stop",))
    while byes < consumers:  # keep the slots alive until every consumer let go of them
        byes += acks.get(timeout=60)[0] == "bye"
    return {
        "produced": produced,
        "in_window": in_window,
        "batches_per_s": in_window / seconds,
        "window": [t0, t1],
        "work_cpu_s": _cpu_s() - ready_cpu,
    }


def consumer_main(
    cid: int, device: str, commands: Any, acks: Any, results: Any, ready: Any
) -> None:
    """A consumer: for each phase, open the ring once, then check and ack every batch."""
    import torch

    torch.set_num_threads(1)
    cuda = device == "cuda"
    if cuda:
        torch.zeros(1, device="cuda:0")  # the CUDA context, before anything is timed
    while True:
        before_get = time.monotonic()
        report: dict[str, Any] = {"role": "consumer", "id": cid, "pid": os.getpid()}
        try:
            # a setup message's CUDA tensors are opened (cudaIpcOpenMemHandle) as it is read
            message = commands.get()
        except Exception:
            message = ("setup-failed",)
            report["error"] = "opening the ring: " + traceback.format_exc()[-3000:]
        if message[0] == "exit":
            break
        if message[0] not in ("setup", "setup-failed"):
            continue  # the rest of a phase this consumer could not join
        try:
            if "error" not in report:
                _consume(cid, cuda, message, before_get, commands, acks, ready, report)
        except Exception:
            report["error"] = traceback.format_exc()[-3000:]
        if not report.get("ready"):
            ready.put(cid)  # do not leave the orchestrator waiting for this one
        message = ()
        if cuda:
            with contextlib.suppress(Exception):
                torch.cuda.synchronize()
                torch.cuda.ipc_collect()
        acks.put(("bye", cid, -1, -1))
        results.put(report)


def _consume(
    cid: int,
    cuda: bool,
    setup: tuple[Any, ...],
    before_get: float,
    commands: Any,
    acks: Any,
    ready: Any,
    report: dict[str, Any],
) -> None:
    import torch

    _, config, slots, handles, put_at = setup
    records: list[tuple[int, float, float]] = []
    mismatches: list[dict[str, int]] = report.setdefault("mismatches", [])
    report["mismatch_count"] = 0
    report["records"] = records
    events = []
    if cuda and handles:
        events = [torch.cuda.Event.from_ipc_handle(torch.device("cuda:0"), h) for h in handles]
    if cuda and config == "cuda-ipc":
        torch.cuda.synchronize()
    report["open_s"] = time.monotonic() - max(before_get, put_at)
    report["slot_device"] = str(slots[0].device)
    if cuda and config == "host-copy":
        report["pinned"] = _register(slots)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    ready_cpu = _cpu_s()
    ready.put(cid)
    report["ready"] = True
    allocated = 0
    while True:
        message = commands.get(timeout=120)
        if message[0] == "stop":
            break
        _, index, slot, expected, sent = message
        if config == "host-copy" and cuda:
            x = slots[slot].to("cuda:0", non_blocking=True)
        else:
            if events:
                torch.cuda.current_stream().wait_event(events[slot])
            x = slots[slot]
        got = int(x.sum(dtype=torch.int64))  # waits for the GPU: it is done with the slot
        checked = time.monotonic()
        if cuda and not allocated:
            allocated = torch.cuda.memory_allocated()
        if got != expected:
            report["mismatch_count"] += 1
        if got != expected and len(mismatches) < 20:  # the first few, as examples
            mismatches.append({"index": index, "slot": slot, "expected": expected, "got": got})
        acks.put(("ack", cid, index, slot))
        records.append((index, checked, checked - sent))
        del x
    report["work_cpu_s"] = _cpu_s() - ready_cpu
    if cuda:
        report["memory_allocated"] = allocated
        report["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    if cuda and config == "host-copy" and report.get("pinned", {}).get("pinned"):
        cudart = torch.cuda.cudart()
        for t in slots:
            cudart.cudaHostUnregister(t.data_ptr())


def _register(slots: list[Any]) -> dict[str, Any]:
    """Page-lock this process's view of the shared host slots, as a pinned ring would be (as
    torch.cuda._pin_memory_utils does it: cudaHostRegisterPortable on shared memory)."""
    import torch

    cudart = torch.cuda.cudart()
    done: dict[str, Any] = {"pinned": False, "codes": []}
    try:
        for t in slots:
            code = int(cudart.cudaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 1))
            done["codes"].append(code)
            if code:
                break
    except Exception as exc:
        done["how"] = f"cudaHostRegister raised {exc!r}"
    if done["codes"] and not any(done["codes"]):
        done.update(pinned=True, how="cudaHostRegister")
        return done
    done.setdefault("how", f"unpinned: cudaHostRegister returned {done['codes']}")
    for t, code in zip(slots, done["codes"], strict=False):
        if code == 0:
            cudart.cudaHostUnregister(t.data_ptr())
    # a failed runtime call leaves its error for the next kernel launch check to raise: take it
    try:
        torch.ones(1, device="cuda:0").add_(1)
        torch.cuda.synchronize()
    except Exception as exc:
        done["stale_error_cleared"] = repr(exc)[:300]
    return done


# --- ipc: NVML witnesses ---------------------------------------------------------------------
class PcieMeter:
    """PCIe RX (host-to-device) bytes over a window: GPM's rate and the polled throughput."""

    def __init__(self) -> None:
        self.nv: Any = None
        self.handle: Any = None
        self.samples: list[Any] = []
        self.polls: list[tuple[float, float]] = []
        self.notes: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.started = 0.0

    def open(self) -> None:
        import pynvml as nv

        nv.nvmlInit()
        self.nv = nv
        self.handle = nv.nvmlDeviceGetHandleByIndex(0)
        try:
            if nv.nvmlGpmQueryDeviceSupport(self.handle).isSupportedDevice:
                self.samples = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
            else:
                self.notes.append("GPM not supported on this GPU")
        except Exception as exc:
            self.notes.append(f"GPM: {exc!r}")

    def start(self) -> None:
        # A meter measures one window after another: each starts with no polls and a poller of
        # its own (on 2026-11-30 the second and later windows kept the first one's stop and
        # polls, and their polled integrals came out negative).
        self._stop = threading.Event()
        self.polls = []
        self.started = time.monotonic()
        if self.samples:
            try:
                self.nv.nvmlGpmSampleGet(self.handle, self.samples[0])
            except Exception as exc:
                self.notes.append(f"GPM sample: {exc!r}")
                self.samples = []
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        nv = self.nv
        while not self._stop.wait(PCIE_POLL_S):
            try:
                kb_s = nv.nvmlDeviceGetPcieThroughput(self.handle, nv.NVML_PCIE_UTIL_RX_BYTES)
            except Exception as exc:
                self.notes.append(f"nvmlDeviceGetPcieThroughput: {exc!r}")
                return
            self.polls.append((time.monotonic(), float(kb_s)))

    def stop(self) -> dict[str, Any]:
        elapsed = time.monotonic() - self.started
        self._stop.set()
        if self._thread:
            self._thread.join()
        out: dict[str, Any] = {"window_s": elapsed, "gpm_rx_mib_per_s": None}
        if self.samples:
            nv = self.nv
            try:
                nv.nvmlGpmSampleGet(self.handle, self.samples[1])
                request = nv.c_nvmlGpmMetricsGet_t()
                request.version = nv.NVML_GPM_METRICS_GET_VERSION
                request.numMetrics = 1
                request.sample1 = self.samples[0]
                request.sample2 = self.samples[1]
                request.metrics[0].metricId = nv.NVML_GPM_METRIC_PCIE_RX_PER_SEC
                metric = nv.nvmlGpmMetricsGet(request).metrics[0]
                if metric.nvmlReturn == nv.NVML_SUCCESS:
                    # NVML documents PCIE_RX_PER_SEC in MiB/s; the raw value is kept as read.
                    out["gpm_rx_mib_per_s"] = float(metric.value)
                    out["gpm_rx_bytes"] = float(metric.value) * 2**20 * elapsed
                else:
                    out["gpm_error"] = f"nvmlReturn {metric.nvmlReturn}"
            except Exception as exc:
                out["gpm_error"] = repr(exc)
        if self.polls:
            # each answer is KB/s over NVML's last ~20 ms; integrate the poll-to-poll steps
            total, last = 0.0, self.started
            for at, kb_s in self.polls:
                total += kb_s * 1000.0 * (at - last)
                last = at
            out["polled_rx_bytes"] = total
            out["polled_rx_mean_kb_per_s"] = statistics.fmean(p[1] for p in self.polls)
            out["polls"] = len(self.polls)
        out["notes"] = self.notes
        return out

    def processes(self) -> dict[int, int | None]:
        """The driver's GPU memory per pid (bytes; None where it does not say)."""
        found: dict[int, int | None] = {}
        for p in self.nv.nvmlDeviceGetComputeRunningProcesses(self.handle):
            found[int(p.pid)] = None if p.usedGpuMemory is None else int(p.usedGpuMemory)
        return found

    def close(self) -> None:
        for sample in self.samples:
            with contextlib.suppress(Exception):
                self.nv.nvmlGpmSampleFree(sample)
        with contextlib.suppress(Exception):
            self.nv.nvmlShutdown()


# --- ipc: the phases, in one set of processes ------------------------------------------------
def run_ipc(
    phases: list[tuple[str, tuple[int, ...]]],
    device: str,
    consumers: int,
    seconds: float,
    warmup_s: float,
    budget_end: float,
    wait_acks: bool = True,
) -> list[dict[str, Any]]:
    """Start one producer and the consumers once, run every (configuration, shape) in turn."""
    import torch.multiprocessing as tmp

    ctx = tmp.get_context("spawn")
    commands = [ctx.Queue() for _ in range(consumers)]
    control, acks, results, ready = ctx.Queue(), ctx.Queue(), ctx.Queue(), ctx.Queue()
    procs = [
        ctx.Process(
            target=producer_main, args=(device, consumers, control, commands, acks, results)
        )
    ]
    procs += [
        ctx.Process(target=consumer_main, args=(i, device, commands[i], acks, results, ready))
        for i in range(consumers)
    ]
    runs: list[dict[str, Any]] = []
    meter: PcieMeter | None = None
    meter_error = None
    try:
        for p in procs:
            p.start()
        if device == "cuda":
            meter = PcieMeter()
            try:
                meter.open()
            except Exception as exc:
                meter_error, meter = repr(exc), None
        for n, (config, shape) in enumerate(phases):
            out: dict[str, Any] = {
                "config": config,
                "shape": list(shape),
                "batch_bytes": _bytes(shape),
            }
            if meter_error:
                out["nvml_error"] = meter_error
            if not wait_acks:
                out["protocol"] = "BROKEN ON PURPOSE: every batch goes into slot 0, acked or not"
            if n and time.monotonic() + seconds + warmup_s + 10 > budget_end:
                out["skipped"] = "out of time"
                runs.append(out)
                continue
            out.update(
                _phase(
                    config,
                    shape,
                    device,
                    consumers,
                    seconds,
                    warmup_s,
                    control,
                    results,
                    ready,
                    meter,
                    wait_acks,
                    lambda: all(p.is_alive() for p in procs),
                )
            )
            runs.append(out)
            if not any(p.is_alive() for p in procs):
                break
        control.put(("exit",))
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
        if meter is not None:
            meter.close()
    return runs


def _bytes(shape: tuple[int, ...]) -> int:
    total = 1
    for n in shape:
        total *= n
    return total


def _phase(
    config: str,
    shape: tuple[int, ...],
    device: str,
    consumers: int,
    seconds: float,
    warmup_s: float,
    control: Any,
    results: Any,
    ready: Any,
    meter: PcieMeter | None,
    wait_acks: bool,
    all_alive: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    reports: list[dict[str, Any]] = []
    control.put(("phase", config, shape, warmup_s, seconds, wait_acks))
    opened = 0
    deadline = time.monotonic() + 120  # the first phase includes every process's start
    while opened < consumers and time.monotonic() < deadline and all_alive():
        try:
            ready.get(timeout=1)
            opened += 1
        except queue.Empty:
            with contextlib.suppress(queue.Empty):
                reports.append(results.get_nowait())  # a producer that failed before the ring
                if reports[-1]["role"] == "producer":
                    break
    out["open_wait_s"] = time.monotonic() - deadline + 120  # the first phase: with process start
    if opened < consumers:
        out["error"] = f"{opened} of {consumers} consumers opened the ring"
    go_at = time.monotonic()
    control.put(("go", go_at))
    driver_mem: dict[int, int | None] = {}
    if meter is not None:
        time.sleep(max(0.0, go_at + warmup_s - time.monotonic()))
        meter.start()
        time.sleep(seconds / 2)
        try:
            driver_mem = meter.processes()
        except Exception as exc:
            out["driver_memory_error"] = repr(exc)
        time.sleep(max(0.0, go_at + warmup_s + seconds - time.monotonic()))
        out["pcie"] = meter.stop()
    else:
        out["pcie"] = {"gpm_rx_mib_per_s": None, "reason": "no NVML on --device cpu"}
    deadline = time.monotonic() + warmup_s + seconds + 90
    while len(reports) < consumers + 1 and time.monotonic() < deadline:
        try:
            reports.append(results.get(timeout=1))
        except queue.Empty:
            if not all_alive():
                break
    if len(reports) < consumers + 1:
        out.setdefault("error", f"only {len(reports)} of {consumers + 1} processes reported")
    out.update(_summarise(config, device, reports, consumers, _bytes(shape), seconds, out["pcie"]))
    if driver_mem:
        out["driver_memory_by_pid"] = {str(k): v for k, v in driver_mem.items()}
        for row in [*out["consumers"], out["producer"]]:
            if "pid" in row:
                row["driver_memory"] = driver_mem.get(row["pid"])
    return out


def _summarise(
    config: str,
    device: str,
    reports: list[dict[str, Any]],
    consumers: int,
    batch_bytes: int,
    seconds: float,
    pcie: dict[str, Any],
) -> dict[str, Any]:
    producer = next((r for r in reports if r["role"] == "producer"), {})
    window = producer.get("window")
    rows = []
    latencies: list[float] = []
    mismatches = 0
    errors = [producer["error"]] if producer.get("error") else []
    for r in sorted((r for r in reports if r["role"] == "consumer"), key=lambda r: r["id"]):
        records = r.pop("records", [])
        inside = [rec for rec in records if window and window[0] <= rec[1] < window[1]]
        latencies += [rec[2] for rec in inside]
        mismatches += r.get("mismatch_count", 0)
        if r.get("error"):
            errors.append(r["error"])
        r.update(delivered=len(records), in_window=len(inside), batches_per_s=len(inside) / seconds)
        rows.append(r)
    rates = [r["batches_per_s"] for r in rows]
    issued = (
        consumers
        if (config == "host-copy" and device == "cuda")
        else (1 if device == "cuda" else 0)
    )
    delivered = sum(r["in_window"] for r in rows) / max(1, len(rows))
    summary: dict[str, Any] = {
        "producer": producer,
        "consumers": rows,
        "consumer_batches_per_s": {
            "min": min(rates) if rates else None,
            "median": statistics.median(rates) if rates else None,
        },
        "producer_batches_per_s": producer.get("batches_per_s"),
        "h2d_bytes_per_batch_issued": issued * batch_bytes,
        "h2d_copies_per_batch_issued": issued,
        "handoff_latency_s": {
            "p50": _pct(latencies, 0.5),
            "p99": _pct(latencies, 0.99),
            "n": len(latencies),
        },
        "mismatches": mismatches,
        "errors": errors,
    }
    if delivered and pcie:
        for key in ("gpm_rx_bytes", "polled_rx_bytes"):
            if pcie.get(key) is not None:
                summary[f"pcie_{key}_per_batch"] = pcie[key] / delivered
    return summary


def section_ipc(args: argparse.Namespace) -> dict[str, Any]:
    shapes: list[tuple[int, ...]] = (
        [(8, 3, 32, 32)] if args.small else [(32, 3, 224, 224), (32, 3, 96, 96)]
    )
    warmup = 0.3 if args.small else WARMUP_S
    out: dict[str, Any] = {
        "device": args.device,
        "label": "mps" if args.mps else "plain",
        "cuda_mps_pipe_directory": os.environ.get("CUDA_MPS_PIPE_DIRECTORY"),
        "cuda_mps_log_directory": os.environ.get("CUDA_MPS_LOG_DIRECTORY"),
        "consumers": args.consumers,
        "seconds": args.seconds,
        "warmup_s": warmup,
        "ring_slots": RING_SLOTS,
        "runs": [],
    }
    budget_end = time.monotonic() + args.ipc_budget_s
    phases = [(config, shape) for shape in shapes for config in ("host-copy", "cuda-ipc")]
    try:
        out["runs"] = run_ipc(
            phases,
            args.device,
            args.consumers,
            args.seconds,
            warmup,
            budget_end,
            wait_acks=not args.reuse_slots_early,
        )
    except Exception:
        out["error"] = traceback.format_exc()[-3000:]
    return out


# --- decode ---------------------------------------------------------------------------------
def _jpegs(px: int, count: int) -> list[bytes]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(px)
    yy, xx = np.mgrid[0:px, 0:px].astype(np.float32) / px
    made = []
    for i in range(count):
        phase = i / max(1, count)
        base = np.stack(
            [xx * 200 + 30 * phase, yy * 180, (xx + yy) * 90 + 40 * np.sin(6 * xx + phase)], axis=-1
        )
        image = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(image).save(buf, format="JPEG", quality=90)
        made.append(buf.getvalue())
    return made


def _rate(step: Any, per_call: int, seconds: float) -> dict[str, float]:
    """Images/s and CPU-s per image of `step` repeated for ~`seconds` (after one warm-up call)."""
    step()
    cpu0, t0, calls = _cpu_s(), time.perf_counter(), 0
    while True:
        step()
        calls += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            break
    images = calls * per_call
    return {
        "images_per_s": images / elapsed,
        "cpu_s_per_image": (_cpu_s() - cpu0) / images,
        "images": images,
    }


def section_decode(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    sizes = [32, 64] if args.small else [96, 224, 512]
    count = 16 if args.small else 256
    seconds = 0.3 if args.small else 2.0
    out: dict[str, Any] = {"device": args.device, "images_per_size": count, "sizes": {}}
    try:
        import torchvision  # type: ignore[import-not-found,unused-ignore]

        out["torchvision"] = torchvision.__version__
    except Exception as exc:  # not installed, or built for another torch
        out["torchvision"] = f"not importable: {exc!r}"[:500]
    for px in sizes:
        out["sizes"][str(px)] = _decode_size(px, count, seconds, args.device, out["torchvision"])
    return out


def _decode_size(px: int, count: int, seconds: float, device: str, tv: str) -> dict[str, Any]:
    """Every decode path's rate on `count` JPEGs of `px` x `px`."""
    import numpy as np
    import torch
    from PIL import Image

    tv_ok = not tv.startswith("not importable")
    rows: dict[str, Any] = {}
    files = _jpegs(px, count)
    datas = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in files]
    rows["jpeg_bytes_mean"] = statistics.fmean(len(b) for b in files)
    state = {"i": 0}

    def one_pil() -> None:
        i = state["i"] = (state["i"] + 1) % count
        with Image.open(io.BytesIO(files[i])) as im:
            torch.from_numpy(np.asarray(im.convert("RGB"))).permute(2, 0, 1).contiguous()

    rows["cpu_pil"] = _guarded(lambda: _rate(one_pil, 1, seconds))
    if not tv_ok:
        for key in ("cpu_torchvision", "gpu_batch_32", "gpu_batch_256"):
            rows[key] = {"skipped": f"torchvision {tv}"}
        return rows
    from torchvision.io import (  # type: ignore[import-not-found,unused-ignore]
        ImageReadMode,
        decode_jpeg,
    )

    def one_tv() -> None:
        i = state["i"] = (state["i"] + 1) % count
        decode_jpeg(datas[i], mode=ImageReadMode.RGB)

    rows["cpu_torchvision"] = _guarded(lambda: _rate(one_tv, 1, seconds))
    for batch in (32, 256):
        if device != "cuda":
            rows[f"gpu_batch_{batch}"] = {"skipped": "--device cpu"}
            continue
        chunk = (datas * (batch // len(datas) + 1))[:batch]

        def gpu_step(chunk: list[Any] = chunk) -> None:
            decode_jpeg(chunk, mode=ImageReadMode.RGB, device="cuda")
            torch.cuda.synchronize()

        rows[f"gpu_batch_{batch}"] = _guarded(lambda b=batch, f=gpu_step: _rate(f, b, seconds))
    if device == "cuda":
        rows["gpu_vs_cpu_pixels"] = _guarded(
            lambda: _gpu_vs_cpu(decode_jpeg, ImageReadMode, datas[:8])
        )
    return rows


def _guarded(measure: Any) -> dict[str, Any]:
    try:
        result: dict[str, Any] = measure()
        return result
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:2000]}


def _gpu_vs_cpu(decode_jpeg: Any, mode: Any, datas: list[Any]) -> dict[str, Any]:
    gpu = decode_jpeg(datas, mode=mode.RGB, device="cuda")
    diffs = []
    for data, g in zip(datas, gpu, strict=True):
        c = decode_jpeg(data, mode=mode.RGB)
        diffs.append(int((g.cpu().int() - c.int()).abs().max()))
    return {
        "images": len(datas),
        "max_abs_diff": max(diffs),
        "per_image": diffs,
        "equal": max(diffs) == 0,
    }


# --- the run --------------------------------------------------------------------------------
def _section_child(args: argparse.Namespace) -> int:
    result = {"ipc": section_ipc, "decode": section_decode}[args.section](args)
    Path(args.section_out).write_text(json.dumps(result, indent=1))
    return 0


def _stop_group(pgid: int, grace_s: float = 5.0) -> None:
    """SIGTERM the section's process group, then SIGKILL what is left after `grace_s`. The
    SIGTERM first lets torch's multiprocessing resource tracker (which ignores SIGTERM) outlive
    the section's processes and unlink their named semaphores (`/dev/shm/sem.mp-*`); a SIGKILL
    to the whole group at once killed it with them, and those files were left behind."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            os.killpg(pgid, 0)  # ProcessLookupError once the group is gone
            time.sleep(0.05)
        os.killpg(pgid, signal.SIGKILL)


def _run_section(name: str, args: argparse.Namespace, limit_s: float, tmp: Path) -> dict[str, Any]:
    """One section in a process group of its own, killed on overrun."""
    result_file = tmp / f"{name}.json"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--section",
        name,
        "--section-out",
        str(result_file),
    ]
    cmd += [
        "--device",
        args.device,
        "--seconds",
        str(args.seconds),
        "--consumers",
        str(args.consumers),
    ]
    cmd += ["--ipc-budget-s", str(max(limit_s * 0.7, limit_s - 10))]
    cmd += (
        ["--mps"] * args.mps
        + ["--small"] * args.small
        + ["--reuse-slots-early"] * args.reuse_slots_early
    )
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        _stop_group(proc.pid)
        output, _ = proc.communicate()
        tail = (output or "")[-4000:]
        return {"status": "timed out", "limit_s": limit_s, "pid": proc.pid, "output_tail": tail}
    _stop_group(proc.pid)  # a straggler child of the section
    record: dict[str, Any] = {"status": "ok", "wall_s": time.monotonic() - started, "pid": proc.pid}
    if proc.returncode or not result_file.exists():
        record.update(status="failed", returncode=proc.returncode)
    if result_file.exists():
        record["result"] = json.loads(result_file.read_text())
    if output.strip():
        record["output_tail"] = output[-4000:]
    return record


def _torch_versions() -> tuple[str, str | None]:
    """torch's version and the CUDA it was built for, read from its version.py: this parent
    process need not import torch (~1.6 CPU-s) to say which one the sections ran."""
    spec = importlib.util.find_spec("torch")  # a top-level find imports nothing
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("no torch package on this Python's path")
    text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    found = dict(re.findall(r"^(__version__|cuda)\b[^=]*=\s*'([^']*)'", text, re.MULTILINE))
    return found["__version__"], found.get("cuda")


def _environment(device: str) -> dict[str, Any]:
    env: dict[str, Any] = {"python": sys.version.split()[0], "device": device}
    try:
        env["torch"], env["cuda"] = _torch_versions()
    except Exception as exc:
        env["torch"] = f"not readable: {exc!r}"
    if device != "cuda":
        return env
    try:
        import pynvml

        pynvml.nvmlInit()
        env["driver"] = pynvml.nvmlSystemGetDriverVersion()
        # NVML, not torch: this process makes no CUDA context (it may start an MPS daemon)
        env["gpu"] = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        env["nvml_version"] = pynvml.nvmlSystemGetNVMLVersion()
        pynvml.nvmlShutdown()
    except Exception as exc:
        env["nvml_error"] = repr(exc)
    return env


@contextlib.contextmanager
def _started_mps(tmp: Path) -> Any:
    """gpudesk's own MPS daemon in a temporary folder, its client variables set; always quit."""
    import pynvml

    from gpudesk.hw.mps import MpsError, MpsManager

    pynvml.nvmlInit()
    uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
    pynvml.nvmlShutdown()
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    manager = MpsManager(tmp / "home")
    manager.ensure(uuid)
    saved = dict(os.environ)
    try:
        os.environ.update(manager.client_env(uuid))
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        with contextlib.suppress(MpsError):
            manager.stop(uuid, force=True)


def _summary_lines(report: dict[str, Any]) -> list[str]:
    lines = [
        f"gpu_dataplane on {report['environment'].get('gpu', report['environment']['device'])}:"
    ]
    for name, section in report["sections"].items():
        res = section.get("result") or {}
        lines.append(f"[{name}] {section['status']} ({section.get('wall_s', 0):.1f} s)")
        if name == "ipc":
            for run in res.get("runs", []):
                head = f"  {run['config']:9} {'x'.join(map(str, run['shape'])):14}"
                if "skipped" in run:
                    lines.append(f"{head} skipped: {run['skipped']}")
                    continue
                rate = run.get("consumer_batches_per_s", {})
                lat = run.get("handoff_latency_s", {})
                cons = run.get("consumers", [])
                pinned = ",".join(
                    sorted({str(c["pinned"]["pinned"]) for c in cons if "pinned" in c})
                )
                pcie = run.get("pcie_gpm_rx_bytes_per_batch") or run.get(
                    "pcie_polled_rx_bytes_per_batch"
                )
                lines.append(
                    f"{head} consumer b/s min {_f(rate.get('min'))} med {_f(rate.get('median'))}"
                    f"  producer {_f(run.get('producer_batches_per_s'))}"
                    f"  latency p50 {_ms(lat.get('p50'))} p99 {_ms(lat.get('p99'))}"
                    f"  H2D issued {run.get('h2d_copies_per_batch_issued')}x"
                    f"  PCIe RX/batch {_f(pcie and pcie / run['batch_bytes'])}x"
                    f"  mismatches {run.get('mismatches')}"
                    f"  open max {_ms(max((c.get('open_s', 0) for c in cons), default=None))}"
                    + (f"  pinned {pinned}" if pinned else "")
                    + (
                        f"  ERRORS {len(run['errors'])}"
                        if run.get("errors") or run.get("error")
                        else ""
                    )
                )
        if name == "decode":
            for px, rows in res.get("sizes", {}).items():
                cells = []
                for key in ("cpu_pil", "cpu_torchvision", "gpu_batch_32", "gpu_batch_256"):
                    row = rows.get(key, {})
                    if "images_per_s" in row:
                        cells.append(f"{key} {row['images_per_s']:.0f}/s")
                    else:
                        cells.append(f"{key} {'skipped' if 'skipped' in row else 'error'}")
                lines.append(f"  {px}px: " + ", ".join(cells))
    return lines


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.2f}ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--only", default=",".join(SECTIONS), help="sections, comma-separated")
    parser.add_argument(
        "--seconds", type=float, default=6.0, help="measured window per ipc configuration"
    )
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument(
        "--mps", action="store_true", help="label ipc results 'mps' (daemon started by the caller)"
    )
    parser.add_argument(
        "--start-mps", action="store_true", help="start gpudesk's own MPS daemon for the run"
    )
    parser.add_argument(
        "--small", action="store_true", help="small batches and images (the CPU rehearsal)"
    )
    parser.add_argument(
        "--reuse-slots-early",
        action="store_true",
        help="self-test: the producer reuses a slot before its acks (mismatches must show)",
    )
    parser.add_argument(
        "--limit-s", type=float, help="every section's time limit (default: sized to --seconds)"
    )
    parser.add_argument("--section", choices=SECTIONS, help=argparse.SUPPRESS)
    parser.add_argument("--section-out", help=argparse.SUPPRESS)
    parser.add_argument("--ipc-budget-s", type=float, default=60.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.section:
        return _section_child(args)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in SECTIONS]
    bad_limit = args.limit_s is not None and args.limit_s <= 0
    if args.out is None or unknown or args.consumers < 1 or args.seconds <= 0 or bad_limit:
        print(
            "gpu_dataplane: give --out DIR, --only among "
            f"{', '.join(SECTIONS)} (unknown: {', '.join(unknown) or 'none'}), "
            "--consumers of at least 1, and --seconds and --limit-s above 0.",
            file=sys.stderr,
        )
        return 2
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print(
                "gpu_dataplane: --device cuda but torch sees no GPU; use --device cpu to rehearse.",
                file=sys.stderr,
            )
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "gpu_dataplane.json"
    started = time.monotonic()
    report: dict[str, Any] = {
        "environment": _environment(args.device),
        "argv": sys.argv[1:],
        "sections": {},
    }
    limits = {"ipc": 40.0 + 4 * (args.seconds + 8), "decode": 90.0}
    if args.limit_s:
        limits = dict.fromkeys(limits, args.limit_s)
    with (
        tempfile.TemporaryDirectory(prefix="gpu-dataplane-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        if args.start_mps:
            try:
                stack.enter_context(_started_mps(Path(tmp)))
                args.mps = True
                report["mps_started"] = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
            except Exception as exc:
                report["mps_started"] = f"failed: {exc}"
        for name in only:
            report["sections"][name] = _run_section(name, args, limits[name], Path(tmp))
            report["wall_s"] = time.monotonic() - started
            target.write_text(json.dumps(report, indent=1))
    print("\n".join(_summary_lines(report)))
    print(f"wall {report['wall_s']:.1f} s; results in {target}")
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
