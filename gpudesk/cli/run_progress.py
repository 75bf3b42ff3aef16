"""`gpudesk run`'s progress while its jobs run: a live table on a terminal (rich), one plain
line per state change elsewhere (CI logs, `| tee`)."""

from __future__ import annotations

import time
from typing import Any, TextIO

from gpudesk import render
from gpudesk.api.models import JobView

NAME_WIDTH = 40  # the live table's names at most
MIN_OUTPUT_WIDTH = 10  # a narrower LAST OUTPUT column is left out


class Progress:
    """Prints what changed: a live table on a terminal, plain lines elsewhere."""

    def __init__(self, stream: TextIO, live: bool) -> None:
        self.stream = stream
        self.seen: dict[int, tuple[str, int, str | None]] = {}
        self.live = None
        if live:
            from rich.console import Console
            from rich.live import Live

            self.live = Live(console=Console(file=stream), refresh_per_second=4, transient=True)
            self.live.start()

    def say(self, line: str) -> None:
        """A line of its own, above the live table on a terminal."""
        if self.live is not None:
            self.live.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=self.stream, flush=True)

    def update(self, jobs: list[JobView]) -> None:
        if self.live is not None:
            console = self.live.console
            self.live.update(self._table(jobs, rows=console.height - 4, width=console.width))
            return
        for job in jobs:
            key = (job.state, job.attempts, job.unsaved)
            if self.seen.get(job.id) == key:
                continue
            self.seen[job.id] = key
            detail = ""
            if job.placed:
                detail = f" on {job.slot} (attempt {job.attempts})" if job.slot else ""
            elif job.terminal or job.attempts:
                detail = f": {job.state_detail}" if job.reason else ""
            if job.unsaved:  # a full disk: shown as it is, not yet in the store
                detail += f" [{job.unsaved}]"
            print(
                f"{render.clock(time.time())}  {job.name}  {job.state}{detail}",
                file=self.stream,
                flush=True,
            )

    def _table(self, jobs: list[JobView], rows: int, width: int) -> Any:
        """As many jobs as `rows` holds, in `width` columns: ids, states and times whole, the
        names next (clipped in the middle where they must be: a sweep's jobs differ at the
        end), the last output line in what is left, or not at all."""
        from rich.table import Table
        from rich.text import Text

        done = sum(1 for j in jobs if j.terminal)
        # Running jobs first, then the queue, then finished ones, as many as the screen holds.
        rank = {"running": 0, "suspended": 0, "queued": 1}
        ordered = sorted(jobs, key=lambda j: (rank.get(j.state, 2), j.id))
        shown = ordered[: max(5, rows)]
        more = f"… and {len(jobs) - len(shown)} more" if len(shown) < len(jobs) else None
        # as `queue` marks it: the store cannot take the job's state yet (a full disk)
        unsaved = next((f"* {j.unsaved}" for j in shown if j.unsaved), None)
        caption = "\n".join(line for line in (more, unsaved) if line) or None
        ids = [str(j.id) for j in shown]
        times = [render.duration(j.run_s()) for j in shown]
        outputs = [render.last_line(j.log) if j.state == "running" else "" for j in shown]
        # each column as wide as its widest cell or its header, whichever is wider
        fixed = sum(
            max(len(header), *map(len, cells))
            for header, cells in (("ID", ids), ("STATE", ["succeeded"]), ("TIME", times))
        )
        room = width - fixed - 2 * 3  # the name's, and the output's after two more spaces
        names = [j.name for j in shown]
        name_width = max(len("NAME"), min(NAME_WIDTH, max(map(len, names), default=4), room))
        output_width = room - name_width - 2 if any(outputs) else 0
        if output_width < MIN_OUTPUT_WIDTH:
            output_width = 0
        table = Table(
            title=f"{done}/{len(jobs)} done",
            title_justify="left",
            box=None,
            pad_edge=False,
            expand=False,
            caption=caption,
            caption_justify="left",
        )
        table.add_column("ID", justify="right", no_wrap=True)
        table.add_column("NAME", no_wrap=True, max_width=name_width)
        table.add_column("STATE", no_wrap=True, min_width=len("succeeded"))
        table.add_column("TIME", justify="right", no_wrap=True)
        if output_width:
            table.add_column("LAST OUTPUT", no_wrap=True, max_width=output_width)
        colors = {
            "running": "cyan",
            "succeeded": "green",
            "failed": "red",
            "cancelled": "yellow",
            "queued": "dim",
            "suspended": "magenta",
        }
        cells = zip(ids, render.clip_apart(names, name_width), shown, times, outputs, strict=True)
        for job_id, name, job, took, output in cells:
            table.add_row(
                job_id,
                Text(name),
                Text(job.state + ("*" if job.unsaved else ""), style=colors.get(job.state, "")),
                took,
                *([Text(render.clip(output, output_width))] if output_width else []),
            )
        return table

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
