"""The engine's restarts of a producer (gpudesk/loader/restarts.py): a death restarted at once,
each restart in a row after it backing off, doubling, and none after RESTART_LIMIT; a consumer
connecting starts the count afresh. The engine's own use, with real processes, is
tests/engine/test_loader_restart_backoff.py."""

from __future__ import annotations

from pathlib import Path

from gpudesk.loader.restarts import FIRST_DELAY_S, RESTART_LIMIT, Restarts


def restarted_at(restarts: Restarts, until: float, step: float = 0.01) -> list[float]:
    """When `restarts` lets a producer that is always down start again, looked at every `step`
    seconds up to `until`, as the engine's tick does."""
    at: list[float] = []
    for tick in range(int(until / step)):
        now = tick * step
        if restarts.exhausted:
            break
        if restarts.take(now, "died (pid 1, exit 1)") is not None:
            at.append(round(now, 2))
    return at


def test_restarts_back_off_doubling_and_stop_at_the_limit() -> None:
    restarts = Restarts()
    at = restarted_at(restarts, 60.0)
    delays = [FIRST_DELAY_S * 2**n for n in range(RESTART_LIMIT - 1)]
    assert at == [round(sum(delays[:n]), 2) for n in range(RESTART_LIMIT)], at
    assert restarts.exhausted and restarts.total == RESTART_LIMIT
    assert at[-1] == 7.5  # the bound docs/loader.md gives: within a resuming consumer's 30 s
    assert "restarting it (5 of 5 at most)" in str(restarts.problem)
    why = restarts.down(None, None)  # its last restart not launched: the reason kept
    assert why == "could not be restarted (None)"
    said = restarts.given_up("died (pid 1, exit 1)", Path("/h/loaders/syn.log"))
    assert "after 5 restarts in a row" in said and "/h/loaders/syn.log" in said
    assert restarts.problem is None  # the engine keeps the reason from now on


def test_a_consumer_connecting_starts_the_count_afresh() -> None:
    restarts = Restarts()
    assert restarted_at(restarts, 1.6) == [0.0, 0.5, 1.5]
    restarts.served()
    assert restarts.failing == 0 and restarts.total == 3
    assert restarts.take(1.6, "died") is not None  # at once again, not after 2 s
