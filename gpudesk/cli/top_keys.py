"""The keys `gpudesk top` reads from its terminal, whole: a function key or an arrow arrives as an
escape sequence (F2 in xterm is ESC O Q, Shift-F2 ESC [ 1 ; 2 Q), and the letters inside one
are not keys that were pressed. Only a lone `q` or `Q` leaves top (Ctrl-C interrupts it)."""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable, Iterator
from typing import TextIO

QUIT_KEYS = ("q", "Q")
ESC = "\x1b"
# The rest of a sequence whose first bytes came alone: a terminal writes one at once, so what
# has not come by then is another key (a lone Esc)
SEQUENCE_REST_S = 0.05


def split_keys(text: str) -> tuple[list[str], str]:
    """`text` as keys (an escape sequence is one key, starting with ESC) and what is left: the
    start of a sequence whose end has not come yet."""
    keys: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != ESC:
            keys.append(text[i])
            i += 1
            continue
        end = _sequence_end(text, i)
        if end is None:
            return keys, text[i:]
        keys.append(text[i:end])
        i = end
    return keys, ""


def _sequence_end(text: str, start: int) -> int | None:
    """Where the escape sequence at `start` ends (ECMA-48: CSI `ESC [` and SS3 `ESC O` run to
    a final byte 0x40-0x7E; ESC and one character is Alt with that key); None when `text` ends
    first."""
    if start + 1 >= len(text):
        return None
    kind = text[start + 1]
    if kind == "O":  # SS3: one more character (F1-F4 and the keypad in xterm)
        return start + 3 if start + 2 < len(text) else None
    if kind != "[":
        return start + 2  # Alt-key, or ESC ESC
    for i in range(start + 2, len(text)):
        if "\x40" <= text[i] <= "\x7e":
            return i + 1
    return None


def quits(keys: list[str]) -> bool:
    return any(key in QUIT_KEYS for key in keys)


def _sleep(seconds: float) -> list[str]:
    time.sleep(seconds)
    return []


@contextlib.contextmanager
def key_reader(stream: TextIO) -> Iterator[Callable[[float], list[str]]]:
    """`wait(seconds)`: the keys pressed within `seconds` (returns at the first one), or [].

    On a terminal, keys come one at a time, unechoed, without Enter (cbreak mode: Ctrl-C still
    interrupts), and the terminal's own mode is put back however top ends. With no terminal
    (a pipe, a file, /dev/null) `wait` only sleeps: top runs until it is interrupted, as before.
    """
    try:
        fd = stream.fileno()
        on_tty = stream.isatty()
    except (OSError, ValueError):  # no stdin at all, or one with no file behind it
        on_tty = False
    if not on_tty:
        yield _sleep
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    open_ = [True]  # until the terminal hangs up: then select would wake at once forever

    def read(seconds: float) -> str:
        ready, _, _ = select.select([fd], [], [], seconds)
        if not ready:
            return ""
        data = os.read(fd, 64)
        if not data:
            open_[0] = False
        return data.decode(errors="replace")

    def wait(seconds: float) -> list[str]:
        if not open_[0]:
            return _sleep(seconds)
        keys, rest = split_keys(read(seconds))
        while rest and open_[0]:
            more = read(SEQUENCE_REST_S)
            if not more:  # a lone Esc (or a sequence cut short): one key, which top ignores
                keys.append(rest)
                break
            new, rest = split_keys(rest + more)
            keys += new
        return keys

    try:
        tty.setcbreak(fd, termios.TCSANOW)
        yield wait
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
