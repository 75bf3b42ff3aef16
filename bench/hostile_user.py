"""One hostile member of a shared station, all at once (issue 36's must-show). Root only.

A real system engine (tests/shared/station_fixture.py) serves real users (tests/local_users.py).
Ada, at the same time: holds 5,000 connections, sends 12 partial frames announcing 64 MiB and 12
announcing the largest request (8 MiB), subscribes 1,000 times and never reads, runs a job that
holds `flock` on its own output.log while she asks for that log again and again, and (where a
real single-node Slurm can be started, tests/slurm_cluster.py) submits a cluster job naming a
slurm.conf of hers that she then deletes. Meanwhile bob pings the engine 300 times on one
connection. Measured: bob's ping p50/p99/max, the engine's RSS (VmRSS, VmHWM) before, during and
after, what ada's attacks were let hold, and how long an admin's `shutdown` takes to stop it.

    sudo .venv/bin/python bench/hostile_user.py [--pings 300] [--connections 5000]

Prints a Markdown table (docs/benchmarks.md, "Issue 36: one hostile member").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "shared")]

from slurm_cluster import PARTITION, missing_reason, running_cluster  # noqa: E402
from station_fixture import SYSTEM_PYTHON, Station, make_station  # noqa: E402

HOG = TESTS / "security" / "socket_hog.py"
MiB = 1024 * 1024

# bob's pinger: one connection, N pings, each one's latency in seconds (standard library only:
# it sits next to the station's raw_client.py and frames its requests with it)
PINGER = """
import json, socket, sys, time
from raw_client import read_reply, request_frame
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(60)
s.connect(sys.argv[1])
out = []
stop_at = time.monotonic() + float(sys.argv[3])
for i in range(int(sys.argv[2])):
    if time.monotonic() > stop_at:
        break
    frame = request_frame("ping", {}, i)
    t = time.perf_counter()
    s.sendall(frame)
    read_reply(s)
    out.append(time.perf_counter() - t)
    time.sleep(0.02)
print(json.dumps(out))
"""


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of `pid`, in KiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    return found


def report_of(process: subprocess.Popen[str], timeout: float = 300.0) -> dict[str, Any]:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    line = process.stdout.readline() if ready else ""
    if not line:
        err = process.stderr.read() if process.stderr and ready else "no report in time"
        return {"error": err.strip()[-300:]}
    return json.loads(line)


def log_lock_loop(station: Station, job: int, stop: threading.Event, out: dict[str, Any]) -> None:
    """Ada asks for her locked job's log again and again (one raw client each)."""
    times, refused = [], 0
    while not stop.is_set():
        started = time.monotonic()
        try:
            reply = station.call("ada", "log", job=job)
        except (AssertionError, subprocess.TimeoutExpired):
            reply = {}
        times.append(time.monotonic() - started)
        refused += not reply.get("ok")
    out.update(requests=len(times), refused=refused, slowest_s=max(times, default=0.0))


def submit_cluster_job(station: Station, cluster: Any) -> tuple[Path, str]:
    """Ada submits a cluster job naming a slurm.conf of hers (deleted later, `conf.unlink()`).
    Before her flood: during it, her own connections are at her limit and a submit of hers may
    be refused, as it should be."""
    ada_home = Path(f"/home/{station.users['ada'].name}")
    conf = ada_home / "slurm.conf"
    conf.write_text(cluster.conf.read_text())
    os.chown(conf, station.users["ada"].uid, station.users["ada"].gid)
    reply = station.call(
        "ada",
        "submit",
        jobs=[
            {
                "name": "gone-conf",
                "command": ["sleep", "600"],
                "gpus": 0,
                "workdir": str(ada_home),
                "cluster": {"kind": "slurm", "partition": PARTITION, "conf": str(conf)},
            }
        ],
        env={"PATH": "/usr/bin:/bin"},
    )
    return conf, "submitted, then its conf deleted" if reply.get("ok") else str(reply)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pings", type=int, default=300)
    parser.add_argument("--connections", type=int, default=5000)
    parser.add_argument(
        "--slurm-window", type=float, default=120.0, help="seconds of pings after the conf goes"
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench/hostile_user.py makes real users and a system engine: run it as root")
        return 2
    results: dict[str, Any] = {}
    with ExitStack() as stack:
        top = Path(tempfile.mkdtemp(prefix="gdhostile-", dir="/tmp"))
        os.chmod(top, 0o755)
        stack.callback(shutil.rmtree, top, True)
        engine_env: dict[str, str] = {}
        slurm_skip = missing_reason()
        cluster = None
        if slurm_skip is None:
            cluster = stack.enter_context(running_cluster(top / "cluster"))
            engine_env = {"SLURM_CONF": str(cluster.conf), "GPUDESK_SLURM_POLL_S": "0.5"}
        stations = make_station(engine_env=engine_env)
        station = next(stations)
        stack.callback(lambda: next(stations, None))
        assert station.process is not None
        pid = station.process.pid
        for script, text in (("socket_hog.py", HOG.read_text()), ("pinger.py", PINGER)):
            (station.client.parent / script).write_text(text)
        hog = str(station.client.parent / "socket_hog.py")
        pinger = [SYSTEM_PYTHON, str(station.client.parent / "pinger.py"), str(station.socket)]

        with station.popen_as("bob", *pinger, "100", "120") as quiet:
            base = json.loads(quiet.communicate(timeout=120)[0])
        results["before"] = memory(pid)

        # her job holds a lock on its own output.log (its stdout) for as long as it runs
        env = {"PATH": "/usr/bin:/bin"}
        locked = station.submit(
            "ada",
            {"name": "lock", "command": ["flock", "/proc/self/fd/1", "sleep", "600"], "gpus": 0},
            env,
        )
        station.wait_state(locked, "running")
        cluster_conf = None
        if cluster is not None:
            cluster_conf, results["slurm"] = submit_cluster_job(station, cluster)
        else:
            results["slurm"] = f"skipped: {slurm_skip}"
        stop = threading.Event()
        log_loop: dict[str, Any] = {}
        phases: list[tuple[str, list[float], dict[str, int]]] = []

        def pings(what: str, window_s: float) -> None:
            with station.popen_as("bob", *pinger, str(args.pings), str(window_s)) as busy:
                times = json.loads(busy.communicate(timeout=window_s + 120)[0])
            phases.append((what, times, memory(pid)))

        with ExitStack() as attack:
            hogs = {
                "partial 12 x 64 MiB": [hog, str(station.socket), "partial", "12", str(64 * MiB)],
                "partial 12 x 8 MiB": [hog, str(station.socket), "partial", "12", str(8 * MiB)],
                "subscribers 1,000": [hog, str(station.socket), "subscribe", "1000"],
                f"idle {args.connections:,}": [
                    *(hog, str(station.socket), "idle", str(args.connections))
                ],
            }
            running = {
                name: attack.enter_context(station.popen_as("ada", SYSTEM_PYTHON, *argv))
                for name, argv in hogs.items()
            }
            # once every attack is in place (each hog reports then, and holds on)
            results["hogs"] = {name: report_of(process) for name, process in running.items()}
            pings("connections, partial frames, subscribers", 300)
            looper = threading.Thread(
                target=log_lock_loop, args=(station, locked, stop, log_loop), daemon=True
            )
            looper.start()
            pings("+ `log` of her flock-held log, again and again", 300)
            if cluster_conf is not None:
                cluster_conf.unlink()
                pings("+ her cluster job's slurm.conf deleted", args.slurm_window)
            stop.set()
            looper.join(120)
            results["log_loop"] = log_loop
            results["phases"] = phases
        results["after"] = memory(pid)
        started = time.monotonic()
        reply = station.call("admin", "shutdown")
        try:
            station.process.wait(60)
            results["shutdown"] = (reply.get("ok"), time.monotonic() - started)
        except subprocess.TimeoutExpired:
            results["shutdown"] = (reply.get("ok"), None)
        print_table(base, results)
    return 0


def quantiles(times: list[float]) -> str:
    ms = sorted(t * 1000 for t in times)
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
    return f"{statistics.median(ms):.1f} / {p99:.1f} / {ms[-1]:.1f}"


def print_table(base: list[float], results: dict[str, Any]) -> None:
    mib = lambda kib: f"{kib / 1024:.0f}"  # noqa: E731
    before, after = results["before"], results["after"]
    print(f"machine: {platform.node()} {os.cpu_count()} cores; {time.strftime('%Y-%m-%d')}")
    print()
    print("| ada does | bob's pings | bob's ping p50 / p99 / max | engine VmRSS |")
    print("|---|---|---|---|")
    print(f"| nothing | {len(base)} | {quantiles(base)} ms | {mib(before['VmRSS'])} MiB |")
    for what, times, mem in results["phases"]:
        shown = f"{quantiles(times)} ms" if times else "none answered"
        print(f"| {what} | {len(times)} | {shown} | {mib(mem['VmRSS'])} MiB |")
    print(f"| (after, all stopped) | | | {mib(after['VmRSS'])} (VmHWM {mib(after['VmHWM'])}) MiB |")
    print()
    print("| ada's attack | what the engine let her hold |")
    print("|---|---|")
    for name, hog in results["hogs"].items():
        if "error" in hog:
            print(f"| {name} | failed: {hog['error']} |")
            continue
        reasons = "; ".join(f"{n} x {r[:100]}" for r, n in hog["reasons"].items())
        print(
            f"| {name} | held {hog['held']}, refused {hog['refused']}, closed without a "
            f"word {hog['closed_silently']}: {reasons or '-'} |"
        )
    loop = results["log_loop"]
    print(
        f"| `log` of her flock-held log | {loop.get('requests')} requests, "
        f"{loop.get('refused')} refused, slowest {loop.get('slowest_s', 0):.2f} s |"
    )
    print(f"| cluster job, slurm.conf deleted | {results['slurm']} |")
    ok, took = results["shutdown"]
    said = f"stopped in {took:.2f} s" if took is not None else "did not stop within 60 s"
    print(f"| admin's `shutdown` | answered ok={ok}; {said} |")


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
