"""Where a personal engine's home is when GPUDESK_HOME does not say: XDG_STATE_HOME's gpudesk
folder when it is an absolute path, else ~/.local/state/gpudesk (the XDG base-directory spec
has a relative value ignored: taken as it is, the home would move with the current folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudesk.paths import default_home


def test_an_absolute_xdg_state_home_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", "/srv/state")
    assert default_home() == Path("/srv/state/gpudesk")


@pytest.mark.parametrize("value", ["state", "./state", ""])
def test_a_relative_or_empty_xdg_state_home_is_ignored(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", value)
    monkeypatch.chdir(tmp_path)
    assert default_home() == tmp_path / ".local" / "state" / "gpudesk"
