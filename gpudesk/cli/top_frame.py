"""A `gpudesk top` frame fitted to the window's rows, as htop and nvitop fit theirs: the header
(clock, backend, engine, host) always shows; below it each GPU's block (the last GPUs one line
each where the jobs need the room, every GPU a line where they still do), then the running
jobs, as many as fit. What is left out is counted on a line of its own (`… 3 more jobs (a
taller window shows them)`), never scrolled off the top of the screen, which a frame taller
than its window would be."""

from __future__ import annotations

from collections.abc import Sequence

TALLER = "(a taller window shows them)"


def fit_rows(
    header: list[str],
    gpus: Sequence[list[str]],
    gpu_lines: Sequence[list[str]],
    jobs: list[str],
    rows: int | None,
) -> list[str]:
    """The frame's lines in `rows` (all of them where `rows` is None: a pipe, a file). `gpus`:
    each GPU's block; `gpu_lines`: the same GPUs in one line each; `jobs`: a blank line, then
    the jobs table (its header, a row per job) or the line that says there are none."""
    whole = [line for block in gpus for line in block]
    if rows is None or len(header) + len(whole) + len(jobs) <= rows:
        return header + whole + jobs
    room = rows - len(header)
    if room <= 0:
        return header[:rows]
    # the first GPUs whole and the rest a line each, as many whole as leave the jobs room ...
    for whole_blocks in range(len(gpus) - 1, -1, -1):
        blocks = [*gpus[:whole_blocks], *gpu_lines[whole_blocks:]]
        used = sum(len(block) for block in blocks)
        if used + len(jobs) <= room:
            return header + [line for block in blocks for line in block] + jobs
    # ... else every GPU a line, and as many jobs as fit below them
    least = min(len(jobs), 3)  # the blank line, the table's header, a line counting the rest
    used = sum(len(block) for block in gpu_lines)
    if used + least <= room:
        return header + [line for block in gpu_lines for line in block] + _cut(jobs, room - used)
    # not even a line per GPU: as many as fit, with the jobs' least below them
    least = min(least, max(0, room - 1))
    shown = max(0, room - least - 1)
    lines = [line for block in gpu_lines[:shown] for line in block]
    lines.append(_more(len(gpu_lines) - shown, "GPU"))
    return header + lines + _cut(jobs, least)


def _cut(jobs: list[str], room: int) -> list[str]:
    """The jobs' lines in `room` lines: the table's first rows, then a line counting the rest."""
    if len(jobs) <= room:
        return jobs
    if room <= 0:
        return []
    if len(jobs) <= 2:  # no table: the line that says so, without the blank one
        return jobs[len(jobs) - room :]
    kept = jobs[: room - 1]
    hidden = len(jobs) - max(len(kept), 2)  # rows: the blank line and the table's header aren't
    return [*kept, _more(hidden, "job")]


def _more(number: int, noun: str) -> str:
    return f"… {number} more {noun}{'' if number == 1 else 's'} {TALLER}"
