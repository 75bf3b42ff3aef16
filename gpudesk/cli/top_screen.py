"""What `gpudesk top` writes to its output, in the one place that knows the output: the
characters its encoding carries, and the window's size.

Python writes text to a stream in the stream's encoding (`stream.encoding`: PYTHONIOENCODING,
else the locale's), and a character that encoding lacks ends the program with
UnicodeEncodeError. top is made for any terminal, a latin-1 or ASCII one included: there it cuts
with `...` instead of `…`, and any other character the encoding lacks (a job named `训练`, a
dash in a note) becomes an ASCII stand-in in the same columns (`?` for each column a character
it cannot show took), never an error.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, TextIO

from gpudesk import render
from gpudesk.cli.output_encoding import carries, output_encoding, stand_in

Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def carried(text: str, encoding: str) -> str:
    """`text` with each character `encoding` lacks replaced by its stand-in."""
    if carries(text, encoding):
        return text
    return "".join(c if carries(c, encoding) else stand_in(c) for c in text)


@contextlib.contextmanager
def drawing_for(stream: TextIO) -> Iterator[str]:
    """Within it, frames are drawn for `stream`: cut with `...` where it lacks `…`. Yields the
    stream's encoding, for `carried`."""
    encoding = output_encoding(stream)
    with render.ascii_ellipsis(not carries("…", encoding)):
        yield encoding


def window(redraw: bool, default_width: int) -> tuple[int, int | None]:
    """The columns and rows a frame fits in: the terminal's (`$COLUMNS` and `$LINES` first, as
    shutil reads them), however narrow (render.terminal_width keeps 40 at least, for the other
    commands' tables: a frame wider than its window wraps every line); `default_width` into a
    pipe or a file without `$COLUMNS`. Rows only where frames are redrawn in place: a frame
    into a pipe or a dumb terminal scrolls, and keeps every line."""
    size = shutil.get_terminal_size((default_width, 24))
    width = size.columns if render.table_width() is not None else default_width
    return max(1, width), (max(1, size.lines) if redraw else None)


ENTER = "\x1b[?1049h\x1b[?25l"  # the alternate screen, the cursor hidden (htop's, nvitop's)
LEAVE = "\x1b[?25h\x1b[?1049l"  # the cursor shown, the screen as top found it


@contextlib.contextmanager
def alternate_screen(out: TextIO, wanted: bool) -> Iterator[None]:
    """Frames drawn on the terminal's alternate screen where `wanted` (a terminal that redraws in
    place; never a pipe): on leaving, however top ends (`q`, Ctrl-C, an exception, SIGTERM or
    SIGHUP, which end it by SystemExit 128+N here instead of killing it mid-frame), the screen
    and the cursor are the shell's again."""
    if not wanted:
        yield
        return
    saved = _exit_on(signal.SIGTERM, signal.SIGHUP)
    try:
        out.write(ENTER)
        yield
    finally:
        # a hung-up terminal takes nothing: top ends all the same
        with contextlib.suppress(OSError, ValueError):
            out.write(LEAVE)
            out.flush()
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def _exit_on(*signums: signal.Signals) -> dict[signal.Signals, Handler]:
    """SystemExit(128 + N) on each of `signums` (their handlers before, to put back), where this
    runs on the main thread (the only one Python lets set them) and the signal is not ignored."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def leave(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    saved: dict[signal.Signals, Handler] = {}
    for signum in signums:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            saved[signum] = signal.signal(signum, leave)
    return saved
