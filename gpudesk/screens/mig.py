"""MIG: each GPU's current slices and the jobs on them, and the planner: the layout the queue
would want and the nvidia-smi commands that would make it. A plan is applied only on an explicit,
confirmed action, and only where the station allows it (`[station] mig_repartition = true`)."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static

from gpudesk.engine.protocol import EngineError
from gpudesk.screens.base import DeskScreen
from gpudesk.screens.state import DeskState
from gpudesk.screens.widgets.gpu_card import mig_profile
from gpudesk.screens.widgets.strips import DeskHeader

PLAN_REFRESH_S = 5.0


def render_layout(state: DeskState) -> Text:
    text = Text()
    text.append("current layout", style="bold")
    if not state.gpus:
        text.append("\n(no GPUs)", style="dim")
    for gpu in state.gpus:
        mode = gpu.get("mig_enabled")
        label = "MIG on" if mode else "MIG off" if mode is False else "no MIG"
        text.append(f"\nGPU {gpu['index']} {gpu.get('name', '')}  {label}")
        for mig in gpu.get("mig_devices") or []:
            jobs = sorted(
                {
                    f"j{p['job_id']}"
                    for p in mig.get("processes") or []
                    if p.get("job_id") is not None
                }
            )
            total = mig.get("memory_total_mib")
            memory = f"{total / 1024:.0f} GiB" if total else "?"
            text.append(f"\n  [{mig_profile(mig)}] {memory}  ", style="cyan")
            text.append(", ".join(jobs) if jobs else "free", style="" if jobs else "dim")
    return text


def render_plans(plans: list[dict[str, Any]] | None, error: str | None) -> Text:
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
    for plan in plans:
        current = ", ".join(plan.get("current") or []) or "none"
        wanted = ", ".join(plan.get("wanted") or []) or "none"
        text.append(f"\nGPU {plan.get('gpu')}: now {current} → wants {wanted}")
        for slot in plan.get("slices") or []:
            jobs = ", ".join(f"j{j}" for j in slot.get("jobs") or [])
            text.append(f"\n  {slot.get('profile')}: {jobs or '-'}", style="dim")
        if plan.get("allowed"):
            text.append("\n  can be applied: press a", style="green")
        elif plan.get("reason"):
            text.append(f"\n  not applied: {plan['reason']}", style="yellow")
        for command in plan.get("commands") or []:
            text.append(f"\n  $ {command}", style="dim")
    return text


class MigScreen(DeskScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "apply_plan", "Apply plan"),
        Binding("g", "next_gpu", "Next GPU"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.plans: list[dict[str, Any]] | None = None
        self.error: str | None = None
        self.loaded_at = 0.0
        self.gpu_choice = 0

    def compose(self) -> ComposeResult:
        yield DeskHeader()
        with VerticalScroll():
            yield Static(id="mig-layout")
            yield Static(id="mig-plans")
        yield Footer()

    def show_state(self, state: DeskState) -> None:
        self.query_one("#mig-layout", Static).update(render_layout(state))
        self.query_one("#mig-plans", Static).update(render_plans(self.plans, self.error))
        if time.monotonic() - self.loaded_at >= PLAN_REFRESH_S:
            self.loaded_at = time.monotonic()
            self.load_plans()

    @work(thread=True, exclusive=True, group="mig-plan")
    def load_plans(self) -> None:
        try:
            plans, error = self.desk.feed.request("mig_plan", gpu=None).get("plans", []), None
        except EngineError as exc:
            plans, error = None, f"no plan: {exc}"
        self.app.call_from_thread(self._loaded, plans, error)

    def _loaded(self, plans: list[dict[str, Any]] | None, error: str | None) -> None:
        self.plans, self.error = plans, error
        if self.is_current:
            self.query_one("#mig-plans", Static).update(render_plans(plans, error))

    def _chosen(self) -> dict[str, Any] | None:
        applicable = [p for p in self.plans or [] if p.get("allowed")]
        if not applicable:
            return None
        return applicable[self.gpu_choice % len(applicable)]

    def action_next_gpu(self) -> None:
        self.gpu_choice += 1
        plan = self._chosen()
        self.notify(f"GPU {plan['gpu']} selected" if plan else "no plan can be applied", timeout=2)

    def action_apply_plan(self) -> None:
        plan = self._chosen()
        if plan is None:
            self.notify("no plan can be applied here (see the reasons)", severity="warning")
            return
        wanted = list(plan.get("wanted") or [])
        commands = "\n".join(plan.get("commands") or [])
        self.desk.confirm(
            f"Repartition GPU {plan['gpu']} into {', '.join(wanted)}?\n\n{commands}",
            lambda: self.desk.act("mig_apply", gpu=plan["gpu"], profiles=wanted, confirm=True),
            yes="Apply",
        )
