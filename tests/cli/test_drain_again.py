"""`gpudesk drain` on a drained station says the first drain is kept in words, not as a second
parenthesis after the first one's reason (`… (disk swap) (kept)`, seen by an admin on a station
in session 58). A real engine, the real CLI."""

from __future__ import annotations

from conftest import EngineHandle, Run


def test_draining_a_drained_station_says_the_first_drain_is_kept(
    engine: EngineHandle, gpudesk: Run
) -> None:
    code, out, err = gpudesk("drain", "--reason", "disk swap")
    assert code == 0, err
    code, out, err = gpudesk("drain", "--reason", "another")
    assert code == 0, err
    (line,) = out.splitlines()
    assert line.startswith("already drained by ") and "(disk swap)" in line, line
    assert line.endswith(": that drain is kept") and "another" not in line, line
