"""Job detail: where the job went and why (or why it waits), its SM, memory and CPU over time,
energy and CPU time, the shared loader it reads, and the end of its log. And the log pane."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer, Log, Static

from gpudesk import render
from gpudesk.engine.protocol import EngineError
from gpudesk.screens.base import DeskScreen, JobActions
from gpudesk.screens.feed import read_log_tail
from gpudesk.screens.queue import STATE_STYLES, job_state
from gpudesk.screens.state import DeskState, sharing_mode
from gpudesk.screens.widgets.glyphs import energy_text, sparkline
from gpudesk.screens.widgets.strips import DeskHeader

DETAIL_REFRESH_S = 2.0
EVENTS_SHOWN = 12
LOG_LINES = 8


def _runtime(job: dict[str, Any], state: DeskState) -> str:
    return render.duration(render.job_runtime(job, state.now)) if job.get("started_at") else "-"


def render_summary(job: dict[str, Any], detail: dict[str, Any] | None, state: DeskState) -> Text:
    text = Text()
    shown = job_state(job)
    text.append(f"job {job['id']} ", style="bold")
    text.append(job["name"], style="bold")
    text.append(f"  {shown}", style=STATE_STYLES.get(shown, ""))
    spec = job["spec"]
    text.append(
        f"  attempt {job['attempts']}/{job['max_attempts']}  priority {spec.get('priority', 0)}"
    )
    where = job.get("slot")
    if where:
        text.append(f"\non {where} ({sharing_mode(job)})")
    wants = f"{spec.get('gpus', 0)} GPU(s)"
    if spec.get("memory_gb") is not None:
        wants += f", {spec['memory_gb']:g} GB"
    if spec.get("sm_pct") is not None:
        wants += f", SM {spec['sm_pct']:g}%"
    text.append(f"\nasks for {wants}; runtime {_runtime(job, state)}")
    if spec.get("dataset"):
        loader = job_loader(job, state.loaders)
        text.append(f"\nreads dataset {spec['dataset']}")
        chosen = ((loader or {}).get("status") or {}).get("selection")
        if chosen:
            text.append(
                f" (selection {chosen['preset']}: {chosen['kept']} of {chosen['of']} samples)"
            )
        elif spec.get("selection"):
            text.append(f" (selection {spec['selection']})")
        if loader:
            status = loader.get("status") or {}
            text.append(
                f" through shared loader {loader['name']} (pid {loader.get('pid')}, "
                f"{len(status.get('consumers') or [])} consumers)"
            )
    waiting = (detail or {}).get("waiting")
    if waiting:
        text.append("\nwaiting: ", style="bold yellow")
        text.append(str(waiting))
    if job.get("reason") and job["state"] != "running":
        text.append(f"\n{job['reason']}", style="dim")
    return text


def job_loader(job: dict[str, Any], loaders: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The shared loader the engine says the job reads (its dataset's, or the variant for the
    job's own selection); the dataset's when the engine does not say."""
    name = job.get("loader") or job["spec"].get("dataset")
    return next((entry for entry in loaders if entry["name"] == name), None)


def render_usage(
    job: dict[str, Any], detail: dict[str, Any] | None, state: DeskState, width: int
) -> Text:
    text = Text()
    usage = (detail or {}).get("usage") or job.get("usage") or {}
    text.append("energy ", style="bold")
    text.append(("~" if usage.get("estimate") else "") + energy_text(usage.get("total_j")))
    if usage.get("gpu_j") is not None:
        text.append(f" (GPU {energy_text(usage.get('gpu_j'))}")
        if usage.get("cpu_j") is not None:
            text.append(f", CPU {energy_text(usage.get('cpu_j'))}")
        text.append(")")
    if usage.get("carbon_g") is not None:
        text.append(f"  ≈{usage['carbon_g']:.1f} g CO2e")
    if usage.get("cpu_s") is not None:
        text.append(f"  CPU time {render.duration(usage['cpu_s'])}")
    series = state.job_series.get(job["id"])
    live = state.job_telemetry(job["id"]) or {}
    span = max(10, width - 22)
    if series:
        for label, values, now, top, unit in (
            ("SM  ", series.sm, live.get("gpu_sm_pct"), 100.0, "%"),
            (
                "MEM ",
                series.memory,
                live.get("gpu_memory_mib"),
                max([v for v in series.memory if v] or [1.0]),
                " MiB",
            ),
            (
                "CPU ",
                series.cpu,
                live.get("cpu_pct"),
                max([v for v in series.cpu if v] + [100.0]),
                "%",
            ),
        ):
            text.append(f"\n{label}", style="bold")
            text.append(sparkline(values, span, top), style="green")
            text.append(f" {'n/a' if now is None else f'{now:.0f}{unit}'}")
    elif job["state"] == "running":
        text.append("\n(series start with the next sample)", style="dim")
    return text


def render_events(detail: dict[str, Any] | None) -> Text:
    text = Text()
    events = (detail or {}).get("events") or []
    text.append("placement and events", style="bold")
    if not events:
        text.append("\n(loading…)" if detail is None else "\n(none)", style="dim")
    for event in events[-EVENTS_SHOWN:]:
        text.append(f"\n{render.clock(event.get('ts'))} ", style="dim")
        text.append(str(event.get("message", "")))
    return text


class JobScreen(JobActions):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,backspace", "app.pop_screen", "Back"),
        Binding("c", "cancel_job", "Cancel"),
        Binding("h", "hold_job", "Hold/release"),
        Binding("r", "requeue_job", "Requeue"),
        Binding("l", "log_job", "Log"),
        Binding("p", "pager_job", "Pager"),
    ]

    def __init__(self, job_id: int) -> None:
        super().__init__()
        self.job_id = job_id
        self.detail: dict[str, Any] | None = None
        self.log_tail: list[str] = []
        self.loaded_at = 0.0

    def compose(self) -> ComposeResult:
        yield DeskHeader()
        with VerticalScroll(id="job-body"):
            yield Static(id="job-summary")
            yield Static(id="job-usage")
            yield Static(id="job-events")
            yield Static(id="job-log")
        yield Footer()

    def show_state(self, state: DeskState) -> None:
        job = state.job(self.job_id)
        if job is None:
            self.query_one("#job-summary", Static).update(f"job {self.job_id} is gone")
            return
        width = self.query_one("#job-body").content_size.width or 78
        self.query_one("#job-summary", Static).update(render_summary(job, self.detail, state))
        self.query_one("#job-usage", Static).update(render_usage(job, self.detail, state, width))
        self.query_one("#job-events", Static).update(render_events(self.detail))
        tail = Text("log " + (job.get("log") or "(none yet)"), style="bold")
        for line in self.log_tail[-LOG_LINES:]:
            tail.append("\n" + line, style="")
        self.query_one("#job-log", Static).update(tail)
        if time.monotonic() - self.loaded_at >= DETAIL_REFRESH_S:
            self.loaded_at = time.monotonic()
            self.load_detail(job.get("log"))

    @work(thread=True, exclusive=True, group="job-detail")
    def load_detail(self, log: str | None) -> None:
        try:
            detail = self.desk.feed.request("show", job=self.job_id)
        except EngineError as exc:
            detail = {"events": [{"ts": time.time(), "message": f"(could not load: {exc})"}]}
        tail = read_log_tail(log, LOG_LINES)
        self.app.call_from_thread(self._loaded, detail, tail)

    def _loaded(self, detail: dict[str, Any], tail: list[str]) -> None:
        self.detail, self.log_tail = detail, tail
        if self.is_current:
            self.show_state(self.desk.state)

    def current_job(self) -> dict[str, Any] | None:
        return self.desk.state.job(self.job_id)


class LogScreen(DeskScreen):
    """A job's log, following new lines as they are written (f toggles following)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "app.pop_screen", "Back"),
        Binding("f", "toggle_follow", "Follow on/off"),
        Binding("p", "pager", "Pager"),
    ]
    POLL_S = 0.5

    def __init__(self, job: dict[str, Any]) -> None:
        super().__init__()
        self.job = job
        self.path = job.get("log")
        self.read_offset = 0
        self.follow = True

    def compose(self) -> ComposeResult:
        yield DeskHeader()
        yield Static(
            f"log of job {self.job['id']} {self.job['name']}: {self.path or '(none)'}",
            id="log-title",
        )
        yield Log(id="log", highlight=False, auto_scroll=True)
        yield Footer()

    def on_mount(self) -> None:
        self.read_more()
        self.set_interval(self.POLL_S, self.read_more)

    def show_state(self, state: DeskState) -> None:
        pass  # the log has its own timer

    @work(thread=True, exclusive=True, group="log-read")
    def read_more(self) -> None:
        if not self.path:
            return
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.read_offset)
                chunk = handle.read(256 * 1024)
        except OSError as exc:
            self.app.call_from_thread(self.notify, f"cannot read the log: {exc}", severity="error")
            return
        if chunk:
            self.read_offset += len(chunk)
            self.app.call_from_thread(self._append, chunk.decode(errors="replace"))

    def _append(self, text: str) -> None:
        log = self.query_one("#log", Log)
        log.auto_scroll = self.follow
        log.write(text)

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        self.query_one("#log", Log).auto_scroll = self.follow
        self.notify("following the log" if self.follow else "not following", timeout=2)

    def action_pager(self) -> None:
        self.desk.page_log(self.job)
