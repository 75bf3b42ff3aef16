"""A block of text that repaints only when what it shows changed."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class TextPanel(Static):
    """A Static whose `show` skips the update when the text is the one already shown.

    In a scrolling container, every update lays the screen out, and Textual then repaints the
    container's scroll bars in a paint of its own, tens of ms after the screen's: a screen
    coming back (which redraws from the same state) would pay a second, late paint for
    nothing. The MIG screen's key answered in 100-135 ms, against ~70 ms, for that reason."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self._shown: Text | None = None

    def show(self, text: Text) -> bool:
        """Paint `text` unless it is already shown; says whether it painted."""
        if text == self._shown:
            return False
        self._shown = text
        self.update(text)
        return True
