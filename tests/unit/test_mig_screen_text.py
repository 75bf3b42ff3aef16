"""The desk's MIG screen says what `auto` would do with each GPU's layout, as `gpudesk mig plan`
does (the recorded station has no idle MIG GPU, so its snapshot never shows the line)."""

from __future__ import annotations

from gpudesk.api.models import MigPlanView
from gpudesk.screens.mig import render_plans


def _plan(auto: str | None, wanted: tuple[str, ...] = ("3g.20gb",)) -> MigPlanView:
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
        commands=[],
        allowed=True,
        blockers=[],
        reason=None,
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
    slices"; the line says what happens instead."""
    text = render_plans([_plan(None, wanted=())], None).plain
    assert "wants none" not in text and "→" not in text
    assert "GPU 3: now 1g.5gb; no waiting job wants a slice here: keep as is" in text


def test_a_plan_that_wants_the_current_layout_says_no_change() -> None:
    text = render_plans([_plan(None, wanted=("1g.5gb",))], None).plain
    assert "GPU 3: now 1g.5gb; already what the queue wants: no change" in text
