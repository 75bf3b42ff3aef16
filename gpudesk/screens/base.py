"""What every desk screen shares: the header strip, the footer with the key hints, and being
redrawn from the app's latest `DeskState` (when it changes, and when the screen comes back)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.css.query import NoMatches
from textual.screen import Screen

from gpudesk.api import JobView
from gpudesk.screens.state import DeskState
from gpudesk.screens.widgets.strips import DeskHeader

if TYPE_CHECKING:
    from gpudesk.screens.app import DeskApp

# Actions that change something: hidden and refused in --readonly.
MUTATING = frozenset(
    {
        "submit",
        "cancel_job",
        "hold_job",
        "priority",
        "priority_up",
        "priority_down",
        "requeue_job",
        "apply_plan",
        "edit_job",
    }
)


class DeskScreen(Screen[None]):
    """A screen of the desk; subclasses draw the state in `show_state`."""

    @property
    def desk(self) -> DeskApp:
        return self.app  # type: ignore[return-value]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.desk.check_action(action, parameters)  # one rule for app and screens

    def redraw(self) -> None:
        if not self.is_mounted:
            return
        state = self.desk.state
        try:
            for header in self.query(DeskHeader):
                header.show(state, self.desk.readonly, self.desk.connection_note)
            self.show_state(state)
        except NoMatches:
            # A frame arrived while the screen's widgets are being built or torn down (mounted,
            # children not yet there): the next frame, or the screen's resume, draws it.
            return

    def show_state(self, state: DeskState) -> None:
        raise NotImplementedError

    def on_screen_resume(self) -> None:
        self.redraw()


class JobActions(DeskScreen):
    """The actions on one job, for screens that have a current job (the queue's selected row,
    the job detail's job). The app carries them out (`DeskApp.run_job_command`), so the
    command palette reaches the same actions from any screen."""

    def selected_job(self) -> JobView | None:
        """The job the screen has selected, if any (quietly: the palette asks)."""
        raise NotImplementedError

    def current_job(self) -> JobView | None:
        return self.selected_job()

    def _run(self, action: str) -> None:
        if job := self.current_job():
            self.desk.run_job_command(action, job)

    def action_cancel_job(self) -> None:
        self._run("cancel_job")

    def action_hold_job(self) -> None:
        self._run("hold_job")

    def action_requeue_job(self) -> None:
        self._run("requeue_job")

    def action_log_job(self) -> None:
        self._run("log_job")

    def action_pager_job(self) -> None:
        self._run("pager_job")

    def action_edit_job(self) -> None:
        self._run("edit_job")
