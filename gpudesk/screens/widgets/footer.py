"""The desk's footer: Textual's `Footer`, rebuilt only when the keys it shows change."""

from __future__ import annotations

from collections.abc import Hashable

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer


class DeskFooter(Footer):
    """Textual's Footer rebuilds itself (a widget per key, each styled anew) at every bindings
    update: focus moving, a screen resuming, a dialog closing. On the desk most of those leave
    the same keys showing, and the rebuilds were a fair share of opening the desk (eight during
    its first paint: median 1.83 s against 1.43 s from launch to the queue's rows on a 2-core
    machine, docs/benchmarks.md). This one rebuilds when what it would show differs from what
    it shows."""

    _shown: Hashable | None = None

    def _keys(self) -> Hashable:
        return tuple(
            (binding.key, binding.description, binding.action, enabled, tooltip)
            for (_, binding, enabled, tooltip) in self.screen.active_bindings.values()
            if binding.show
        ), self.show_command_palette

    def compose(self) -> ComposeResult:
        if self._bindings_ready:
            self._shown = self._keys()
        yield from super().compose()

    def bindings_changed(self, screen: Screen) -> None:
        if (
            self._bindings_ready
            and self.is_attached
            and screen is self.screen
            and screen.app.app_focus  # else Textual's waits for the focus to come back
        ):
            keys = self._keys()
            if keys == self._shown:
                return
            self._shown = keys  # a second update before the rebuild needs no other
        super().bindings_changed(screen)
