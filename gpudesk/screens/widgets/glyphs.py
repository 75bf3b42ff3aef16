"""Text pieces drawn with characters only, so they read the same without colour (NO_COLOR, a
16-colour terminal, a screen reader's text dump): sparklines, bars, segmented memory bars."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

# The sparkline and bar glyphs are shared with the CLI's terminal plots (gpudesk.plots).
from gpudesk.render import EMPTY as EMPTY
from gpudesk.render import SPARKS as SPARKS
from gpudesk.render import bar as bar
from gpudesk.render import sparkline as sparkline

# Each tenant of a memory bar gets its own fill, so shares stay apart without colour.
SHARE_FILLS = "█▓▒▞▚▖"
SHARE_STYLES = ("green", "cyan", "magenta", "yellow", "blue", "red")


def share_bar(
    shares: Sequence[tuple[str, float]], total: float, used: float | None, width: int
) -> Text:
    """A memory bar split into the named shares (in MiB of `total`); what is used but not
    accounted to a share is drawn plain."""
    text = Text()
    if not total:
        text.append(EMPTY * width, style="dim")
        return text
    cells = 0
    for i, (_name, amount) in enumerate(shares):
        span = round(max(0.0, amount) / total * width)
        span = min(span, width - cells)
        if span <= 0:
            continue
        text.append(
            SHARE_FILLS[i % len(SHARE_FILLS)] * span, style=SHARE_STYLES[i % len(SHARE_STYLES)]
        )
        cells += span
    other = max(0.0, (used or 0.0) - sum(a for _, a in shares))
    span = min(round(other / total * width), width - cells)
    if span > 0:
        text.append("░" * span)
        cells += span
    text.append(EMPTY * (width - cells), style="dim")
    return text


def gib(mib: float | None) -> str:
    return "n/a" if mib is None else f"{mib / 1024:.1f}"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}%"


def watts(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} W"
