"""The result line: how a job tells gpudesk what it found (the one home of the convention; it is
documented in docs/results.md).

A job prints, on a line of its own, ``result `` followed by a JSON object::

    result {"val_acc": 0.9722, "final_loss": 0.081, "epochs": 40, "device": "cpu"}

The last such line in its output wins (a job may print a provisional one per epoch). Its
*metrics* are the entries whose values are finite numbers (JSON integers and floats; ``true``,
``false``, strings, lists, objects, NaN and infinities are kept out). `gpudesk run` shows them in
its report and ranks a sweep by the metric its profile's ``[report]`` names; `gpudesk select
compare` reads its quality from the same line.

A leaf module: stdlib and gpudesk.joblog only.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Literal

import msgspec

from gpudesk import joblog

PREFIX = "result "
LINE = re.compile(r"^result (\{.*\})\s*$", re.MULTILINE)
# A report reads this much of the end of each job's output (across rotations): a result line is
# one of a job's last lines, and a run may have thousands of jobs.
TAIL_BYTES = 1 << 20
Goal = Literal["max", "min"]


def last_result(text: str) -> dict[str, object] | None:
    """The JSON object of the last well-formed result line in `text` (None when there is none)."""
    for found in reversed(LINE.findall(text)):
        try:
            value = json.loads(found)
        except (ValueError, RecursionError):  # `{"x": [[[[…` nested past the stack: no result
            continue
        if isinstance(value, dict):
            return value
    return None


def metrics_of(result: Mapping[str, object] | None) -> dict[str, float]:
    """The entries of a result that count as metrics: finite numbers, in the job's order."""
    out: dict[str, float] = {}
    for key, value in (result or {}).items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        try:
            number = float(value)
        except OverflowError:  # a whole number JSON holds and no float does (10**400)
            continue
        if math.isfinite(number):
            out[key] = number
    return out


def read_metrics(log: str | os.PathLike[str] | None) -> dict[str, float] | None:
    """The metrics of the last result line in a job's log; None when it printed none (or the
    log cannot be read)."""
    if not log:
        return None
    try:
        text = joblog.tail(log, TAIL_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    result = last_result(text)
    return None if result is None else metrics_of(result)


class Best(msgspec.Struct, frozen=True):
    """The job that did best by `metric` among `ranked` candidates; `ties` others equalled it."""

    job: int
    value: float
    ranked: int
    ties: int


def best(
    candidates: Sequence[tuple[int, Mapping[str, float]]], metric: str, goal: Goal
) -> Best | None:
    """The best of (job id, metrics) pairs by `metric` (the first in order wins a tie); None when
    no candidate has the metric."""
    scored = [(job, values[metric]) for job, values in candidates if metric in values]
    if not scored:
        return None
    pick = max if goal == "max" else min
    job, value = pick(scored, key=lambda pair: pair[1])
    ties = sum(1 for _, v in scored if v == value) - 1
    return Best(job=job, value=value, ranked=len(scored), ties=ties)
