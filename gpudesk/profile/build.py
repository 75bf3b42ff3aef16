"""A whole profile document read (its tables, then its entries) and expanded into `JobSpec`s:
placeholders substituted, `after` ordered, names kept unique.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import msgspec

from gpudesk.core.field_checks import check_job_name
from gpudesk.core.jobs import JobSpec, check_command, check_env, check_name, check_workdir, describe
from gpudesk.core.station import STATION_KEYS
from gpudesk.profile.entries import _Entries, _Entry
from gpudesk.profile.model import JobOrigin, NamedWorkdir, Problem, Profile
from gpudesk.profile.values import (
    _INVALID,
    _PLACEHOLDER,
    _TOP_HINTS,
    AFTER_KEYS,
    TOP_KEYS,
    _check_description,
    _param_value,
    _render_key,
    _substitute,
)
from gpudesk.text import printable_line
from gpudesk.toml_lines import Key


class _Builder(_Entries):
    """Reads one profile document: `build` checks it whole, then expands its entries."""

    def build(self, document: dict[str, Any]) -> Profile:
        self.unknown_keys((), document, TOP_KEYS, _TOP_HINTS)
        name = self.path.stem or "profile"
        if "name" in document:
            checked = self.check(("name",), check_name, document["name"])
            name = name if checked is _INVALID else checked
        description = None
        if "description" in document:
            checked = self.check(("description",), _check_description, document["description"])
            description = None if checked is _INVALID else checked
        station = self.station(document)
        datasets = self.datasets(document)
        report = self.report(document)
        self.objective = report  # what a sweep's parent run rolls its best child up by
        self.tracking = self.read_tracking(document, name)
        cluster = self.read_cluster(document)
        self.read_defaults(document)

        entries: list[_Entry] = []
        declared = 0
        containers_ok = True
        for kind in ("jobs", "sweeps"):
            if kind not in document:
                continue
            tables = document[kind]
            if isinstance(tables, dict):
                containers_ok = False
                self.problem(
                    (kind,),
                    f"expected an array of tables ([[{kind}]]), found a single "
                    f"[{kind}] table; write [[{kind}]] with double brackets",
                )
                continue
            if not isinstance(tables, list):
                containers_ok = False
                self.problem(
                    (kind,), f"expected an array of tables ([[{kind}]]), found {describe(tables)}"
                )
                continue
            declared += len(tables)
            for index, table in enumerate(tables):
                entry = self.entry(kind, index, table)
                if entry is not None:
                    entries.append(entry)
        if declared == 0 and containers_ok:
            self.problem((), "the profile defines no jobs: add a [[jobs]] or [[sweeps]] table")
        self.check_job_count()
        self.raise_problems()

        jobs = self.expand(entries)
        self.raise_problems()
        station_keys = tuple(k for k in STATION_KEYS if k in (document.get("station") or {}))
        return Profile(
            self.path,
            name,
            description,
            station,
            datasets,
            jobs,
            station_keys,
            report,
            tracking=self.tracking,
            cluster=cluster,
            workdirs=tuple(self.workdirs.values()),
            origins=tuple(self.origins),
        )

    def expand(self, entries: list[_Entry]) -> list[JobSpec]:
        jobs: list[JobSpec] = []
        made_by: dict[str, Key] = {}
        reported: set[tuple[Key, Key]] = set()  # one problem per (entry, field or other entry)
        made: dict[Key, list[int]] = {}  # entry -> the indices of its jobs in `jobs`
        ordered = self.dependency_order(entries)
        if ordered is None:
            return jobs  # its problems are raised by the caller
        for entry in ordered:
            # the jobs it runs after, of each kind, as `submit` takes them within one request:
            # -(index + 1)
            after: dict[str, Any] = {
                kind: tuple(
                    -(index + 1)
                    for other in getattr(entry, kind)
                    for index in made.get(self.entry_named(entries, other).key, [])
                )
                for kind in AFTER_KEYS
            }
            after = {kind: refs for kind, refs in after.items() if refs}
            where = Problem(self.shown, self.locator.line(entry.key), _render_key(entry.key), "")
            points = entry.count()
            for point, (name, values) in enumerate(entry.variants(), start=1):
                spec = self.make_job(entry, name, values, reported)
                if spec is None:
                    continue
                other = made_by.get(spec.name)
                if other is not None:
                    if (entry.key, other) not in reported:
                        reported.add((entry.key, other))
                        self.duplicate(entry, spec.name, other)
                    continue
                made_by[spec.name] = entry.key
                made.setdefault(entry.key, []).append(len(jobs))
                jobs.append(msgspec.structs.replace(spec, **after) if after else spec)
                self.origins.append(JobOrigin(where, point, points))
        return jobs

    @staticmethod
    def entry_named(entries: list[_Entry], name: str) -> _Entry:
        return next(entry for entry in entries if entry.name == name)

    def dependency_order(self, entries: list[_Entry]) -> list[_Entry] | None:
        """The entries in file order, except that one comes after those it runs after, of
        any kind (`after`, `after_any`, `after_notok`: a stable topological order); None, with
        the problems noted, for an unknown name, a job after itself, or a cycle."""
        names = {entry.name for entry in entries}
        ok = True
        for entry in entries:
            for kind, other in entry.dependencies():
                if other not in names:
                    ok = False
                    known = ", ".join(sorted(repr(n) for n in names if n != entry.name)) or "none"
                    self.problem(
                        (*entry.key, kind),
                        f"no [[jobs]] or [[sweeps]] named {other!r} in this profile "
                        f"({kind} names a table's name; these are: {known})",
                    )
                elif other == entry.name:
                    ok = False
                    self.problem((*entry.key, kind), "a job cannot run after itself")
        if not ok:
            return None
        placed: list[_Entry] = []
        waiting = list(entries)
        while waiting:
            ready = next(
                (
                    e
                    for e in waiting
                    if all(o in {p.name for p in placed} for _, o in e.dependencies())
                ),
                None,
            )
            if ready is None:
                cycle = " -> ".join(e.name for e in waiting)
                self.problem(
                    (*waiting[0].key, next(waiting[0].dependencies(), ("after",))[0]),
                    f"these run after each other in a circle, so none could start: {cycle}",
                )
                return None
            placed.append(ready)
            waiting.remove(ready)
        return placed

    def make_job(
        self, entry: _Entry, name: str, values: dict[str, str], reported: set[tuple[Key, Key]]
    ) -> JobSpec | None:
        command = tuple(_substitute(arg, values) for arg in entry.command)
        env = {k: _substitute(v, values) for k, v in entry.env.items()}
        env = {**self.defaults.get("env", {}), **env}
        workdir: str | None = self.defaults.get("workdir")
        workdir_key: Key = ("defaults", "workdir")
        if entry.workdir is not None:
            workdir = _substitute(entry.workdir, values)
            workdir_key = (*entry.key, "workdir")
        # Substituted values are checked again: a grid value can make a name too long, put a
        # control character in it, or empty the program.
        checks: list[tuple[str, Callable[[Any], Any], Any]] = [
            ("name", check_job_name, name),
            ("command", lambda v: check_command(v, entry.shell), command),
            ("env", check_env, env),
            ("workdir", check_workdir, workdir),
        ]
        checked: dict[str, Any] = {}
        for field_name, check, value in checks:
            try:
                checked[field_name] = check(value)
            except ValueError as exc:
                if (entry.key, (field_name,)) not in reported:
                    reported.add((entry.key, (field_name,)))
                    self.problem((*entry.key, field_name), self.context(entry, values) + str(exc))
        if len(checked) < len(checks):
            return None
        if checked["workdir"] is not None:
            resolved = self.resolve_dir(checked["workdir"])
            if resolved not in self.workdirs:
                line = self.locator.line(workdir_key)
                where = Problem(self.shown, line, _render_key(workdir_key), "")
                self.workdirs[resolved] = NamedWorkdir(resolved, where)
        sweep = entry.name if entry.key[0] == "sweeps" else None
        tracking = self.tracking
        if tracking is not None and sweep is not None:
            tracking = msgspec.structs.replace(
                tracking,
                params={param: _param_value(values[param]) for param in entry.grid},
                sweep_params={
                    param: _param_value(", ".join(shown)) for param, shown in entry.grid.items()
                },
                objective=self.objective.metric if self.objective else None,
                goal=self.objective.goal if self.objective else None,
            )
        return JobSpec(
            name=checked["name"],
            command=checked["command"],
            shell=entry.shell,
            workdir=self.resolve_dir(checked["workdir"]),
            env=checked["env"],
            sweep=sweep,
            tracking=tracking,
            **{_SPEC_FIELD.get(k, k): v for k, v in entry.resources.items()},
        )

    @staticmethod
    def context(entry: _Entry, values: dict[str, str]) -> str:
        # a grid value is the user's text: its control characters spelled out, on one line
        shown = [f"{param}={printable_line(values[param])}" for param in entry.grid]
        if entry.repeat > 1:
            shown.append(f"repeat={values['repeat']}")
        return f"with {', '.join(shown)}: " if shown else ""

    def resolve_dir(self, workdir: str | None) -> str:
        if workdir is None:
            return str(self.base_dir)
        return os.path.normpath(os.path.join(self.base_dir, os.path.expanduser(workdir)))

    def duplicate(self, entry: _Entry, name: str, other: Key) -> None:
        message = f"duplicate job name {name!r}"
        if other == entry.key:
            what = "job" if entry.key[0] == "jobs" else "sweep"
            message += f": this {what} makes it more than once"
            needed = [*entry.grid, *(["repeat"] if entry.repeat > 1 else [])]
            used = set(_PLACEHOLDER.findall(entry.name))
            missing = [f"{{{p}}}" for p in needed if p not in used]
            if "{" in entry.name and missing:
                message += f"; the name template should use {', '.join(missing)}"
        else:
            line = self.locator.line((*other, "name"))
            where = f" (line {line})" if line is not None else ""
            message += f": {_render_key(other)}{where} makes a job with the same name"
        self.problem((*entry.key, "name"), message)


# profile keys named otherwise in the JobSpec
_SPEC_FIELD = {"time_limit": "time_limit_s", "begin": "begin_at"}
