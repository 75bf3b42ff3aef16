"""How often the Slurm poller asks squeue (no cluster needed): fast just after gpudesk sent,
cancelled or heard a change, slow otherwise, as a shared controller's admins ask; a fixed
interval where the engine's environment sets one; and squeue's start time read from its line."""

from __future__ import annotations

import pytest

from gpudesk.core.identity import Identity
from gpudesk.slurm.commands import QueueLine
from gpudesk.slurm.poller import (
    FAST_FOR_S,
    FAST_POLL_S,
    POLL_ENV,
    POLL_S,
    Heard,
    Poller,
    Watched,
    poll_s,
)


def test_fast_after_a_change_then_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(POLL_ENV, raising=False)
    assert POLL_S >= 10.0  # what Slurm admins accept of a tool (snakemake 30 s, stui 10 s)
    assert poll_s(None, 100.0) == POLL_S
    assert poll_s(100.0, 100.0 + FAST_FOR_S / 2) == FAST_POLL_S
    assert poll_s(100.0, 100.0 + FAST_FOR_S + 1) == POLL_S
    monkeypatch.setenv(POLL_ENV, "0.3")
    assert poll_s(None, 100.0) == 0.3


def test_a_new_job_a_cancel_or_a_heard_change_makes_the_polls_fast() -> None:
    poller = Poller(lambda: None)
    poller.stopping = True  # no thread: the bookkeeping alone
    poller._start = lambda: None  # type: ignore[method-assign]
    owner = Identity(1000, 1000, ())
    watched = Watched(7, "/etc/slurm/slurm.conf", owner, "12", None, "12")
    assert poller.changed_at is None
    poller.watch([watched])
    first = poller.changed_at
    assert first is not None  # a job to follow: it may start soon
    running = QueueLine("12", "12", "RUNNING", None, "node1", "2026-11-30T10:00:00")
    poller._note_changes([Heard(7, running)])
    assert poller.changed_at == first  # its first news is no change
    poller._note_changes([Heard(7, running)])
    assert poller.changed_at == first
    done = QueueLine("12", "12", "COMPLETED", None, "node1", "2026-11-30T10:00:00")
    poller._note_changes([Heard(7, done)])
    assert poller.changed_at is not None and poller.changed_at > first
    later = poller.changed_at
    poller.cancel("/etc/slurm/slurm.conf", owner, ["12"], [7])
    assert poller.changed_at >= later


def test_squeue_lines_carry_slurms_start_time_once_the_job_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpudesk.slurm.commands import SlurmCommands

    owner = Identity(1000, 1000, ())
    commands = SlurmCommands.__new__(SlurmCommands)
    commands.owner = owner
    out = (
        "12|12|RUNNING|None|node1|1000|2026-11-30T10:00:00\n"
        "13|13|PENDING|Resources|(null)|1000|2026-11-30T11:00:00\n"
        "14|14|RUNNING|None|node1|1001|2026-11-30T10:00:00\n"  # another user's: ignored
    )
    done = type("Done", (), {"returncode": 0, "out": out, "err": ""})()
    monkeypatch.setattr(commands, "run", lambda *a, **k: done, raising=False)
    lines = {line.slurm_id: line for line in commands.queue(["12", "13", "14"])}
    assert set(lines) == {"12", "13"}
    assert lines["12"].started == "2026-11-30T10:00:00"
    assert lines["13"].started is None  # a pending job's %S is an estimate, not a start


def test_a_time_slurms_clients_give_stays_within_what_the_engine_saw() -> None:
    """Slurm's clients run as the job's owner, who may make them print anything: a start she
    forges cannot fall before the submit or after the engine saw the job running, an end cannot
    fall in the future or before the start."""
    from gpudesk.slurm.outcome import within

    submitted, seen_running, now = 1000.0, 1030.0, 2000.0
    assert within(1010.0, submitted, seen_running) == 1010.0  # Slurm's own, believed
    assert within(1500.0, submitted, seen_running) == seen_running  # a forged late start
    assert within(10.0, submitted, seen_running) == submitted  # a forged early one
    assert within(9e9, seen_running, now) == now  # an end in the future
    assert within(None, submitted, now) is None
