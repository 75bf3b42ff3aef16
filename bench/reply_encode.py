"""What encoding one of the engine's replies costs on its loop: the wire struct a handler
returns, to the frame body's bytes (gpudesk.core.protocol.encode_result).

    python bench/reply_encode.py [--repeat 200] [--json]

Two ways, on the same structs, checked to give the same JSON data:
- json (before): `msgspec.to_builtins` walks the struct into dicts and lists, the stdlib's
  `json.dumps` writes them, and the text is encoded to UTF-8 (gpudesk.text.json_bytes);
- msgspec (now): `msgspec.json.Encoder` writes the struct's bytes in one pass; a string that
  holds a lone surrogate (a job's argv that is not UTF-8) makes it raise, and the reply is then
  written the json way, with the surrogate spelled out (measured too: "with a surrogate").
Replies: a `jobs` page (100 jobs with their usage, JOBS_PAGE_CAP; 10 jobs) and a one-job
listing, built from bench/api_decode.py's payloads. Reported: the median time per reply and
the ratio, over `--repeat` runs after a warm-up.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import msgspec
from api_decode import job  # bench/: on sys.path when run as a script

from gpudesk.api import models
from gpudesk.core import protocol
from gpudesk.text import json_bytes


def before(request_id: int, result: msgspec.Struct) -> bytes:
    """The reply as the engine wrote it before: builtins, then the stdlib's json."""
    return json_bytes(
        {
            "v": protocol.PROTOCOL_VERSION,
            "id": request_id,
            "ok": True,
            "result": msgspec.to_builtins(result),
        }
    )


def median_us(encode: Callable[[], bytes], repeat: int) -> float:
    for _ in range(5):
        encode()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        encode()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def replies() -> dict[str, models.JobList]:
    def listing(count: int, command_word: str = "train.py") -> models.JobList:
        jobs = [job(i) for i in range(1, count + 1)]
        for item in jobs:
            item["spec"]["command"][1] = command_word
        return msgspec.convert({"jobs": jobs, "more": True, "total": 5000}, models.JobList)

    return {
        "jobs page (100 jobs)": listing(100),
        "jobs page (10 jobs)": listing(10),
        "one job": listing(1),
        "jobs page (100 jobs), with a surrogate": listing(100, "tr\udcffin.py"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for what, reply in replies().items():
        old, new = before(7, reply), protocol.encode_result(7, reply)
        assert json.loads(old) == json.loads(new), what  # the same data either way
        old_us = median_us(lambda r=reply: before(7, r), args.repeat)
        new_us = median_us(lambda r=reply: protocol.encode_result(7, r), args.repeat)
        rows.append(
            {
                "reply": what,
                "bytes": len(new),
                "json_bytes": len(old),
                "json_us": round(old_us, 1),
                "msgspec_us": round(new_us, 1),
                "speedup": round(old_us / new_us, 2),
            }
        )
    machine = f"{platform.node()} ({platform.machine()}, Python {platform.python_version()})"
    if args.json:
        print(json.dumps({"machine": machine, "repeat": args.repeat, "rows": rows}, indent=2))
        return 0
    print(f"encode one reply, median of {args.repeat} runs, on {machine}")
    print(f"{'reply':40} {'bytes':>8} {'(json)':>8} {'json µs':>9} {'msgspec µs':>11} {'x':>6}")
    for row in rows:
        print(
            f"{row['reply']:40} {row['bytes']:>8} {row['json_bytes']:>8} {row['json_us']:>9.1f} "
            f"{row['msgspec_us']:>11.1f} {row['speedup']:>6.2f}"
        )
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
