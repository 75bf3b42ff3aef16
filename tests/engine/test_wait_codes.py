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
