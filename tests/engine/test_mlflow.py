"""MLflow tracking against a real MLflow SQLite store (docs/tracking.md): a sweep's parent and
child runs with params, metric histories, energy and result metrics; a job's own
`mlflow.start_run()` landing in the run gpudesk made for it; the engine scheduling on with the
store down, and the runs appearing once it is back; the tracking worker ending with its engine.

mlflow is imported here only to read the store back (MlflowClient), as a user would."""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import EngineHandle, module_engine, wait_for

from gpudesk.core.jobs import JobSpec
from gpudesk.paths import Home

# found, not imported: importing MLflow is ~3 s of CPU in every worker that collects this module
# (the tests' processes import it where they use it)
if importlib.util.find_spec("mlflow") is None:
    pytest.skip("MLflow is optional: gpudesk[mlflow]", allow_module_level=True)
if importlib.util.find_spec("sqlalchemy") is None:
    pytest.skip("MLflow's SQLite store needs SQLAlchemy", allow_module_level=True)
# MLflow's SQLite store on SQLAlchemy 2.1 warns of a loader option it uses: MLflow's to change.
# its module-scoped fixture is made once: the module stays on one worker (--dist loadgroup)
pytestmark = [
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.xdist_group("test_mlflow"),
]

GPUDESK = [sys.executable, "-m", "gpudesk"]

# A tiny job: a few samples long (the station samples every 0.2 s), then its result lines.
JOB = """
import sys, time
time.sleep(2)
print('result {"val_acc": 0.1, "loss": 0.9}')
print('result {"val_acc": %s, "loss": %s}' % (sys.argv[1], 1 - float(sys.argv[1])), flush=True)
"""


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLflow SQLite database with its tables made: making them takes MLflow ~4 s, once
    here instead of in every test (each copies this file)."""
    path = tmp_path_factory.mktemp("mlflow") / "empty.db"
    client(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineHandle]:
    """conftest's `engine` (CPU-only, 2 slots), one for the module's tests that take it: the
    tracking worker it starts for their runs imports MLflow (~2 s of CPU) once, not once per
    test. Each test tracks into a store of its own, and its jobs have ended or are cancelled
    when it ends."""
    with module_engine(tmp_path_factory, "mlflow-engine") as handle:
        yield handle


def store_from(empty: Path, folder: Path) -> str:
    """A fresh store in `folder` (made atomically, a rename): its URI."""
    staging = folder.parent / f".{folder.name}.new"
    staging.mkdir()
    shutil.copyfile(empty, staging / "mlflow.db")
    staging.rename(folder)
    return f"sqlite:///{folder}/mlflow.db"


def gpudesk(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUDESK, *args], capture_output=True, text=True, timeout=90, cwd=cwd)


def client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def runs_of(uri: str, experiment: str) -> list:
    mlflow_client = client(uri)
    found = mlflow_client.get_experiment_by_name(experiment)
    if found is None:
        return []
    return list(mlflow_client.search_runs([found.experiment_id]))


@pytest.mark.slow(21)
def test_a_sweep_is_a_parent_run_with_a_child_run_per_job(
    sim_engine: EngineHandle, tmp_path: Path, empty_store: Path
) -> None:
    uri = store_from(empty_store, tmp_path / "store")
    (tmp_path / "job.py").write_text(JOB)
    profile = tmp_path / "sweep.toml"
    profile.write_text(
        textwrap.dedent(f"""
        name = "mlsweep"
        [report]
        metric = "loss"
        goal = "min"
        [tracking]
        mlflow_uri = "{uri}"
        [[sweeps]]
        name = "acc"
        command = ["{sys.executable}", "job.py", "{{acc}}"]
        gpus = 1
        memory_gb = 4
        grid = {{ acc = [0.7, 0.8, 0.9] }}
        """)
    )
    started = time.monotonic()
    result = gpudesk("run", str(profile))
    assert result.returncode == 0, result.stdout + result.stderr
    ids = [j["id"] for j in sim_engine.client.request("jobs")["jobs"]]
    assert len(ids) == 3

    def all_final() -> list | None:
        runs = runs_of(uri, "mlsweep")
        done = [r for r in runs if r.info.status in ("FINISHED", "FAILED", "KILLED")]
        return runs if len(runs) == 4 and len(done) == 4 else None

    runs = wait_for(all_final, 30.0, interval=0.3, what="four finished MLflow runs")
    print(f"sweep tracked in {time.monotonic() - started:.1f} s")
    assert isinstance(runs, list)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 3
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.params == {"acc": "0.7, 0.8, 0.9"}
    assert (
        parent.info.run_name.startswith("acc (") and parent.data.tags["mlflow.source.type"] == "JOB"
    )
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    mlflow_client = client(uri)
    # the parent rolls its best child up by the profile's [report]: the least loss
    best = max(children, key=lambda c: float(c.data.params["gpudesk.grid.acc"]))
    assert parent.data.metrics["best/loss"] == pytest.approx(0.1)
    assert parent.data.tags["gpudesk.best_run_id"] == best.info.run_id
    assert parent.data.tags["gpudesk.best_run_name"] == best.info.run_name
    assert parent.data.tags["gpudesk.best_goal"] == "min"
    history = mlflow_client.get_metric_history(parent.info.run_id, "best/loss")
    values = [m.value for m in sorted(history, key=lambda m: m.step)]
    assert values == sorted(values, reverse=True) and len({m.step for m in history}) == len(values)
    for child in children:
        params, metrics, tags = child.data.params, child.data.metrics, child.data.tags
        assert child.info.status == "FINISHED"
        assert params["gpudesk.grid.acc"] in ("0.7", "0.8", "0.9")
        assert metrics["result/val_acc"] == float(params["gpudesk.grid.acc"])
        assert metrics["result/loss"] == pytest.approx(1 - metrics["result/val_acc"])
        assert params["gpudesk.mode"] in ("exclusive", "mps", "naive", "mig")
        assert "(SIMULATED)" in params["gpudesk.gpu_model"] and tags["gpudesk.simulated"] == "true"
        assert params["gpudesk.job_id"] in {str(i) for i in ids}
        assert sys.executable in params["gpudesk.command"]
        assert all(name.startswith("gpudesk.") for name in params)
        assert metrics["energy_j"] > 0 and metrics["gpu_seconds"] > 0
        assert "co2e_g" in metrics and "cpu_seconds" in metrics
        # the hardware series where MLflow's System Metrics tab looks: under system/, by GPU
        shown = sim_engine.show(int(params["gpudesk.job_id"]))
        name = f"system/gpu_{shown.attempts[0].placement.gpus[0]}_power_usage_watts"
        history = mlflow_client.get_metric_history(child.info.run_id, name)
        assert len(history) > 1, (history, sorted(metrics))
        assert [m.step for m in history] == sorted(m.step for m in history)
        own = "system/job_cpu_utilization_percentage"
        assert len(mlflow_client.get_metric_history(child.info.run_id, own)) >= 1
        shown = sim_engine.show(int(params["gpudesk.job_id"]))
        assert shown.tracking.run_id == child.info.run_id


# The job's own params carry names gpudesk's run has too (without gpudesk's prefix): MLflow
# refuses to change a param, so before gpudesk named its own `gpudesk.*` this raised. It logs
# `done` itself and prints it in its result line too: before the result line's metrics went
# under `result/`, gpudesk's value landed in the job's own `done` history and won.
OWN_RUN = (
    "import mlflow; mlflow.start_run(); mlflow.log_metric('own', 1); "
    "mlflow.log_metric('done', 5); "
    "mlflow.log_params({'mode': 'train', 'user': 'me', 'dataset': 'mine'}); mlflow.end_run(); "
    "print('result {\"done\": 1}')"
)


@pytest.mark.slow(14)
def test_a_jobs_own_start_run_logs_into_the_run_gpudesk_made(
    engine: EngineHandle, tmp_path: Path, empty_store: Path
) -> None:
    uri = store_from(empty_store, tmp_path / "store")
    submitted = gpudesk(
        "submit", "--name", "own", "--mlflow-uri", uri, "--experiment", "mine", "--",
        sys.executable, "-c", OWN_RUN,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout.split()[2])
    done = engine.wait_state(job_id, {"succeeded", "failed"}, timeout=40.0)
    assert done.state == "succeeded", engine.show(job_id)

    def finished() -> list | None:
        runs = runs_of(uri, "mine")
        return (
            runs
            if runs
            and runs[0].info.status == "FINISHED"
            and "result/done" in (runs[0].data.metrics)
            else None
        )

    runs = wait_for(finished, 20.0, interval=0.3, what="the job's run to be finished")
    assert isinstance(runs, list)
    assert len(runs) == 1, [r.info for r in runs]  # no second run of the job's own
    (run,) = runs
    assert run.data.metrics["own"] == 1
    # both survive: the job's own `done` (its history its own) and the result line's
    assert run.data.metrics["done"] == 5 and run.data.metrics["result/done"] == 1
    history = client(uri).get_metric_history(run.info.run_id, "done")
    assert [m.value for m in history] == [5]
    params = run.data.params
    assert params["gpudesk.job_id"] == str(job_id)
    # both sets: the job's own, and gpudesk's under its prefix
    assert (params["mode"], params["user"], params["dataset"]) == ("train", "me", "mine")
    assert params["gpudesk.user"] == done.user and params["gpudesk.mode"] in ("exclusive", "cpu")
    assert run.data.tags["mlflow.user"] == done.user
    assert engine.show(job_id).tracking.run_id == run.info.run_id


@pytest.mark.slow(12)
def test_a_runs_duration_is_the_jobs_wall_time_not_its_time_in_the_queue(
    engine: EngineHandle, tmp_path: Path, empty_store: Path
) -> None:
    """The job waits 4 s behind another, then runs 2 s: its run lasts as long as the job ran
    (MLflow cannot move a run's start, so the run is made when the job is placed). A run made
    at submit lasted the 6 s."""
    uri = store_from(empty_store, tmp_path / "store")
    (first,) = engine.submit({"name": "ahead", "command": ["sleep", "4"]})
    (job_id,) = engine.submit(
        {
            "name": "timed",
            "command": [sys.executable, "-c", "import time; time.sleep(2)"],
            "after": [first],
            "tracking": {"mlflow_uri": uri, "experiment": "timed"},
        }
    )
    done = engine.wait_state(job_id, {"succeeded", "failed"}, timeout=40.0)
    assert done.state == "succeeded", engine.show(job_id)
    assert done.started_at is not None and done.ended_at is not None
    wall = done.ended_at - done.started_at

    def finished() -> list | None:
        runs = runs_of(uri, "timed")
        return runs if runs and runs[0].info.status == "FINISHED" else None

    runs = wait_for(finished, 20.0, interval=0.3, what="the job's run to be finished")
    assert isinstance(runs, list) and len(runs) == 1
    info = runs[0].info
    duration = (info.end_time - info.start_time) / 1000
    ahead = done.started_at - info.start_time / 1000
    print(f"job wall {wall:.2f} s, run {duration:.2f} s, made {ahead:.3f} s before the job")
    assert abs(duration - wall) <= 1.0, (duration, wall)
    assert info.start_time / 1000 <= done.started_at + 0.05  # made, then the job started
    # The worker that made the run never loaded pandas (tracking/worker.main): ~0.35 s of CPU
    # in each worker's start, for a dataset type of MLflow's it has no use for.
    assert engine.pid is not None
    (worker,) = [
        child
        for child in psutil.Process(engine.pid).children()
        if "gpudesk.tracking.worker" in child.cmdline()
    ]
    mapped = [m.path for m in worker.memory_maps()]
    assert any("/numpy/" in path for path in mapped)  # MLflow's compiled imports show here
    assert not [path for path in mapped if "/pandas/" in path]


@pytest.mark.slow(8)
def test_a_tracked_job_is_edited_until_its_run_is_made_and_its_params_are_the_edit(
    engine: EngineHandle, tmp_path: Path, empty_store: Path
) -> None:
    """Its run is made when it is placed, so a held tracked job can still be edited and its
    run records the edited spec; once the run exists (requeued after it ran), an edit is
    refused: MLflow never changes a param."""
    from gpudesk.api import EngineError

    uri = store_from(empty_store, tmp_path / "store")
    spec = JobSpec.from_dict(
        {
            "name": "before",
            "command": ["true"],
            "workdir": str(tmp_path),
            "tracking": {"mlflow_uri": uri, "experiment": "edited"},
        }
    )
    (job_id,) = engine.api.submit_jobs([spec], hold=True).ids
    engine.api.edit_job(job_id, {"name": "after", "command": ["sleep", "0.3"]})
    engine.api.release([job_id])
    assert engine.wait_state(job_id, {"succeeded", "failed"}, timeout=40.0).state == "succeeded"

    def finished() -> list | None:
        runs = runs_of(uri, "edited")
        return runs if runs and runs[0].info.status == "FINISHED" else None

    runs = wait_for(finished, 20.0, interval=0.3, what="the job's run to be finished")
    assert isinstance(runs, list) and len(runs) == 1
    assert runs[0].info.run_name == "after"
    assert runs[0].data.params["gpudesk.command"] == "sleep 0.3"
    # both slots taken, so the requeued job stays queued, its run made on its first attempt
    blockers = engine.submit(*({"name": f"slot{i}", "command": ["sleep", "60"]} for i in (1, 2)))
    for blocker in blockers:
        engine.wait_state(blocker, "running")
    engine.api.requeue([job_id])
    assert engine.job(job_id).state == "queued"
    with pytest.raises(EngineError, match="its MLflow run is made already"):
        engine.api.edit_job(job_id, {"name": "again"})
    engine.api.cancel(blockers)


def parent_run(uri: str, experiment: str):
    runs = runs_of(uri, experiment)
    return next((r for r in runs if "mlflow.parentRunId" not in r.data.tags), None)


@pytest.mark.slow(20)
def test_a_sweeps_best_child_is_kept_across_an_engine_restart(
    home: Home, tmp_path: Path, empty_store: Path
) -> None:
    """One child succeeds (acc 0.9), the engine restarts, the other ends (acc 0.5): the parent's
    best stays the first child's, its history never names the worse one (the restarted engine
    reads the children that ended before it from their logs first)."""
    uri = store_from(empty_store, tmp_path / "store")
    gate = tmp_path / "go"
    tracking = {
        "mlflow_uri": uri,
        "experiment": "restart",
        "sweep_params": {"acc": "0.9, 0.5"},
        "objective": "acc",
        "goal": "max",
    }
    waits = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.1)\n"
    engine = EngineHandle(home)
    engine.start()
    ids = engine.submit(
        *(
            {
                "name": f"rs-{acc}",
                "command": [sys.executable, "-c", f"{wait}print('result {{\"acc\": {acc}}}')"],
                "group": "g1",
                "sweep": "rs",
                "tracking": {**tracking, "params": {"acc": str(acc)}},
            }
            for acc, wait in ((0.9, ""), (0.5, waits))
        )
    )
    assert engine.wait_state(ids[0], {"succeeded", "failed"}, timeout=30.0).state == "succeeded"

    def best_of_first() -> object:
        parent = parent_run(uri, "restart")
        return parent is not None and parent.data.metrics.get("best/acc") == 0.9

    wait_for(best_of_first, 20.0, interval=0.3, what="the parent's first best")
    engine.stop()
    engine.start()
    gate.write_text("")
    assert engine.wait_state(ids[1], {"succeeded", "failed"}, timeout=30.0).state == "succeeded"

    def ended() -> object:
        parent = parent_run(uri, "restart")
        return parent if parent is not None and parent.info.status == "FINISHED" else None

    parent = wait_for(ended, 20.0, interval=0.3, what="the sweep's run to end")
    history = client(uri).get_metric_history(parent.info.run_id, "best/acc")  # type: ignore[attr-defined]
    assert [m.value for m in history] and all(m.value == 0.9 for m in history), history
    tags = parent.data.tags  # type: ignore[attr-defined]
    assert tags["gpudesk.best_run_name"] == "rs-0.9" and tags["gpudesk.best_goal"] == "max"
    assert tags["gpudesk.best_job_id"] == str(ids[0])
    engine.stop()


@pytest.mark.slow(21)
def test_with_the_store_down_jobs_run_the_engine_answers_and_runs_appear_later(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, empty_store: Path
) -> None:
    # A file where the store's folder should be: MLflow cannot make its database (the store is
    # down) until the file goes (the store is back).
    blocker = tmp_path / "store"
    blocker.write_text("not a folder")
    uri = f"sqlite:///{blocker}/mlflow.db"
    monkeypatch.setenv("GPUDESK_TRACKING_WAIT_S", "1.5")  # the engine's bound on waiting
    engine = EngineHandle(home)
    engine.start()
    job = "import time; time.sleep(0.5); print('result {\"val_acc\": 0.5}')"
    ids = engine.submit(
        *(
            {
                "name": f"down{i}",
                "command": [sys.executable, "-c", job],
                "tracking": {"mlflow_uri": uri, "experiment": "down"},
            }
            for i in range(3)
        )
    )

    def failing() -> dict | None:
        stores = engine.client.request("status").get("tracking") or []
        return stores[0] if stores and stores[0]["error"] else None

    store = wait_for(failing, 15.0, interval=0.1, what="tracking to report the store down")
    assert isinstance(store, dict)
    assert store["mlflow_uri"] == uri and store["queued"] >= 1
    assert "store" in store["error"] or "File" in store["error"], store
    # the engine answers at once while its worker retries
    for _ in range(5):
        asked = time.monotonic()
        engine.client.request("status")
        assert time.monotonic() - asked < 1.0
    text = gpudesk("engine", "status")
    assert f"mlflow:  {uri}" in text.stdout and "failing since" in text.stdout, text.stdout
    jobs = engine.wait_all_done(ids, timeout=30.0)
    assert [j.state for j in jobs] == ["succeeded"] * 3
    shown = engine.show(ids[0])
    assert any("started without MLFLOW_RUN_ID" in e.message for e in shown.events)
    assert shown.tracking.run_id is None

    # An engine restart and a worker crash while the store is down: nothing is lost, and no
    # run is made twice (exactly three below).
    engine.stop()
    engine.start()
    worker = wait_for(lambda: tracking_worker(engine), 10.0, what="the new tracking worker")
    assert isinstance(worker, psutil.Process)
    worker.kill()
    blocker.unlink()  # the store is back
    assert store_from(empty_store, blocker) == uri

    def all_finished() -> list | None:
        runs = runs_of(uri, "down")
        ended = [
            r for r in runs if r.info.status == "FINISHED" and "result/val_acc" in r.data.metrics
        ]
        return runs if len(ended) == 3 else None

    runs = wait_for(all_finished, 40.0, interval=0.5, what="the three runs once the store is back")
    assert isinstance(runs, list) and len(runs) == 3
    store = wait_for(
        lambda: (s := engine.client.request("status")["tracking"][0])["error"] is None and s,
        10.0,
        what="tracking to report the store back",
    )
    assert {engine.show(i).tracking.run_id for i in ids} == {r.info.run_id for r in runs}
    log = home.engine_log.read_text()
    assert "unreachable" in log and "tracking worker for uid" in log and "exited" in log


def tracking_worker(engine: EngineHandle) -> psutil.Process | None:
    """The engine's tracking worker process (its child running the worker module)."""
    assert engine.pid is not None
    for child in psutil.Process(engine.pid).children():
        with contextlib.suppress(psutil.Error):
            if "gpudesk.tracking.worker" in " ".join(child.cmdline()):
                return child
    return None


def ended_runs(uri: str, experiment: str) -> list | None:
    """The experiment's runs, once there are some and all have ended."""
    runs = runs_of(uri, experiment)
    return runs if runs and all(r.info.status == "FINISHED" for r in runs) else None


def gone(process: psutil.Process) -> bool:
    """Whether `process` has exited (a zombie its new parent has not reaped yet has)."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slow(24)
@pytest.mark.parametrize("end", ["stop", "SIGKILL"])
def test_the_tracking_worker_ends_with_its_engine_even_within_a_store_call(
    end: str, home: Home, tmp_path: Path, empty_store: Path
) -> None:
    """The worker is inside a call on a store another process holds locked (MLflow waits 5 s on
    a locked SQLite file, then fails): it ends with the engine all the same, by the time
    `engine stop` returns, or within 2 s of the engine's SIGKILL. It ran 5 s and more after the
    engine before (10 s on an HTTP store's timeout, and 5 s of grace besides). What it could not
    finish, the next engine sends again: each run is there once, ended."""
    ready = store_from(empty_store, tmp_path / "ready")
    locked = store_from(empty_store, tmp_path / "locked")
    engine = EngineHandle(home)
    engine.start()

    def tracked(name: str, uri: str) -> dict:
        return {
            "name": name,
            "command": ["true"],
            "tracking": {"mlflow_uri": uri, "experiment": name},
        }

    # a first run, made and ended: the worker has MLflow imported and does nothing now
    engine.submit(tracked("first", ready))
    wait_for(lambda: ended_runs(ready, "first"), 30.0, interval=0.2, what="the first run to end")
    worker = tracking_worker(engine)
    assert worker is not None
    database = tmp_path / "locked" / "mlflow.db"
    holder = sqlite3.connect(database, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        (second,) = engine.submit(tracked("second", locked))
        wait_for(
            lambda: any(f.path == str(database) for f in worker.open_files()),
            20.0,
            what="the worker to wait on the locked store",
        )
        ended = time.monotonic()
        if end == "stop":
            result = gpudesk("engine", "stop")
            assert result.returncode == 0, result.stderr
            assert gone(worker), "engine stop returned before the tracking worker exited"
        else:
            engine.kill9()
            wait_for(
                lambda: gone(worker),
                max(0.0, ended + 2.0 - time.monotonic()),
                what="the worker to end",
            )
        took = time.monotonic() - ended
        print(f"the worker ended {took:.2f} s after the engine's {end}")
        assert took < 4.0  # its call alone waits 5 s on the lock
    finally:
        holder.rollback()
        holder.close()
    # the next engine sends what the worker held: the second run made (once), both ended
    restarted = EngineHandle(home)
    restarted.start()
    assert restarted.wait_state(second, {"succeeded", "failed"}, timeout=40.0).state == "succeeded"
    for name, uri in (("first", ready), ("second", locked)):
        runs = wait_for(
            lambda u=uri, n=name: ended_runs(u, n), 30.0, interval=0.3, what=f"{name}'s run"
        )
        assert isinstance(runs, list) and len(runs) == 1, [r.info for r in runs]
    restarted.client.close()
