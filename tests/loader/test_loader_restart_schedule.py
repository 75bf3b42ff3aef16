"""The engine's restarts of a producer (gpudesk/loader/restarts.py): a death restarted at once,
each restart in a row after it backing off, doubling, and none after RESTART_LIMIT; a consumer
connecting starts the count afresh. The engine's own use, with real processes, is
tests/engine/test_loader_restart_backoff.py."""

from __future__ import annotations

from pathlib import Path

from gpudesk.loader.restarts import (
    FIRST_DELAY_S,
    LINE_MAX,
    RESTART_LIMIT,
    Restarts,
    ended,
    last_line,
)


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
    why = restarts.down(None, None, Path("/h/loaders/syn.log"))  # not launched: its reason kept
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


def test_how_a_producer_went_down_names_its_exit_and_its_own_last_line(tmp_path: Path) -> None:
    """`down` says the exit status (a signal by name) and the last line the latest start wrote
    to its log: not a line of an earlier start's, printable, cut to LINE_MAX."""
    import signal
    import subprocess
    import sys

    log = tmp_path / "syn.log"
    log.write_text("an earlier start's last line\n")
    restarts = Restarts(log_from=log.stat().st_size)
    exited = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    exited.wait()
    assert restarts.down(exited.pid, exited, log) == f"died (pid {exited.pid}, exit 3)"
    with log.open("a") as f:
        f.write("Traceback ...\nRuntimeError: no \x1b[31mdisk\n\n")
    said = restarts.down(exited.pid, exited, log)
    assert said.endswith("exit 3; its log's last line: RuntimeError: no \\x1b[31mdisk)"), said
    with log.open("a") as f:
        f.write("x" * 5000 + "\n")
    assert len(last_line(log, 0) or "") == LINE_MAX
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert f"(pid {killed.pid}, killed by SIGKILL;" in restarts.down(killed.pid, killed, log)
    assert restarts.down(killed.pid, killed, tmp_path / "none.log").endswith("SIGKILL)")
    assert ended(-40) == "killed by signal 40"  # SIGRTMIN+6
    assert ended(None) == "its exit status not known: adopted, not the engine's child"
