"""The desk's MIG screen says what `auto` would do with each GPU's layout, as `gpudesk mig plan`
does (the recorded station has no idle MIG GPU, so its snapshot never shows the line)."""

from __future__ import annotations

import msgspec

from gpudesk.api.models import MigPlanView
from gpudesk.screens.mig import render_plans


def _plan(
    auto: str | None, wanted: tuple[str, ...] = ("3g.20gb",), reason: str | None = None
) -> MigPlanView:
    """GPU 3's plan as the engine words it: commands where the layout would change, else the
    reason why it does not."""
    changes = reason is None
    return MigPlanView(
        gpu=3,
        name="NVIDIA A100-SXM4-40GB",
        mig_mode="enabled",
        mig_enabled=True,
        simulated=True,
        current=["1g.5gb"],
        wanted=list(wanted),
        slices=[],
        left_out=[],
        left_out_total=0,
        commands=["nvidia-smi mig -i 3 -dci", "nvidia-smi mig -i 3 -dgi"] if changes else [],
        allowed=changes,
        blockers=[],
        reason=reason,
        enable_hint=None,
        running_jobs=[],
        auto=auto,
    )


def test_the_plan_shows_what_auto_predicts() -> None:
    said = "GPU 3: 1g.5gb -> 3g.20gb; predicted work rate 0.00 -> 1.00; it pays"
    text = render_plans([_plan(said)], None).plain
    assert f"GPU 3: now 1g.5gb → would become 3g.20gb\n  auto: {said}\n" in text


def test_no_auto_line_where_auto_does_not_weigh_the_gpu() -> None:
    assert "auto:" not in render_plans([_plan(None)], None).plain


def test_a_plan_that_wants_no_slice_says_the_layout_is_kept() -> None:
    """No waiting job wants a slice: the layout stays. "→ wants none" read as "destroy the
    slices"; the line says the layout as it is, the engine's reason why it stays."""
    kept = "No queued job needs a MIG slice on GPU 3; its layout (1g.5gb) stays."
    text = render_plans([_plan(None, wanted=(), reason=kept)], None).plain
    assert "wants none" not in text and "→" not in text
    assert f"GPU 3: now 1g.5gb\n  not applied: {kept}" in text


def test_a_plan_that_wants_the_current_layout_says_so_once() -> None:
    """The engine says why nothing changes; the desk does not say it again in its own words."""
    same = "GPU 3 already has this layout."
    text = render_plans([_plan(None, wanted=("1g.5gb",), reason=same)], None).plain
    assert f"GPU 3: now 1g.5gb\n  not applied: {same}" in text
    assert "no change" not in text and "already what the queue wants" not in text


def test_the_plan_shows_what_the_layout_costs_the_queue() -> None:
    """The line `gpudesk mig plan` prints, the engine's own words, in yellow where the layout
    costs the queue time."""
    from gpudesk.api.models import QueueTimeView

    line = (
        "MIG 3g.20gb: queue drains in ~4h10m; the whole GPU under MPS: ~3h52m — MIG costs the "
        "queue 18m00s: not recommended for this queue (SIMULATED from the model)"
    )
    times = QueueTimeView(
        layout=["3g.20gb"],
        mig_s=15000.0,
        mig_cannot_run=0,
        mps_s=13920.0,
        mps_cannot_run=0,
        exclusive_s=16000.0,
        exclusive_cannot_run=0,
        cost_s=1080.0,
        costs_queue_time=True,
        recommended=False,
        current=["1g.5gb"],
        current_s=None,
        current_cannot_run=0,
        jobs=3,
        left_out=0,
        run_time_unknown=0,
        assumed_run_s=1440.0,
        running_not_counted=0,
        summary=line,
        notes=["3 queued job(s), all started from an idle GPU"],
    )
    plan = _plan(None)
    rendered = render_plans([msgspec.structs.replace(plan, queue_time=times)], None)
    assert f"\n  queue time: {line}" in rendered.plain
    styles = {
        str(span.style)
        for span in rendered.spans
        if "queue time" in rendered.plain[span.start : span.end]
    }
    assert styles == {"yellow"}
    assert "queue time" not in render_plans([plan], None).plain
