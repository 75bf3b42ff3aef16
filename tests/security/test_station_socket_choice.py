"""Which engine a client talks to when nothing names one: the station's, on a station.

A station's engine that an admin stopped removed its socket, and a user outside the station's
group cannot see into its socket's folder: either way the socket looked absent, and `gpudesk
submit` quietly started a personal engine, a second scheduler on the station's GPUs. The
station is now known by its socket's folder and its state folder too."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudesk import paths
from gpudesk.paths import system_socket_from_env


@pytest.fixture
def station(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    socket = tmp_path / "run" / "gpudesk" / "control.sock"
    state = tmp_path / "var" / "lib" / "gpudesk"
    monkeypatch.setattr(paths, "SYSTEM_SOCKET", socket)
    monkeypatch.setattr(paths, "SYSTEM_STATE_DIR", state)
    monkeypatch.delenv("GPUDESK_HOME", raising=False)
    monkeypatch.delenv("GPUDESK_SOCKET", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return socket, state


def test_no_station_here_means_a_personal_engine(station: tuple[Path, Path]) -> None:
    assert system_socket_from_env() is None


@pytest.mark.parametrize("left", ["its socket's folder", "its state folder"])
def test_a_station_without_its_socket_is_still_the_station(
    station: tuple[Path, Path], left: str, gpudesk, tmp_path: Path
) -> None:
    socket, state = station
    (socket.parent if left == "its socket's folder" else state).mkdir(parents=True)
    assert system_socket_from_env() == socket
    code, _, err = gpudesk("submit", "--", "true")
    assert code != 0 and "is not running; an admin starts it" in err, err
    assert "set GPUDESK_HOME" in err  # how to use an engine of one's own instead, on purpose
    assert not (tmp_path / "home").exists()  # no personal engine, no home made for one


def test_gpudesk_home_still_chooses_a_personal_engine(
    station: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    socket, _ = station
    socket.parent.mkdir(parents=True)
    monkeypatch.setenv("GPUDESK_HOME", str(tmp_path / "mine"))
    assert system_socket_from_env() is None
