"""Job detail: where the job went and why (or why it waits), its SM, memory and CPU over time,
energy and CPU time, the shared loader it reads, and the end of its log. And the log pane."""

from __future__ import annotations

import codecs
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Log, Static

from gpudesk import joblog, render
from gpudesk.api import EngineError, JobDetail, JobView, LoaderView
from gpudesk.screens.base import DeskScreen, JobActions
from gpudesk.screens.queue import STATE_STYLES, job_state
from gpudesk.screens.state import DeskState, job_runtime, sharing_mode
from gpudesk.screens.widgets.footer import DeskFooter
from gpudesk.screens.widgets.glyphs import sparkline
from gpudesk.screens.widgets.strips import DeskHeader
from gpudesk.text import printable, printable_message
from gpudesk.units import watt_hours

DETAIL_REFRESH_S = 2.0
EVENTS_SHOWN = 12
LOG_LINES = 8


@dataclass(frozen=True)
class DetailTrouble:
    """Why the job's detail could not be read, and when."""

    at: float
    message: str


def _runtime(job: JobView, state: DeskState) -> str:
    return render.duration(job_runtime(job, state.now)) if job.started_at else "-"


def render_summary(job: JobView, detail: JobDetail | None, state: DeskState) -> Text:
    text = Text()
    shown = job_state(job)
    text.append(f"job {job.id} ", style="bold")
    text.append(job.name, style="bold")
    text.append(f"  {job.user}")
    text.append(f"  {shown}", style=STATE_STYLES.get(shown, ""))
    if job.unsaved:  # as `gpudesk show` marks it: the end the engine worked out, not stored
        text.append(f" [{job.unsaved}]", style="bold red")
    spec = job.spec
    text.append(f"  attempt {job.attempts}/{job.max_attempts}  priority {spec.priority}")
    if job.slot:
        text.append(f"\non {job.slot} ({sharing_mode(job, state)})")
    wants = f"{spec.gpus} GPU(s)"
    if spec.memory_gb is not None:
        wants += f", {spec.memory_gb:g} GB"
    if spec.sm_pct is not None:
        wants += f", SM {spec.sm_pct:g}%"
    text.append(f"\nasks for {wants}; runtime {_runtime(job, state)}")
    _append_submit_extras(text, job, detail)
    if spec.dataset:
        loader = job_loader(job, state.loaders)
        status = loader.status if loader else None
        text.append(f"\nreads dataset {spec.dataset}")
        chosen = status.selection if status else None
        if chosen:
            text.append(f" (selection {chosen.preset}: {chosen.kept} of {chosen.of} samples)")
        elif spec.selection:
            text.append(f" (selection {spec.selection})")
        if loader:
            text.append(
                f" through shared loader {loader.name} (pid {loader.pid}, "
                f"{len(status.consumers) if status else 0} consumers)"
            )
    waiting = detail.waiting if detail else None
    if waiting:
        text.append("\nwhy: ", style="bold yellow")  # the reason itself says "waiting ..."
        text.append(printable_message(waiting))
    remaining = detail.remaining if detail else None
    if remaining is not None:
        text.append(f"\nremaining {render.remaining_text(remaining)}")
    if job.reason and not job.placed:
        text.append(f"\n{printable_message(job.reason)}", style="dim")
    return text


def _append_submit_extras(text: Text, job: JobView, detail: JobDetail | None) -> None:
    """Its comment, array and the dependencies beside `after` (submit --comment, --array,
    --after-any, --after-notok); its begin time shows in `why` while it waits for it. An
    array's first job also says its tasks, whose id names them all (as `gpudesk show`)."""
    spec = job.spec
    if spec.comment:
        text.append(f"\ncomment: {printable(spec.comment)}")
    if spec.array_task is not None:
        head = spec.array_job if spec.array_job is not None else job.id
        limit = f", at most {spec.array_limit} at once" if spec.array_limit else ""
        text.append(f"\narray task {spec.array_task} of array job {head}{limit}")
    if detail is not None and detail.array is not None:
        text.append(f"\n{render.array_tasks_text(detail.array.tasks, detail.array.jobs)}")
    for kind, refs in (("afterany", spec.after_any), ("afternotok", spec.after_notok)):
        if refs:
            text.append(f"\n{kind}: " + ", ".join(f"job {ref}" for ref in refs))


def job_loader(job: JobView, loaders: Sequence[LoaderView]) -> LoaderView | None:
    """The shared loader the engine says the job reads (its dataset's, or the variant for the
    job's own selection); the dataset's when the engine does not say."""
    name = job.loader or job.spec.dataset
    return next((entry for entry in loaders if entry.name == name), None)


def render_usage(job: JobView, detail: JobDetail | None, state: DeskState, width: int) -> Text:
    text = Text()
    usage = (detail.usage if detail else None) or job.usage
    text.append("energy ", style="bold")
    if usage is None:
        text.append(watt_hours(None))
    else:
        text.append(("~" if usage.estimate else "") + watt_hours(usage.total_j))
        if usage.gpu_j is not None:
            text.append(f" (GPU {watt_hours(usage.gpu_j)}")
            if usage.cpu_j is not None:
                text.append(f", CPU {watt_hours(usage.cpu_j)}")
            text.append(")")
        if usage.carbon_g is not None:
            text.append(f"  ≈{usage.carbon_g:.1f} g CO2e")
        if usage.cpu_s is not None:
            text.append(f"  CPU time {render.duration(usage.cpu_s)}")
    series = state.job_series.get(job.id)
    live = state.job_telemetry(job.id)
    span = max(10, width - 22)
    if series:
        for label, values, now, top, unit in (
            ("SM  ", series.sm, live.gpu_sm_pct if live else None, 100.0, "%"),
            (
                "MEM ",
                series.memory,
                live.gpu_memory_mib if live else None,
                max([v for v in series.memory if v] or [1.0]),
                " MiB",
            ),
            (
                "CPU ",
                series.cpu,
                live.cpu_pct if live else None,
                max([v for v in series.cpu if v] + [100.0]),
                "%",
            ),
        ):
            text.append(f"\n{label}", style="bold")
            text.append(sparkline(values, span, top), style="green")
            text.append(f" {'n/a' if now is None else f'{now:.0f}{unit}'}")
    elif job.placed:
        text.append("\n(series start with the next sample)", style="dim")
    return text


def render_events(detail: JobDetail | None, trouble: DetailTrouble | None = None) -> Text:
    text = Text()
    text.append("placement and events", style="bold")
    if trouble is not None:
        text.append(f"\n{render.clock(trouble.at)} ", style="dim")
        text.append(printable_message(trouble.message))
        return text
    events = detail.events if detail else []
    if not events:
        text.append("\n(loading…)" if detail is None else "\n(none)", style="dim")
    for event in events[-EVENTS_SHOWN:]:
        text.append(f"\n{render.clock(event.ts)} ", style="dim")
        # spelled out here too: a row stored before the engine spelled what it quotes (an
        # edit's command, before c84e003) holds its escape sequences as they came
        text.append(printable_message(event.message))
    return text


class JobScreen(JobActions):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,backspace", "app.pop_screen", "Back"),
        Binding("c", "cancel_job", "Cancel"),
        Binding("h", "hold_job", "Hold/release"),
        Binding("r", "requeue_job", "Requeue"),
        Binding("z", "suspend_job", "Suspend/resume"),
        Binding("l", "log_job", "Log"),
        Binding("p", "pager_job", "Pager"),
        Binding("e", "edit_job", "Edit"),
    ]

    def __init__(self, job_id: int) -> None:
        super().__init__()
        self.job_id = job_id
        self.detail: JobDetail | None = None
        self.trouble: DetailTrouble | None = None
        self.log_tail: list[str] = []
        self.loaded_at = 0.0

    def compose(self) -> ComposeResult:
        yield DeskHeader()
        with VerticalScroll(id="job-body"):
            yield Static(id="job-summary")
            yield Static(id="job-usage")
            yield Static(id="job-events")
            yield Static(id="job-log")
        yield DeskFooter()

    def show_state(self, state: DeskState) -> None:
        job = state.job(self.job_id)
        if job is None:
            self.query_one("#job-summary", Static).update(f"job {self.job_id} is gone")
            return
        width = self.query_one("#job-body").content_size.width or 78
        self.query_one("#job-summary", Static).update(render_summary(job, self.detail, state))
        self.query_one("#job-usage", Static).update(render_usage(job, self.detail, state, width))
        self.query_one("#job-events", Static).update(render_events(self.detail, self.trouble))
        tail = Text("log " + (job.log or "(none yet)"), style="bold")
        for line in self.log_tail[-LOG_LINES:]:
            tail.append("\n" + line, style="")
        self.query_one("#job-log", Static).update(tail)
        if time.monotonic() - self.loaded_at >= DETAIL_REFRESH_S:
            self.loaded_at = time.monotonic()
            self.load_detail(job.log)

    @work(thread=True, exclusive=True, group="job-detail")
    def load_detail(self, log: str | None) -> None:
        detail, trouble = self.detail, None
        try:
            detail = self.desk.feed.show(self.job_id)
        except EngineError as exc:
            trouble = DetailTrouble(time.time(), f"(could not load: {exc})")
        tail = self.desk.feed.log_tail(self.job_id, log, LOG_LINES)
        self.app.call_from_thread(self._loaded, detail, trouble, tail)

    def _loaded(
        self, detail: JobDetail | None, trouble: DetailTrouble | None, tail: list[str]
    ) -> None:
        self.detail, self.trouble, self.log_tail = detail, trouble, tail
        if self.is_current:
            self.show_state(self.desk.state)

    def selected_job(self) -> JobView | None:
        return self.desk.state.job(self.job_id)


class LogScreen(DeskScreen):
    """A job's log, following new lines as they are written (f toggles following)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "app.pop_screen", "Back"),
        Binding("f", "toggle_follow", "Follow on/off"),
        Binding("p", "pager", "Pager"),
    ]
    POLL_S = 0.5

    def __init__(self, job: JobView) -> None:
        super().__init__()
        self.job = job
        self.path = job.log
        # read as a stream across rotations, and only from files of the job's owner (a link or
        # a FIFO in its place is refused: gpudesk.joblog)
        self.stream = joblog.LogStream(job.log, 0, job.uid) if job.log else None
        # a byte that is not UTF-8 spelled \xff, as `gpudesk logs` spells it (not U+FFFD)
        self.decoder = codecs.getincrementaldecoder("utf-8")("backslashreplace")
        self.follow = True

    def compose(self) -> ComposeResult:
        yield DeskHeader()
        yield Static(
            f"log of job {self.job.id} {self.job.name}: {self.path or '(none)'}",
            id="log-title",
            markup=False,
        )
        yield Log(id="log", highlight=False, auto_scroll=True)
        yield DeskFooter()

    def on_mount(self) -> None:
        self.read_more()
        self.set_interval(self.POLL_S, self.read_more)

    def show_state(self, state: DeskState) -> None:
        pass  # the log has its own timer

    @work(thread=True, exclusive=True, group="log-read")
    def read_more(self) -> None:
        if self.stream is None:
            return
        try:
            piece = self.stream.read(256 * 1024)
        except OSError as exc:
            self.app.call_from_thread(self.notify, f"cannot read the log: {exc}", severity="error")
            return
        if piece is not None and piece.data:
            # the job's escape sequences are shown, never obeyed by the desk's terminal
            text = printable(self.decoder.decode(piece.data))
            self.app.call_from_thread(self._append, text)

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
