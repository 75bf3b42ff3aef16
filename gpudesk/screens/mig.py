"""MIG: each GPU's current slices and the jobs on them, and the planner: the layout the queue
would want and the nvidia-smi commands that would make it. A plan is applied only on an explicit,
confirmed action, and only where the station allows it (`[station] mig_repartition = true`)."""

from __future__ import annotations

import time
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll

from gpudesk.api import EngineError, MigPlanView
from gpudesk.screens.base import DeskScreen
from gpudesk.screens.state import DeskState
from gpudesk.screens.widgets.footer import DeskFooter
from gpudesk.screens.widgets.gpu_card import mig_profile
from gpudesk.screens.widgets.strips import DeskHeader
from gpudesk.screens.widgets.text_panel import TextPanel

PLAN_REFRESH_S = 5.0


def render_layout(state: DeskState) -> Text:
    text = Text()
    text.append("current layout", style="bold")
    if not state.gpus:
        text.append("\n(no GPUs)", style="dim")
    for gpu in state.gpus:
        label = "MIG on" if gpu.mig_enabled else "MIG off"
        text.append(f"\nGPU {gpu.index} {gpu.name or ''}  {label}")
        for mig in gpu.mig_devices:
            jobs = sorted({f"j{p.job_id}" for p in mig.processes if p.job_id is not None})
            total = mig.memory_total_mib
            memory = f"{total / 1024:.0f} GiB" if total else "?"
            text.append(f"\n  [{mig_profile(mig)}] {memory}  ", style="cyan")
            text.append(", ".join(jobs) if jobs else "free", style="" if jobs else "dim")
    return text


def render_plans(plans: list[MigPlanView] | None, error: str | None) -> Text:
    text = Text()
    text.append("planner (what the queue would want)", style="bold")
    if error:
        text.append(f"\n{error}", style="red")
        return text
    if plans is None:
        text.append("\n(loading…)", style="dim")
        return text
    if not plans:
        text.append("\nno MIG-capable GPU", style="dim")
    off = [plan for plan in plans if not plan.mig_enabled]
    for plan in plans:
        if not plan.mig_enabled:  # one line each; what to do is said once, below
            text.append(f"\nGPU {plan.gpu}: {_mig_off(plan)}", style="dim")
            _queue_time(text, plan)
            continue
        text.append(f"\nGPU {plan.gpu}: {_change(plan)}")
        for slot in plan.slices:
            jobs = ", ".join(f"j{j}" for j in slot.jobs)
            text.append(f"\n  {slot.profile}: {jobs or '-'}", style="dim")
        for profile in plan.spare:
            text.append(f"\n  {profile}: spare, for jobs to come", style="dim")
        if plan.auto:
            text.append(f"\n  auto: {plan.auto}", style="dim")
        _queue_time(text, plan)
        if plan.allowed:
            text.append("\n  can be applied: press a", style="green")
        elif plan.reason:
            text.append(f"\n  not applied: {plan.reason}", style="yellow")
        for command in plan.commands:
            text.append(f"\n  $ {command}", style="dim")
    hinted = [plan for plan in off if plan.enable_hint]
    if hinted:
        gpus = ", ".join(str(plan.gpu) for plan in off)
        text.append(f"\n\nMIG is off on GPU {gpus}. {hinted[0].enable_hint}", style="dim")
        if len(hinted) > 1:
            others = "; ".join(f"GPU {p.gpu}: -i {p.gpu}" for p in hinted[1:])
            text.append(f" (The same for the others, {others}.)", style="dim")
        if any(plan.simulated for plan in off):
            text.append(
                " On a SIMULATED station, MIG mode comes from the [station] mig table.",
                style="dim",
            )
    return text


def _queue_time(text: Text, plan: MigPlanView) -> None:
    """The line `gpudesk mig plan` shows: the queue's drain time with the layout against the
    whole GPU (SIMULATED), in yellow where the layout costs the queue time."""
    times = plan.queue_time
    if times is not None:
        style = "yellow" if times.costs_queue_time else "dim"
        text.append(f"\n  queue time: {times.summary}", style=style)


def _change(plan: MigPlanView) -> str:
    """What the plan does to a MIG GPU's layout: the layout it would become, where there are
    commands to make it; else the layout alone, kept (never "→ none", which reads as "destroy
    the slices"), the engine's reason below saying why nothing changes."""
    current = ", ".join(plan.current) or "no slices"
    if not plan.commands:
        return f"now {current}"
    return f"now {current} → would become {', '.join(plan.wanted)}"


def _mig_off(plan: MigPlanView) -> str:
    """A GPU not in MIG mode, in one line: whether it can be, and what the queue would want."""
    if plan.mig_mode == "unsupported":
        return f"{plan.name} does not support MIG"
    wanted = f"; the queue would want {', '.join(plan.wanted)}" if plan.wanted else ""
    pending = " (a change to MIG mode is pending)" if plan.mig_mode == "pending" else ""
    return f"MIG off{pending}{wanted}"


class MigScreen(DeskScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "apply_plan", "Apply plan"),
        Binding("g", "next_gpu", "Next GPU"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.plans: list[MigPlanView] | None = None
        self.error: str | None = None
        self.loaded_at = 0.0
        self.gpu_choice = 0
        self.apply_once_loaded = False  # the palette's "Apply MIG plan" came before the plans

    def compose(self) -> ComposeResult:
        yield DeskHeader()
        with VerticalScroll():
            yield TextPanel(id="mig-layout")
            yield TextPanel(id="mig-plans")
        yield DeskFooter()

    def show_state(self, state: DeskState) -> None:
        self.query_one("#mig-layout", TextPanel).show(render_layout(state))
        self.query_one("#mig-plans", TextPanel).show(render_plans(self.plans, self.error))
        if time.monotonic() - self.loaded_at >= PLAN_REFRESH_S:
            self.loaded_at = time.monotonic()
            self.load_plans()

    @work(thread=True, exclusive=True, group="mig-plan")
    def load_plans(self) -> None:
        try:
            plans, error = self.desk.feed.mig_plan().plans, None
        except EngineError as exc:
            plans, error = None, f"no plan: {exc}"
        self.app.call_from_thread(self._loaded, plans, error)

    def _loaded(self, plans: list[MigPlanView] | None, error: str | None) -> None:
        # The plan is asked for again each time the screen comes back; the same answer is not
        # painted again (the panel skips it).
        self.plans, self.error = plans, error
        if self.is_current:
            self.query_one("#mig-plans", TextPanel).show(render_plans(plans, error))
        if self.apply_once_loaded:
            self.apply_once_loaded = False
            self.action_apply_plan()

    def apply_when_loaded(self) -> None:
        """Apply (asking first) as soon as the plans are read; at once if they are."""
        if self.plans is None and self.error is None:
            self.apply_once_loaded = True
        else:
            self.action_apply_plan()

    def _chosen(self) -> MigPlanView | None:
        applicable = [p for p in self.plans or [] if p.allowed]
        if not applicable:
            return None
        return applicable[self.gpu_choice % len(applicable)]

    def action_next_gpu(self) -> None:
        self.gpu_choice += 1
        plan = self._chosen()
        self.notify(f"GPU {plan.gpu} selected" if plan else "no plan can be applied", timeout=2)

    def action_apply_plan(self) -> None:
        plan = self._chosen()
        if plan is None:
            self.notify("no plan can be applied here (see the reasons)", severity="warning")
            return
        gpu, wanted = plan.gpu, list(plan.wanted)
        commands = "\n".join(plan.commands)
        self.desk.confirm(
            f"Repartition GPU {gpu} into {', '.join(wanted)}?\n\n{commands}",
            lambda: self.desk.act("mig_apply", lambda feed: feed.mig_apply(gpu, wanted)),
            yes="Apply",
        )
