"""Line numbers for TOML keys: tomllib parses without positions, so error messages that should
say `profile.toml:12` find the line with this light scan of the source text."""

from __future__ import annotations

import contextlib
import json
import re
import sys

# The one place that picks the TOML parser: the standard library's from 3.11, tomli before.
if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["BARE_KEY", "Key", "KeyLines", "tomllib"]

# A key path inside a document: ("jobs", 2, "gpus") is `jobs[2].gpus`.
Key = tuple[str | int, ...]

BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class KeyLines:
    """Maps key paths to the 1-based line where they are written.

    A light scan of TOML text that tomllib already accepted: table and array-of-tables headers,
    `key = value` lines with dotted and quoted keys, arrays and inline tables (their keys map to
    the line they are on). Good enough for hand-written profiles; it never raises.
    """

    _SPACE = re.compile(r"[ \t]*")
    _BLANKS = re.compile(r"(?:[ \t\r\n]+|#[^\n]*)*")
    _BASIC = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
    _LITERAL = re.compile(r"'([^'\n]*)'")
    _SCALAR = re.compile(r"[^,\]}\n#]*")
    _SKIP_PLAIN = re.compile(r"[^\[\]{}\"'#]+")
    _MAX_DEPTH = 64

    def __init__(self, text: str) -> None:
        self._text = text
        self._pos = 0
        self._lines: dict[Key, int] = {}
        self._scanned = False  # the scan runs on first use, so valid profiles never pay for it
        self._counts: dict[Key, int] = {}  # elements seen so far per array of tables
        self._line_pos = 0  # _line_at counts newlines incrementally from here
        self._line_no = 1

    def line(self, key: Key) -> int | None:
        """The line of `key`, else of its nearest ancestor that was found."""
        if not self._scanned:
            self._scanned = True
            with contextlib.suppress(Exception):  # best effort: no line number beats a crash
                self._scan()
        while key:
            if key in self._lines:
                return self._lines[key]
            key = key[:-1]
        return None

    def _line_at(self, pos: int) -> int:
        if pos < self._line_pos:
            self._line_pos, self._line_no = 0, 1
        self._line_no += self._text.count("\n", self._line_pos, pos)
        self._line_pos = pos
        return self._line_no

    def _mark(self, key: Key, pos: int, first: int = 1) -> None:
        """Record the line of `key` and of its prefixes from length `first` on (first wins)."""
        line = self._line_at(pos)
        for end in range(first, len(key) + 1):
            self._lines.setdefault(key[:end], line)

    def _skip(self, pattern: re.Pattern[str]) -> None:
        match = pattern.match(self._text, self._pos)
        if match:
            self._pos = match.end()

    def _skip_line(self) -> None:
        end = self._text.find("\n", self._pos)
        self._pos = len(self._text) if end < 0 else end + 1

    def _scan(self) -> None:
        text = self._text
        table: Key = ()
        while True:
            self._skip(self._BLANKS)
            if self._pos >= len(text):
                return
            start = self._pos
            if text.startswith("[[", start):
                self._pos += 2
                keys = self._key()
                array = self._resolve(keys[:-1]) + keys[-1:]
                index = self._counts.get(array, 0)
                self._counts[array] = index + 1
                table = (*array, index)
                self._mark(table, start)
            elif text[start] == "[":
                self._pos += 1
                table = self._resolve(self._key())
                self._mark(table, start)
            else:
                keys = self._key()
                if keys:
                    self._mark(table + keys, start, first=len(table) + 1)
                    self._skip(self._SPACE)
                    if text.startswith("=", self._pos):
                        self._pos += 1
                        self._skip(self._SPACE)
                        self._value(table + keys, 0)
            self._skip_line()

    def _resolve(self, keys: Key) -> Key:
        """A header's path, with each array of tables replaced by its latest element."""
        path: Key = ()
        for part in keys:
            path = (*path, part)
            if path in self._counts:
                path = (*path, self._counts[path] - 1)
        return path

    def _key(self) -> Key:
        text = self._text
        parts: list[str] = []
        while True:
            self._skip(self._SPACE)
            if text.startswith('"', self._pos):
                match = self._BASIC.match(text, self._pos)
                part = _unescape(match.group(1)) if match else ""
            elif text.startswith("'", self._pos):
                match = self._LITERAL.match(text, self._pos)
                part = match.group(1) if match else ""
            else:
                match = BARE_KEY.match(text, self._pos)
                part = match.group(0) if match else ""
            if not match:
                break
            parts.append(part)
            self._pos = match.end()
            self._skip(self._SPACE)
            if not text.startswith(".", self._pos):
                break
            self._pos += 1
        return tuple(parts)

    def _value(self, key: Key, depth: int) -> None:
        text = self._text
        pos = self._pos
        if text.startswith(('"""', "'''"), pos):
            self._pos = self._multiline_end(pos)
        elif text.startswith(('"', "'"), pos):
            pattern = self._BASIC if text[pos] == '"' else self._LITERAL
            match = pattern.match(text, pos)
            if match:
                self._pos = match.end()
            else:
                self._skip_line()
        elif text.startswith(("[", "{"), pos):
            if depth >= self._MAX_DEPTH:
                self._skip_nested()
            elif text[pos] == "[":
                self._array(key, depth)
            else:
                self._inline_table(key, depth)
        else:
            self._skip(self._SCALAR)

    def _multiline_end(self, pos: int) -> int:
        text = self._text
        quote = text[pos : pos + 3]
        search = pos + 3
        while True:
            end = text.find(quote, search)
            if end < 0:
                return len(text)
            escape = end
            while escape > search and text[escape - 1] == "\\":
                escape -= 1
            if quote == '"""' and (end - escape) % 2:  # an escaped quote, keep looking
                search = end + 1
                continue
            end += 3
            extra = 0  # up to two quotes may sit right before the closing delimiter
            while extra < 2 and text.startswith(quote[0], end):
                end += 1
                extra += 1
            return end

    def _array(self, key: Key, depth: int) -> None:
        text = self._text
        self._pos += 1
        index = 0
        while True:
            self._skip(self._BLANKS)
            if self._pos >= len(text):
                return
            char = text[self._pos]
            if char == "]":
                self._pos += 1
                return
            if char == ",":
                self._pos += 1
                index += 1
                continue
            before = self._pos
            self._mark((*key, index), before, first=len(key) + 1)
            self._value((*key, index), depth + 1)
            if self._pos == before:
                self._pos += 1

    def _inline_table(self, key: Key, depth: int) -> None:
        text = self._text
        self._pos += 1
        while True:
            self._skip(self._BLANKS)
            if self._pos >= len(text):
                return
            char = text[self._pos]
            if char == "}":
                self._pos += 1
                return
            if char == ",":
                self._pos += 1
                continue
            start = self._pos
            keys = self._key()
            if not keys:
                self._pos += 1
                continue
            self._mark(key + keys, start, first=len(key) + 1)
            self._skip(self._SPACE)
            if text.startswith("=", self._pos):
                self._pos += 1
                self._skip(self._SPACE)
                self._value(key + keys, depth + 1)

    def _skip_nested(self) -> None:
        """Skip one deeply nested array or inline table without recursing."""
        text = self._text
        depth = 0
        while self._pos < len(text):
            self._skip(self._SKIP_PLAIN)
            if self._pos >= len(text):
                return
            char = text[self._pos]
            if char in "[{":
                depth += 1
            elif char in "]}":
                depth -= 1
                if depth <= 0:
                    self._pos += 1
                    return
            elif char == "#":
                self._skip_line()
                continue
            else:
                if text.startswith(('"""', "'''"), self._pos):
                    self._pos = self._multiline_end(self._pos)
                    continue
                pattern = self._BASIC if char == '"' else self._LITERAL
                match = pattern.match(text, self._pos)
                if match:
                    self._pos = match.end()
                    continue
            self._pos += 1


def _unescape(raw: str) -> str:
    try:
        value = json.loads(f'"{raw}"')
    except ValueError:
        return raw
    return value if isinstance(value, str) else raw
