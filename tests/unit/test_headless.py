"""`gpudesk run`'s report and live table, without an engine."""

from __future__ import annotations

import io

from rich.console import Console
from test_api_prepass import job_view  # same folder: on sys.path under pytest

from gpudesk.api.models import JobView
from gpudesk.cli.run_report import RunReport, _Progress


def job(job_id: int, state: str, **extra: object) -> JobView:
    fields: dict[str, object] = {
        "id": job_id,
        "name": f"j{job_id}",
        "state": state,
        "attempts": 1,
        "started_at": 100.0,
        "ended_at": 102.5,
        "exit_code": 0,
        "reason": None,
        "log": None,
        "slot": None,
        **extra,
    }
    return job_view(**fields)


def test_report_counts_and_success() -> None:
    report = RunReport(
        "p",
        "p@1",
        started_at=100.0,
        ended_at=110.0,
        jobs=[job(1, "succeeded"), job(2, "failed", exit_code=3)],
    )
    data = report.to_dict()
    assert data["counts"] == {"succeeded": 1, "failed": 1}
    assert data["succeeded"] is False
    assert data["jobs"][0]["wall_s"] == 2.5
    assert "p: 1 failed, 1 succeeded in 10.0s" in report.text()
    assert RunReport("p", "g", 0.0, jobs=[]).succeeded is False  # nothing ran: not a success


def test_live_table_shows_running_first_and_fits_the_screen() -> None:
    jobs = [job(i, "succeeded") for i in range(1, 31)] + [job(31, "queued"), job(32, "running")]
    table = _Progress(io.StringIO(), live=False)._table(jobs, rows=6)
    out = io.StringIO()
    Console(file=out, width=100).print(table)
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert lines[0] == "30/32 done"
    assert lines[2].split()[:3] == ["32", "j32", "running"]
    assert lines[3].split()[:3] == ["31", "j31", "queued"]
    assert len(lines) == 2 + 6 + 1
    assert lines[-1] == "… and 26 more"
