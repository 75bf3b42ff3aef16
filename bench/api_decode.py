"""What decoding the engine's replies strictly costs, by model technology: the measurement that
chose msgspec for gpudesk.api.models.

    python bench/api_decode.py [--jobs 1000] [--repeat 30] [--json]

The same models three ways, all strict (an unknown field, a missing one or a wrong type fails):
- msgspec: the product's `msgspec.Struct` models, decoded from the reply's bytes in one pass;
- dataclasses: `json.loads`, then a generic checker walking frozen dataclasses built from the
  same field lists (what a hand-written stdlib decoder does);
- pydantic: v2 models built from the same field lists (`extra="forbid"`, strict), validated
  from the JSON bytes (`TypeAdapter.validate_json`).
Two replies: `jobs` with `--jobs` jobs and their usage (the desk asks for it every few
seconds), and one `telemetry` event of a 4-GPU station with MIG slices and 16 running jobs
(the desk decodes one per sample). Reported: the median decode time of each, the ratio to
msgspec measured in the same run, and each library's import time in a fresh interpreter
(what `gpudesk top` would pay at start).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import subprocess
import sys
import time
import types
import typing
from collections.abc import Callable
from typing import Any

import msgspec

from gpudesk.api import models


# -------------------------------------------------------------------------------- payloads
def usage(attempt: int | None = None) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "gpu_j": 51234.5,
        "gpu_idle_j": 1200.0,
        "gpu_above_idle_j": 50034.5,
        "gpu_source": "nvml",
        "split": "sm share",
        "estimate": False,
        "cpu_j": 812.2,
        "total_j": 52046.7,
        "carbon_g": 6.867,
        "cpu_s": 88.12,
        "rss_peak_mib": 2210.4,
        "io_read_mib": 120.5,
        "io_write_mib": 3.2,
    }
    if attempt is not None:
        figures |= {"attempt": attempt, "gpu_memory_peak_mib": 8123.0, "gpu_sm_mean_pct": 41.5}
    return figures


def job(job_id: int) -> dict[str, Any]:
    return {
        "id": job_id,
        "name": f"sweep-lr{job_id % 7}-bs{job_id % 5}",
        "user": "ada",
        "uid": 1000,
        "state": "running" if job_id % 3 else "succeeded",
        "group": "sweep@20261124-080000.4242",
        "submitted_at": 1_790_000_000.0 + job_id,
        "started_at": 1_790_000_100.0 + job_id,
        "ended_at": None,
        "attempts": 1,
        "max_attempts": 1,
        "exit_code": None,
        "reason": None,
        "cancel_requested": False,
        "held": False,
        "attempts_before_requeue": 0,
        "spec": {
            "name": f"sweep-lr{job_id % 7}-bs{job_id % 5}",
            "command": ["python", "train.py", "--lr", "0.01", "--bs", "64"],
            "shell": False,
            "workdir": "/home/ada/sweep",
            "gpus": 1,
            "memory_gb": 8.0,
            "sm_pct": 40.0,
            "dataset": "cifar10",
            "selection": None,
            "priority": 0,
            "max_attempts": 1,
            "group": "sweep@20261124-080000.4242",
        },
        "slot": "gpu:1/mps",
        "gpus": [1],
        "mode": "mps",
        "mig_slice": None,
        "pgid": 40000 + job_id,
        "log": f"/home/ada/.local/state/gpudesk/jobs/{job_id}/1/output.log",
        "loader": "cifar10",
        "usage": usage() | {"grid_g_per_kwh": 475.0, "per_attempt": [usage(1)]},
    }


def process(pid: int, mig_device: int | None = None) -> dict[str, Any]:
    return {
        "pid": pid,
        "used_memory_mib": 4096.0,
        "sm_pct": 20.0,
        "mig_device": mig_device,
        "job_id": pid - 40000,
    }


def gpu(index: int) -> dict[str, Any]:
    mig = index == 3
    return {
        "index": index,
        "uuid": f"GPU-{index:08d}-0000-0000-0000-000000000000",
        "name": "NVIDIA A100-SXM4-40GB",
        "lost": False,
        "memory_used_mib": 20480.0,
        "memory_total_mib": 40536.0,
        "kernel_active_pct": 71.0,
        "sm_activity_pct": 48.5,
        "power_w": 231.4,
        "power_limit_w": 400.0,
        "energy_j": 812345.6,
        "energy_source": "nvml",
        "idle_power_w": 52.0,
        "temperature_c": 61.0,
        "sm_clock_mhz": 1410.0,
        "memory_clock_mhz": 1215.0,
        "mig_enabled": mig,
        "mig_devices": [
            {
                "index": slot,
                "uuid": f"MIG-{index}-{slot}",
                "name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
                "gpu_instance_id": 1 + slot,
                "compute_instance_id": 0,
                "memory_used_mib": 4096.0,
                "memory_total_mib": 19968.0,
                "sm_count": 42,
                "processes": [process(40000 + 12 + slot, slot)],
            }
            for slot in (range(2) if mig else ())
        ],
        "processes": [process(40000 + 4 * index + k) for k in range(4)],
        "jobs": [4 * index + k for k in range(4)],
        "unavailable": [],
    }


def telemetry_event() -> dict[str, Any]:
    return {
        "v": 1,
        "taken_at": 1_790_000_500.0,
        "backend": "sim:dgx-station-a100",
        "simulated": True,
        "banner": None,
        "sampling_since": 1_790_000_000.0,
        "interval_s": 1.0,
        "host": {
            "cpu_pct": 35.5,
            "cores": 64,
            "memory_used_mib": 120000,
            "memory_total_mib": 515000,
            "load_avg": [10.5, 9.8, 9.1],
            "cpu_energy_j": 123456.7,
            "cpu_energy_note": None,
            "grid_g_per_kwh": 475.0,
            "gpu_energy_carbon_g": 430.123,
        },
        "gpus": [gpu(i) for i in range(4)],
        "jobs": [
            {
                "id": j,
                "attempt_id": j,
                "name": f"job-{j}",
                "slot": "gpu:0/mps",
                "gpus": [j // 4],
                "runtime_s": 500.0,
                "processes": 3,
                "cpu_pct": 95.0,
                "cpu_s": 470.2,
                "rss_mib": 2100.5,
                "io_read_mib": 10.5,
                "io_write_mib": 0.5,
                "gpu_memory_mib": 4096.0,
                "gpu_sm_pct": 20.0,
                "energy": {k: v for k, v in usage(1).items() if k != "attempt"},
            }
            for j in range(16)
        ],
    }


# ------------------------------------------------------------ the same models, other ways
def _field_types(struct: type[msgspec.Struct]) -> dict[str, Any]:
    hints = typing.get_type_hints(struct)
    return {f.name: hints[f.name] for f in msgspec.structs.fields(struct)}


def _defaults(struct: type[msgspec.Struct]) -> dict[str, Any]:
    return {
        f.name: f.default
        for f in msgspec.structs.fields(struct)
        if f.default is not msgspec.NODEFAULT
    }


def _convert_type(hint: Any, make: Callable[[type[msgspec.Struct]], Any]) -> Any:
    """A type hint with every msgspec Struct in it replaced by `make(struct)`."""
    if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
        return make(hint)
    args = typing.get_args(hint)
    if not args:
        return hint
    origin = typing.get_origin(hint)
    converted = tuple(_convert_type(a, make) for a in args)
    if origin in (types.UnionType, typing.Union):
        return typing.Union[converted]  # noqa: UP007 (built at run time)
    if origin is typing.Literal:
        return hint
    return origin[converted] if len(converted) > 1 else origin[converted[0]]


def dataclass_models(root: type[msgspec.Struct]) -> Any:
    made: dict[type, Any] = {}

    def make(struct: type[msgspec.Struct]) -> Any:
        if struct not in made:
            defaults = _defaults(struct)
            fields = []
            for name, hint in _field_types(struct).items():
                converted = _convert_type(hint, make)
                if name in defaults:
                    fields.append((name, converted, dataclasses.field(default=defaults[name])))
                else:
                    fields.append((name, converted))
            fields.sort(key=lambda f: len(f) == 3)  # required before defaulted
            made[struct] = dataclasses.make_dataclass(struct.__name__, fields, frozen=True)
            made[struct].__hints__ = {f[0]: f[1] for f in fields}
        return made[struct]

    return make(root)


def check(hint: Any, value: Any, path: str) -> Any:
    """Strict conversion of decoded JSON to `hint` (dataclasses built above)."""
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise TypeError(f"{path}: expected an object")
        hints = hint.__hints__
        unknown = value.keys() - hints.keys()
        if unknown:
            raise TypeError(f"{path}: unknown field {sorted(unknown)[0]}")
        return hint(**{k: check(hints[k], v, f"{path}.{k}") for k, v in value.items()})
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        for arg in args:
            try:
                return check(arg, value, path)
            except TypeError:
                continue
        raise TypeError(f"{path}: no type of {hint} fits")
    if origin is list:
        if not isinstance(value, list):
            raise TypeError(f"{path}: expected a list")
        return [check(args[0], v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise TypeError(f"{path}: expected an object")
        key = int if args[0] is int else str
        return {key(k): check(args[1], v, f"{path}.{k}") for k, v in value.items()}
    if origin is typing.Literal:
        if value not in args:
            raise TypeError(f"{path}: not one of {args}")
        return value
    if hint is Any:
        return value
    if hint is type(None):
        if value is not None:
            raise TypeError(f"{path}: expected null")
        return None
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
        raise TypeError(f"{path}: expected {hint.__name__}")
    return value


def pydantic_model(root: type[msgspec.Struct]) -> Any:
    import pydantic

    made: dict[type, Any] = {}

    def make(struct: type[msgspec.Struct]) -> Any:
        if struct not in made:
            defaults = _defaults(struct)
            fields = {
                name: (_convert_type(hint, make), defaults.get(name, ...))
                for name, hint in _field_types(struct).items()
            }
            config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)
            made[struct] = pydantic.create_model(struct.__name__, __config__=config, **fields)
        return made[struct]

    return pydantic.TypeAdapter(make(root))


# ------------------------------------------------------------------------------ measuring
def median_ms(decode: Callable[[bytes], Any], raw: bytes, repeat: int) -> float:
    decode(raw)  # warm caches
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        decode(raw)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def import_ms(statement: str, runs: int = 5) -> float:
    """Median wall time of a fresh interpreter running `statement`, less an empty one's."""

    def run(code: str) -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - started

    base = statistics.median(run("pass") for _ in range(runs))
    return max(0.0, statistics.median(run(statement) for _ in range(runs)) - base) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    payloads = {
        f"jobs ({args.jobs} jobs, with usage)": (
            models.JobList,
            json.dumps({"jobs": [job(i) for i in range(1, args.jobs + 1)]}).encode(),
        ),
        "telemetry event (4 GPUs, 16 jobs)": (
            models.TelemetryEvent,
            json.dumps(telemetry_event()).encode(),
        ),
    }
    rows = []
    for what, (model, raw) in payloads.items():
        as_dataclass = dataclass_models(model)
        as_pydantic = pydantic_model(model)
        ways: dict[str, Callable[[bytes], Any]] = {
            "msgspec": msgspec.json.Decoder(model).decode,
            "dataclasses": lambda raw, dc=as_dataclass: check(dc, json.loads(raw), "$"),
            "pydantic": as_pydantic.validate_json,
        }
        # the three must agree on the data before their speed means anything
        reference = msgspec.to_builtins(ways["msgspec"](raw))
        assert dataclasses.asdict(ways["dataclasses"](raw)) == reference
        assert as_pydantic.dump_python(ways["pydantic"](raw)) == reference
        timings = {name: median_ms(decode, raw, args.repeat) for name, decode in ways.items()}
        for name, ms in timings.items():
            rows.append(
                {
                    "reply": what,
                    "bytes": len(raw),
                    "technology": name,
                    "median_ms": round(ms, 3),
                    "vs_msgspec": round(ms / timings["msgspec"], 1),
                }
            )
    imports = {
        "msgspec": import_ms("import msgspec"),
        "pydantic": import_ms("import pydantic; pydantic.BaseModel"),
        "dataclasses": import_ms("import dataclasses, json"),
    }
    machine = f"{platform.node()} ({platform.machine()}, {platform.python_version()})"
    if args.json:
        print(json.dumps({"machine": machine, "decode": rows, "import_ms": imports}, indent=2))
        return 0
    print(f"strict decode, median of {args.repeat} runs, on {machine}")
    print(f"{'reply':38} {'bytes':>9} {'technology':12} {'ms':>9} {'x msgspec':>9}")
    for row in rows:
        print(
            f"{row['reply']:38} {row['bytes']:>9} {row['technology']:12} "
            f"{row['median_ms']:>9.3f} {row['vs_msgspec']:>9.1f}"
        )
    print(
        "import in a fresh interpreter (ms, over an empty one): "
        + ", ".join(f"{name} {ms:.0f}" for name, ms in imports.items())
    )
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
