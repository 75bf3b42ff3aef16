"""The running jobs under the GPU cards, where the terminal has room for them (nvitop's
process list): id, name, user, placement, sharing mode, SM %, GPU memory, CPU %, energy since
the job started and runtime, from the engine's latest sample."""

from __future__ import annotations

from rich.text import Text

from gpudesk import render
from gpudesk.screens.state import DeskState, job_runtime, sharing_mode

HEADERS = ("ID", "NAME", "USER", "WHERE", "MODE", "SM", "GPU MEM", "CPU", "ENERGY", "TIME")
RIGHT = ("ID", "SM", "GPU MEM", "CPU", "ENERGY", "TIME")
USER_MAX = 10
NAME_ROOMY = 20  # a sweep's names told apart, cut in the middle (see the queue)
# Left out, in this order, while the name would be narrower than NAME_ROOMY (80 columns): the
# mode is in WHERE too (gpu:0/mps, gpu:2/3g.20gb), the CPU on the job screen.
DROPPED_WHEN_NARROW = ("MODE", "CPU")
GAP = 2  # render.table's column separator


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _name_room(headers: list[str], rows: list[tuple[object, ...]], width: int) -> int:
    """What `width` leaves the name column (1) once the others take what they need."""
    used = 0
    for at, header in enumerate(headers):
        if at == 1:
            continue
        need = max([len(header), *(len(str(row[at])) for row in rows)])
        used += min(need, USER_MAX) if at == 2 else need
    return width - used - GAP * (len(headers) - 1)


def render_job_list(state: DeskState, width: int) -> Text:
    """A plain table of the running jobs, fitted to `width` (the name is cut first)."""
    jobs = [j for j in state.jobs if j.state == "running"]
    title = Text(f"running jobs ({len(jobs)})", style="bold")
    if not jobs:
        return title + Text("  none", style="dim")
    rows: list[tuple[object, ...]] = []
    for job in sorted(jobs, key=lambda j: (j.slot or "", j.id)):
        seen = state.job_telemetry(job.id)
        memory = seen.gpu_memory_mib if seen else None
        usage = job.usage
        rows.append(
            (
                job.id,
                job.name,
                job.user,
                job.slot or "-",
                sharing_mode(job, state) or "-",
                _pct(seen.gpu_sm_pct if seen else None),
                "-" if memory is None else f"{memory / 1024:.1f}G",
                _pct(seen.cpu_pct if seen else None),
                render.energy_cell(usage.total_j, usage.estimate) if usage else "-",
                render.duration(job_runtime(job, state.now)),
            )
        )
    headers = list(HEADERS)
    for dropped in ("", *DROPPED_WHEN_NARROW):
        if dropped:
            at = headers.index(dropped)
            headers.pop(at)
            rows = [row[:at] + row[at + 1 :] for row in rows]
        if _name_room(headers, rows, width) >= NAME_ROOMY:
            break
    room = max(len("NAME"), _name_room(headers, rows, width))
    rows = [(row[0], render.clip_middle(str(row[1]), room), *row[2:]) for row in rows]
    table = render.table(
        headers,
        rows,
        max_widths={2: USER_MAX},
        right=[headers.index(h) for h in RIGHT if h in headers],
        width=width,
        shrink=(1, 2),
    )
    head, _, body = table.partition("\n")
    return title + Text("\n") + Text(head, style="bold") + Text("\n" + body)
