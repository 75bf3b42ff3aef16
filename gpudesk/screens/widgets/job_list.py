"""The running jobs under the GPU cards, where the terminal has room for them (nvitop's
process list): id, name, user, placement, sharing mode, SM %, GPU memory, CPU %, energy since
the job started and runtime, from the engine's latest sample; then the GPU processes outside
gpudesk's jobs, with their owner and command."""

from __future__ import annotations

from rich.text import Text

from gpudesk import render
from gpudesk.screens.state import STATE_STYLES, DeskState, job_runtime, sharing_mode
from gpudesk.screens.widgets.gpu_card import gpu_processes

HEADERS = ("ID", "NAME", "USER", "WHERE", "MODE", "SM", "GPU MEM", "CPU", "ENERGY", "TIME")
RIGHT = (0, 5, 6, 7, 8, 9)  # ID and the figures
NAME, USER = 1, 2
USER_MAX = 10
# The narrowest a name is cut to (in the middle, where a sweep's names stay apart:
# render.clip_apart, as `gpudesk queue` cuts them), and the user (8: what `ps` keeps of a
# user name), before a column is left out: first MODE (it is in WHERE too: gpu:0/mps,
# gpu:2/3g.20gb), then CPU (on the job screen). On a shared station who runs a job matters
# more than its CPU share.
NAME_MIN = 12
USER_MIN = 8
OPTIONAL = (7, 4)  # CPU, MODE: fitted_table leaves out the last listed first


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def render_job_list(state: DeskState, width: int) -> Text:
    """A plain table of the running jobs, fitted to `width` (the name is cut first), then the
    GPU processes outside gpudesk's jobs."""
    listing = _running_jobs(state, width)
    others = render_other_processes(state, width)
    return listing if others is None else listing + Text("\n\n") + others


def render_other_processes(state: DeskState, width: int) -> Text | None:
    """GPU processes no gpudesk job owns (an MPS server apart), as nvitop lists them: GPU,
    pid, owner, GPU memory, SM share and command; None where there are none."""
    rows = []
    for gpu in state.gpus:
        for proc in gpu_processes(gpu):
            if proc.job_id is None and not proc.mps_server:
                rows.append(
                    (
                        gpu.index,
                        proc.pid,
                        proc.user or "?",
                        "-"
                        if proc.used_memory_mib is None
                        else f"{proc.used_memory_mib / 1024:.1f}G",
                        _pct(proc.sm_pct),
                        proc.command or "?",
                    )
                )
    if not rows:
        return None
    table, _ = render.fitted_table(
        ("GPU", "PID", "USER", "GPU MEM", "SM", "COMMAND"),
        rows,
        width=width,
        max_widths={2: USER_MAX},
        right=(0, 1, 3, 4),
        shrink=(5, 2),
        min_widths={2: USER_MIN},
    )
    head, _, body = table.partition("\n")
    title = Text(f"other processes on the GPUs ({len(rows)}, not gpudesk jobs)", style="bold")
    return title + Text("\n") + Text(head, style="bold") + Text("\n" + body)


def _running_jobs(state: DeskState, width: int) -> Text:
    jobs = sorted((j for j in state.jobs if j.placed), key=lambda j: (j.slot or "", j.id))
    # a suspended job (`gpudesk suspend`) still holds its place: named in the title, its row
    # in the queue's suspended style
    suspended = sum(1 for j in jobs if j.state == "suspended")
    count = f"{len(jobs)}, {suspended} suspended" if suspended else str(len(jobs))
    title = Text(f"running jobs ({count})", style="bold")
    if not jobs:
        return title + Text("  none", style="dim")
    rows: list[tuple[object, ...]] = []
    for job in jobs:
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
    table, _ = render.fitted_table(
        HEADERS,
        rows,
        width=width,
        optional=OPTIONAL,
        max_widths={USER: USER_MAX},
        right=RIGHT,
        shrink=(NAME, USER),
        middle=(NAME,),
        min_widths={NAME: NAME_MIN, USER: USER_MIN},
    )
    head, _, body = table.partition("\n")
    listing = title + Text("\n") + Text(head, style="bold")
    for job, line in zip(jobs, body.split("\n"), strict=True):
        style = STATE_STYLES["suspended"] if job.state == "suspended" else ""
        listing += Text("\n") + Text(line, style=style)
    return listing
