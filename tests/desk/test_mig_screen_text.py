"""The desk's MIG screen says what `auto` would do with each GPU's layout, as `gpudesk mig plan`
does (the recorded station has no idle MIG GPU, so its snapshot never shows the line)."""

from __future__ import annotations

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
