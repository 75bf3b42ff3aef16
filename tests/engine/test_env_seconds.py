"""The engine's one reading of a duration from its environment (gpudesk.env_seconds)."""

from __future__ import annotations

import pytest

from gpudesk.env_seconds import env_seconds


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, 30.0),  # unset: the default
        ("1.5", 1.5),
        ("abc", 30.0),  # not a number
        ("nan", 30.0),
        ("inf", 30.0),
        ("-4", 0.1),  # below the bounds: the lower one
        ("99999", 3600.0),
    ],
)
def test_env_seconds(monkeypatch: pytest.MonkeyPatch, raw: str | None, expected: float) -> None:
    if raw is None:
        monkeypatch.delenv("GPUDESK_TEST_S", raising=False)
    else:
        monkeypatch.setenv("GPUDESK_TEST_S", raw)
    assert env_seconds("GPUDESK_TEST_S", 30.0, 0.1, 3600.0) == expected
