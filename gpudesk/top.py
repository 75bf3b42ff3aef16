"""`gpudesk top`: a plain monitor made for SSH — no curses, 80 columns, no colour needed.

Each frame shows the station (backend, slots), the host's CPU and memory, and every running job
with the CPU and memory of its whole process group. Job data comes from the engine when one runs
(top never starts one); host readings are taken directly. GPU blocks join when the station has
GPU backends.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from gpudesk import render
from gpudesk.engine import hostmetrics
from gpudesk.engine.client import EngineClient, EngineError, engine_pid
from gpudesk.engine.station import StationConfig
from gpudesk.paths import Home

ONCE_WINDOW_S = 0.25  # a single frame still needs two readings for CPU percentages
MIB = 1024 * 1024
GIB = 1024 * MIB


@dataclass
class Snapshot:
    taken_at: float
    backend: str
    engine: dict[str, Any] | None
    host: hostmetrics.HostSample
    jobs: list[dict[str, Any]] = field(default_factory=list)
    groups: dict[int, hostmetrics.GroupSample] = field(default_factory=dict)
    cpu_pct: dict[int, float | None] = field(default_factory=dict)  # by pgid

    @property
    def simulated(self) -> bool:
        return self.backend.startswith("sim:")

    def to_dict(self) -> dict[str, Any]:
        jobs = []
        for job in self.jobs:
            group = self.groups.get(job["pgid"])
            jobs.append({
                "id": job["id"],
                "name": job["name"],
                "slot": job["slot"],
                "runtime_s": _round(render.job_runtime(job)),
                "processes": group.processes if group else 0,
                "cpu_pct": _round(self.cpu_pct.get(job["pgid"])),
                "cpu_s": _round(group.cpu_seconds) if group else None,
                "rss_mib": _round(group.rss_bytes / MIB) if group else None,
            })
        return {
            "taken_at": self.taken_at,
            "backend": self.backend,
            "simulated": self.simulated,
            "engine": self.engine,
            "host": {
                "cpu_pct": self.host.cpu_pct,
                "cores": self.host.cores,
                "memory_used_mib": round(self.host.memory_used / MIB),
                "memory_total_mib": round(self.host.memory_total / MIB),
                "load_avg": list(self.host.load_avg),
            },
            "gpus": [],
            "jobs": jobs,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _engine_view(home: Home) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    pid = engine_pid(home)
    if pid is None:
        return None, []
    try:
        with EngineClient(home, timeout=2.0) as client:
            status = client.request("status")
            jobs = client.request("jobs", states=["running"])["jobs"]
    except EngineError as exc:
        return {"running": True, "pid": pid, "error": str(exc)}, []
    station = status["station"]
    engine = {"running": True, "pid": status["pid"], "policy": station["policy"],
              "slots_busy": status["slots"]["busy"], "slots_total": status["slots"]["total"],
              "queued": status["counts"]["queued"], "backend": station["effective_backend"]}
    return engine, jobs


def take_snapshot(home: Home, previous: Snapshot | None = None) -> Snapshot:
    engine, jobs = _engine_view(home)
    backend = (engine or {}).get("backend") or StationConfig().with_env_override().effective_backend
    groups = hostmetrics.sample_groups(j["pgid"] for j in jobs if j["pgid"])
    snapshot = Snapshot(time.time(), backend, engine, hostmetrics.sample_host(), jobs, groups)
    if previous is not None:
        seconds = snapshot.host.taken_at - previous.host.taken_at
        snapshot.cpu_pct = {pgid: hostmetrics.cpu_percent(previous.groups.get(pgid), group,
                                                          seconds)
                            for pgid, group in groups.items()}
    return snapshot


def _bar(fraction: float, width: int) -> str:
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "[" + "|" * filled + " " * (width - filled) + "]"


def render_frame(snapshot: Snapshot, width: int = 80) -> str:
    host, engine = snapshot.host, snapshot.engine
    label = "SIMULATED " if snapshot.simulated else ""
    clock = time.strftime("%H:%M:%S", time.localtime(snapshot.taken_at))
    if engine is None:
        state = "engine not running"
    elif "error" in engine:
        state = f"engine pid {engine['pid']} not answering"
    else:
        state = (f"engine pid {engine['pid']}, {engine['policy']}, slots "
                 f"{engine['slots_busy']}/{engine['slots_total']}, {engine['queued']} queued")
    lines = [render.clip(f"gpudesk top  {clock}  {label}backend {snapshot.backend}  {state}",
                         width)]
    mem_used, mem_total = host.memory_used / GIB, host.memory_total / GIB
    lines.append(render.clip(
        f"CPU {_bar(host.cpu_pct / 100, 16)} {host.cpu_pct:3.0f}% of {host.cores}  "
        f"MEM {_bar(mem_used / mem_total if mem_total else 0, 10)} "
        f"{mem_used:.1f}/{mem_total:.0f} GiB  load {host.load_avg[0]:.2f}", width))
    lines.append("GPUs: none on this station" if snapshot.backend == "none" else "GPUs: -")
    lines.append("")
    if not snapshot.jobs:
        lines.append("no running jobs")
    else:
        rows = []
        for job in snapshot.to_dict()["jobs"]:
            cpu = "-" if job["cpu_pct"] is None else f"{job['cpu_pct']:.0f}%"
            rss = "-" if job["rss_mib"] is None else f"{job['rss_mib']:.0f} MiB"
            rows.append((job["id"], job["name"], job["slot"] or "-",
                         render.duration(job["runtime_s"]), cpu, rss, job["processes"]))
        name_width = max(8, width - 56)
        lines.append(render.table(("ID", "NAME", "SLOT", "TIME", "CPU", "RSS", "PROCS"), rows,
                                  max_widths={1: name_width}, right=(0, 3, 4, 5, 6)))
    return "\n".join(render.clip(line, width) for line in "\n".join(lines).splitlines())


def _can_redraw(stream: TextIO) -> bool:
    return stream.isatty() and os.environ.get("TERM", "") not in ("", "dumb")


def run_top(home: Home, *, once: bool, as_json: bool, interval: float,
            out: TextIO = sys.stdout) -> None:
    hostmetrics.sample_host()  # primes psutil's CPU counter
    previous = take_snapshot(home)
    if once or as_json:
        time.sleep(ONCE_WINDOW_S)
        snapshot = take_snapshot(home, previous)
        if as_json:
            print(json.dumps(snapshot.to_dict(), indent=2), file=out)
        else:
            print(render_frame(snapshot), file=out)
        return
    redraw = _can_redraw(out)
    try:
        while True:
            time.sleep(interval)
            snapshot = take_snapshot(home, previous)
            frame = render_frame(snapshot)
            out.write(f"\x1b[H\x1b[2J{frame}\n" if redraw else f"{frame}\n\n")
            out.flush()
            previous = snapshot
    except KeyboardInterrupt:
        out.write("\n")
