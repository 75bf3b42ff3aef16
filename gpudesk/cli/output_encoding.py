"""Output in a locale that is not UTF-8 (LANG=en_US.ISO-8859-1, LC_ALL=C, PYTHONIOENCODING=latin-1).

Python writes text in the stream's encoding, and a character that encoding lacks ends the
command with a UnicodeEncodeError traceback: a job named `训练-…` in `gpudesk queue`, the `…` of
any cut column in `show`. Where stdout or stderr cannot carry UTF-8, each character its encoding
lacks is written as an ASCII stand-in in the same columns (`...` for `…`, `?` for each column of
one with none), and cuts are made with `...` (render.ELLIPSIS): the command says what it would
have said, never a traceback. `gpudesk top` does the same for its frames (cli/top_screen.py).
"""

from __future__ import annotations

import codecs
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
ERRORS = "gpudesk.stand_in"  # the codec error handler's name (codecs.register_error)


def stand_in(char: str) -> str:
    return STAND_INS.get(char, "?" * max(1, render.cell_width(char)))


def _stand_ins(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    return "".join(stand_in(c) for c in exc.object[exc.start : exc.end]), exc.end


def degrade(*streams: TextIO) -> None:
    """Write each character `streams`' encodings lack as its stand-in, and cut with `...`
    where one of them has no `…`; for the rest of this process."""
    codecs.register_error(ERRORS, _stand_ins)
    for stream in streams:
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors=ERRORS)
    if not all(carries("…", output_encoding(stream)) for stream in streams):
        render.ELLIPSIS.set("...")


def output_encoding(stream: TextIO) -> str:
    """The encoding `stream` writes in; utf-8 for one that names none (a StringIO), ascii for
    one Python does not know."""
    name = getattr(stream, "encoding", None) or "utf-8"
    try:
        return codecs.lookup(name).name
    except LookupError:
        return "ascii"


def carries(text: str, encoding: str) -> bool:
    """Whether `encoding` can write every character of `text`."""
    try:
        text.encode(encoding)
    except UnicodeEncodeError:
        return False
    return True
