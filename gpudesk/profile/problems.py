"""Recording problems while a profile is read: each at its key's line, every one kept, raised
together as one `ProfileError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpudesk.core.jobs import describe
from gpudesk.core.tracking_spec import TrackingSpec
from gpudesk.profile.model import JobOrigin, NamedWorkdir, Problem, ProfileError, ReportConfig
from gpudesk.profile.values import _INVALID, _found, _render_key, _suggest
from gpudesk.toml_lines import Key, KeyLines


class _Recorder:
    """The reader's state: where the document is, what it found so far, its problems."""

    def __init__(
        self, shown: str, path: Path, locator: KeyLines, base_dir: Path | None = None
    ) -> None:
        self.shown = shown
        self.path = path
        self.base_dir = base_dir or path.parent
        self.locator = locator
        self.problems: list[Problem] = []
        self.dataset_names: set[str] | None = set()  # None: [datasets] unusable, skip references
        self.defaults: dict[str, Any] = {}
        self.counts: list[tuple[Key, int]] = []  # jobs each entry would make, before expanding
        self.tracking: TrackingSpec | None = None  # [tracking], once read
        self.objective: ReportConfig | None = None  # [report]: a sweep's parent run's roll-up
        self.workdirs: dict[str, NamedWorkdir] = {}  # each workdir a key names, by its path
        self.origins: list[JobOrigin] = []  # where each expanded job comes from, in order

    # -- recording problems

    def problem(self, key: Key, message: str, *, at: Key | None = None) -> None:
        line = self.locator.line(key if at is None else at)
        self.problems.append(Problem(self.shown, line, _render_key(key), message))

    def check(self, key: Key, check: Callable[[Any], Any], value: Any) -> Any:
        try:
            return check(value)
        except ValueError as exc:
            self.problem(key, str(exc))
        except ArithmeticError:  # float() of an int that fits 64 bits cannot fail, but be safe
            self.problem(key, f"the number is out of range, found {describe(value)}")
        return _INVALID

    def table(self, key: Key, value: Any, expected: str) -> dict[str, Any] | None:
        if isinstance(value, dict):
            return value
        self.problem(key, f"expected {expected}, found {_found(value)}")
        return None

    def unknown_keys(
        self,
        key: Key,
        table: Mapping[str, Any],
        allowed: Sequence[str],
        hints: Mapping[str, str] | None = None,
    ) -> None:
        for name in table:
            if name not in allowed:
                hint = (hints or {}).get(name)
                self.problem((*key, name), hint or "unknown key" + _suggest(name, allowed))

    def raise_problems(self) -> None:
        if self.problems:
            # File-level problems first, then by line; sorting is stable within a line.
            self.problems.sort(key=lambda p: -1 if p.line is None else p.line)
            raise ProfileError(self.problems)
