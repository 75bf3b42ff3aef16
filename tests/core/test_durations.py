"""Time limits as people write them: sbatch's --time forms and unit suffixes."""

from __future__ import annotations

import pytest

from gpudesk.units import parse_duration


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("90", 5400.0),  # sbatch: a bare number is minutes
        ("90:00", 5400.0),  # minutes:seconds
        ("1:30:00", 5400.0),
        ("2-0", 172800.0),  # days-hours
        ("2-12:00", 216000.0),  # days-hours:minutes
        ("2-12:00:00", 216000.0),
        ("90s", 90.0),
        ("30m", 1800.0),
        ("1h30m", 5400.0),
        (" 2D ", 172800.0),
        ("1.5h", 5400.0),
        # --begin's words for the same units (`--time 10min` was refused)
        ("10min", 600.0),
        ("5minutes", 300.0),
        ("2hours", 7200.0),
        ("1day", 86400.0),
        ("3secs", 3.0),
        ("1h30min", 5400.0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text", ["", "abc", "1:2:3:4", "5x", "-3", "h", "1h 30m", "2-", "10mn", "1dayx", "5y"]
)
def test_what_is_not_a_duration_says_what_is(text: str) -> None:
    with pytest.raises(ValueError, match="give minutes as sbatch --time does"):
        parse_duration(text)
