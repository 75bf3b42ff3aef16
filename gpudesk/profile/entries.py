"""[[jobs]] and [[sweeps]] tables: each checked into an `_Entry` (its grid and placeholders
included), and the number of jobs they would make held to the limit.
"""

from __future__ import annotations

import difflib
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpudesk.core.jobs import (
    FIELD_CHECKS,
    check_bool,
    check_command,
    check_name,
    describe,
    never_met,
)
from gpudesk.profile.model import MAX_GRID_PARAMS, MAX_JOBS
from gpudesk.profile.tables import _Tables
from gpudesk.profile.values import (
    _IDENTIFIER,
    _INVALID,
    _JOB_HINTS,
    _KEY_CHECKS,
    _PLACEHOLDER,
    _RESOURCE_KEYS,
    AFTER_KEYS,
    JOB_KEYS,
    SWEEP_KEYS,
    _check_after_names,
    _check_repeat,
    _found,
    _render_key,
    _render_value,
    _substitute,
)
from gpudesk.toml_lines import Key


@dataclass
class _Entry:
    """One validated [[jobs]] or [[sweeps]] table, ready to expand."""

    key: Key  # ("jobs", 2)
    name: str
    command: tuple[str, ...]
    shell: bool
    env: dict[str, str]  # the table's own env (placeholders substituted)
    workdir: str | None  # the table's own workdir (placeholders substituted)
    resources: dict[str, Any]  # gpus, memory_gb, …, defaults already merged in
    repeat: int
    grid: dict[str, list[str]] = field(default_factory=dict)  # parameter -> rendered values
    after: tuple[str, ...] = ()  # names of the [[jobs]]/[[sweeps]] whose jobs must succeed first
    # names of those whose jobs must have ended (however: after_any; without succeeding:
    # after_notok), as submit --after-any / --after-notok
    after_any: tuple[str, ...] = ()
    after_notok: tuple[str, ...] = ()

    def dependencies(self) -> Iterator[tuple[str, str]]:
        """(key, name) for every table it runs after, of every kind."""
        for kind in AFTER_KEYS:
            for name in getattr(self, kind):
                yield kind, name

    def count(self) -> int:
        """How many jobs `variants` makes."""
        return math.prod(len(values) for values in self.grid.values()) * self.repeat

    def variants(self) -> Iterator[tuple[str, dict[str, str]]]:
        """(job name, placeholder values) for each job this entry makes, in order."""
        params = list(self.grid)
        for combo in itertools.product(*self.grid.values()):
            for index in range(1, self.repeat + 1):
                values = dict(zip(params, combo, strict=True))
                values["repeat"] = str(index)
                if "{" in self.name:
                    name = _substitute(self.name, values)
                else:
                    label = ",".join(f"{p}={v}" for p, v in zip(params, combo, strict=True))
                    name = self.name + (f"[{label}]" if params else "")
                    if self.repeat > 1:
                        name += f"#{index}"
                yield name, values


class _Entries(_Tables):
    """Reads [[jobs]] and [[sweeps]] tables (after the tables they refer to)."""

    def entry(self, kind: str, index: int, table: Any) -> _Entry | None:
        key: Key = (kind, index)
        what = "job" if kind == "jobs" else "sweep"
        if not isinstance(table, dict):
            self.problem(key, f"expected a table of {what} settings, found {_found(table)}")
            return None
        before = len(self.problems)
        if kind == "jobs":
            self.unknown_keys(key, table, JOB_KEYS, _JOB_HINTS)
        else:
            self.unknown_keys(key, table, SWEEP_KEYS)

        name = _INVALID
        if "name" not in table:
            self.problem((*key, "name"), f"missing: every {what} needs a name")
        else:
            name = self.check((*key, "name"), check_name, table["name"])

        if "shell" in table:
            shell = self.check((*key, "shell"), check_bool, table["shell"])
        else:
            shell = self.defaults.get("shell", False)
        command = _INVALID
        if "command" not in table:
            example = '"python train.py"' if shell is True else '["python", "train.py"]'
            self.problem(
                (*key, "command"),
                f"missing: every {what} needs a command, e.g. command = {example}",
            )
        elif shell is not _INVALID:
            command = self.check(
                (*key, "command"), lambda v: check_command(v, shell), table["command"]
            )

        resources = {k: v for k, v in self.defaults.items() if k in _RESOURCE_KEYS}
        for field_name in _RESOURCE_KEYS:
            if field_name in table:
                check = _KEY_CHECKS.get(field_name) or FIELD_CHECKS[field_name]
                checked = self.check((*key, field_name), check, table[field_name])
                resources[field_name] = checked
                if field_name == "dataset" and isinstance(checked, str):
                    self.check_dataset_reference((*key, "dataset"), checked)
        if resources.get("selection") and not resources.get("dataset"):
            self.problem(
                (*key, "selection"),
                "a selection applies to the job's dataset: set "
                "dataset too (or put the selection in its [datasets.NAME] table)",
            )
        after = self.after_names(key, table)
        env = self.check((*key, "env"), FIELD_CHECKS["env"], table["env"]) if "env" in table else {}
        workdir = (
            self.check((*key, "workdir"), FIELD_CHECKS["workdir"], table["workdir"])
            if "workdir" in table
            else None
        )
        repeat = self.check((*key, "repeat"), _check_repeat, table.get("repeat", 1))
        grid: dict[str, list[str]] | None = {}
        if kind == "sweeps":
            grid = self.grid(key, table)
        if repeat is not _INVALID and grid is not None:
            self.counts.append((key, repeat * math.prod(len(v) for v in grid.values())))

        templates = (name, command, env, workdir)
        templates_ok = grid is not None and all(value is not _INVALID for value in templates)
        if grid is None or not templates_ok:
            return None
        if kind == "sweeps":
            self.check_placeholders(key, *templates, grid)
        if len(self.problems) > before:
            return None
        return _Entry(key, name, command, shell, env, workdir, resources, repeat, grid, **after)

    def after_names(self, key: Key, table: dict[str, Any]) -> dict[str, tuple[str, ...]]:
        """Its after, after_any and after_notok: the names of the tables each gives."""
        found: dict[str, tuple[str, ...]] = {}
        for kind in AFTER_KEYS:
            if kind in table:
                checked = self.check((*key, kind), _check_after_names, table[kind])
                found[kind] = () if checked is _INVALID else checked
        # a profile's keys are the fields' names: said plainly, as its other problems say keys
        if problem := never_met(found.get("after", ()), found.get("after_notok", ()), str):
            self.problem((*key, "after_notok"), problem)
        return found

    def grid(self, key: Key, table: dict[str, Any]) -> dict[str, list[str]] | None:
        grid_key = (*key, "grid")
        if "grid" not in table:
            self.problem(
                grid_key,
                "missing: a sweep needs a grid of parameters, e.g. grid = { lr = [0.1, 0.01] }",
            )
            return None
        grid = self.table(grid_key, table["grid"], "a table of parameter = [values]")
        if grid is None:
            return None
        if not grid:
            self.problem(grid_key, "the grid is empty; add a parameter, e.g. lr = [0.1, 0.01]")
            return None
        if len(grid) > MAX_GRID_PARAMS:
            self.problem(
                grid_key, f"expected at most {MAX_GRID_PARAMS} parameters, found {len(grid)}"
            )
            return None
        result: dict[str, list[str]] = {}
        ok = True
        for param, values in grid.items():
            param_key = (*grid_key, param)
            if param == "repeat":
                ok = False
                self.problem(
                    param_key, "'repeat' is reserved for the repeat index; rename the parameter"
                )
                continue
            if not _IDENTIFIER.fullmatch(param):
                ok = False
                self.problem(
                    param_key,
                    "a parameter name must be letters, digits and '_', not "
                    "starting with a digit, so that {name} can refer to it",
                )
                continue
            rendered = self.grid_values(param_key, values)
            if rendered is None:
                ok = False
            else:
                result[param] = rendered
        return result if ok else None

    def grid_values(self, key: Key, values: Any) -> list[str] | None:
        expected = "a non-empty array of strings, numbers or booleans"
        if not isinstance(values, list) or not values:
            found = "an empty array" if values == [] else _found(values)
            self.problem(key, f"expected {expected}, found {found}")
            return None
        rendered: list[str] = []
        seen: set[str] = set()
        for i, value in enumerate(values):
            if not isinstance(value, (str, int, float)):
                self.problem(
                    key,
                    f"value {i} should be a string, number or boolean, found {describe(value)}",
                    at=(*key, i),
                )
                return None
            text = _render_value(value)
            if text in seen:
                self.problem(key, f"the value {text} appears more than once", at=(*key, i))
                return None
            seen.add(text)
            rendered.append(text)
        return rendered

    def check_placeholders(
        self,
        key: Key,
        name: str,
        command: tuple[str, ...],
        env: dict[str, str],
        workdir: str | None,
        grid: dict[str, list[str]],
    ) -> None:
        """Every {placeholder} in a sweep must be a grid parameter (or repeat), and every grid
        parameter must be used somewhere that makes its jobs differ."""
        known = [*grid, "repeat"]
        # (key named in the problem, key whose line is shown, template text)
        fields: list[tuple[Key, Key, str]] = [
            ((*key, "command"), (*key, "command", i), arg) for i, arg in enumerate(command)
        ]
        fields += [((*key, "env", var), (*key, "env", var), value) for var, value in env.items()]
        if workdir is not None:
            fields.append(((*key, "workdir"), (*key, "workdir"), workdir))
        if "{" in name:
            fields.append(((*key, "name"), (*key, "name"), name))
        used: set[str] = set()  # a typo'd placeholder "uses" the parameter it was meant to be
        for field_key, at, text in fields:
            for placeholder in dict.fromkeys(_PLACEHOLDER.findall(text)):
                used.add(placeholder)
                if placeholder in known:
                    continue
                close = difflib.get_close_matches(placeholder, known, n=1)
                used.update(close)
                hint = f"; did you mean {{{close[0]}}}?" if close else ""
                self.problem(
                    field_key,
                    f"unknown placeholder {{{placeholder}}}{hint} "
                    f"(the grid defines: {', '.join(grid)})",
                    at=at,
                )
        for param in grid:
            if param not in used:
                self.problem(
                    (*key, "grid", param),
                    f"grid parameter {param!r} is not used in the command, env, workdir or "
                    f"name, so its values would create identical jobs; use {{{param}}} or "
                    "remove it",
                )

    def check_job_count(self) -> None:
        total = sum(count for _, count in self.counts)
        if total <= MAX_JOBS:
            return
        biggest_key, biggest = max(self.counts, key=lambda item: item[1])
        if biggest > MAX_JOBS:
            self.problem(
                biggest_key,
                f"expands to {biggest:,} jobs, more than the limit of "
                f"{MAX_JOBS:,} jobs per profile",
            )
        else:
            self.problem(
                (),
                f"the profile expands to {total:,} jobs, more than the limit of "
                f"{MAX_JOBS:,} (the largest part is {_render_key(biggest_key)} with "
                f"{biggest:,})",
            )
