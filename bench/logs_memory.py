"""`gpudesk logs` of a large log: the reader's peak memory and wall time, plain and `--json`.

    python bench/logs_memory.py [--mib 100] [--json]

Starts a personal engine in a fresh home (no GPUs), runs one job that writes `--mib` MiB of
lines (ASCII with an escape sequence, an accented letter and an emoji in each, as a progress
bar's log has, and a few bytes that are not UTF-8 at its end), then runs `gpudesk logs` on it
as a process three ways: plain into /dev/null, `--json` (the whole log in one JSON object) and
`--json -n 10`. Each one's peak RSS is its own (wait4's ru_maxrss), its wall time measured
around it. `--json` writes the output as it reads it, so its peak should not grow with the
log (docs/benchmarks.md, "logs --json of a large log").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WRITER = """
import sys
line = ("x" * 90 + " \\x1b[31m\\u00e9\\U0001F600\\n").encode()
out = sys.stdout.buffer
for _ in range({mib} * 1024 * 1024 // len(line)):
    out.write(line)
out.write(b"bad \\xff\\xfe bytes\\n")
"""


def gpudesk(*args: str, env: dict[str, str], stdout: int | None = None) -> tuple[int, float, int]:
    """(exit status, wall seconds, peak RSS in KiB) of one `gpudesk` process."""
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "gpudesk", *args], env=env, stdout=stdout, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, time.perf_counter() - started, usage.ru_maxrss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=100, help="the log's size in MiB")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpudesk-logs-") as tmp:
        env = {**os.environ, "GPUDESK_HOME": str(Path(tmp) / "home")}
        script = Path(tmp) / "writer.py"
        script.write_text(WRITER.format(mib=args.mib))
        try:
            submitted = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gpudesk",
                    "submit",
                    "--parsable",
                    "--",
                    sys.executable,
                    str(script),
                ],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            job = submitted.stdout.strip()
            subprocess.run(
                [sys.executable, "-m", "gpudesk", "wait", "-q", job], env=env, check=True
            )
            rows = []
            with open(os.devnull, "wb") as devnull:
                for label, extra in (
                    ("plain", ()),
                    ("--json", ("--json",)),
                    ("--json -n 10", ("--json", "-n", "10")),
                ):
                    code, wall, rss = gpudesk("logs", job, *extra, env=env, stdout=devnull.fileno())
                    rows.append({"how": label, "exit": code, "wall_s": wall, "peak_rss_kib": rss})
        finally:
            subprocess.run(
                [sys.executable, "-m", "gpudesk", "engine", "stop"],
                env=env,
                capture_output=True,
                check=False,
            )
    if args.json:
        print(json.dumps({"mib": args.mib, "machine": platform.node(), "rows": rows}, indent=2))
        return 0
    print(f"gpudesk logs of a {args.mib} MiB log ({platform.node()}, {os.cpu_count()} cores)")
    print(f"{'how':<14} {'exit':>4} {'wall s':>7} {'peak RSS MiB':>13}")
    for row in rows:
        print(
            f"{row['how']:<14} {row['exit']:>4} {row['wall_s']:>7.2f} "
            f"{row['peak_rss_kib'] / 1024:>13.1f}"
        )
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
