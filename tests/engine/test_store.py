"""The SQLite store: schema versions, atomic writes, legal transitions."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from telemetry_views import usage_figures

from gpudesk.core.jobs import InvalidTransition, JobSpec, JobState
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.schema import SCHEMA_VERSION, IncompatibleStore, StoreError


def spec(name: str = "j", **extra: object) -> JobSpec:
    return JobSpec(name=name, command=("true",), **extra)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "db")
    yield s
    s.close()


def test_new_store_is_at_the_current_schema(store: Store) -> None:
    assert store.schema_version == SCHEMA_VERSION
    rows = store._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    tables = {r[0] for r in rows}
    assert {
        "jobs",
        "attempts",
        "events",
        "settings",
        "gpu_samples",
        "job_samples",
        "attempt_usage",
    } <= tables
    assert "metric_samples" not in tables  # replaced by the telemetry tables in version 2


def test_a_version_1_store_migrates_and_keeps_its_jobs(tmp_path: Path) -> None:
    from gpudesk.engine.store.schema import MIGRATIONS

    conn = sqlite3.connect(tmp_path / "db")
    conn.executescript(MIGRATIONS[0])
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    store = Store.open(tmp_path / "db")
    assert store.schema_version == SCHEMA_VERSION
    (job,) = store.submit([JobSpec(name="after", command=("true",))])
    attempt = store.start_attempt(job.id, {"slot": "cpu:0"}, tmp_path / "jobs")
    store.record_usage([(attempt.id, job.id, usage_figures(gpu_j=12.5))])
    assert store.usage([job.id])[job.id][0].gpu_j == 12.5
    store.close()


def test_a_version_22_store_gets_the_names_in_its_listing_index(tmp_path: Path) -> None:
    older = Store.open(tmp_path / "db")
    first = older.submit([spec("lr-1"), spec("lr-2"), spec("other")])
    older._conn.executescript(  # the store as schema 22 left it
        "DROP INDEX jobs_unarchived; CREATE INDEX jobs_unarchived ON jobs (id) WHERE archived = 0;"
        "PRAGMA user_version = 22;"
    )
    older.close()
    store = Store.open(tmp_path / "db")
    assert store.schema_version == SCHEMA_VERSION
    index = store._conn.execute("PRAGMA index_info(jobs_unarchived)")
    assert [row["name"] for row in index] == ["id", "name"]
    page = store.jobs_page(limit=10, name="lr-*", count=True)
    assert [job.id for job in page.jobs] == [job.id for job in first[:2]] and page.total == 2
    store.close()


def test_usage_another_engine_stored_is_read_with_what_it_has(store: Store, tmp_path: Path) -> None:
    """A row an older engine wrote (no GPU memory peak, no mean SM share): None for what it
    lacks; one a newer engine wrote: the fields this one knows; one that is no usage at all (a
    damaged store): left out, not an error for every job listed with it."""
    rows = [
        '{"gpu_j": 12.5, "cpu_s": 3.0, "estimate": true}',
        '{"gpu_j": 1.0, "watts_to_come": 7}',
        '{"gpu_j": "x"}',
        "[1]",
    ]
    jobs = store.submit([JobSpec(name=f"u{i}", command=("true",)) for i in range(len(rows))])
    for job, text in zip(jobs, rows, strict=True):
        attempt = store.start_attempt(job.id, {"slot": "cpu:0"}, tmp_path / "jobs")
        store.record_usage([(attempt.id, job.id, usage_figures())])
        with store._conn:
            sql = "UPDATE attempt_usage SET usage = ? WHERE attempt_id = ?"
            store._conn.execute(sql, (text, attempt.id))
    found = store.usage([job.id for job in jobs])
    assert set(found) == {jobs[0].id, jobs[1].id}
    (older,) = found[jobs[0].id]
    assert (older.attempt, older.gpu_j, older.cpu_s, older.estimate) == (1, 12.5, 3.0, True)
    assert older.gpu_memory_peak_mib is None and older.gpu_sm_mean_pct is None
    (newer,) = found[jobs[1].id]
    assert (newer.gpu_j, newer.estimate) == (1.0, False)


def test_usage_and_series_round_trip(store: Store, tmp_path: Path) -> None:
    (job,) = store.submit([JobSpec(name="u", command=("true",))])
    first = store.start_attempt(job.id, {"slot": "gpu:0"}, tmp_path / "jobs")
    store.record_usage([(first.id, job.id, usage_figures(gpu_j=10.0))])
    store.record_usage([(first.id, job.id, usage_figures(gpu_j=30.0))])  # replaced, not added
    (stored,) = store.usage([job.id])[job.id]
    assert (stored.attempt, stored.gpu_j) == (1, 30.0)

    assert store.usage([]) == {}
    store.add_samples(
        [(100.0, 0, "power_w", 250.0), (110.0, 0, "power_w", 260.0)],
        [(100.0, job.id, first.id, "cpu_pct", 95.0)],
    )
    assert store.gpu_series(0, "power_w", since=105.0) == [(110.0, 260.0)]
    assert store.job_series(job.id, "cpu_pct") == [(100.0, 95.0)]
    assert store.prune_samples(before=105.0) == 2
    assert store.gpu_series(0, "power_w") == [(110.0, 260.0)]


def test_a_long_job_series_is_thinned_to_at_most_so_many_points(
    store: Store, tmp_path: Path
) -> None:
    (job,) = store.submit([JobSpec(name="long", command=("true",))])
    attempt = store.start_attempt(job.id, {"slot": "gpu:0"}, tmp_path / "jobs")
    store.add_samples([], [(10.0 * i, job.id, attempt.id, "gpu_sm_pct", i) for i in range(1, 11)])
    assert len(store.job_series_thinned(job.id, "gpu_sm_pct", 10)) == 10  # as stored
    # runs of 4, 4 and 2 points, each its mean at its last point's time
    assert store.job_series_thinned(job.id, "gpu_sm_pct", 3) == [
        (40.0, 2.5),
        (80.0, 6.5),
        (100.0, 9.5),
    ]


def test_reopening_does_not_migrate_again(tmp_path: Path) -> None:
    Store.open(tmp_path / "db").close()
    again = Store.open(tmp_path / "db")
    assert again.schema_version == SCHEMA_VERSION
    again.close()


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "db")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(IncompatibleStore, match="newer than this gpudesk"):
        Store.open(tmp_path / "db")


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot open the gpudesk database"):
        Store.open(tmp_path / "db")


def test_submit_is_all_or_nothing(store: Store) -> None:
    class Boom(JobSpec):
        def to_dict(self):  # type: ignore[override]
            raise RuntimeError("disk full")

    good = spec("good")
    bad = Boom(name="bad", command=("true",))
    env = {"PATH": "/bin"}
    with pytest.raises(RuntimeError):
        store.submit([good, bad], base_env=env)
    assert store.jobs() == []
    assert store.events() == []
    # the rolled-back environment row must not be remembered either
    (job,) = store.submit([good], base_env=env)
    assert store.base_env(job.id) == env


def test_submit_records_an_event_and_shares_the_environment(store: Store) -> None:
    env = {"PATH": "/bin", "SECRET": "x"}
    a, b = store.submit([spec("a"), spec("b")], base_env=env)
    assert [j.state for j in store.jobs()] == [JobState.QUEUED, JobState.QUEUED]
    assert store.base_env(a.id) == env == store.base_env(b.id)
    assert store._conn.execute("SELECT COUNT(*) FROM environments").fetchone()[0] == 1
    assert [(e.job_id, e.state) for e in store.events()] == [(a.id, "queued"), (b.id, "queued")]


def test_attempt_lifecycle(store: Store, tmp_path: Path) -> None:
    (job,) = store.submit([spec(max_attempts=2)])
    attempt = store.start_attempt(job.id, {"slot": "cpu:0", "reason": "free"}, tmp_path)
    assert attempt.number == 1 and attempt.state == "launching"
    assert attempt.dir == str(tmp_path / str(job.id) / "1")
    assert store.job(job.id).state is JobState.RUNNING
    store.attempt_launched(attempt.id, pid=123, pid_started=1.0)
    assert [a.id for a in store.live_attempts()] == [attempt.id]
    store.finish_attempt(
        attempt, attempt_state="exited", job_state=JobState.QUEUED, message="retry", exit_code=1
    )
    assert store.live_attempts() == []
    second = store.start_attempt(job.id, {"slot": "cpu:1"}, tmp_path)
    assert second.number == 2
    store.finish_attempt(
        second,
        attempt_state="exited",
        job_state=JobState.SUCCEEDED,
        message="exit code 0",
        exit_code=0,
    )
    final = store.job(job.id)
    assert (final.state, final.attempts, final.exit_code) == (JobState.SUCCEEDED, 2, 0)
    assert final.ended_at is not None


def test_illegal_transitions_are_refused_and_change_nothing(store: Store, tmp_path: Path) -> None:
    (job,) = store.submit([spec()])
    store.finish_queued([(job.id, "cancelled")], JobState.CANCELLED)
    with pytest.raises(InvalidTransition):
        store.finish_queued([(job.id, "again")], JobState.FAILED)
    with pytest.raises(InvalidTransition):
        store.start_attempt(job.id, {"slot": "cpu:0"}, tmp_path)
    assert store.job(job.id).state is JobState.CANCELLED
    assert store.attempts(job.id) == []


def test_cancel_deadline_keeps_the_earliest(store: Store) -> None:
    (job,) = store.submit([spec()])
    store.request_cancel(job.id, grace=10, now=100.0)
    store.request_cancel(job.id, grace=50, now=101.0)
    assert store.job(job.id).kill_deadline == 110.0
    store.request_cancel(job.id, grace=1, now=102.0)
    assert store.job(job.id).kill_deadline == 103.0


def test_queue_order_is_priority_then_arrival(store: Store) -> None:
    store.submit([spec("a"), spec("b", priority=3), spec("c"), spec("d", priority=3)])
    assert [j.name for j in store.queued()] == ["b", "d", "a", "c"]


def test_listing_filters(store: Store) -> None:
    jobs = store.submit(
        [JobSpec(name=f"j{i}", command=("true",), group="g" if i % 2 else None) for i in range(6)]
    )
    assert [j.name for j in store.jobs(group="g")] == ["j1", "j3", "j5"]
    assert [j.name for j in store.jobs(limit=2)] == ["j4", "j5"]
    assert [j.name for j in store.jobs(ids=[jobs[0].id, jobs[2].id])] == ["j0", "j2"]
    assert store.counts()["queued"] == 6


def test_settings_round_trip(store: Store) -> None:
    assert store.setting("station") is None
    store.set_setting("station", {"slots": 3})
    store.set_setting("station", {"slots": 4})
    assert store.setting("station") == {"slots": 4}


def test_demand_history_keeps_the_larger_peak_and_averages_sm(store: Store) -> None:
    store.record_demand("abc", 4000.0, 30.0, now=1.0)
    store.record_demand("abc", 3000.0, 50.0, now=2.0)
    assert store.demand_history() == {"abc": (4000.0, 40.0, 2)}


def test_a_raised_demand_is_stored_with_the_attempts_end(store: Store, tmp_path: Path) -> None:
    (job,) = store.submit([JobSpec(name="d", command=("true",), gpus=1, max_attempts=2)])
    attempt = store.start_attempt(job.id, {"slot": "gpu:0"}, tmp_path / "jobs")
    raised = {"memory_mib": 6144, "sm_pct": 30.0, "source": "after OOM", "exclusive": True}
    store.finish_attempt(
        attempt,
        attempt_state="exited",
        job_state=JobState.QUEUED,
        message="oom",
        exit_code=1,
        demand=raised,
    )
    assert store.job(job.id).demand == raised


def test_the_migrations_are_in_the_order_their_numbers_say() -> None:
    # each migration after the first is introduced by a comment "# N: ..." in MIGRATIONS; a
    # store at version N has run exactly the first N, so one put in out of order would be
    # skipped by a store made between (schema 18 once went in ahead of 17: a store of 17 never
    # got model_observations.owner_uid)
    import re

    from gpudesk.engine.store import schema

    text = Path(schema.__file__).read_text()
    body = text[text.index("MIGRATIONS: tuple[str, ...] = (") : text.index("SCHEMA_VERSION =")]
    numbers = [int(n) for n in re.findall(r"^    # (\d+):", body, re.MULTILINE)]
    assert numbers == list(range(2, schema.SCHEMA_VERSION + 1))
