"""`gpudesk run`'s wake-ups (gpudesk.api.wakeups) against a real engine's bound on a subscriber."""

from __future__ import annotations

import pytest
from conftest import EngineHandle

from gpudesk.api.wakeups import Wakeups
from gpudesk.core.jobs import JobSpec


def specs(count: int, **fields: object) -> list[JobSpec]:
    return [JobSpec(name=f"j{k}", command=("true",), **fields) for k in range(count)]  # type: ignore[arg-type]


def test_a_follower_cut_off_for_falling_behind_follows_anew(
    home: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine cuts off a subscriber that leaves more than its bound unread (a run busy
    queueing thousands of jobs); `gpudesk run`'s wake-ups subscribe again."""
    monkeypatch.setenv("GPUDESK_SUBSCRIBER_BACKLOG_BYTES", "65536")
    engine = EngineHandle(home)  # type: ignore[arg-type]
    engine.start()
    try:
        (blocker,) = engine.api.submit_jobs(specs(1), hold=True).ids
        waiting = engine.api.submit_jobs(specs(2_000, after=(blocker,))).ids  # none can start
        with Wakeups(engine.api, "job") as wakeups:
            # Each round sends 2,000 events, unread until the round's end: how many it takes
            # to pass the bound depends on the kernel's socket buffers
            for round_ in range(20):
                (engine.api.hold if round_ % 2 == 0 else engine.api.release)(waiting)
                assert wakeups.wait(10.0)
                if wakeups.resubscribed:
                    break
            assert wakeups.resubscribed == 1
            engine.api.cancel([waiting[0]])  # the new stream hears on
            assert wakeups.wait(10.0) and wakeups.resubscribed == 1
    finally:
        engine.client.close()
