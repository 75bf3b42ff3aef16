"""What `gpudesk show` prints of one job: its spec and state, the jobs it runs after, its
attempts (with what placement weighed), what it used, its events and environment; and
`show --plot`'s figure.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from gpudesk import render
from gpudesk.cli import job_extras_view
from gpudesk.cli.common import simulated_banner
from gpudesk.cli.plot_output import write_plot
from gpudesk.core.umask import umask_text
from gpudesk.text import printable_line, printable_message

if TYPE_CHECKING:
    from gpudesk.api.models import (
        AlternativeView,
        AttemptView,
        EventView,
        JobDetail,
        JobSpecView,
        JobView,
        UsageSummary,
    )
    from gpudesk.plots.common import PlotTarget

AFTER_LABEL = "  after      "  # `show`'s fields are labelled in this width
FIELD_INDENT = " " * len(AFTER_LABEL)  # where a field's value starts in `show`
ATTEMPT_INDENT = " " * len("      why ")  # an attempt's log, cgroup and reason, continued
EVENT_INDENT = len("  00:00:00  ") + 11  # an event's message, continued under itself


def detail_lines(
    data: JobDetail, after: list[JobView], width: int, room: int | None = None
) -> list[str]:
    """`gpudesk show JOB` in `width` columns; `after`: the jobs it runs after, as they stand.
    `room`: a terminal's width, where the lines of figures and the title fold too; None (a pipe)
    keeps each of those on one line, as scripts grep them."""
    lines = _spec_lines(data.job, width, room)
    if data.simulated and data.job.spec.gpus:  # said first, as `queue` says it: its GPUs' figures
        lines.insert(0, simulated_banner(data.simulated, width))
    if data.job.spec.after:
        lines.extend(_after_field(data.job, after, width))
    lines.extend(_field(line, room) for line in job_extras_view.show_lines(data.job, data.array))
    lines.extend(_run_lines(data, width, room))
    lines.extend(_attempt_lines(data.attempts, width, room, data.job.suspended_at))
    lines.extend(_usage_lines(data.usage, data.job, data.attempts, room))
    lines.extend(_event_lines(data.events, data.earlier_events, width))
    if data.env is not None:
        lines.append("environment:")
        for k, v in sorted(data.env.items()):
            said = f"  {k}={printable_line(v)}"
            # one word (a path) kept whole as it stands: fill would move it out from its indent
            lines.append(render.fold(said, room, "    ") if " " in said.strip() else said)
    return lines


def _field(line: str, room: int | None) -> str:
    """A `  label      value` line in `room` columns, its value continued under itself; a
    value of one word (a path) stays beside its label, wider than the room or not."""
    if room is None or " " not in line[len(FIELD_INDENT) :].strip():
        return line
    return render.fill(line, room, FIELD_INDENT)


def _spec_lines(j: JobView, width: int, room: int | None) -> list[str]:
    """Who, in what state, the command and what it asks for, when."""
    spec = j.spec
    command = spec.command[0] if spec.shell else shlex.join(spec.command)
    # a name wider than the room goes whole under the `job 1:` it follows (an id, a name or a
    # path is never broken: it is copied from here)
    title = render.fold(f"job {j.id}: {printable_line(j.name)}", room, FIELD_INDENT)
    state = (
        f"  state      {j.state}"
        + (", held" if j.held else "")
        + (
            f" since {render.clock(j.suspended_at)} (its GPUs held; gpudesk resume {j.id})"
            if j.suspended_at is not None
            else ""
        )
        + (f" ({j.state_detail})" if j.reason else "")
        + (f" [{j.unsaved}]" if j.unsaved else "")
    )
    asks = (
        f"  asks for   {spec.gpus} GPU(s)"
        + (f", {spec.memory_gb:g} GiB" if spec.memory_gb else "")  # as --mem counts
        + (f", {spec.sm_pct:g}% SM" if spec.sm_pct is not None else "")
        + (f", dataset {spec.dataset}" if spec.dataset else "")
        + (f" ({spec.selection})" if spec.selection else "")
    )
    return [
        title,
        _field(f"  user       {j.user} (uid {j.uid})", room),
        _field(state, room),
        *_packed(
            "  command    ",
            # spelled out: a command's escape sequences must not reach the terminal
            (
                [printable_line(command)]
                if spec.shell
                else [printable_line(shlex.quote(arg)) for arg in spec.command]
            )
            + (["[shell]"] if spec.shell else []),
            width,
        ),
        *_workdir_lines(spec, room),
        _field(asks, room),
        # figures side by side, three spaces apart; one that does not fit goes under the first
        *_packed(
            "  priority   ",
            [
                str(spec.priority),
                f"attempts {_attempts_text(j)}",
                *(
                    [f"time limit {render.duration(spec.time_limit_s)} per attempt"]
                    if spec.time_limit_s is not None
                    else []
                ),
                *(
                    [
                        f"preemptible ({spec.preempt_signal}, "
                        f"grace {render.duration(spec.preempt_grace_s)})"
                    ]
                    if spec.preemptible
                    else []
                ),
            ],
            room,
            sep="   ",
        ),
        *_packed(
            "  submitted  ",
            [
                render.clock(j.submitted_at),
                f"started {render.clock(j.started_at)}",
                f"ended {render.clock(j.ended_at)}",
                f"time {render.duration(j.run_s())}",
            ],
            room,
            sep="   ",
        ),
    ]


def _after_field(j: JobView, after: list[JobView], width: int) -> list[str]:
    """The jobs it runs after, each with its name and state, and whether it still waits."""
    states = {other.id: other for other in after}
    refs = [
        f"job {ref} ({printable_line(states[ref].name)}, {states[ref].state})"
        if ref in states
        else f"job {ref} (gone)"
        for ref in j.spec.after
    ]
    # what it still waits for; once it has run (or was cancelled for them) it waits no more
    until = "starts once all have succeeded" if j.state == "queued" else ""
    return _after_lines(refs, until, width)


def _run_lines(data: JobDetail, width: int, room: int | None) -> list[str]:
    """Its run and sweep, its MLflow run, and why it waits."""
    j, spec = data.job, data.job.spec
    lines: list[str] = []
    if j.group:
        run = f"  run        {j.group}" + (f", sweep {spec.sweep}" if spec.sweep else "")
        lines.append(_field(run, room))
    if data.tracking is not None:
        tracked = data.tracking
        mlflow = (
            f"  mlflow     {tracked.mlflow_uri}, experiment {tracked.experiment}, "
            + (f"run {tracked.run_id}" if tracked.run_id else "run not made yet")
            + (f" (the store: {tracked.error})" if tracked.error else "")
        )
        lines.append(_field(mlflow, room))
    if data.waiting:  # the reason says "waiting ...", "held: ...", "pending in Slurm ..."
        lines.append(render.fill(f"  why        {data.waiting}", width, FIELD_INDENT))
    if data.remaining is not None:
        text = render.remaining_text(data.remaining)
        lines.append(render.fill(f"  remaining  {text}", width, FIELD_INDENT))
    return lines


def _attempt_lines(
    attempts: list[AttemptView], width: int, room: int | None, suspended_at: float | None = None
) -> list[str]:
    """Each attempt: state, slot, pid, exit, time (its run time: `suspended_at`, the job's,
    while its attempt is suspended); its log, cgroup, reason and what placement weighed."""
    if not attempts:
        return []
    lines = ["attempts:"]
    for a in attempts:
        exit_code = "-" if a.exit_code is None else a.exit_code
        took = render.duration(a.run_s(None if a.ended_at else suspended_at))
        pieces = [f"{a.state:<13}", f"{a.placement.slot:<7}", f"pid {a.pid or '-':<8}"]
        pieces += [f"exit {exit_code:<4}", took]
        lines.extend(_packed(f"  #{a.number}  ", pieces, room, indent=ATTEMPT_INDENT))
        # under GPUDESK_HOME: spelled out
        lines.append(f"      log {printable_line(str(a.log))}")
        if a.containment:
            lines.append(render.fill(f"      in  {a.containment}", width, ATTEMPT_INDENT))
        lines.append(render.fill(f"      why {a.placement.reason}", width, ATTEMPT_INDENT))
        if a.state == "preempted" and a.reason:  # why it gave way (docs/preemption.md)
            lines.append(render.fill(f"      end {a.reason}", width, ATTEMPT_INDENT))
        lines.extend(_alternative_lines(a.placement.alternatives, room))
    return lines


def _event_lines(events: list[EventView], earlier: int, width: int) -> list[str]:
    """The job's events, the latest the engine sent; `earlier`: how many came before them."""
    lines = [f"events (the latest {len(events):,}; {earlier:,} earlier):" if earlier else "events:"]
    for e in events:
        # spelled out here too: a row stored before the engine spelled what it quotes (an
        # edit's command, before c84e003) holds its escape sequences as they came
        message = printable_message(e.message)
        event = f"  {render.clock(e.ts)}  {e.state or e.kind:<10} {message}"
        lines.append(render.fill(event, width, " " * EVENT_INDENT))
    return lines


def _after_lines(refs: list[str], until: str, width: int) -> list[str]:
    """show's `after` field in `width` columns: the jobs it runs after, a sweep's many of them
    continued under the first, each job's mention kept on one line; then `until` ("" for
    nothing), wrapped as prose."""
    pieces = [f"{ref}," for ref in refs[:-1]] + [refs[-1] + (":" if until else "")]
    return _packed(AFTER_LABEL, pieces + until.split(), width)


def _workdir_lines(spec: JobSpecView, room: int | None) -> list[str]:
    """The folder it runs in, and beside it the umask it writes with (its submitter's, as
    Slurm's SLURM_UMASK); none for a job from a client that sent none: it has the engine's."""
    umask = [] if spec.umask is None else [f"umask {umask_text(spec.umask)}"]
    workdir = printable_line(spec.workdir) if spec.workdir else "-"
    return _packed("  workdir    ", [workdir, *umask], room, sep="   ")


def _packed(
    label: str, pieces: list[str], width: int | None, sep: str = " ", indent: str = FIELD_INDENT
) -> list[str]:
    """A field of `show` in `width` columns: `pieces` after `label`, `sep` apart, as many to a
    line as fit, the rest continued under `indent`; a piece (a job's mention, a command's
    argument with its quotes) is never split, so a longer one runs past `width`; all on one
    line where `width` is None."""
    lines = [label + pieces[0]] if pieces else [label.rstrip()]
    for piece in pieces[1:]:
        if width is not None and len(lines[-1].rstrip()) + len(sep) + len(piece.rstrip()) > width:
            lines[-1] = lines[-1].rstrip()
            lines.append(indent + piece)
        else:
            lines[-1] += sep + piece
    lines[-1] = lines[-1].rstrip()
    return lines


def plot_job(target: PlotTarget | None, data: JobDetail) -> None:
    """`show --plot`, after what show prints."""
    if target is None:
        return
    from gpudesk import render
    from gpudesk.plots.job import job_figure, job_text

    write_plot(
        target,
        lambda: job_figure(data),
        lambda: job_text(data, width=render.terminal_width()),
    )


def _alternative_lines(alternatives: list[AlternativeView], room: int | None) -> list[str]:
    """What placement weighed: each slot with the job's predicted speed there (1.00 = alone
    on a whole GPU) and the work per second the station gains."""
    if not alternatives:
        return []
    lines = [render.fold("      weighed (predicted speed, station gain):", room, ATTEMPT_INDENT)]
    for alt in alternatives:
        mark = "*" if alt.note == "chosen" else " "
        note = f"  {alt.note}" if alt.note and alt.note != "chosen" else ""
        line = f"       {mark} {alt.slot:<16} {alt.rate:5.2f} {alt.gain:6.2f}{note}"
        lines.append(render.fold(line, room, " " * 9))
    return lines


def _attempts_text(job: JobView) -> str:
    """ "2/3", or after a requeue "1/3 since requeued (4 in all)"; preempted attempts, which do
    not count, named: "1/3 (+2 preempted)"."""
    before = job.attempts_before_requeue
    counted = f"{job.attempts - before - job.preemptions}/{job.max_attempts}"
    if job.preemptions:
        counted += f" (+{job.preemptions} preempted)"
    return f"{counted} since requeued ({job.attempts} in all)" if before else counted


def _na(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def _usage_lines(
    usage: UsageSummary | None, job: JobView, attempts: list[AttemptView], room: int | None
) -> list[str]:
    """What a job used since it started: energy (Wh, as every view shows it; `--json` keeps
    joules) with carbon, CPU, memory, I/O."""
    from gpudesk import render
    from gpudesk.units import watt_hours

    if not usage:
        if job.terminal and not attempts:
            return [_field(f"usage:     none: it never ran ({job.state} before it started)", room)]
        return ["usage:     not measured yet"]
    on_mig = any(a.placement.mode == "mig" for a in attempts)

    def mib(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f} MiB"

    lines = ["usage:"]
    if usage.gpu_j is not None:
        idle = usage.gpu_idle_j
        how = {
            # a MIG slice's energy is not measured: NVML counts the whole GPU's, every slice
            # and the idle ones included
            "exclusive": "the whole GPU in MIG mode, not the slice's own: its idle slices included"
            if on_mig
            else "the GPU to itself",
            "sm share": "shared GPU, split by SM share",
            "mps share": "shared GPU, split by SM share, its MPS clients' share evenly",
            "even": "shared GPU, split evenly",
        }.get(usage.split or "", "")
        source = "energy counter" if usage.gpu_source == "counter" else f"{usage.gpu_source} power"
        baseline = (
            f" = {watt_hours(usage.gpu_above_idle_j)} above an idle baseline of {watt_hours(idle)}"
            if idle is not None
            else " (idle baseline unknown)"
        )
        gpu = (
            f"  GPU energy {render.energy_cell(usage.gpu_j, usage.estimate)}{baseline}"
            f"  [{source}; {how}]" + ("  ESTIMATE" if usage.estimate else "")
        )
        lines.append(_field(gpu, room))
    cpu = usage.cpu_j
    lines.append(
        _field(
            "  CPU energy "
            + (
                f"{watt_hours(cpu)} (RAPL, by share of busy CPU time)"
                if cpu is not None
                else "n/a (RAPL not readable here)"
            ),
            room,
        )
    )
    if usage.total_j is not None:
        carbon = f"{_na(usage.carbon_g, '{:.2f}')} g CO2e at {usage.grid_g_per_kwh:g} g/kWh"
        lines.append(_field(f"  carbon     {carbon}", room))
    took = [render.duration(usage.cpu_s), f"peak RSS {mib(usage.rss_peak_mib)}"]
    took += [f"I/O read {mib(usage.io_read_mib)}", f"written {mib(usage.io_write_mib)}"]
    # "I/O read 0 MiB written 0 MiB" is one figure, said one space apart, that may fold too
    packed = _packed("  CPU time   ", took, room, sep="   ")
    lines.extend(line.replace("   written ", " written ") for line in packed)
    return lines
