"""A job that ended while the disk was full is acted on as ended: its end is known (the views
show it, marked not yet saved) but its store still says `running` until there is room and the
settle's retry (every SETTLE_RETRY_S) stores it. A cancel in that window once found the store
writable again (room made, the retry not yet run): it stored the cancel, signalled the group of
a wrapper long reaped, answered "stopping", and the retry then stored the job's own failure as
`cancelled`. Every action is now refused there, as for any job that cannot be acted on, saying
how it ended and why that is not saved; the end is stored once, as it was, when there is room.

Real: a small tmpfs mounted as GPUDESK_HOME (root only), real attempts; the engine built in this
process (`EngineInProcess`) so that the test, not a clock, decides when the retry runs.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineInProcess, home_at, mounted_tmpfs, wait_for
from test_full_disk import TMPFS_SIZE, attempt_rows, fill_beside_the_store  # same folder

from gpudesk.core.identity import Caller
from gpudesk.core.station import StationConfig
from gpudesk.paths import Home

ME = Caller.of_process()
# Each action on a job, as its request's arguments (`jobs` or `job` added).
ACTIONS: dict[str, dict[str, object]] = {
    "cancel": {"grace": 1.0},
    "requeue": {},
    "hold": {},
    "release": {},
    "suspend": {},
    "resume": {},
    "signal": {"signal": "USR1"},
    "priority": {"delta": -1},
    "edit": {"fields": {"name": "renamed"}},
}


@pytest.fixture
def station(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EngineInProcess]:
    """An engine built in this process, its home on a freshly mounted small tmpfs."""
    with (
        mounted_tmpfs(tmp_path / "disk", f"size={TMPFS_SIZE}") as disk,
        home_at(disk / "home", monkeypatch) as home,
    ):
        engine = EngineInProcess(home, StationConfig(backend="none", slots=2))
        try:
            yield engine
        finally:
            for filler in disk.glob("filler*"):
                filler.unlink()
            engine.close()


def answers(engine: EngineInProcess, job_id: int) -> dict[str, tuple[bool, str]]:
    """Each action's answer for `job_id`: (ok, its outcome's text; the error's for `edit`,
    which names one job)."""
    said = {}
    for op, args in ACTIONS.items():
        if op == "edit":
            reply = engine.call(ME, op, job=job_id, **args)
            said[op] = (reply["ok"], reply.get("error", {}).get("message", ""))
        else:
            (result,) = engine.ok(ME, op, jobs=[job_id], **args)["results"]
            said[op] = (result["ok"], result["outcome"])
    return said


def stored(home: Home, job_id: int) -> tuple[str, int, int]:
    """(state, cancel_requested, priority) as a reader of the database sees them."""
    db = sqlite3.connect(home.db)
    try:
        row = db.execute(
            "SELECT state, cancel_requested, priority FROM jobs WHERE id = ?", (job_id,)
        ).fetchone()
        return str(row[0]), int(row[1]), int(row[2])
    finally:
        db.close()


@pytest.mark.parametrize("code", [0, 3], ids=["exit-0", "exit-3"])
def test_a_job_ended_on_a_full_disk_is_not_acted_on_and_its_end_is_stored_once(
    station: EngineInProcess, tmp_path: Path, code: int
) -> None:
    engine, home = station, station.engine.home
    disk = home.root.parent
    gate = tmp_path / "gate"  # off the small disk
    job = {"name": "gated", "command": f"while [ ! -e {gate} ]; do sleep 0.02; done; exit {code}"}
    (job_id,) = engine.ok(ME, "submit", jobs=[{**job, "shell": True}])["ids"]

    def shown() -> dict:
        engine.step()
        return engine.ok(ME, "show", job=job_id)["job"]  # type: ignore[no-any-return]

    wait_for(lambda: shown()["state"] == "running", 20.0, what="the job to start")
    before = stored(home, job_id)
    fill_beside_the_store(disk, home, "filler")
    gate.touch()
    view = wait_for(lambda: (j := shown()).get("unsaved") and j, 20.0, what="its end, unsaved")
    state = "succeeded" if code == 0 else "failed"
    assert (view["state"], view["exit_code"]) == (state, code), view

    # While the disk is full, and once it has room again but before the retry has run: every
    # action refused, saying how the job ended and that its end is not saved yet.
    for window in ("full", "room"):
        if window == "room":
            for filler in disk.glob("filler*"):
                filler.unlink()
        said = answers(engine, job_id)
        ended = f"already {state} (exit {code}); its end is not yet saved: the disk holding "
        wrong = {
            op: answer
            for op, answer in said.items()
            if answer[0] or not answer[1].startswith(ended) or str(home.root) not in answer[1]
        }
        assert not wrong, (window, wrong)
        assert stored(home, job_id) == before, window  # nothing stored: no cancel, no priority
        assert attempt_rows(home, job_id) == [(1, "running", None)], window

    # The retry stores the end as it was, once: no cancel, no second attempt.
    deadline = time.monotonic() + 20.0
    while attempt_rows(home, job_id) == [(1, "running", None)]:
        assert time.monotonic() < deadline, "the end was never stored"
        engine.step()
        time.sleep(0.05)
    assert attempt_rows(home, job_id) == [(1, "exited", code)]
    assert stored(home, job_id) == (state, 0, before[2])
    detail = engine.ok(ME, "show", job=job_id)
    assert (detail["job"]["state"], detail["job"].get("unsaved")) == (state, None)
    kinds = [event["kind"] for event in detail["events"]]
    assert "cancel" not in kinds and "signal" not in kinds, kinds
    for _ in range(5):  # a second attempt, had one been started, would be on record by now
        engine.step()
        time.sleep(0.05)
    assert attempt_rows(home, job_id) == [(1, "exited", code)]
