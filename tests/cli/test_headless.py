"""`gpudesk run`'s report and live table, without an engine."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SWEEP_NAMES as SWEEP
from rich.console import Console
from test_api_prepass import job_view  # same folder: on sys.path under pytest

from gpudesk import render
from gpudesk.api.models import JobView
from gpudesk.api.own_station import own_station_home
from gpudesk.cli.run_progress import Progress
from gpudesk.cli.run_report import RunReport, reached_by
from gpudesk.paths import Home
from gpudesk.profile import ReportConfig


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
    table = Progress(io.StringIO(), live=False)._table(jobs, rows=6, width=100)
    out = io.StringIO()
    Console(file=out, width=100).print(table)
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert lines[0] == "30/32 done"
    assert lines[2].split()[:3] == ["32", "j32", "running"]
    assert lines[3].split()[:3] == ["31", "j31", "queued"]
    assert len(lines) == 2 + 6 + 1
    assert lines[-1] == "… and 26 more"


def test_progress_marks_a_job_whose_state_the_store_cannot_take_yet() -> None:
    """A full disk: a job shown as it is, not yet saved (a Slurm id the store refused, an end
    waiting to be saved) is marked in the plain lines and in the live table, as `queue` does."""
    why = "not yet saved: the disk holding gpudesk's state folder (/h, 0 KiB free) is full"
    stream = io.StringIO()
    progress = Progress(stream, live=False)
    progress.update([job(1, "queued", attempts=0, unsaved=why)])
    progress.update([job(1, "queued", attempts=0)])  # saved: said again, unmarked
    first, second = stream.getvalue().splitlines()
    assert first.endswith(f"j1  queued [{why}]") and second.endswith("j1  queued"), stream
    table = progress._table([job(1, "succeeded", unsaved=why)], rows=6, width=120)
    out = io.StringIO()
    Console(file=out, width=120).print(table)
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert lines[2].split()[:3] == ["1", "j1", "succeeded*"]
    assert " ".join(" ".join(lines[3:]).split()) == f"* {why}"  # the caption, wrapped


def sweep_report(ranking: ReportConfig | None) -> RunReport:
    home = "/very/long/state/folder/of/a/group/that/shares/one/gpu/server/gpudesk/jobs"
    jobs = [
        job(
            i,
            "succeeded",
            name=f"digits-lr{lr}-h{h}-with-a-long-suffix",
            log=f"{home}/{i}/1/output.log",
        )
        for i, (lr, h) in enumerate([(0.003, 128), (0.03, 512), (0.1, 128)], start=1)
    ] + [job(4, "failed", exit_code=3, log=f"{home}/4/1/output.log")]
    metrics = {
        i: {
            "val_acc": acc,
            "best_val_acc": acc,
            "final_loss": 1 - acc,
            "epochs": 40.0,
            "samples_per_s": 12345.6,
            "params": 8970.0,
            "wall_s": 3.2,
        }
        for i, acc in [(1, 0.91), (2, 0.9722), (3, 0.5)]
    }
    metrics[4] = {"val_acc": 0.99}  # a failed job is never called best
    return RunReport("quickstart", "g", 100.0, 110.0, jobs=jobs, ranking=ranking, metrics=metrics)


@pytest.mark.parametrize("width", [40, 80])
def test_the_reports_job_table_fits_keeping_each_id_state_and_wall_time(width: int) -> None:
    text = sweep_report(ReportConfig("val_acc", "max")).text(width=width)
    lines = text.splitlines()
    # only the logs' folder, one path never broken, runs past
    assert all(len(line) <= width or len(line.split()) == 1 for line in lines), text
    header = lines[0].split()
    assert header[:3] == ["ID", "NAME", "STATE"] and "WALL" in header
    rows = [line.split() for line in lines[1:5]]
    assert [(r[0], r[header.index("STATE")]) for r in rows] == [
        ("1", "succeeded"), ("2", "succeeded"), ("3", "succeeded"), ("4", "failed")
    ]  # fmt: skip
    assert all(r[header.index("WALL")] == "2.5s" for r in rows)
    if width == 40:
        assert lines[5] == "(ENERGY, ATTEMPTS in --json)"


def test_report_ranks_the_sweep_and_fits_80_columns() -> None:
    report = sweep_report(ReportConfig("val_acc", "max"))
    text = report.text(width=80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, text
    start = lines.index("results, best val_acc first:")
    assert lines[start + 1].split()[:3] == ["ID", "NAME", "val_acc"]
    assert [line.split()[0] for line in lines[start + 2 : start + 6]] == ["2", "1", "3", "4"]
    assert (
        "best configuration: digits-lr0.03-h512-with-a-long-suffix (job 2): val_acc 0.9722 "
        "(max of 3)" in " ".join(line.strip() for line in lines)
    )
    said = " ".join(text.split())
    assert "logs: gpudesk logs ID, or ID/ATTEMPT/output.log under /very/long/" in said
    assert "gpudesk logs ID," in text  # the command on one line, whatever wraps after it
    assert "2/1/output.log" not in text  # no column repeating it per job
    data = report.to_dict()
    assert data["best"] == {
        "job": 2,
        "name": "digits-lr0.03-h512-with-a-long-suffix",
        "metric": "val_acc",
        "goal": "max",
        "value": 0.9722,
        "ranked": 3,
        "ties": 0,
    }
    assert data["report"] == {"metric": "val_acc", "goal": "max"}
    assert data["jobs"][1]["metrics"]["val_acc"] == 0.9722
    low = sweep_report(ReportConfig("final_loss", "min")).to_dict()["best"]
    assert (low["job"], low["value"]) == (2, pytest.approx(0.0278))


def test_report_without_a_metric_calls_no_job_best() -> None:
    report = sweep_report(None)
    text = report.text(width=80)
    assert "best configuration" not in text
    assert 'add [report] with metric = "val_acc" and goal = "max"' in " ".join(text.split())
    assert report.to_dict()["best"] is None and report.to_dict()["report"] is None
    assert max(len(line) for line in text.splitlines()) <= 80


def test_report_energy_in_wh_since_the_run_began() -> None:
    usage = {"gpu_j": 7200.0, "cpu_j": 1800.0, "total_j": 9000.0}
    report = RunReport("p", "g", 100.0, 110.0, jobs=[job(1, "succeeded", usage=usage)])
    report.grid_g_per_kwh = 475.0
    report.backend = "nvml"
    text = report.text(width=80)
    assert "2.50 Wh" in text  # the job's row
    line = report.energy_line()
    assert line.startswith(f"energy since {render.clock(100.0)} (this run's jobs): GPU 2.00 Wh")
    assert "CPU 0.50 Wh" in line
    assert report.to_dict()["jobs"][0]["usage"]["total_j"] == 9000.0  # JSON keeps joules


def test_a_pre_pass_job_is_not_a_job_without_a_result() -> None:
    # a selection's pre-pass prints its cache entry, never a `result` line: only a training
    # job that printed none is counted as silent
    report = sweep_report(ReportConfig("val_acc", "max"))
    report.jobs.append(job(5, "succeeded"))
    assert "1 job(s) printed no result line" in report.text(width=80)
    report.prepass_jobs.add(5)
    assert "printed no result line" not in report.text(width=80)
    report.jobs.append(job(6, "succeeded"))
    assert "1 job(s) printed no result line" in report.text(width=80)


def test_one_jobs_numbers_ask_for_no_ranking() -> None:
    # "no job is called best" is advice for a sweep; a run of one training job has nothing to
    # rank, and its report does not end on advice
    report = RunReport("one", "g", 100.0, 110.0, jobs=[job(1, "succeeded")])
    report.metrics = {1: {"val_acc": 0.9}}
    assert "no job is called best" not in report.text(width=80)
    report.jobs.append(job(2, "succeeded"))
    report.metrics[2] = {"val_acc": 0.8}
    assert "no job is called best" in report.text(width=80)


def loader_with_selection(key: str, reused: bool) -> object:
    """A stand-in for a LoaderView with only what loader_lines reads."""
    from types import SimpleNamespace

    selection = SimpleNamespace(
        preset="coverage-25", kept=250, of=1000, key=key, reused=reused, prepass_wall_s=3.2
    )
    status = SimpleNamespace(consumers_total=1, selection=selection, produced=4, delivered_total=4)
    return SimpleNamespace(
        name="digits", status=status, saved_cpu_s=1.0, cpu_s=1.0, unshared_cpu_s=2.0
    )


def test_a_pre_pass_computed_by_this_run_is_not_called_a_cache_hit() -> None:
    # the run's own pre-pass job computes the selection and caches it; the loader then finds
    # it in the cache ("reused"), which is this run's work, not an earlier run's
    report = RunReport("sel", "g", 100.0, 110.0, jobs=[job(1, "succeeded")])
    report.loaders = [loader_with_selection("abc123", reused=True)]  # type: ignore[list-item]
    report.prepasses_run["abc123"] = 3.2
    [line, *_] = report.loader_lines()
    assert "pre-pass 3.2 s in this run, now cached" in line and "earlier run" not in line
    report.prepasses_run.clear()  # computed by an earlier run
    [line, *_] = report.loader_lines()
    assert "pre-pass from the cache of an earlier run" in line


def sweep_jobs(tmp_path: Path, state: str, **extra: object) -> list[JobView]:
    """A sweep's jobs whose names differ only in their middle and end, each with a log where
    the engine keeps it (jobs/ID/ATTEMPT/output.log)."""
    jobs = []
    for number, name in enumerate(SWEEP, start=1001):
        log = tmp_path / "jobs" / str(number) / "1" / "output.log"
        log.parent.mkdir(parents=True)
        log.write_text("epoch 3/40 loss 0.1234 val_acc 0.9123 samples/s 12345.6 lr 0.01\n")
        jobs.append(
            job(number, state, name=f"{name}-with-seed-42", log=str(log), ended_at=3825.0, **extra)
        )
    return jobs


def test_final_table_at_80_columns_keeps_each_sweep_job_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the logs' folder is named from here: jobs/
    jobs = sweep_jobs(tmp_path, "succeeded", usage={"total_j": 3600.0, "estimate": True})
    text = RunReport("sweep", "g", 100.0, 4000.0, jobs=jobs).text(width=80)
    assert text.splitlines()[:7] == [
        "  ID  NAME                            STATE      ATTEMPTS   WALL  EXIT    ENERGY",
        "1001  light-….01-h512-1-with-seed-42  succeeded         1  1h02m     0  ~1.00 Wh",
        "1002  light-….01-h512-2-with-seed-42  succeeded         1  1h02m     0  ~1.00 Wh",
        "1003  light-…001-h512-1-with-seed-42  succeeded         1  1h02m     0  ~1.00 Wh",
        "1004  heavy-…01-h1024-1-with-seed-42  succeeded         1  1h02m     0  ~1.00 Wh",
        "",
        "sweep: 4 succeeded in 1h05m",
    ]
    assert text.splitlines()[7] == "logs: gpudesk logs ID, or ID/ATTEMPT/output.log under jobs/"
    assert all(len(line) <= 80 for line in text.splitlines()), text


def test_live_table_at_80_columns_gives_the_width_to_ids_names_and_times(
    tmp_path: Path,
) -> None:
    jobs = [*sweep_jobs(tmp_path, "running"), job(999, "succeeded", name="prep")]

    def shown(width: int) -> list[str]:
        out = io.StringIO()
        table = Progress(io.StringIO(), live=False)._table(jobs, rows=10, width=width)
        Console(file=out, width=width).print(table)
        return [line.rstrip() for line in out.getvalue().splitlines()]

    assert shown(80) == [
        "1/5 done",
        "  ID  NAME                               STATE       TIME  LAST OUTPUT",
        "1001  light-lr0.01-h512-1-with-seed-42   running    1h02m  epoch 3/40 loss 0.12…",
        "1002  light-lr0.01-h512-2-with-seed-42   running    1h02m  epoch 3/40 loss 0.12…",
        "1003  light-lr0.001-h512-1-with-seed-42  running    1h02m  epoch 3/40 loss 0.12…",
        "1004  heavy-lr0.01-h1024-1-with-seed-42  running    1h02m  epoch 3/40 loss 0.12…",
        " 999  prep                               succeeded   2.5s",
    ]
    # narrower: the output gives way first, then the names' middles; ids and times stay
    assert shown(50) == [
        "1/5 done",
        "  ID  NAME                        STATE       TIME",
        "1001  li….01-h512-1-with-seed-42  running    1h02m",
        "1002  li….01-h512-2-with-seed-42  running    1h02m",
        "1003  li…001-h512-1-with-seed-42  running    1h02m",
        "1004  he…01-h1024-1-with-seed-42  running    1h02m",
        " 999  prep                        succeeded   2.5s",
    ]


def test_live_table_keeps_the_id_and_time_headers_whole_beside_long_names() -> None:
    """Single-digit ids and queued jobs' "-" times are narrower than their headers: the names
    get only what the headers leave, and TIME is not clipped to `TI…`."""
    name = "light-lr0.0{}-h512-wd0.01-seed42-warmup-cosine"
    jobs = [
        job(i, "queued", name=name.format(i), started_at=None, ended_at=None) for i in range(1, 5)
    ]
    out = io.StringIO()
    table = Progress(io.StringIO(), live=False)._table(jobs, rows=10, width=60)
    Console(file=out, width=60).print(table)
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert lines[1].split() == ["ID", "NAME", "STATE", "TIME"], lines
    assert all(len(line) <= 60 for line in lines)
    assert lines[2].split()[0] == "1" and lines[2].split()[-2:] == ["queued", "-"]


def test_a_profiles_own_simulated_station_is_named_in_the_logs_hint(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report's `logs:` line said a bare `gpudesk logs ID`: from this shell that reached
    the user's own engine, and showed another job's log under the same id."""
    monkeypatch.delenv("GPUDESK_BACKEND", raising=False)
    profile = tmp_path / "simh.toml"
    profile.write_text(
        'name = "simh"\n[station]\nbackend = "sim:h100"\n'
        '[[jobs]]\nname = "g"\ncommand = ["true"]\ngpus = 1\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "gpudesk", "run", str(profile)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "300"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (hint,) = [line for line in done.stdout.splitlines() if line.startswith("logs: ")]
    station = own_station_home("sim:h100").root
    assert hint.startswith(f"logs: GPUDESK_HOME={station} gpudesk logs ID"), hint
    assert reached_by(Home.from_env()) == ""  # the shell's own engine needs no prefix
