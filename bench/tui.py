"""What the idle desk costs: CPU of the `gpudesk` TUI process and bytes it writes to the terminal.

    python bench/tui.py [--seconds 60] [--warmup 10] [--size 80x24] [--refresh 1.0,0.5]
                        [--jobs 50] [--json]

Starts a fresh engine in a temporary GPUDESK_HOME on a SIMULATED DGX Station A100 (4 GPUs,
sampling every 1 s), submits `--jobs` jobs (4 sleeping jobs that fill the GPUs, the rest queued
behind them), then runs the real desk (`python -m gpudesk`, station screen) in a pseudo-terminal
of `--size`, as an SSH session would see it. After `--warmup` seconds it measures, over
`--seconds`: the desk's CPU time (user + system of the desk process and any children) as a
share of one core, and the bytes the desk wrote to the terminal per second (everything read
from the pty master: the real output an SSH connection would carry). It then presses `q`,
checks the desk exits and the jobs are still running, and stops everything.
Targets: <= 5 % of one core and <= 20 KiB/s at 80x24 at the default refresh.

Then, with `--switch-rounds N` (default 5; 0 leaves it out), it presses 2, 3, 4, 1 (queue,
loaders, MIG, station) N times round and times each key to its repaint: from writing the key
to the last byte of the output it causes (the output then quiet for QUIET_S). Target: a key
answered within 100 ms on an idle machine. The samples' own redraws (one a second) can fall
into a window and lengthen it: the median is the figure, the maximum says how much. Each key
waits a random 0-1 s (seeded) after the terminal went quiet: a round of four keys lasts about
one sample period, and pressed at once one key kept meeting the sample's redraw run after run
(the MIG key's median 105-131 ms in some runs, 60-65 ms in others, its own paint ~60 ms in
both: the desk's trace showed the sample's header redraw landing 40-60 ms after it).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import pty
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
SLEEP = [sys.executable, "-c", "import time; time.sleep(3600)"]
QUIET_S = 0.08  # no output for this long: the repaint a key caused is over
SWITCH_KEYS = (b"2", b"3", b"4", b"1")  # queue, loaders, MIG, station


def gpudesk(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUDESK_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "gpudesk", *args],
        env=env,
        text=True,
        capture_output=True,
        check=check,
    )


def start_station(home: Path, jobs: int) -> None:
    from gpudesk.api.connection import Connection, start_engine
    from gpudesk.core.station import StationConfig
    from gpudesk.paths import Home

    desk_home = Home(home)
    start_engine(
        desk_home,
        StationConfig(backend="sim:dgx-station-a100", policy="auto", sample_interval=1.0, slots=4),
    )
    with Connection(desk_home) as client:
        specs = [
            {
                "name": f"fill-{i}",
                "command": SLEEP,
                "gpus": 1,
                "memory_gb": 36.0,
                "sm_pct": 85.0,
                "workdir": str(home),
            }
            for i in range(4)
        ]
        specs += [
            {
                "name": f"sweep-{i}",
                "command": SLEEP,
                "gpus": 1,
                "memory_gb": 30.0,
                "sm_pct": 70.0,
                "workdir": str(home),
            }
            for i in range(max(0, jobs - 4))
        ]
        client.request("submit", jobs=specs, env=dict(os.environ))
        deadline = time.monotonic() + 30
        while client.request("status")["counts"].get("running", 0) < 4:
            if time.monotonic() > deadline:
                raise SystemExit("the 4 GPU jobs did not start")
            time.sleep(0.2)


def stop_station(home: Path) -> None:
    from gpudesk.api.connection import Connection
    from gpudesk.paths import Home

    with Connection(Home(home), timeout=10) as client:
        # every live job, page after page (a `jobs` reply is a page: 300 jobs are 3 of them)
        ids: list[int] = []
        args: dict[str, Any] = {"states": ["queued", "running"]}
        while True:
            page = client.request("jobs", **args)
            ids += [j["id"] for j in page["jobs"]]
            if not page["more"]:
                break
            args["after_id"] = page["after_id"]
        if ids:
            client.request("cancel", jobs=ids, grace=0)
    time.sleep(1.0)
    gpudesk(home, "engine", "stop", check=False)


def cpu_of(proc: psutil.Process) -> float:
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            times = p.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def switch_latencies(master: int, rounds: int, seed: int = 37) -> list[tuple[str, float]]:
    """(key, seconds from the key written to the end of the repaint it caused), each press."""
    import random

    rng = random.Random(seed)
    latencies = []
    for key in SWITCH_KEYS * rounds:
        _drain(master, QUIET_S)  # start from a quiet terminal
        # out of step with the samples (one a second): a key at a random phase of the period
        time.sleep(rng.uniform(0.0, 1.0))
        _drain(master, QUIET_S)
        pressed = time.monotonic()
        os.write(master, key)
        last = None
        while True:
            ready, _, _ = select.select([master], [], [], QUIET_S)
            if not ready:
                if last is not None or time.monotonic() - pressed > 5.0:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            last = time.monotonic()
        latencies.append((key.decode(), (last or time.monotonic()) - pressed))
    return latencies


def _drain(master: int, quiet: float) -> None:
    """Read until the terminal has been quiet for `quiet` seconds (at most 3 s)."""
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], quiet)
        if not ready:
            return
        try:
            if not os.read(master, 65536):
                return
        except OSError:
            return


def measure(
    home: Path,
    columns: int,
    rows: int,
    refresh: float,
    warmup: float,
    seconds: float,
    switch_rounds: int = 0,
) -> dict[str, Any]:
    env = {
        **os.environ,
        "GPUDESK_HOME": str(home),
        "TERM": "xterm-256color",
        "COLUMNS": str(columns),
        "LINES": str(rows),
    }
    env.pop("NO_COLOR", None)
    pid, master = pty.fork()
    if pid == 0:  # the desk, in the pseudo-terminal
        os.execve(sys.executable, [sys.executable, "-m", "gpudesk", "--refresh", str(refresh)], env)
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    os.kill(pid, signal.SIGWINCH)
    proc = psutil.Process(pid)

    def pump(until: float) -> int:
        count = 0
        while True:
            left = until - time.monotonic()
            if left <= 0:
                return count
            ready, _, _ = select.select([master], [], [], left)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    return count
                if not data:
                    return count
                count += len(data)

    pump(time.monotonic() + warmup)
    cpu_before, started = cpu_of(proc), time.monotonic()
    written = pump(started + seconds)
    elapsed = time.monotonic() - started
    cpu = cpu_of(proc) - cpu_before
    presses = switch_latencies(master, switch_rounds) if switch_rounds else []
    latencies = sorted(seconds for _, seconds in presses)
    by_key = {
        key: round(1000 * sorted(t for k, t in presses if k == key)[switch_rounds // 2], 1)
        for key in dict.fromkeys(k for k, _ in presses)
    }
    os.write(master, b"q")
    exit_deadline = time.monotonic() + 15
    exited = False
    while time.monotonic() < exit_deadline:
        pump(time.monotonic() + 0.2)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            exited = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            break
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    os.close(master)
    return {
        "size": f"{columns}x{rows}",
        "refresh_s": refresh,
        "seconds": round(elapsed, 1),
        "cpu_pct_of_core": round(100.0 * cpu / elapsed, 2),
        "bytes_per_s": round(written / elapsed, 1),
        "kib_per_s": round(written / elapsed / 1024, 2),
        "quit_cleanly": exited,
        **(
            {
                "switch_ms_median": round(1000 * latencies[len(latencies) // 2], 1),
                "switch_ms_p90": round(1000 * latencies[int(len(latencies) * 0.9)], 1),
                "switch_ms_max": round(1000 * latencies[-1], 1),
                "switches": len(latencies),
                "switch_ms_median_by_key": by_key,
                # every press in order, by key: which presses a median hides
                "switch_ms_by_key": {
                    key.decode(): [round(1000 * t, 1) for k, t in presses if k == key.decode()]
                    for key in SWITCH_KEYS
                },
            }
            if latencies
            else {}
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--size", default="80x24")
    parser.add_argument("--refresh", default="1.0", help="comma-separated refresh intervals")
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--switch-rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    columns, rows = (int(v) for v in args.size.lower().split("x"))
    results = []
    with tempfile.TemporaryDirectory(prefix="gpudesk-tui-") as tmp:
        home = Path(tmp) / "home"
        start_station(home, args.jobs)
        try:
            for refresh in (float(v) for v in args.refresh.split(",")):
                result = measure(
                    home, columns, rows, refresh, args.warmup, args.seconds, args.switch_rounds
                )
                status = json.loads(gpudesk(home, "engine", "status", "--json").stdout)
                result["jobs_running_after_quit"] = status["counts"].get("running", 0)
                results.append(result)
        finally:
            stop_station(home)
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}",
        "jobs": args.jobs,
        "results": results,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{report['date']}  {report['machine']}; SIMULATED DGX Station A100, {args.jobs} jobs")
    print(
        f"{'size':<8}{'refresh':>8}{'CPU % core':>12}{'KiB/s':>8}  quit  running after"
        "  key to repaint, ms: median p90 max"
    )
    for r in results:
        switch = (
            f"{r['switch_ms_median']:>8.0f} {r['switch_ms_p90']:>4.0f} {r['switch_ms_max']:>4.0f}"
            if "switches" in r
            else ""
        )
        print(
            f"{r['size']:<8}{r['refresh_s']:>7.1f}s{r['cpu_pct_of_core']:>12.2f}"
            f"{r['kib_per_s']:>8.2f}  {'ok' if r['quit_cleanly'] else 'NO'}    "
            f"{r['jobs_running_after_quit']:<13}{switch}"
        )
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
