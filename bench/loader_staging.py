"""The shared loader's data path to the GPU: each consumer copying every batch (`device =
"cpu"`, the host ring) against one staged copy for every consumer (`device = "cuda"`).

    python bench/loader_staging.py --out DIR [--device cuda|cpu] [--consumers 4] [--seconds 6]
                                   [--batch 32] [--px 224] [--workers 2] [--configs host,staged]
                                   [--mps] [--decode] [--images]

The product's own producer (`gpudesk loader serve`) and `SharedLoader` consumers, one
configuration at a time, each in fresh processes, over `gpudesk.workloads.synthetic` (sample i:
a float32 tensor filled with i, so every sample is checked where the consumer reads it). A
sample holds 3 x px x px bytes as float32s (px 224: 150,528 bytes; a batch of 32: 4.8 MB, the
prototype's 224-px uint8 batch of `bench/gpu_dataplane.py`).

`--images` serves `gpudesk.workloads.images` instead (JPEG decode and augmentation per sample):
`host` has its workers decode on the CPU, `staged` has the producer decode each batch on its
GPU (gpudesk/loader/device_decode.py); consumers check each id's label and the image size.
Compare the producer's CPU-s (workers included) and batches/s.

- host:   `--device cpu` producer; every consumer copies each batch to its GPU itself
          (`.to("cuda", non_blocking=True)`, as a training script does).
- staged: `--device cuda` producer: it stages each batch once on its GPU; consumers get views
          of its mirror through CUDA IPC (their `.to("cuda")` is a no-op).

Each consumer, for `--seconds` after a 1.5-s warm-up: checks every sample of every batch on the
GPU (features == id, label == id), counts mismatches, and the bytes its own `.to()` copied to
the GPU. Measured per configuration: batches/s per consumer (min, median); host-to-device bytes
per delivered batch as the GPU's PCIe RX counter saw them (NVML GPM over the window; the
witness), and as issued (the consumers' copies plus the producer's staged bytes), each as a
multiple of the batch; mismatches; every consumer's data path ("staged" or "host: why"); CPU
seconds of the consumers and the producer over the window; the driver's GPU memory per process.

On `--device cpu` (a machine without a GPU: the rehearsal) the same runs with the mirror in host
shared memory (`GPUDESK_LOADER_STAGING=shm`) and no NVML: the protocol and the checks run, the
bus figures are null. DIR/loader_staging.json is rewritten after each configuration.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NAME = "stage"
WARMUP_S = 1.5
IMAGES = 1024  # --images: samples in the image dataset
SLACK_S = 4.0  # consumers read this much longer than the metered window, to contain it


def consumer_main(args: argparse.Namespace) -> int:
    """One consumer: read, check, count; write its figures as JSON to --result."""
    import resource

    import torch

    from gpudesk.loader import SharedLoader

    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.zeros(1, device=device)  # its context first: start-up is not measured
    labels_of = None
    if args.images:
        from gpudesk.workloads.images import make_dataset

        labels = make_dataset(size=IMAGES, image_px=args.px, cache_dir=args.cache).labels
        labels_of = [int(x) for x in labels]
    loader = SharedLoader(NAME, with_ids=True, fallback=False, resume_s=0)
    batches = mismatches = copied = 0
    start = end = None
    go = time.monotonic() + WARMUP_S
    deadline = go + args.seconds + SLACK_S
    cpu0 = 0.0
    while end is None:
        for (features, labels), ids in loader:
            now = time.monotonic()
            if start is None and now >= go:
                start, cpu0 = now, _cpu(resource)
                Path(args.result + ".go").touch()  # the launcher meters once all are here
            if now >= deadline:
                end = now
                break
            moved = [t for t in (features, labels) if t.device != device]
            on = [t.to(device, non_blocking=True) for t in (features, labels)]
            expected = ids.to(device, non_blocking=True)
            if labels_of is not None:  # --images: each id's label, and the image's size
                ok = on[1].tolist() == [labels_of[i] for i in ids.tolist()]
                ok = ok and tuple(on[0].shape[1:]) == (3, args.px, args.px)
            else:
                ok = bool((on[0] == expected.float().view(-1, 1)).all()) and torch.equal(
                    on[1], expected
                )
            if start is not None:
                batches += 1
                mismatches += not ok
                copied += sum(t.nbytes for t in moved)
    cpu = _cpu(resource) - cpu0
    memory = torch.cuda.memory_allocated(device) if device.type == "cuda" else None
    result = {
        "pid": os.getpid(),
        "data_path": loader.data_path,
        "batches": batches,
        "seconds": (end - start) if start else None,
        "batches_per_s": batches / (end - start) if start and end and end > start else None,
        "mismatches": mismatches,
        "copied_bytes": copied,
        "cpu_s": cpu,
        "torch_allocated_bytes": memory,
    }
    Path(args.result).write_text(json.dumps(result))
    loader.close()
    return 0


def decode_section(args: argparse.Namespace) -> dict[str, Any]:
    """The product's image dataset (`gpudesk.workloads.images`: 160-px JPEGs of two photos)
    decoded per CPU core against nvJPEG on the GPU: what `device = "cuda"` decoding would
    trade. One core: the dataset's whole sample (decode, random resized crop, colour jitter,
    blur, flip) and its decode alone (Pillow); the GPU: `torchvision.io.decode_jpeg(device=
    "cuda")` on batches of the same JPEGs, resized to --decode-px (the augmentations are not
    ported to the GPU, so only the decode is compared like for like)."""
    import torch

    sys.path.insert(0, str(ROOT / "bench"))
    from gpu_dataplane import _guarded, _rate

    from gpudesk.workloads.images import make_dataset

    torch.set_num_threads(1)
    dataset = make_dataset(size=256, image_px=args.decode_px)
    jpegs = [
        bytes(dataset.data[int(dataset.offsets[i]) : int(dataset.offsets[i + 1])])
        for i in range(len(dataset))
    ]
    state = {"i": 0}

    def whole_sample() -> None:
        state["i"] = (state["i"] + 1) % len(dataset)
        dataset[state["i"]]

    def pil_decode() -> None:
        import io

        from PIL import Image

        state["i"] = (state["i"] + 1) % len(jpegs)
        with Image.open(io.BytesIO(jpegs[state["i"]])) as image:
            image.convert("RGB").load()

    rows: dict[str, Any] = {
        "jpeg_bytes_mean": statistics.fmean(len(j) for j in jpegs),
        "cpu_dataset_sample_1_core": _guarded(lambda: _rate(whole_sample, 1, args.decode_s)),
        "cpu_pil_decode_1_core": _guarded(lambda: _rate(pil_decode, 1, args.decode_s)),
    }
    if args.device != "cuda":
        rows["gpu"] = {"skipped": "--device cpu"}
        return rows
    from torchvision.io import ImageReadMode, decode_jpeg  # type: ignore[import-not-found,unused-ignore]

    datas = [torch.frombuffer(bytearray(j), dtype=torch.uint8) for j in jpegs]
    for batch in (32, 256):
        chunk = (datas * (batch // len(datas) + 1))[:batch]

        def gpu_step(chunk: list[Any] = chunk) -> None:
            images = decode_jpeg(chunk, mode=ImageReadMode.RGB, device="cuda")
            stacked = torch.stack(images).float()
            torch.nn.functional.interpolate(stacked, size=(args.decode_px, args.decode_px))
            torch.cuda.synchronize()

        rows[f"gpu_decode_resize_batch_{batch}"] = _guarded(
            lambda b=batch, f=gpu_step: _rate(f, b, args.decode_s)
        )
    return rows


def _cpu(resource: Any) -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_config(config: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix=f"{config}-", dir=tmp))
    env = {**os.environ, "GPUDESK_HOME": str(home), "PYTHONPATH": _pythonpath()}
    staged = config == "staged"
    if staged and args.device == "cpu":
        env["GPUDESK_LOADER_STAGING"] = "shm"
    floats = 3 * args.px * args.px // 4
    batch_bytes = args.batch * (floats * 4 + 8)  # features + labels
    if args.images:
        batch_bytes = args.batch * (3 * args.px * args.px + 8)  # uint8 pixels + labels
    argv = [sys.executable, "-m", "gpudesk", "loader", "serve", NAME]
    if args.images:  # the image dataset: the workers decode, or (staged) the producer's GPU
        argv += ["--dataset", "gpudesk.workloads.images:make_dataset", "--arg", f"size={IMAGES}"]
        argv += ["--arg", f"image_px={args.px}", "--arg", f'cache_dir="{args.cache}"']
    else:
        argv += ["--dataset", "gpudesk.workloads.synthetic:make_dataset"]
        argv += ["--arg", "size=4096", "--arg", f"shape=[{floats}]"]
    argv += ["--batch-size", str(args.batch), "--workers", str(args.workers)]
    argv += ["--device", "cuda" if staged else "cpu", "--idle-exit", "30"]
    producer = _start(argv, env, home / "producer.log")
    sys.path.insert(0, str(ROOT))
    from gpudesk.paths import Home

    info = Home.from_env(home).loader_paths(NAME)[2]
    _wait(lambda: info.exists() or producer.poll() is not None, 90)
    if producer.poll() is not None:
        raise RuntimeError(f"the producer exited: {_tail(home / 'producer.log')}")
    consumers = []
    for i in range(args.consumers):
        argv = [sys.executable, __file__, "--role", "consumer", "--device", args.device]
        argv += ["--px", str(args.px)] + (
            ["--images", "--cache", args.cache] if args.images else []
        )
        argv += ["--seconds", str(args.seconds), "--result", str(home / f"c{i}.json")]
        consumers.append(_start(argv, env, home / f"c{i}.log"))
    meter = _meter(args.device)
    # The bus is metered over a window inside every consumer's own (they read for
    # --seconds + SLACK_S, and the window is --seconds from when the last one began).
    _wait(lambda: all((home / f"c{i}.json.go").exists() for i in range(args.consumers)), 120)
    from gpudesk.loader.status import collect

    made_before = _produced(collect(NAME, Home.from_env(home)))
    if meter:
        meter.start()
    time.sleep(args.seconds)
    bus = meter.stop() if meter else None
    made = _produced(collect(NAME, Home.from_env(home))) - made_before
    for proc in consumers:
        proc.wait(timeout=args.seconds + 120)
    status = _status(env)
    gpu_memory = meter.processes() if meter else {}
    if meter:
        meter.close()
    producer.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        producer.wait(15)
    results = []
    for i in range(args.consumers):
        path = home / f"c{i}.json"
        results.append(
            json.loads(path.read_text()) if path.exists() else {"error": _tail(home / f"c{i}.log")}
        )
    row = _summary(config, results, status, bus, batch_bytes, gpu_memory, home)
    # The witness: the GPU's PCIe RX over the meter's window per batch the producer made in
    # it (each batch once, however many consumers read it).
    rx = (bus or {}).get("gpm_rx_bytes")
    row["batches_made_in_window"] = made
    row["pcie_rx_per_batch_made_x"] = rx / made / batch_bytes if rx is not None and made else None
    return row


def _summary(
    config: str,
    results: list[dict[str, Any]],
    status: dict[str, Any] | None,
    bus: dict[str, Any] | None,
    batch_bytes: int,
    gpu_memory: dict[int, int | None],
    home: Path,
) -> dict[str, Any]:
    good = [r for r in results if "error" not in r]
    rates = [r["batches_per_s"] for r in good if r.get("batches_per_s")]
    delivered = sum(r["batches"] for r in good)
    staging = (status or {}).get("staging") or {}
    staged_bytes_per_batch = None
    if staging.get("batches_staged"):
        staged_bytes_per_batch = staging["bytes_staged"] / staging["batches_staged"]
    stream = delivered / len(good) if good else 0
    window = statistics.fmean(r["seconds"] for r in good if r.get("seconds")) if good else None
    # What was issued over the window: each consumer's copies, and the producer's staging at
    # the rate the stream ran (one staged batch per distinct batch: the fastest consumer's).
    issued = sum(r["copied_bytes"] for r in good)
    if staged_bytes_per_batch and good:
        issued += staged_bytes_per_batch * max(r["batches"] for r in good)
    rx = (bus or {}).get("gpm_rx_bytes")
    # The meter's window is a little longer than the consumers': scale it to theirs.
    rx_window = rx * window / bus["window_s"] if rx is not None and window and bus else None
    return {
        "config": config,
        "consumers": results,
        "batch_bytes": batch_bytes,
        "batches_per_s_min": min(rates) if rates else None,
        "batches_per_s_median": statistics.median(rates) if rates else None,
        "delivered": delivered,
        "mismatches": sum(r["mismatches"] for r in good),
        "data_paths": sorted({r["data_path"] for r in good}),
        # Per batch of the stream (each consumer got every one: delivered / consumers).
        "issued_h2d_x_batch": issued / stream / batch_bytes if stream else None,
        "pcie_rx_x_batch": rx_window / stream / batch_bytes
        if rx_window is not None and stream
        else None,
        "bus": bus,
        "consumer_cpu_s": sum(r["cpu_s"] for r in good),
        "producer": {
            k: (status or {}).get(k)
            for k in ("cpu_s", "produced", "bytes_written", "staging", "decoding")
        },
        "gpu_memory_by_pid": {str(k): v for k, v in gpu_memory.items()},
        "producer_log": _tail(home / "producer.log"),
    }


def _status(env: dict[str, str]) -> dict[str, Any] | None:
    done = subprocess.run(
        [sys.executable, "-m", "gpudesk", "loader", "status", NAME, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    with contextlib.suppress(json.JSONDecodeError, IndexError, KeyError, TypeError):
        return dict(json.loads(done.stdout)["loaders"][0])
    return {"error": done.stdout[-500:] + done.stderr[-500:]}


def _meter(device: str) -> Any:
    if device != "cuda":
        return None
    sys.path.insert(0, str(ROOT / "bench"))
    from gpu_dataplane import PcieMeter

    meter = PcieMeter()
    meter.open()
    return meter


@contextlib.contextmanager
def _mps(args: argparse.Namespace, tmp: Path) -> Iterator[None]:
    """With --mps: gpudesk's own MPS daemon in a temporary folder (bench/gpu_dataplane.py's),
    its client variables in this process's environment, so every process started is a client;
    always quit."""
    if not args.mps:
        yield
        return
    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, str(ROOT))
    from gpu_dataplane import _started_mps

    with _started_mps(tmp):
        yield


def _produced(entries: list[dict[str, Any]]) -> int:
    return int(entries[0].get("produced", 0)) if entries and "error" not in entries[0] else 0


def _start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "w") as sink:  # the child keeps its own descriptor
        return subprocess.Popen(argv, env=env, stdout=sink, stderr=subprocess.STDOUT)


def _wait(predicate: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the producer or the consumers did not come up")
        time.sleep(0.05)


def _tail(path: Path, lines: int = 6) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def _pythonpath() -> str:
    parts = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    return os.pathsep.join(p for p in parts if p)


def _line(row: dict[str, Any]) -> str:
    def f(value: Any, digits: int = 2) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    return (
        f"{row['config']:>7}: {f(row['batches_per_s_median'], 1)} batches/s per consumer "
        f"(min {f(row['batches_per_s_min'], 1)}), PCIe RX {f(row['pcie_rx_x_batch'])} x batch, "
        f"{f(row.get('pcie_rx_per_batch_made_x'))} x per batch made, "
        f"issued {f(row['issued_h2d_x_batch'])} x batch, mismatches {row['mismatches']}, "
        f"paths {row['data_paths']}, consumer CPU-s {f(row['consumer_cpu_s'])}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", default="main", choices=("main", "consumer"))
    parser.add_argument("--out", default=None)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--px", type=int, default=224)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--configs", default="host,staged")
    parser.add_argument("--result", default=None)
    parser.add_argument("--decode", action="store_true", help="also the decode section")
    parser.add_argument(
        "--images",
        action="store_true",
        help="the image dataset instead of the synthetic one: host = its workers decode on the "
        "CPU, staged = the producer decodes on its GPU (gpudesk/loader/device_decode.py)",
    )
    parser.add_argument("--cache", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--decode-px", type=int, default=96)
    parser.add_argument("--decode-s", type=float, default=3.0)
    parser.add_argument(
        "--mps", action="store_true", help="producer and consumers as clients of an MPS daemon"
    )
    args = parser.parse_args(argv)
    if args.role == "consumer":
        return consumer_main(args)
    if args.out is None:
        parser.error("--out DIR is required")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"args": vars(args), "started": time.time(), "configs": []}
    with tempfile.TemporaryDirectory(prefix="gd-stage-") as tmp, _mps(args, Path(tmp)):
        if args.images:  # built once, before anything is timed
            from gpudesk.workloads.images import make_dataset

            args.cache = str(Path(tmp) / "images")
            make_dataset(size=IMAGES, image_px=args.px, cache_dir=args.cache)
        report["mps"] = bool(args.mps)
        for config in args.configs.split(","):
            try:
                row = run_config(config, args, Path(tmp))
            except Exception as exc:  # one configuration failing must not lose the others
                row = {"config": config, "error": repr(exc)}
            report["configs"].append(row)
            (out / "loader_staging.json").write_text(json.dumps(report, indent=1))
            print(_line(row) if "error" not in row else f"{config}: {row['error']}", flush=True)
    if args.decode:
        try:
            report["decode"] = decode_section(args)
        except Exception as exc:  # torchvision missing, no nvJPEG: recorded, not lost
            report["decode"] = {"error": repr(exc)}
        (out / "loader_staging.json").write_text(json.dumps(report, indent=1))
        print(json.dumps(report["decode"]), flush=True)
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
