"""`jobs`' wait_reason on an engine built in this process over a filled store: each queued
job's short code, worked out for a page in one pass over the queue and no query per job."""

from __future__ import annotations

import os

from conftest import EngineInProcess
from store_fill import fill_jobs

from gpudesk.core.identity import Caller
from gpudesk.core.station import StationConfig
from gpudesk.paths import Home
from gpudesk.slurm import views as slurm_views
from gpudesk.slurm.records import SENDING, SlurmRow


def queued_codes(engine: EngineInProcess, me: Caller) -> dict[int, str]:
    jobs = engine.ok(me, "jobs", states=["queued"])["jobs"]
    return {job["id"]: job["wait_reason"] for job in jobs}


def test_two_users_queue_one_head_the_rest_behind_it_and_no_query_per_job(home: Home) -> None:
    home.ensure()
    engine = EngineInProcess(home, StationConfig(backend="none", slots=1))
    try:
        mine = fill_jobs(home.db, finished=300, queued=3, name="ada")[-3:]
        theirs = fill_jobs(home.db, queued=2, owner_uid=os.getuid() + 1, name="bo")
        held = fill_jobs(home.db, queued=1, held=True, name="ada-held")
        engine.engine.recover()  # the queue, as the engine reads it at start
        me = Caller.of_process()
        # the first job placement would take waits for room; everyone else behind it
        codes = queued_codes(engine, me)
        assert codes == {
            mine[0]: "Resources",
            **dict.fromkeys([*mine[1:], *theirs], "Priority"),
            held[0]: "JobHeldUser",
        }
        statements: list[str] = []
        engine.store._conn.set_trace_callback(statements.append)
        queued_codes(engine, me)
        few = len(statements)
        fill_jobs(home.db, queued=90, name="more")
        engine.engine.recover()
        statements.clear()
        assert len(queued_codes(engine, me)) == 96
        assert len(statements) == few  # 96 jobs listed with the same queries as 6
    finally:
        engine.close()


def test_a_slurm_jobs_code_is_slurms_own_reason() -> None:
    def row(**given: object) -> SlurmRow:
        fields: dict = {
            "job_id": 7,
            "cluster": "lab",
            "conf": "/etc/slurm/slurm.conf",
            "submission": "123",
            "task": None,
            "own_id": None,
            "output": "/home/ada/out",
            "script": "/home/ada/job.sh",
            "gres": "gpu:1",
            **given,
        }
        return SlurmRow(**fields)

    assert slurm_views.wait_code(row(state="PENDING", reason="Priority")) == "Priority"
    assert slurm_views.wait_code(row(state="PENDING", reason="None")) == "Pending"
    assert slurm_views.wait_code(row(submission=SENDING)) == "Submitting"


def test_a_part_held_by_its_client_is_told_from_a_users_hold_also_once_read_back(
    home: Home,
) -> None:
    """A job held by the client sending its submission in parts waits as JobHeldClient, not
    JobHeldUser (before: the user's code, as if they had held it; only `show` told them apart,
    by the hold event's words). The kind is stored: an engine reading the queue back at start
    finds the client's parts by it (that client lost the last engine, so they are cancelled:
    tests/api/test_submit_parts.py) and leaves the user's hold as it is; the user's own hold
    of a client's part makes it theirs."""
    engine = EngineInProcess(home, StationConfig(backend="none", slots=1))
    try:
        me = Caller.of_process()
        jobs = [{"name": f"p{k}", "command": ["true"]} for k in range(2)]
        parts = engine.ok(me, "submit", jobs=jobs, hold=True, in_parts={"jobs": 4, "parts": 2})
        (users,) = engine.ok(me, "submit", jobs=jobs[:1], hold=True)["ids"]
        expected = {**dict.fromkeys(parts["ids"], "JobHeldClient"), users: "JobHeldUser"}
        assert queued_codes(engine, me) == expected
        engine.engine.recover()  # as at start: the queue read back from the store
        assert queued_codes(engine, me) == {users: "JobHeldUser"}
        parts = engine.ok(me, "submit", jobs=jobs, hold=True, in_parts={"jobs": 4, "parts": 2})
        first = parts["ids"][0]
        engine.ok(me, "release", jobs=[first])
        engine.ok(me, "hold", jobs=[first])
        assert queued_codes(engine, me)[first] == "JobHeldUser"
    finally:
        engine.close()
