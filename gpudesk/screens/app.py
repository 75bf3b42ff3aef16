"""The desk: a Textual app over the engine. One worker thread reads the feed and posts typed
messages; screens redraw from the folded `DeskState`; actions run on worker threads and report
back as notifications, so no widget ever waits on I/O."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from textual import work
from textual.app import App, ScreenStackError, SuspendNotSupported, SystemCommand
from textual.binding import Binding, BindingType
from textual.markup import escape
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.screen import Screen

from gpudesk.api import ActionOutcome, EngineError, JobView, MigApplyResult
from gpudesk.api.models import DrainResult
from gpudesk.screens.base import MUTATING, DeskScreen, JobActions
from gpudesk.screens.dialogs import ConfirmScreen, JobPromptScreen, SubmitRequest, SubmitScreen
from gpudesk.screens.edit_dialog import EditJobScreen
from gpudesk.screens.feed import Feed, Frame
from gpudesk.screens.help import HelpScreen
from gpudesk.screens.job import JobScreen, LogScreen
from gpudesk.screens.loaders import LoadersScreen
from gpudesk.screens.mig import MigScreen
from gpudesk.screens.pager import NoPager, page_job_log, pager_command, terminal_handed_over
from gpudesk.screens.processes import ProcessesScreen
from gpudesk.screens.queue import QueueScreen
from gpudesk.screens.state import DeskState
from gpudesk.screens.station import StationScreen

DEFAULT_REFRESH_S = 1.0
RETRY_S = 2.0  # after the engine stopped answering
# Closing: how long the live job counts may keep `q` waiting, behind another request on the
# connection and then on the answer, before the last frame's counts are said instead.
QUIT_BUSY_S = 0.3
QUIT_ANSWER_S = 2.0


class FrameArrived(Message):
    def __init__(self, frame: Frame) -> None:
        super().__init__()
        self.frame = frame


class FeedTrouble(Message):
    """The engine stopped answering (None: it answers again)."""

    def __init__(self, problem: str | None) -> None:
        super().__init__()
        self.problem = problem


# An action through the feed: a job-control request's outcomes, a MIG repartition's result, or
# a drain's.
Action = Callable[[Feed], Sequence[ActionOutcome] | MigApplyResult | DrainResult]


@dataclass(frozen=True)
class JobCommand:
    """An action on one job, as the command palette offers it (`DeskApp.run_job_command`)."""

    action: str  # what run_job_command does; MUTATING names the ones read-only desks leave out
    title: str
    help: str


JOB_COMMANDS = (
    JobCommand("open_job", "Job detail", "placement and why, usage, events, log tail"),
    JobCommand("cancel_job", "Cancel job", "stop it, or take it out of the queue (asks first)"),
    JobCommand("hold_job", "Hold / release job", "keep a queued job from starting, or let it"),
    JobCommand("priority_up", "Raise priority", "the job runs sooner"),
    JobCommand("priority_down", "Lower priority", "the job runs later"),
    JobCommand("requeue_job", "Requeue job", "run a finished job again"),
    JobCommand("log_job", "Open log", "the job's log in a pane, following"),
    JobCommand("pager_job", "Open log in $PAGER", "the job's log in your pager"),
    JobCommand("edit_job", "Edit job", "change a queued job's name, command, time limit, GPUs"),
    JobCommand(
        "suspend_job",
        "Suspend / resume job",
        "stop a running job, keeping its GPUs, or continue it",
    ),
)
SCREEN_COMMANDS = (  # (mode, title, help)
    ("station", "Station", "GPU cards, host and totals"),
    ("queue", "Queue & jobs", "every job, with actions"),
    ("loaders", "Loaders", "shared data loaders and their consumers"),
    ("mig", "MIG plan", "MIG layout and the planner"),
    ("processes", "Running jobs", "per-job SM, GPU memory, CPU, energy (nvitop's table)"),
)


@dataclass(frozen=True)
class ActionDone:
    """How an action went, for its notification."""

    op: str
    outcomes: list[ActionOutcome] = field(default_factory=list)
    submitted: list[int] | None = None  # the new jobs' ids, for a submit
    error: str | None = None


class DeskApp(App[str]):
    CSS_PATH = "desk.tcss"
    TITLE = "gpudesk"
    ENABLE_COMMAND_PALETTE = True
    MODES: ClassVar[dict[str, Any]] = {
        "station": StationScreen,
        "queue": QueueScreen,
        "loaders": LoadersScreen,
        "mig": MigScreen,
        "processes": ProcessesScreen,
    }
    DEFAULT_MODE = "station"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("1,s", "switch_mode('station')", "GPUs"),
        Binding("2,j", "switch_mode('queue')", "Jobs"),
        Binding("3", "switch_mode('loaders')", "Loaders"),
        Binding("4,m", "switch_mode('mig')", "MIG"),
        Binding("5", "switch_mode('processes')", "Procs"),
        Binding("n", "submit", "Submit"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "quit_desk", "Quit"),
    ]

    def __init__(
        self,
        feed: Feed,
        *,
        readonly: bool = False,
        refresh_s: float = DEFAULT_REFRESH_S,
        workdir: Path | None = None,
    ) -> None:
        super().__init__()
        self.feed = feed
        self.readonly = readonly or feed.readonly_reason is not None
        self.refresh_s = refresh_s
        self.workdir = workdir or Path.cwd()
        self.state = DeskState()
        self.connection_note: str | None = None
        self.damaged_said: set[int] = set()  # damaged job rows already told of
        self.left_out_said: str | None = None
        self.closed_by_signal: int | None = None  # SIGTERM or SIGHUP, where one closed it

    # ------------------------------------------------------------------ data
    def on_mount(self) -> None:
        self._close_on_signals()
        self.follow_feed()

    def _close_on_signals(self) -> None:
        """SIGTERM (`kill`, a closing tmux pane) and SIGHUP (an SSH link that dropped) would end
        the process at once, leaving the terminal in the alternate screen with mouse reporting
        on; the desk closes on them as on `q` instead, and takes the terminal back."""
        import asyncio

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGHUP):
            # (not where the loop cannot take signals: off the main thread, as some tests run)
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signum, self._closed_by, signum)

    def _closed_by(self, signum: int) -> None:
        self.closed_by_signal = signum
        self.exit()

    @work(thread=True, exclusive=True, group="feed", exit_on_error=False)
    def follow_feed(self) -> None:
        from textual.worker import get_current_worker

        current = get_current_worker()
        trouble = False
        while not current.is_cancelled:
            try:
                frame = self.feed.next_frame(self.refresh_s)
            except EngineError as exc:
                self.post_message(FeedTrouble(f"engine not answering: {exc}"))
                trouble = True
                time.sleep(RETRY_S)
                continue
            if trouble:
                self.post_message(FeedTrouble(None))
                trouble = False
            if frame is not None:
                self.post_message(FrameArrived(frame))

    def on_frame_arrived(self, message: FrameArrived) -> None:
        frame = message.frame
        self.state.fold(frame)
        self._say_listing(frame)
        self._redraw()

    def _say_listing(self, frame: Frame) -> None:
        """Say, once each, which job rows the engine could not read (they are left out) and
        what the live window leaves out: the desk never shows a cut list silently."""
        fresh = [d for d in frame.damaged if d.id not in self.damaged_said]
        if fresh:
            self.damaged_said.update(d.id for d in fresh)
            shown = "; ".join(f"job {d.id}: {d.reason}" for d in fresh[:3])
            self.notify(
                f"{len(fresh)} job record(s) cannot be read and are left out: {shown}",
                severity="warning",
                timeout=10,
            )
        if frame.left_out and frame.left_out != self.left_out_said:
            self.notify(frame.left_out, timeout=6)
        self.left_out_said = frame.left_out

    def load_older_finished(self) -> None:
        """The next page of older finished jobs into the queue (its `m` key)."""
        self._load_older()

    @work(thread=True, group="older", exclusive=True)
    def _load_older(self) -> None:
        try:
            found = self.feed.older_finished()
            text = f"loaded {found} older finished job(s)" if found else "no older finished jobs"
            self.call_from_thread(self.notify, text, timeout=4)
        except EngineError as exc:
            self.call_from_thread(self.notify, f"older jobs: {exc}", severity="error", timeout=8)

    def on_feed_trouble(self, message: FeedTrouble) -> None:
        # One notice an outage: the feed says it again at every retry, and the header says
        # ENGINE NOT ANSWERING until the engine is back (then a new outage is told again).
        first = self.connection_note is None
        self.connection_note = message.problem and "ENGINE NOT ANSWERING"
        if message.problem and first:
            self.notify(message.problem, severity="error", timeout=6)
        self._redraw()

    def _redraw(self) -> None:
        try:
            screen = self.screen
        except ScreenStackError:  # a frame that arrived while the desk closes
            return
        if isinstance(screen, DeskScreen):
            screen.redraw()

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        # Plain text, whatever the caller (a screen's notify passes markup=True): a notice
        # holds job names, what the user typed and the engine's messages, whose brackets
        # (sweep[lr=0.1], [station]) are no markup; `[/]` in one would close the desk.
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    # ------------------------------------------------------------------ actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # read-only: hidden from the footer, and the keys do nothing
        return not (self.readonly and action in MUTATING)

    def act(self, op: str, action: Action) -> None:
        """Run one engine action (`op` names it) off the UI thread and say how it went."""
        if self.readonly:
            self.notify("read-only desk: actions are off", severity="warning")
            return
        self._act(op, action)

    @work(thread=True, group="actions")
    def _act(self, op: str, action: Action) -> None:
        try:
            reply = action(self.feed)
            outcomes = [] if isinstance(reply, (MigApplyResult, DrainResult)) else list(reply)
            done = ActionDone(op, outcomes=outcomes)
        except EngineError as exc:
            done = ActionDone(op, error=str(exc))
        self.call_from_thread(self._acted, done)

    def _acted(self, result: ActionDone) -> None:
        if not self.is_running:  # the desk closed while the action ran
            return
        if result.error:
            self.notify(f"{result.op}: {result.error}", severity="error", timeout=8)
            return
        if result.outcomes:
            text = "; ".join(f"job {r.id} {r.outcome}" for r in result.outcomes)
        elif result.submitted is not None:
            text = f"submitted {len(result.submitted)} job(s): " + ", ".join(
                str(i) for i in result.submitted
            )
        else:
            text = f"{result.op}: done"
        self.notify(text, timeout=4)

    def confirm(self, question: str, on_yes: Callable[[], None], yes: str = "Yes") -> None:
        def answered(ok: bool | None) -> None:
            if ok:
                on_yes()

        self.push_screen(ConfirmScreen(question, yes), answered)

    def confirm_cancel(self, job: JobView) -> None:
        if job.terminal:
            self.notify(f"job {job.id} is already {job.state}", severity="warning")
            return
        what = f"stop the {job.state}" if job.placed else "cancel the queued"
        self.confirm(
            f"Really {what} job {job.id} ({job.name})?",
            lambda: self.act("cancel", lambda feed: feed.cancel([job.own_ref])),
            yes="Cancel job",
        )

    def toggle_drain(self) -> None:
        """Drain the station (asking first), or undrain it: an admin's (the engine says)."""
        if self.readonly:
            self.notify("read-only desk: actions are off", severity="warning")
            return
        if self.state.status is not None and self.state.status.drain is not None:
            self.act("undrain", lambda feed: feed.undrain())
            return
        self.confirm(
            "Drain the station? No new job starts until it is undrained; running jobs go on.",
            lambda: self.act("drain", lambda feed: feed.drain("drained from the desk")),
            yes="Drain",
        )

    def open_job(self, job_id: int) -> None:
        self.push_screen(JobScreen(job_id))

    def run_job_command(self, action: str, job: JobView) -> None:
        """Carry out one of JOB_COMMANDS on `job` (keys and the palette both come here)."""
        if self.readonly and action in MUTATING:
            self.notify("read-only desk: actions are off", severity="warning")
            return
        # the row's job alone: an array's first job's id names every task of the array
        job_id = job.own_ref
        if action == "open_job":
            self.open_job(job.id)
        elif action == "cancel_job":
            self.confirm_cancel(job)
        elif action == "hold_job":
            if job.held:
                self.act("release", lambda feed: feed.release([job_id]))
            else:
                self.act("hold", lambda feed: feed.hold([job_id]))
        elif action in ("priority_up", "priority_down"):
            delta = 1 if action == "priority_up" else -1
            self.act("priority", lambda feed: feed.move_priority([job_id], delta))
        elif action == "requeue_job":
            self.act("requeue", lambda feed: feed.requeue([job_id]))
        elif action == "log_job":
            self.open_log(job)
        elif action == "pager_job":
            self.page_log(job)
        elif action == "edit_job":
            self.edit_job(job)
        elif action == "suspend_job":
            if job.state == "suspended":
                self.act("resume", lambda feed: feed.resume([job_id]))
            else:
                self.act("suspend", lambda feed: feed.suspend([job_id]))
        else:
            raise ValueError(f"not a job command: {action}")

    def edit_job(self, job: JobView) -> None:
        """The edit form of a job that has not started; what it changed sent as `edit`."""
        if job.state != "queued":
            self.notify(
                f"job {job.id} is {job.state}: only a job that has not started can be edited",
                severity="warning",
            )
            return

        def answered(fields: dict[str, Any] | None) -> None:
            if fields:
                self.act("edit", lambda feed: feed.edit(job.id, fields))
            elif fields is not None:
                self.notify(f"job {job.id}: nothing changed", timeout=3)

        self.push_screen(EditJobScreen(job), answered)

    def ask_job_then(self, command: JobCommand) -> None:
        """Ask which job (its id or name), then run `command` on it."""

        def answered(text: str | None) -> None:
            if text is None:
                return
            job, problem = self.find_job(text)
            if job is None:
                self.notify(problem, severity="warning", timeout=6)
                return
            self.run_job_command(command.action, job)

        self.push_screen(JobPromptScreen(command.title), answered)

    def find_job(self, text: str) -> tuple[JobView | None, str]:
        """The job a user means by `text`: its id (`21`, or as the cards label it, `j21`;
        `#21` too), its exact name, else the one job whose name contains it (the newest where
        several share a name: her own newest where she has one, as the engine reads a name);
        else why none."""
        jobs = self.state.jobs
        number = text.strip().removeprefix("#")
        if number[:1] in ("j", "J") and not any(j.name == text for j in jobs):
            number = number[1:]
        if number.isascii() and number.isdecimal():  # not '²', which int() cannot read
            job = self.state.job(int(number))
            return job, "" if job else f"no job {number} in the desk's list"
        exact = [j for j in jobs if j.name == text]
        found = exact or [j for j in jobs if text.lower() in j.name.lower()]
        if len(found) == 1 or exact:
            return max([j for j in found if j.uid == os.getuid()] or found, key=lambda j: j.id), ""
        if not found:
            return None, f"no job named like {text!r}"
        names = ", ".join(f"{j.id} {j.name}" for j in found[:4]) + ("…" if len(found) > 4 else "")
        return None, f"{len(found)} jobs match {text!r} ({names}): give its id"

    def apply_mig_plan(self) -> None:
        """The MIG screen's apply (asks first), from anywhere: once its plans are read."""
        self.switch_mode("mig")
        self.call_after_refresh(self._apply_when_planned)

    def _apply_when_planned(self) -> None:
        # Screens opened over the MIG screen (a job, from the palette) are left first: the
        # switch to the mode it is already in shows the one on top.
        migs = [screen for screen in self.screen_stack if isinstance(screen, MigScreen)]
        if not migs:
            return
        while self.screen is not migs[-1]:
            self.pop_screen()
        migs[-1].apply_when_loaded()

    def open_log(self, job: JobView) -> None:
        if not job.log:
            self.notify(f"job {job.id} has no log yet (it has not started)", severity="warning")
            return
        self.push_screen(LogScreen(job))

    def page_log(self, job: JobView) -> None:
        if not job.log:
            self.notify(f"job {job.id} has no log yet", severity="warning")
            return
        try:  # found before the terminal is handed over: a desk that cannot say so is lost
            pager = pager_command(os.environ.get("PAGER"))
        except NoPager as exc:
            self._log_pane_instead(job, f"cannot open $PAGER here ({exc})")
            return
        try:
            with terminal_handed_over(self):
                status = page_job_log(job.id, pager)
        except SuspendNotSupported:
            self._log_pane_instead(job, "cannot open $PAGER here (no terminal to hand over)")
            return
        except OSError as exc:  # found, but it would not start (not a program, no access)
            self._log_pane_instead(job, f"cannot open $PAGER here ({exc.strerror or exc})")
            return
        if status != 0:
            ended = (
                f"was ended by {signal.Signals(-status).name}"
                if -status in signal.valid_signals()
                else f"exited with status {status}"
            )
            self._log_pane_instead(job, f"$PAGER ({Path(pager[0]).name}) {ended}")

    def _log_pane_instead(self, job: JobView, why: str) -> None:
        self.notify(f"{why}; showing the log pane instead", severity="warning")
        self.open_log(job)

    def action_submit(self) -> None:
        if self.readonly:
            return
        self.push_screen(SubmitScreen(self.workdir), self._submit_answered)

    def _submit_answered(self, request: SubmitRequest | None) -> None:
        if request is not None:
            self._submit(request)

    @work(thread=True, group="actions")
    def _submit(self, request: SubmitRequest) -> None:
        """A command as one job, or a profile through the submit workflow (as `gpudesk run`
        does it): its [station] and [datasets], its selections' pre-pass jobs, and once they
        all succeeded its jobs. Waiting for pre-passes happens here, in this worker thread."""
        from textual.worker import get_current_worker

        from gpudesk.api import JobSpec, SpecError
        from gpudesk.api.profiles import ProfileError, load_profile
        from gpudesk.api.submit import (
            StationReport,
            Step,
            Submitted,
            WaitStopped,
            submit_profile,
            submit_specs,
            wait_for_jobs,
        )

        worker = get_current_worker()

        def closing() -> bool:
            return worker.is_cancelled or not self.is_running

        def told(step: Step) -> None:
            if isinstance(step, StationReport) and step.lines() and not closing():
                self.call_from_thread(self.notify, "\n".join(step.lines()), timeout=10)
            if isinstance(step, Submitted) and step.stage == "prepass" and not closing():
                self.call_from_thread(
                    self.notify,
                    f"queued {len(step.ids)} selection pre-pass job(s): "
                    + ", ".join(str(i) for i in step.ids)
                    + "; the profile's jobs follow once they succeed",
                    timeout=6,
                )

        try:
            client = self.feed.connect()  # this thread's own: it may wait on pre-passes
        except EngineError as exc:
            self.call_from_thread(self._acted, ActionDone("submit", error=str(exc)))
            return
        try:
            if request.profile is not None:
                profile = load_profile(request.profile)
                outcome = submit_profile(
                    client,
                    profile,
                    wait=lambda ids: wait_for_jobs(client, ids, stop=closing),
                    on_step=told,
                    how_to_apply="the desk leaves station settings as they are; "
                    "gpudesk engine set changes them",
                )
                failed = outcome.failed_prepasses
                if failed:
                    done = ActionDone("submit", error="; ".join(p.describe() for p in failed))
                else:
                    done = ActionDone("submit", submitted=outcome.job_ids)
            else:
                spec = JobSpec.from_dict(request.job or {})
                done = ActionDone("submit", submitted=submit_specs(client, [spec]))
        except WaitStopped:
            return  # the desk closed while pre-passes ran; they go on in the engine
        except ProfileError as exc:
            done = ActionDone("submit", error=f"the profile is not valid:\n{exc}")
        except SpecError as exc:
            done = ActionDone("submit", error=f"{exc.key}: {exc.message}")
        except (EngineError, OSError) as exc:
            done = ActionDone("submit", error=str(exc))
        finally:
            client.close()
        self.call_from_thread(self._acted, done)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.readonly))

    def action_quit_desk(self) -> None:
        # The counts as the engine has them now (the last frame may be a refresh old, or
        # older on a busy engine); where it cannot say at once, the last frame's, saying as of
        # when. Not asked at all while it is not answering: `q` must not hang on it.
        as_of = ""
        counts: dict[str, int] | None = None
        if self.connection_note is None:
            with contextlib.suppress(EngineError):  # then as the last frame had them
                counts = self.feed.job_counts(busy_s=QUIT_BUSY_S, answer_s=QUIT_ANSWER_S)
        if counts is None:
            counts = self.state.counts()
            if self.state.now is not None:
                when = time.strftime("%H:%M:%S", time.localtime(self.state.now))
                as_of = f",\nas of {when}, when the desk last heard from it"
        running, queued = counts.get("running", 0), counts.get("queued", 0)
        self.exit(
            f"desk closed: the engine goes on with {running} running and {queued} "
            f"queued job(s){as_of}.\n`gpudesk` reopens it; `gpudesk engine stop` stops the "
            "engine, not the jobs."
        )

    # ------------------------------------------------------------------ palette
    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Every action, on every screen: the screens, the job actions (on the selected job
        where the screen has one, else on a job the palette asks for), submit, the MIG plan,
        help and quit. A read-only desk leaves the actions that change something out."""
        for mode, title, help_text in SCREEN_COMMANDS:
            yield SystemCommand(title, help_text, partial(self.switch_mode, mode))
        selected = screen.selected_job() if isinstance(screen, JobActions) else None
        for command in JOB_COMMANDS:
            if self.readonly and command.action in MUTATING:
                continue
            shown = command.action == "open_job" and isinstance(screen, JobScreen)
            if selected is not None and not shown:  # not the job screen of the job it shows
                yield SystemCommand(  # the palette reads a title as markup
                    f"{command.title} {selected.id} ({escape(selected.name)})",
                    command.help,
                    partial(self.run_job_command, command.action, selected),
                )
            yield SystemCommand(
                f"{command.title}…",
                command.help + "; asks which job",
                partial(self.ask_job_then, command),
            )
        if not self.readonly:
            yield SystemCommand("Submit", "submit a profile or a command", self.action_submit)
            yield SystemCommand(
                "Apply MIG plan", "repartition as planned (asks first)", self.apply_mig_plan
            )
            drained = self.state.status is not None and self.state.status.drain is not None
            yield SystemCommand(
                "Undrain station" if drained else "Drain station",
                "start jobs again"
                if drained
                else "start no new job (maintenance); running jobs go on (asks first)",
                self.toggle_drain,
            )
        yield SystemCommand("Help", "every key binding", self.action_help)
        yield SystemCommand("Quit", "close the desk (jobs keep running)", self.action_quit_desk)
        yield from super().get_system_commands(screen)
