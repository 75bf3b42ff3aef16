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

import codecs
import contextlib
import shutil
from collections.abc import Iterator
from typing import TextIO

from gpudesk import render

# stand-ins that read as the character they replace (the rest: `?` per column)
STAND_INS = {
    "…": "...",
    "—": "-",
    "–": "-",
    "·": ".",
    "‘": "'",
    "’": "'",
    "“": '"',
    "”": '"',
    "→": ">",
    "≈": "~",
    "×": "x",
}


def output_encoding(stream: TextIO) -> str:
    """The encoding `stream` writes in; utf-8 for one that names none (a StringIO), ascii for
    one Python does not know."""
    name = getattr(stream, "encoding", None) or "utf-8"
    try:
        return codecs.lookup(name).name
    except LookupError:
        return "ascii"


def carries(text: str, encoding: str) -> bool:
    try:
        text.encode(encoding)
    except UnicodeEncodeError:
        return False
    return True


def carried(text: str, encoding: str) -> str:
    """`text` with each character `encoding` lacks replaced by its stand-in."""
    if carries(text, encoding):
        return text
    return "".join(
        c if carries(c, encoding) else STAND_INS.get(c, "?" * max(1, render.cell_width(c)))
        for c in text
    )


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
