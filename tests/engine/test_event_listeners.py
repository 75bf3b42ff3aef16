"""A job change is heard by every listener in the engine (MLflow tracking, then the end
hooks): one that fails is logged, and neither stops the next nor fails what changed the job
(its end is stored already: settling it again would publish a second, wrong event)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudesk.core.jobs import JobSpec
from gpudesk.core.records import JobRecord
from gpudesk.engine.events import EventPublisher
from gpudesk.engine.store.database import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(tmp_path / "db")
    yield opened
    opened.close()


def test_a_failing_listener_stops_neither_the_next_nor_the_change(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    (job,) = store.submit([JobSpec(name="j", command=("true",))])
    events = EventPublisher(None, store)
    heard: list[int] = []

    def broken(record: JobRecord) -> None:
        raise ValueError("a stored row that is not usage")

    events.listeners += [broken, lambda record: heard.append(record.id)]
    with caplog.at_level(logging.ERROR, "gpudesk.engine"):
        events.job(job.id, "it ended")
    assert heard == [job.id]
    assert f"a job-change listener failed on job {job.id}" in caplog.text
    assert "a stored row that is not usage" in caplog.text
