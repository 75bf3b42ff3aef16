"""What every desk screen shares: the header strip, the footer with the key hints, and being
redrawn from the app's latest `DeskState` (when it changes, and when the screen comes back)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.screen import Screen

from gpudesk.screens.state import DeskState
from gpudesk.screens.widgets.strips import DeskHeader

if TYPE_CHECKING:
    from gpudesk.screens.app import DeskApp

# Actions that change something: hidden and refused in --readonly.
MUTATING = frozenset({"submit", "cancel_job", "hold_job", "priority", "requeue_job",
                      "apply_plan"})


class DeskScreen(Screen[None]):
    """A screen of the desk; subclasses draw the state in `show_state`."""

    @property
    def desk(self) -> DeskApp:
        return self.app  # type: ignore[return-value]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # read-only: hidden from the footer, and the keys do nothing
        return not (self.desk.readonly and action in MUTATING)

    def redraw(self) -> None:
        if not self.is_mounted:
            return
        state = self.desk.state
        for header in self.query(DeskHeader):
            header.show(state, self.desk.readonly, self.desk.connection_note)
        self.show_state(state)

    def show_state(self, state: DeskState) -> None:
        raise NotImplementedError

    def on_screen_resume(self) -> None:
        self.redraw()
