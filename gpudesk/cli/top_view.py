"""`gpudesk top`: a plain monitor made for SSH — no curses, 80 columns, no colour needed.

Each frame shows the station (backend, engine state), the host's CPU and memory, one block per
GPU (SM activity, kernel-active time, memory, power, energy in Wh since sampling began, with
that time, MIG devices and the jobs on it) and every running job (while one is suspended, a
STATE column says SUSPENDED or running). `--json` keeps joules.

When an engine runs for this home, top shows what the engine's sampler sees (it never starts
one); otherwise it samples the station directly, which for `--once` and `--json` means two
readings 0.12 s apart. A top left open asks again whether an engine answers, every
`top_engine.RETRY_S` on a thread of its own (gpudesk.cli.top_engine), and shows the engine's view
again once one does: top started before the engine, or the engine restarted or paused, comes
back to it as htop and nvitop users expect.

A frame is drawn from a `TopView`, which is also what `--json` prints: the snapshot as the wire
carries it (the direct sampler makes the same `Snapshot`), with `engine` from `EngineSummary`
and `jobs_known` false where the jobs shown are not known to be all (sampled directly in a home
where an engine has run: its jobs run on without it).
"""

from __future__ import annotations

import logging
import os
import sys
import textwrap
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from gpudesk import render
from gpudesk.api.connection import who_starts
from gpudesk.api.errors import EngineError
from gpudesk.cli.interrupts import INTERRUPTS
from gpudesk.cli.top_engine import (
    ASK_TIMEOUT_S,
    EngineProbe,
    EngineSummary,
    engine_status,
    engine_view,
)
from gpudesk.cli.top_frame import fit_rows
from gpudesk.cli.top_keys import key_reader, quits
from gpudesk.cli.top_screen import alternate_screen, carried, drawing_for, window
from gpudesk.core.station import StationConfig
from gpudesk.paths import Home
from gpudesk.text import json_text
from gpudesk.units import MIB_PER_GIB, watt_hours

if TYPE_CHECKING:
    from gpudesk.api.models import GpuView, JobTelemetry, ProcessView, Snapshot
    from gpudesk.hw.telemetry.monitor import Monitor

DIRECT_WINDOW_S = 0.12  # GPM (>= 0.1 s apart), CPU % and energy all need two readings
GIB = MIB_PER_GIB
WIDTH = 80  # a frame into a pipe or a file, without $COLUMNS
BAR = 16  # the SM and memory bars: room for "energy 12.5 Wh since 21:40 (integrated)"


@dataclass
class Source:
    """Where frames come from: the engine, or a monitor of our own."""

    home: Home
    engine: EngineSummary | None = None
    monitor: Monitor | None = None  # when sampling directly
    note: str | None = None  # of the backend sampled directly
    engine_note: str | None = None  # why the engine's view is not shown
    explicit: bool = False  # the backend sampled directly was named, not found by `auto`
    requested: str | None = None  # GPUDESK_BACKEND, where it names one
    probe: EngineProbe | None = None  # a live top sampling directly: asks for the engine again

    def close(self) -> None:
        if self.monitor is not None:
            self.monitor.close()


@dataclass(frozen=True)
class TopView:
    """One frame's station: its snapshot and what top says around it."""

    snapshot: Snapshot
    source: str  # "engine": the engine's sampler; "direct": top sampled the station itself
    engine: EngineSummary | None
    note: str | None  # why top samples directly, a backend's problem: shown under the header
    jobs_known: bool = True  # the jobs shown are all that run (see the module's docstring)
    # GPUs whose MIG mode a direct simulator cannot know (_simulated_mig_unknown)
    mig_unknown: frozenset[int] = frozenset()

    def to_json(self) -> dict[str, Any]:
        """`top --json`: the snapshot's fields, every one (null where unknown, as the direct
        sampler always printed them), then top's own."""
        view: dict[str, Any] = _every_field(self.snapshot)
        for gpu in view["gpus"]:
            if gpu["index"] in self.mig_unknown:
                gpu["mig_enabled"], gpu["mig_unknown"] = None, True
        view.update(
            source=self.source,
            engine=None if self.engine is None else self.engine.to_json(),
            note=self.note,
            jobs_known=self.jobs_known,
        )
        return view


def _every_field(value: Any) -> Any:
    """A wire struct as JSON-ready builtins with each of its fields, those at their default
    too (the wire leaves those out: `WireModel`'s omit_defaults)."""
    fields = getattr(value, "__struct_fields__", None)
    if fields is not None:
        return {name: _every_field(getattr(value, name)) for name in fields}
    if isinstance(value, list):
        return [_every_field(item) for item in value]
    if isinstance(value, dict):
        return {key: _every_field(item) for key, item in value.items()}
    return value


def open_source(home: Home, env: dict[str, str] | None = None) -> Source:
    """The engine when it runs and watches the backend asked for, else direct sampling."""
    env = dict(os.environ) if env is None else env
    requested = env.get("GPUDESK_BACKEND") or None
    engine = engine_status(home)
    if engine is not None and engine.watches(requested):
        return Source(home, engine, requested=requested)
    backend_name = StationConfig().with_env_override(env).backend
    from gpudesk.hw.telemetry.backend import make_backend
    from gpudesk.hw.telemetry.monitor import Monitor

    backend = make_backend(backend_name)
    source = Source(
        home, engine, Monitor(backend), explicit=backend_name == "nvml", requested=requested
    )
    source.engine_note = _engine_note(home, engine, requested)
    if backend_name == "auto" and backend.name == "none":
        from gpudesk.hw.telemetry.nvml import nvml_problem

        # auto found no driver: say so, rather than a bare "none" a user takes for a bug
        why = nvml_problem() or "no NVIDIA driver answered when top started"
        source.note = f"no GPUs shown: GPUDESK_BACKEND=auto looked for NVML and {why}"
    return source


def _engine_note(
    home: Home, engine: EngineSummary | None, requested: str | None, lost: bool = False
) -> str | None:
    """Why top samples the station itself while `engine` is the engine's state (None: none
    runs; `lost`: one this top showed went away)."""
    if engine is None and home.is_system:  # its members' jobs run on: none of them is known
        return (
            f"{home.description} is not running; {who_starts(home)}. Its jobs are not known "
            "meanwhile; sampling this host directly, and top shows the engine's view again "
            "once it answers"
        )
    if engine is None:
        return (
            "the engine stopped; sampling directly; top shows the engine's view again once it "
            "runs (`gpudesk engine start`)"
            if lost
            else None
        )
    if engine.error is not None:
        return (
            f"the engine (pid {engine.pid}) is not answering; sampling directly; top shows "
            "its view again once it answers"
        )
    if not engine.watches(requested):
        return (
            f"the engine watches {engine.backend}; showing "
            f"GPUDESK_BACKEND={requested}, sampled directly"
        )
    return f"the engine (pid {engine.pid}) has no sample yet; sampling directly meanwhile"


class BackendDown(Exception):
    """The backend the user asked for by name cannot start: top has nothing to show."""


class StationDown(Exception):
    """A station's engine is not running: a frame of `--once` or `--json` could not say which
    of its members' jobs run, so it is not printed (the message: what `queue` says)."""


def _check_station(source: Source) -> None:
    if source.home.is_system and source.engine is None:
        from gpudesk.api.client import Client

        try:  # its refusal is the paragraph every command gives (`gpudesk queue`)
            with Client.attach(source.home, timeout=ASK_TIMEOUT_S) as client:
                client.ping()
        except EngineError as exc:
            raise StationDown(str(exc)) from None
        raise StationDown(f"{source.home.description} did not answer; try again")


def _check_backend(source: Source) -> None:
    """An explicitly chosen backend (GPUDESK_BACKEND=nvml) that cannot start ends top at
    once, as nvidia-smi, nvitop and gpustat end without a driver; `auto` shows the CPU."""
    monitor = source.monitor
    if source.explicit and monitor is not None and monitor.open_problem:
        raise BackendDown(
            f"GPUDESK_BACKEND={monitor.backend.name}: {monitor.open_problem}. Install or load "
            "the NVIDIA driver, or set GPUDESK_BACKEND=auto (or none) to watch the CPU only."
        )


def take_view(source: Source, *, fresh: bool = False) -> TopView:
    """One station view (`--json` prints it). `fresh` (the first frame) gives a direct
    monitor its two readings and waits for an engine's first sample; later frames sampled
    directly take the engine's view again once the engine answers (EngineProbe)."""
    if source.monitor is None:
        view = _from_engine(source, wait=fresh)
        if view is not None:
            return view
        source.monitor = _direct_monitor()  # the engine went away, or stopped answering
        source.engine_note = _engine_note(source.home, source.engine, source.requested, True)
    elif not fresh:
        view = _engine_again(source)
        if view is not None:
            return view
    monitor = source.monitor
    if fresh or monitor.latest is None:
        monitor.ingest(monitor.collect())
        time.sleep(DIRECT_WINDOW_S)
    snapshot = monitor.ingest(monitor.collect())
    note = "; ".join(filter(None, [source.engine_note, source.note])) or None
    from gpudesk.cli.no_engine import never_ran

    # where no engine has run there are no gpudesk jobs; where one has, they run on without
    # it, and a station's members' always may (its state folder is not the client's to look in)
    jobs_known = not source.home.is_system and never_ran(source.home)
    # nothing has given the simulated GPUs a MIG layout there either: the direct simulator's
    # whole GPUs are what there is
    unknown = _simulated_mig_unknown(snapshot) if not jobs_known else frozenset()
    if unknown:
        note = "; ".join(filter(None, [note, SIMULATED_MIG_UNKNOWN]))
    return TopView(snapshot, "direct", source.engine, note, jobs_known, unknown)


def _engine_again(source: Source) -> TopView | None:
    """The engine's view once a probe finds it answering (and watching what was asked for)."""
    if source.probe is None:
        source.probe = EngineProbe(source.home)
    answer = source.probe.answer()
    if answer is None:
        return None
    (state,) = answer
    lost = source.engine is not None or source.engine_note is not None
    source.engine = state
    if state is not None and state.watches(source.requested):
        view = _from_engine(source, wait=False)
        if view is not None:
            if source.monitor is not None:
                source.monitor.close()
            source.monitor, source.engine_note = None, None
            return view
    source.engine_note = _engine_note(source.home, source.engine, source.requested, lost)
    return None


SIMULATED_MIG_UNKNOWN = (
    "the simulated GPUs' MIG layout is their engine's ([station] mig, as `gpudesk mig list` "
    "reads it) and no engine watches them: their MIG mode is unknown here, the GPUs shown whole "
    "(`gpudesk engine start` starts the engine; top then shows its layout)"
)


def _simulated_mig_unknown(snapshot: Snapshot) -> frozenset[int]:
    """A simulated station sampled directly where an engine has run: its MIG layout lives in
    that engine's store (the station's `mig` setting), which only the engine reads, so what a
    direct simulator shows (no MIG anywhere) is not known to be so. The MIG-capable GPUs
    (`mig_enabled` false, not None): `--json` gives them `mig_enabled` null and `mig_unknown`,
    and the note says why."""
    if not snapshot.simulated:
        return frozenset()
    return frozenset(g.index for g in snapshot.gpus if g.mig_enabled is False)


def _direct_monitor() -> Monitor:
    from gpudesk.hw.telemetry.backend import make_backend
    from gpudesk.hw.telemetry.monitor import Monitor

    return Monitor(make_backend(StationConfig().with_env_override().backend))


def _from_engine(source: Source, wait: bool) -> TopView | None:
    """The engine's view, None where it has none to give (`source.engine` says why)."""
    snapshot, state = engine_view(source.home, wait)
    if snapshot is None:
        source.engine = state
        return None
    source.engine = state or source.engine
    return TopView(snapshot, "engine", source.engine, source.note)


# ---------------------------------------------------------------- rendering
def _na(value: float | None, fmt: str = "{:.0f}", unit: str = "") -> str:
    return "n/a" if value is None else fmt.format(value) + unit


def _bar(fraction: float | None, width: int) -> str:
    if fraction is None:
        return "[" + "n/a".center(width) + "]"
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "[" + "|" * filled + " " * (width - filled) + "]"


def _header(view: TopView, width: int = WIDTH) -> list[str]:
    engine, snapshot = view.engine, view.snapshot
    if engine is None:
        state = "engine not running"
    elif engine.error is not None:
        state = f"engine pid {engine.pid} not answering"
    else:
        gpus = f"GPUs {engine.gpus_busy}/{engine.gpus_total}, " if engine.gpus_total else ""
        state = (
            f"engine pid {engine.pid}, {engine.policy}, {gpus}CPU slots "
            f"{engine.slots_busy}/{engine.slots_total}, {engine.queued} queued"
        )
    clock = time.strftime("%H:%M:%S", time.localtime(snapshot.taken_at))
    # the label before what a narrow terminal cuts (the clock, the backend's name)
    label = "SIMULATED  " if snapshot.simulated else ""
    lines = [f"gpudesk top  {label}{clock}  backend {snapshot.backend}", state]
    if engine is not None and engine.drained:
        lines.append(f"DRAINED: the station is {engine.drained}; no job starts until undrained")
    for text in (snapshot.banner, view.note):
        if text:
            wrap = max(20, width)  # narrower is cut (render_frame) rather than a word a line
            lines.extend(textwrap.wrap(text, wrap, initial_indent="!! ", subsequent_indent="   "))
    host = snapshot.host
    used, total = host.memory_used_mib / GIB, host.memory_total_mib / GIB
    cpu = host.cpu_pct
    lines.append(
        f"CPU {_bar(None if cpu is None else cpu / 100, 16)} {_na(cpu, '{:3.0f}', '%')} of "
        f"{host.cores}  MEM {_bar(used / total if total else 0, 10)} {used:.1f}/{total:.0f} GiB"
        f"  load {host.load_avg[0]:.2f}"
    )
    if host.cpu_energy_j is not None:  # a line of its own: the host line has no room for "since"
        lines.append(f"CPU energy {watt_hours(host.cpu_energy_j)} {_since(snapshot)} (RAPL)")
    return lines


def _since(snapshot: Snapshot) -> str:
    """Since when the energy counters shown count: the engine's sampler, or top's own when it
    samples directly (both give `sampling_since`)."""
    began = render.since(snapshot.sampling_since, snapshot.taken_at)
    return f"since {began}" if began else "since sampling began"


def _gpu_block(
    gpu: GpuView, simulated: bool, jobs: dict[int, JobTelemetry], since: str, mig_unknown: bool
) -> list[str]:
    tag = " (SIMULATED)" if simulated else ""  # before the name, which a narrow terminal cuts
    if gpu.lost:
        return [f"GPU {gpu.index}{tag}  {gpu.name or '?'}  LOST: fell off the bus"]
    temp = _na(gpu.temperature_c, unit="C")
    clock = _na(gpu.sm_clock_mhz, unit=" MHz")
    title = f"GPU {gpu.index}{tag}  {gpu.name or '?'}"
    lines = [f"{title}  {temp}  {clock}".rstrip()]
    sm = gpu.sm_activity_pct
    power, limit = gpu.power_w, gpu.power_limit_w
    power_text = (
        _na(power, unit=" W") if limit is None or power is None else f"{power:.0f}/{limit:.0f} W"
    )
    lines.append(
        f"  SM  {_bar(None if sm is None else sm / 100, BAR)} {_na(sm, unit='%'):>4}  "
        f"kernel-active {_na(gpu.kernel_active_pct, unit='%'):>4}  "
        f"power {power_text}"
    )
    used, total = gpu.memory_used_mib, gpu.memory_total_mib
    fraction = used / total if used is not None and total else None
    memory = "n/a" if used is None or total is None else f"{used / GIB:.1f}/{total / GIB:.1f} GiB"
    source = {"counter": "", "integrated": " (integrated)"}.get(gpu.energy_source or "", "")
    lines.append(
        f"  MEM {_bar(fraction, BAR)} {memory:<13}  energy {watt_hours(gpu.energy_j)} "
        f"{since}{source}"
    )
    mig_enabled = None if mig_unknown else gpu.mig_enabled
    pending = render.mig_pending(gpu.index, mig_enabled, gpu.mig_pending, advice=False)
    if pending is not None:  # one line that fits 80 columns: `mig list` gives the advice
        lines.append(f"  {pending} (`gpudesk mig list` says what applies it)")
    if mig_unknown:
        lines.append("  MIG mode unknown without the engine (see the note above)")
    elif gpu.mig_enabled and not gpu.mig_devices:
        lines.append("  MIG enabled, no MIG devices: no job runs on it (gpudesk mig list)")
    for mig in gpu.mig_devices:
        mem = (
            "n/a"
            if mig.memory_used_mib is None or mig.memory_total_mib is None
            else f"{mig.memory_used_mib / GIB:.1f}/{mig.memory_total_mib / GIB:.1f} GiB"
        )
        users = ", ".join(_process_label(p, short=True) for p in mig.processes) or "idle"
        lines.append(
            f"  MIG {mig.index} {mig.name or '?'}  GI {mig.gpu_instance_id} "
            f"CI {mig.compute_instance_id}  {mem}  {users}"
        )
    holders = [jobs[j] for j in gpu.jobs if j in jobs]
    others = [p for p in gpu.processes if p.job_id is None]
    servers = [p for p in others if p.mps_server]
    if holders or servers:
        parts = [f"{j.id} {j.name}{' (SUSPENDED)' if j.suspended else ''}" for j in holders]
        parts += [_process_label(p) for p in servers]
        lines.append("  jobs: " + ", ".join(parts))
    # a process outside gpudesk's jobs, each on a line of its own: whose, how much, what
    lines += [f"  {_process_label(p)}" for p in others if not p.mps_server]
    return lines


def _process_label(process: ProcessView, short: bool = False) -> str:
    """A GPU process in a list of a GPU's users: its job, the MPS server, or a process outside
    gpudesk: its pid, owner, GPU memory, SM share and command, as nvitop shows one (`short`, in
    a MIG device's line: its pid and owner; the GPU's own lines have the rest)."""
    if process.job_id is not None:
        return str(process.job_id)
    if process.mps_server:
        return f"MPS server (pid {process.pid})"
    if short:
        owner = f" ({process.user})" if process.user else ""
        return f"pid {process.pid}{owner}"
    return "not gpudesk: " + foreign_label(process)


def foreign_label(process: ProcessView) -> str:
    """`pid 4242 bob 3.2 GiB SM 40% python train.py`: what is known of a process outside
    gpudesk's jobs (each part left out where unknown)."""
    parts = [f"pid {process.pid}"]
    if process.user:
        parts.append(process.user)
    if process.used_memory_mib is not None:
        parts.append(f"{process.used_memory_mib / GIB:.1f} GiB")
    if process.sm_pct is not None:
        parts.append(f"SM {process.sm_pct:.0f}%")
    if process.command:
        parts.append(process.command)
    return " ".join(parts)


# sampled directly where an engine has run: `gpudesk engine stop` leaves its jobs running
JOBS_UNKNOWN = "running jobs: unknown without the engine (its jobs run on without it)"


def render_frame(
    view: TopView,
    width: int = WIDTH,
    encoding: str | None = None,
    rows: int | None = None,
) -> str:
    """The frame in `width` columns, and in `rows` lines where given (top_frame.fit_rows); in
    `encoding`'s characters where one is given (each it lacks replaced before the lines are
    cut: a stand-in may be wider, `…` is `...`)."""
    snapshot = view.snapshot
    jobs = {job.id: job for job in snapshot.jobs}
    since = _since(snapshot)
    if snapshot.gpus:
        blocks = [
            _gpu_block(gpu, snapshot.simulated, jobs, since, gpu.index in view.mig_unknown)
            for gpu in snapshot.gpus
        ]
        lines = [[_gpu_line(gpu)] for gpu in snapshot.gpus]
    else:
        none = (
            "GPUs: none on this station" if snapshot.backend == "none" else "GPUs: none answering"
        )
        blocks = lines = [[none]]
    if snapshot.jobs:
        table = _jobs_table(snapshot.jobs, width).splitlines()
    else:
        table = ["no running jobs" if view.jobs_known else JOBS_UNKNOWN]
    header = _fitted(_header(view, width), width, encoding)
    frame = fit_rows(
        header,
        [_fitted(block, width, encoding) for block in blocks],
        [_fitted(line, width, encoding) for line in lines],
        ["", *_fitted(table, width, encoding)],
        rows,
    )
    return "\n".join(render.clip(line, width) for line in frame)


def _fitted(lines: list[str], width: int, encoding: str | None) -> list[str]:
    """`lines` in `encoding`'s characters, each cut to `width` columns."""
    text = "\n".join(lines)
    if encoding is not None:
        text = carried(text, encoding)
    return [render.clip(line, width) for line in text.splitlines()]


def _gpu_line(gpu: GpuView) -> str:
    """A GPU in one line, where its block does not fit the window: SM, memory, power, jobs."""
    if gpu.lost:
        return f"GPU {gpu.index}  LOST: fell off the bus"
    sm = gpu.sm_activity_pct
    used, total = gpu.memory_used_mib, gpu.memory_total_mib
    fraction = used / total if used is not None and total else None
    memory = "n/a" if used is None or total is None else f"{used / GIB:.1f}/{total / GIB:.0f}G"
    held = ",".join(str(job) for job in gpu.jobs)
    return (
        f"GPU {gpu.index}  SM {_bar(None if sm is None else sm / 100, 8)} "
        f"{_na(sm, unit='%'):>4}  MEM {_bar(fraction, 8)} {memory:<10} "
        f"{_na(gpu.power_w, unit=' W'):>6}" + (f"  jobs {held}" if held else "")
    )


def _jobs_table(jobs: list[JobTelemetry], width: int) -> str:
    """The running jobs, one line each, in `width` columns: the user and the name give way
    first (clipped), then whole columns (CPU, RSS, ENERGY, GPU MEM, USER, TIME); ID, NAME,
    SLOT and a STATE stay. The STATE column is there while a job is suspended (`gpudesk
    suspend`: stopped, its GPUs held): SUSPENDED or running."""
    stopped = any(job.suspended for job in jobs)
    rows = []
    for job in jobs:
        cpu = "-" if job.cpu_pct is None else f"{job.cpu_pct:.0f}%"
        rss = "-" if job.rss_mib is None else f"{job.rss_mib:.0f}M"
        gpu_mem = "-" if job.gpu_memory_mib is None else f"{job.gpu_memory_mib:.0f}M"
        state = ["SUSPENDED" if job.suspended else "running"] if stopped else []
        rows.append(
            (
                job.id,
                job.user or "-",  # the direct sampler (no engine) knows no owner
                job.name,
                *state,
                job.slot or "-",
                render.duration(job.runtime_s),
                cpu,
                rss,
                gpu_mem,
                render.energy_cell(job.energy.total_j, job.energy.estimate),
            )
        )
    headers = ("ID", "USER", "NAME", *(["STATE"] if stopped else []), "SLOT")
    extra = 1 if stopped else 0
    # the columns after the name, where a STATE column moves them
    time_at, cpu_at, rss_at, gpu_memory_at, energy_at = (i + extra for i in (4, 5, 6, 7, 8))
    table, _ = render.fitted_table(
        (*headers, "TIME", "CPU", "RSS", "GPU MEM", "ENERGY"),
        rows,
        width=width,
        optional=(time_at, 1, gpu_memory_at, energy_at, rss_at, cpu_at),  # the last gives way first
        max_widths={1: 8, 3 + extra: 10},
        right=(0, time_at, cpu_at, rss_at, gpu_memory_at, energy_at),
        shrink=(1, 2),
        middle=(2,),  # a sweep's names differ at their ends
        min_widths={1: 5, 2: 8},
    )
    return table


def _can_redraw(stream: TextIO) -> bool:
    return stream.isatty() and os.environ.get("TERM", "") not in ("", "dumb")


def run_top(
    home: Home,
    *,
    once: bool,
    as_json: bool,
    interval: float,
    out: TextIO = sys.stdout,
    keys: TextIO | None = None,
) -> None:
    # The monitor logs a backend's problems for the engine's log; top says them in its frame
    # (or its one error paragraph), so they are not printed a second time on stderr.
    telemetry_log = logging.getLogger("gpudesk.telemetry")
    if not telemetry_log.handlers:
        telemetry_log.addHandler(logging.NullHandler())
    source = open_source(home)
    try:
        with drawing_for(out) as encoding:
            _show(source, out, keys, encoding, once=once, as_json=as_json, interval=interval)
    except KeyboardInterrupt:
        out.write("\n")
    finally:
        source.close()


def _show(
    source: Source,
    out: TextIO,
    keys: TextIO | None,
    encoding: str,
    *,
    once: bool,
    as_json: bool,
    interval: float,
) -> None:
    """top's frames into `out` (`encoding`'s characters), until `q` where it runs on."""
    if once or as_json:
        view = take_view(source, fresh=True)
        _check_station(source)
        _check_backend(source)
        if as_json:
            print(json_text(view.to_json(), indent=2), file=out)
        else:
            # every line, even on a terminal: one frame left in the scrollback, as `top -b -n 1`
            print(render_frame(view, window(False, WIDTH)[0], encoding), file=out)
        return
    redraw = _can_redraw(out)
    view = take_view(source, fresh=True)
    _check_backend(source)
    with key_reader(sys.stdin if keys is None else keys) as wait, alternate_screen(out, redraw):
        while True:
            # the terminal's width, read again each frame: a resized window (a tmux pane
            # split) gets frames that fit it, and a wide one the jobs' whole names
            width, rows = window(redraw, WIDTH)
            frame = render_frame(view, width, encoding, rows)
            # in place, no newline after the last row: it would scroll the header off
            out.write(f"\x1b[H\x1b[2J{frame}" if redraw else f"{frame}\n\n")
            out.flush()
            # the frame's interval, or less when a key comes: `q` leaves at once
            deadline = time.monotonic() + interval
            while (left := deadline - time.monotonic()) > 0:
                INTERRUPTS.check()  # one Python swallowed (gpudesk.cli.interrupts)
                if quits(wait(left)):
                    return
            view = take_view(source)
