"""Letting short jobs through: the queue's order when `[station] queue_order = "shortest"`.

Mean job completion time falls when short jobs go first (shortest-job-first is optimal for mean
completion time on one server), but a plain shortest-first order starves a long job behind a
stream of short ones. So the order is *highest response ratio next* (Brinch Hansen, 1971):

    ratio = (waited_s + expected_s) / expected_s

A job just submitted has ratio 1 whatever its length. Every second it waits raises a short job's
ratio faster than a long one's, so short jobs pass. But every job's ratio grows without bound
while it waits, so none waits for ever: a job that has waited as long as it is expected to run
(ratio 2) goes ahead of any newcomer, however short.

The order applies within priority and fair share, never across them: a higher priority goes
first, then (when several users wait) the user with the lighter recent usage, then the ratio,
then submission. `expected_s` is what the engine has measured, never what a job says of itself:
the mean run time of its command family's succeeded runs (gpudesk.policy.command_family). A job
whose family has no finished run gets the median of the known jobs' expected times in the queue
(an assumption: "a job like the others"); with none known the order is the given one.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

MIN_EXPECTED_S = 1.0  # a family measured at ~0 s must not divide by zero (an assumption)


def response_ratio(waited_s: float, expected_s: float) -> float:
    expected = max(expected_s, MIN_EXPECTED_S)
    return (max(waited_s, 0.0) + expected) / expected


def shortest_first(
    jobs: Sequence[T],
    expected_s: Callable[[T], float | None],
    waited_s: Callable[[T], float],
    group: Callable[[T], tuple[Any, ...]],
) -> list[T]:
    """`jobs` (in their given order: priority, fair share, submission) reordered by response
    ratio within each `group` (priority and fair-share standing). Stable: equal ratios keep
    the given order."""
    known = {id(job): e for job in jobs if (e := expected_s(job)) is not None}
    if not known:
        return list(jobs)
    typical = statistics.median(known.values())
    position = {id(job): n for n, job in enumerate(jobs)}

    def key(job: T) -> tuple[Any, ...]:
        ratio = response_ratio(waited_s(job), known.get(id(job), typical))
        return (*group(job), -ratio, position[id(job)])

    return sorted(jobs, key=key)
