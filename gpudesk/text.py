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
and the engine refuses such a request (`gpudesk.engine.protocol.decode_request`).
"""

from __future__ import annotations

import json
import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def _spell(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def safe_text(text: str) -> str:
    """`text` with every lone surrogate spelled out (`\\xe9` for a non-UTF-8 byte, `\\ud800`
    otherwise): valid Unicode, storable in SQLite and sendable as strict JSON."""
    if text.isascii():
        return text
    return _SURROGATE.sub(_spell, text)


def is_text(text: str) -> bool:
    """Is `text` valid Unicode (no lone surrogate)? What a name or a label must be."""
    return text.isascii() or _SURROGATE.search(text) is None


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


def json_bytes(value: Any) -> bytes:
    """`value` as UTF-8 JSON that a strict reader accepts: a lone surrogate in any string (which
    `json.dumps` would write as a `\\udce9` escape, invalid JSON for msgspec) is spelled out as
    `safe_text` does. Only strings can hold one, so the fallback walks only when there is."""
    text = json.dumps(value, ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(_safe_tree(value), ensure_ascii=False).encode()


def _safe_tree(value: Any) -> Any:
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {
            (safe_text(k) if isinstance(k, str) else k): _safe_tree(v) for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_safe_tree(v) for v in value]
    return value
