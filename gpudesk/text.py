"""Text from outside made safe to keep and to show: the one home for strings that may not be
valid Unicode.

Linux file names, arguments and environment values are bytes. Python hands the ones that are not
UTF-8 to us as `str` with each bad byte turned into a lone surrogate (U+DC80..U+DCFF, PEP 383
"surrogateescape"); `os.fsencode` turns them back into the same bytes, so a job's argv, working
directory and environment keep them and stay runnable. SQLite and strict JSON readers (msgspec)
refuse lone surrogates, so text that is *stored or shown* (a failure reason, an event, a reply)
goes through `safe_text`, which spells each such byte as `\\xNN`, the way `ls -b` and a shell's
`$'...'` do.

A surrogate that no byte stands for (U+D800..U+DC7F, U+DD00..U+DFFF: a JSON `\\ud800` escape sent
by a client, never a file name) cannot reach the operating system at all: `is_os_text` says so,
and the engine refuses such a request (`gpudesk.core.protocol.decode_request`).

A job's output shown on someone's terminal goes through `printable` (text) or `printable_bytes`
(the engine's replies to a reader who is not the job's owner): every control character but a
newline and a tab, ESC first (the start of every escape sequence: a window title, a cleared
screen, a rewritten line), is spelled `\\xNN` in the same way, so it is seen and never obeyed.

A name, a comment, a label: one line of text that people read in tables and messages. What it may
not hold has one home, `unsafe_char`: a control character (C0, DEL, C1: U+009B is CSI to many a
terminal), and the characters that reorder, break or hide what a reader sees (Unicode format
characters, Cf: the bidi overrides U+202A..U+202E and isolates U+2066..U+2069, the zero-width
U+200B..U+200F; the line and paragraph separators U+2028, U+2029). Such text is refused when a
job is submitted, in the words of `one_line_refusal`; one shown in a message or kept from before
is spelled out by `printable_line`.
"""

from __future__ import annotations

import functools
import json
import math
import re
import stat
import unicodedata
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 controls but \n and \t, DEL, and the C1 controls (U+0080..U+009F: a terminal may take
# U+009B as CSI, as ESC [)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_BUT_CR = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# the same in UTF-8 bytes (a C1 control is \xc2 then \x80..\x9f)
_CONTROL_BYTES = re.compile(b"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def _spell(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def safe_text(text: str) -> str:
    """`text` with every lone surrogate spelled out (`\\xe9` for a non-UTF-8 byte, `\\ud800`
    otherwise): valid Unicode, storable in SQLite and sendable as strict JSON."""
    if text.isascii():
        return text
    return _SURROGATE.sub(_spell, text)


def printable(text: str, keep_carriage_return: bool = False) -> str:
    """`text` (a job's output) safe to write to a terminal: every control character but a
    newline and a tab spelled `\\xNN` (ESC as `\\x1b`), so no escape sequence reaches the
    terminal. `keep_carriage_return`: a `\\r` stays one (the owner's own progress bars redraw
    in place, as they did when the job wrote them; someone else's output never gets this: a
    `\\r` can hide a line under the next)."""
    pattern = _CONTROL_BUT_CR if keep_carriage_return else _CONTROL
    return pattern.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def printable_bytes(data: bytes) -> bytes:
    """`printable` on bytes of UTF-8 text, for a piece of a stream: a C1 control is spelled
    by its code point, as `printable` spells it. A \xc2 that ends `data` is left to the caller
    (the next piece may make it a C1 control: see `ends_in_c1_lead`)."""
    return _CONTROL_BYTES.sub(_spell_control_bytes, data)


def ends_in_c1_lead(data: bytes) -> bool:
    """Does `data` end in the first byte of what may be a C1 control in UTF-8 (\xc2)? A reader
    that neutralises a stream piece by piece holds it back for the next piece."""
    return data.endswith(b"\xc2")


def _spell_control_bytes(match: re.Match[bytes]) -> bytes:
    code = match.group()[-1]  # \xc2\x9b is U+009B
    return b"\\x%02x" % code


# Unicode categories a line of text shown to people may not hold: controls, format characters
# (bidi overrides and isolates, zero-width characters), line and paragraph separators
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def unsafe_char(text: str, allowed: str = "") -> str | None:
    """The first character of `text` that a name, a comment or a label may not hold (see the
    module's doc: a control character, a format character, a line or paragraph separator), but
    those in `allowed`; None where there is none. A lone surrogate is not one (`is_text`)."""
    if text.isascii():
        return next((c for c in text if (c < " " or c == "\x7f") and c not in allowed), None)
    return next(
        (c for c in text if unicodedata.category(c) in _UNSAFE_CATEGORIES and c not in allowed),
        None,
    )


def spelled_char(char: str) -> str:
    """One character as it is spelled out: `\\x1b`, `\\x9b`, `\\u202e`."""
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable_line(text: str) -> str:
    """`text` (a name, a value from a profile, one kept from before the checks refused it) safe
    to show on one line: each character `unsafe_char` finds spelled out (`\\x1b`, `\\x0a`,
    `\\u202e`), and a lone surrogate as `safe_text` spells it."""
    text = safe_text(text)
    if unsafe_char(text) is None:
        return text
    return "".join(
        spelled_char(c) if unicodedata.category(c) in _UNSAFE_CATEGORIES else c for c in text
    )


def quoted(text: str) -> str:
    """A value someone gave, quoted in a message: `'a\\xffb\\x1b[2J'` (`printable_line`'s
    spelling, where Python's repr would say `'a\\udcffb…'`)."""
    return f"'{printable_line(text)}'"


def printable_message(text: str) -> str:
    """A message of one or more lines (an error paragraph, which may quote a path or a value
    a user gave) safe to show: each line as `printable_line` spells it, the newlines kept."""
    return "\n".join(printable_line(line) for line in text.split("\n"))


def is_text(text: str) -> bool:
    """Is `text` valid Unicode (no lone surrogate)? What a name or a label must be."""
    return text.isascii() or _SURROGATE.search(text) is None


def one_line_refusal(text: str, what: str, why: str, allowed: str = "") -> str | None:
    """Why `text` cannot be `what` ("a name", "a comment"), one line of plain text: the first
    character `unsafe_char` finds (but those in `allowed`), spelled out, then `why` ("it is
    shown on one line of plain text"); or bytes that are not UTF-8. None where it can be."""
    bad = unsafe_char(text, allowed)
    if bad is not None:
        return (
            f"{what} cannot contain control characters or invisible formatting "
            f"(found {spelled_char(bad)}): {why}"
        )
    if not is_text(text):
        shown = safe_text(text)
        shown = shown if len(shown) <= 60 else f"{shown[:57]}..."
        # quoted as every value is (`\\xe9`), not as Python's repr would (`\\\\xe9`)
        return f"{what} must be text (UTF-8); {quoted(shown)} holds bytes that are not"
    return None


def is_os_text(text: str) -> bool:
    """Can `text` be an argument, a path or an environment value: valid Unicode, or bytes that
    are not UTF-8 as Python decodes them (surrogateescape)?"""
    if text.isascii():
        return True
    try:
        text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return False
    return True


def json_text(
    value: Any,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """`value` as JSON text for people and programs to read (every `--json`, `--format json`
    and JSON report file): what `json.dumps(value, indent=..., separators=..., sort_keys=...,
    default=str)` writes (ASCII: other characters as `\\u00e9` escapes), but JSON that every
    reader takes as it is. A lone surrogate, which `json.dumps` writes as a `\\udcff` escape
    that stands for no character (msgspec and serde_json refuse the whole document, jq and Go
    read U+FFFD and lose the byte), is spelled out as `safe_text` does: a non-UTF-8 byte of a
    path or an argument is the text `\\xff`. A float
    that is NaN or infinite is null, as in `json_bytes`. A value JSON has no type for (a path,
    a date) is its `str`, spelled out the same way. Valid text is written as json.dumps writes
    it, byte for byte: only a `\\ud` in the text (a surrogate pair, a character beyond U+FFFF,
    looks the same) makes it look closer, and spelling valid text changes nothing."""
    if indent is None and separators is None and not sort_keys:
        encoder = _COMPACT  # each value of `history --format json`: kept at hand
    else:
        encoder = _ascii_encoder(indent, separators, sort_keys)
    try:
        text = encoder.encode(value)
    except ValueError:  # NaN or an infinity
        return encoder.encode(_safe_tree(value))
    if "\\ud" not in text:
        return text
    return encoder.encode(_safe_tree(value))


@functools.cache
def _ascii_encoder(
    indent: int | None, separators: tuple[str, str] | None, sort_keys: bool = False
) -> json.JSONEncoder:
    """One encoder for each layout, kept: making one is most of the time `json.dumps` takes to
    write a number (`history --format json` writes each value alone)."""
    return json.JSONEncoder(
        indent=indent,
        separators=separators,
        sort_keys=sort_keys,
        default=_spelled_str,
        allow_nan=False,
    )


def _spelled_str(value: object) -> str:
    return safe_text(str(value))


_COMPACT = _ascii_encoder(None, None)


def json_bytes(value: Any) -> bytes:
    """`value` as UTF-8 JSON that a strict reader accepts: a lone surrogate in any string (which
    `json.dumps` would write as a `\\udce9` escape, invalid JSON for msgspec) is spelled out as
    `safe_text` does, and a float that is NaN or infinite (which `json.dumps` writes as `NaN`,
    no JSON at all: msgspec refuses the whole message) is null, as msgspec writes the engine's
    replies. Only strings and floats can hold either, so the fallback walks only when one does."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        return text.encode()
    except (UnicodeEncodeError, ValueError):
        return json.dumps(_safe_tree(value), ensure_ascii=False, allow_nan=False).encode()


def _safe_tree(value: Any) -> Any:
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {
            (safe_text(k) if isinstance(k, str) else k): _safe_tree(v) for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_safe_tree(v) for v in value]
    return value


def file_kind(mode: int) -> str:
    """What a file of `mode` is, in words ("a regular file", "a named pipe"): the one home of
    that sentence part, for every message that says what stands where something else should."""
    for test, kind in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return "a special file"
