"""MLflow tracking's parts that need no store: the [tracking] table and a job's `tracking`,
the engine-worker messages, the outbox that never blocks, what a run gets, and the worker's
batching, retries and refusals (against a recording stand-in for MlflowClient)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from telemetry_views import gpu_view, job_telemetry, usage_figures

from gpudesk.core.jobs import JobSpec, SpecError
from gpudesk.core.tracking_spec import TrackingSpec, resolve_mlflow_uri
from gpudesk.profile import ProfileError, parse_profile
from gpudesk.tracking import content, messages
from gpudesk.tracking.messages import (
    BadMessage,
    BindRun,
    CreateRun,
    Health,
    LogToRun,
    MetricPoint,
    Rejected,
    RunMade,
    SetStatus,
)
from gpudesk.tracking.outbox import Outbox

URI = "sqlite:////tmp/mlflow.db"


def parse(text: str, path: str = "/work/p/sweep.toml"):
    return parse_profile(textwrap.dedent(text).lstrip().encode(), path)


# ------------------------------------------------------------------ [tracking], JobSpec
def test_a_profile_tracking_table_goes_into_every_job_and_a_sweep_into_its_jobs() -> None:
    profile = parse("""
        name = "grid"
        [tracking]
        mlflow_uri = "sqlite:///runs/mlflow.db"
        [[jobs]]
        name = "prep"
        command = ["true"]
        [[sweeps]]
        name = "lr"
        command = ["train", "{lr}"]
        grid = { lr = [0.1, 0.01] }
    """)
    uri = "sqlite:////work/p/runs/mlflow.db"  # anchored at the profile's folder
    assert profile.tracking == TrackingSpec(uri, "grid")  # the experiment: the profile's name
    prep, first, second = profile.jobs
    assert prep.sweep is None and prep.tracking == TrackingSpec(uri, "grid")
    assert first.sweep == second.sweep == "lr"
    assert first.tracking == TrackingSpec(uri, "grid", {"lr": "0.1"}, {"lr": "0.1, 0.01"})
    assert second.tracking is not None and second.tracking.params == {"lr": "0.01"}
    # what the wire and the store carry comes back the same
    assert JobSpec.from_dict(first.to_dict()) == first


def test_tracking_table_mistakes_name_the_key() -> None:
    with pytest.raises(ProfileError) as raised:
        parse("""
            [tracking]
            mlflow_uri = 5
            experimnt = "x"
            [[jobs]]
            name = "a"
            command = ["true"]
        """)
    text = str(raised.value)
    assert "tracking.mlflow_uri: expected an MLflow tracking URI string" in text
    assert "found 5 (integer)" in text
    assert "tracking.experimnt: unknown key; did you mean 'experiment'?" in text
    with pytest.raises(ProfileError, match=r"tracking.mlflow_uri: missing: name the MLflow"):
        parse('[tracking]\nexperiment = "x"\n[[jobs]]\nname = "a"\ncommand = ["true"]\n')
    with pytest.raises(ProfileError, match=r"tracking.mlflow_uri: 'mlflow.db' is not a URI"):
        parse('[tracking]\nmlflow_uri = "mlflow.db"\n[[jobs]]\nname = "a"\ncommand = ["true"]')
    with pytest.raises(ProfileError, match=r"tracking: expected a \[tracking\] table"):
        parse('tracking = "sqlite:///x.db"\n[[jobs]]\nname = "a"\ncommand = ["true"]\n')


@pytest.mark.parametrize(
    ("tracking", "message"),
    [
        ({"mlflow_uri": URI, "colour": "red"}, "tracking: colour: unknown key"),
        ({"experiment": "x"}, "tracking: mlflow_uri: missing"),
        ({"mlflow_uri": "sqlite:///relative.db"}, "the store's path must be absolute"),
        ({"mlflow_uri": "sqlite://"}, "the store's path must be absolute"),
        ({"mlflow_uri": "C:/runs"}, "is not a URI"),
        ({"mlflow_uri": URI, "experiment": ""}, "tracking: experiment: expected a non-empty"),
        ({"mlflow_uri": URI, "params": {"k": 1}}, "params.k: expected a string"),
        ("sqlite:///x", "tracking: expected a table"),
    ],
)
def test_a_jobs_tracking_is_checked(tracking: Any, message: str) -> None:
    with pytest.raises(SpecError, match=message) as raised:
        JobSpec.from_dict({"name": "a", "command": ["true"], "tracking": tracking})
    assert raised.value.key == "tracking"


def test_relative_stores_are_anchored_and_others_left_alone() -> None:
    assert resolve_mlflow_uri("sqlite:///m.db", "/home/a") == "sqlite:////home/a/m.db"
    assert resolve_mlflow_uri("sqlite:////abs/m.db", "/home/a") == "sqlite:////abs/m.db"
    assert resolve_mlflow_uri("http://127.0.0.1:5000", "/home/a") == "http://127.0.0.1:5000"
    spec = JobSpec.from_dict({"name": "a", "command": ["true"], "tracking": {"mlflow_uri": URI}})
    assert spec.tracking == TrackingSpec(URI, "gpudesk")


# ---------------------------------------------------------------------------- messages
def test_every_message_goes_through_a_line_and_back() -> None:
    ops = [
        CreateRun(URI, "k", "e", "run", "SCHEDULED", 5, {"t": "1"}, {"p": "2"}, "parent"),
        LogToRun(URI, "k", (MetricPoint("m", 1.5, 7, 0),), {"p": "x"}, {"t": "y"}),
        SetStatus(URI, "k", "FINISHED", 9, ack=True),
        BindRun(URI, "k", "abc"),
    ]
    for op in ops:
        line = messages.encode(op)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert messages.decode_op(line) == op
    for reply in [RunMade("k", "r"), messages.Acked("k"), Rejected("k", "no"), Health(URI, 3)]:
        assert messages.decode_reply(messages.encode(reply)) == reply


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b"[1]",
        b'{"op": "delete", "uri": "u", "key": "k"}',
        b'{"op": "status", "uri": "u", "key": "k", "status": "DONE"}',
        b'{"op": "log", "uri": "u", "key": "k", "metrics": [["m", "1", 0, 0]]}',
        b'{"op": "create", "uri": 3, "key": "k"}',
    ],
)
def test_a_bad_line_is_a_bad_message(line: bytes) -> None:
    with pytest.raises(BadMessage):
        messages.decode_op(line)


# ------------------------------------------------------------------------------ outbox
def small_pipe() -> tuple[int, int]:
    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETFL, fcntl.fcntl(write, fcntl.F_GETFL) | os.O_NONBLOCK)
    fcntl.fcntl(write, 1031, 4096)  # F_SETPIPE_SZ: one page
    return read, write


def test_the_outbox_writes_what_the_pipe_takes_and_never_blocks() -> None:
    read, write = small_pipe()
    try:
        outbox = Outbox()
        lines = [b"x" * 1000 + b"%d\n" % i for i in range(20)]
        for line in lines:
            outbox.put(line)
        written = outbox.write_to(write)  # the pipe holds a page: the rest waits, no blocking
        assert 0 < written < sum(map(len, lines)) and outbox.pending
        got = b""
        while outbox.pending or got.count(b"\n") < 20:
            got += os.read(read, 65536)
            outbox.write_to(write)
        assert got == b"".join(lines)  # whole lines, in order: a part line is finished first
    finally:
        os.close(read)
        os.close(write)


def test_a_full_outbox_drops_the_oldest_metric_lines_and_keeps_the_rest() -> None:
    outbox = Outbox(max_lines=3)
    outbox.put(b"create\n")
    for i in range(5):
        outbox.put(b"metrics %d\n" % i, droppable=True)
    outbox.put(b"end\n")
    assert [line for line, _ in outbox.lines] == [b"create\n", b"metrics 4\n", b"end\n"]
    assert outbox.dropped == 4
    outbox.partial = b"half a line"
    outbox.restart()  # a new worker never sees the rest of the old one's line
    assert outbox.partial == b""


# ----------------------------------------------------------------------------- content
def test_a_sample_becomes_points_of_its_gpus_and_its_processes() -> None:
    """Under `system/`, as MLflow's own system metrics are named (its UI's System Metrics tab
    draws them), each GPU by its index; the job's own share as `system/job_*`."""
    job_view = job_telemetry(
        3,
        gpus=[0, 1],
        cpu_pct=150.0,
        rss_mib=512.0,
        gpu_memory_mib=1000.0,
        gpu_sm_pct=None,
        energy=usage_figures(total_j=42.0),
    )
    gpus = {
        0: gpu_view(0, sm_activity_pct=40.0, kernel_active_pct=90.0, power_w=100.0,
            power_limit_w=400.0, memory_used_mib=2000.0, memory_total_mib=40000.0),
        1: gpu_view(1, sm_activity_pct=60.0, kernel_active_pct=None, power_w=50.0,
            power_limit_w=None, memory_used_mib=1000.0, memory_total_mib=40000.0),
    }  # fmt: skip
    points = {p.name: p for p in content.sample_points(job_view, gpus, 1234, 7)}
    assert {p.step for p in points.values()} == {7}
    assert {p.timestamp_ms for p in points.values()} == {1234}
    values = {name: p.value for name, p in points.items()}
    mb = 1.048576  # MLflow's megabytes are 10^6 bytes
    assert values == pytest.approx(
        {
            "system/job_cpu_utilization_percentage": 150.0,
            "system/job_memory_usage_megabytes": 512.0 * mb,
            "system/job_gpu_memory_usage_megabytes": 1000.0 * mb,
            "system/job_energy_joules": 42.0,
            "system/gpu_0_utilization_percentage": 90.0,  # NVML's utilization, as MLflow's
            "system/gpu_0_sm_activity_percentage": 40.0,
            "system/gpu_0_memory_usage_megabytes": 2000.0 * mb,
            "system/gpu_0_memory_usage_percentage": 5.0,
            "system/gpu_0_power_usage_watts": 100.0,
            "system/gpu_0_power_usage_percentage": 25.0,
            "system/gpu_1_sm_activity_percentage": 60.0,
            "system/gpu_1_memory_usage_megabytes": 1000.0 * mb,
            "system/gpu_1_memory_usage_percentage": 2.5,
            "system/gpu_1_power_usage_watts": 50.0,
        }
    )


def test_a_jobs_params_and_placement_are_gpudesks_own_and_a_sweeps_parent_is_named_plainly() -> (
    None
):
    tracking = TrackingSpec("sqlite:////tmp/m.db", "e", params={"lr": "0.1"})
    spec = JobSpec(name="digits-lr0.1", command=("train",), dataset="mnist", tracking=tracking)
    job = SimpleNamespace(id=4, user="ada", spec=spec, name=spec.name)
    params = content.run_params(job)  # type: ignore[arg-type]
    assert params["gpudesk.user"] == "ada" and params["gpudesk.dataset"] == "mnist"
    assert params["gpudesk.grid.lr"] == "0.1"
    # none a script's own mlflow.log_params could name: they all carry gpudesk's prefix
    assert all(k.startswith("gpudesk.") for k in params)
    where = SimpleNamespace(slot="gpu0", mode="mps", gpus=(0,), mig_slice=None)
    placed = content.placement_values(where, {0: "NVIDIA H100"}, simulated=True)  # type: ignore[arg-type]
    assert placed == {
        "gpudesk.slot": "gpu0",
        "gpudesk.mode": "mps",
        "gpudesk.gpu_model": "NVIDIA H100 (SIMULATED)",
    }
    assert content.run_tags(job)["mlflow.source.type"] == "JOB"  # type: ignore[arg-type]
    assert content.sweep_run_name("digits-lr{lr}-b{batch}", "g1") == "digits-lr*-b* (g1)"
    assert content.sweep_run_name("plain", "g1") == "plain (g1)"


def test_result_lines_are_steps_and_names_mlflow_refuses_are_left_out() -> None:
    text = (
        'epoch 1\nresult {"val_acc": 0.5, "bad name!": 1}\nresult {"val_acc": 0.8, '
        '"loss": 0.2, "device": "cpu"}\nresult not json\n'
    )
    points = content.result_points(text, 99)
    assert [(p.name, p.value, p.step) for p in points] == [
        ("result/val_acc", 0.5, 0),
        ("result/val_acc", 0.8, 1),
        ("result/loss", 0.2, 1),
    ]


def test_a_long_command_is_cut_to_mlflows_limit_saying_so() -> None:
    value = content.param_value("x" * 7000)
    assert len(value) == 6000 and value.endswith(content.CUT_NOTE)
    assert content.param_value("short") == "short"


# ------------------------------------------------------------------------------ worker
class StoreError(Exception):
    error_code = "TEMPORARILY_UNAVAILABLE"


class Refusal(Exception):
    error_code = "INVALID_PARAMETER_VALUE"


class FakeClient:
    """MlflowClient's calls the worker makes, recorded; `down` makes every call fail."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.down = False
        self.refuse_params = False
        self.made = 0

    def _call(self, name: str, value: Any = None) -> None:
        if self.down:
            raise StoreError("connection refused")
        self.calls.append((name, value))

    def get_experiment_by_name(self, name: str) -> Any:
        self._call("get_experiment", name)
        return None

    def create_experiment(self, name: str, artifact_location: str | None = None) -> str:
        self._call("create_experiment", (name, artifact_location))
        return "1"

    def search_runs(self, ids: list[str], filter_string: str, max_results: int) -> list:
        self._call("search_runs", filter_string)
        return []

    def create_run(self, experiment_id: str, start_time: Any, tags: Any, run_name: str) -> Any:
        self._call("create_run", dict(tags))
        self.made += 1
        info = type("Info", (), {"run_id": f"run{self.made}"})
        return type("Run", (), {"info": info})

    def update_run(self, run_id: str, status: str) -> None:
        self._call("update_run", (run_id, status))

    def set_terminated(self, run_id: str, status: str, end_time: int) -> None:
        self._call("set_terminated", (run_id, status))

    def log_batch(self, run_id: str, metrics=(), params=(), tags=()) -> None:
        if params and self.refuse_params:
            raise Refusal("Changing param values is not allowed")
        self._call("log_batch", (run_id, len(metrics), len(params), len(tags)))


@pytest.fixture
def worker() -> Any:
    pytest.importorskip("mlflow")
    from gpudesk.tracking.worker import Worker

    said: list[messages.Reply] = []
    made = Worker(said.append)
    made.clients[URI] = FakeClient()
    made.said = said  # type: ignore[attr-defined]
    return made


def create(key: str = "k", parent: str | None = None) -> CreateRun:
    return CreateRun(URI, key, "exp", key, "SCHEDULED", 1, {"t": "1"}, {"p": "1"}, parent)


def test_the_worker_makes_runs_and_sends_points_in_batches(worker: Any) -> None:
    from gpudesk.tracking.worker import KEY_TAG

    client = worker.clients[URI]
    worker.take(create("parent"))
    worker.take(create("k", parent="parent"))
    for step in range(1500):  # one line a sample: merged, then cut to MLflow's 1000 a call
        worker.take(LogToRun(URI, "k", (MetricPoint("m", 1.0, step, step),)))
    worker.take(SetStatus(URI, "k", "FINISHED", 5, ack=True))
    worker.work_due(closing=True)
    assert worker.said[:2] == [RunMade("parent", "run1"), RunMade("k", "run2")]
    assert worker.said[2] == messages.Acked("k")
    made = [value for name, value in client.calls if name == "create_run"]
    assert made[1][KEY_TAG] == "k" and made[1]["mlflow.parentRunId"] == "run1"
    batches = [v for name, v in client.calls if name == "log_batch" and v[1]]
    assert batches == [("run2", 1000, 0, 0), ("run2", 500, 0, 0)]
    assert ("set_terminated", ("run2", "FINISHED")) in client.calls
    assert not worker.pending


def test_a_store_that_fails_is_retried_in_order_and_said_so(worker: Any) -> None:
    client = worker.clients[URI]
    client.down = True
    worker.take(create())
    worker.take(LogToRun(URI, "k", (MetricPoint("m", 1.0, 0, 0),)))
    worker.work_due()
    (health,) = worker.said
    assert isinstance(health, Health) and health.queued == 2
    assert health.error == "StoreError: connection refused"
    store = worker.stores[URI]
    assert store.retry_at > 0 and worker.next_due() is not None
    worker.work_due()  # not due yet: backing off
    assert len(worker.said) == 1
    client.down = False
    store.retry_at = 0.0
    worker.work_due()
    assert worker.said[1] == RunMade("k", "run1")
    assert worker.said[-1] == Health(URI, 0, None, 0)  # answers again, nothing queued


def test_once_the_engine_is_gone_a_failing_stores_updates_are_dropped(worker: Any) -> None:
    worker.clients[URI].down = True
    worker.take(create())
    worker.work_due()
    # the next engine sends them again; this worker must not make the run later, racing its
    # successor's worker to make a second one
    worker.work_due(closing=True)
    assert not worker.pending


def test_what_the_store_refuses_is_said_once_and_not_retried(worker: Any) -> None:
    worker.clients[URI].refuse_params = True
    worker.take(create())
    worker.work_due(closing=True)
    assert RunMade("k", "run1") in worker.said
    refused = [r for r in worker.said if isinstance(r, Rejected)]
    assert len(refused) == 1 and "params: Refusal: Changing param values" in refused[0].message
    worker.take(LogToRun(URI, "nobody", (MetricPoint("m", 1.0, 0, 0),)))
    worker.take(LogToRun(URI, "nobody", (MetricPoint("m", 2.0, 0, 1),)))
    worker.work_due(closing=True)
    assert not worker.pending  # a run that does not exist: dropped, not retried


def test_too_many_waiting_points_drop_the_oldest(worker: Any, monkeypatch: Any) -> None:
    from gpudesk.tracking import worker as worker_module

    monkeypatch.setattr(worker_module, "MAX_QUEUED_POINTS", 10)
    for step in range(4):
        worker.take(LogToRun(URI, "k", tuple(MetricPoint("m", 1.0, 0, step) for _ in range(4))))
    store = worker.stores[URI]
    assert store.points == 8 and store.dropped == 8


# ------------------------------------------------------------------------ no mlflow here
def test_the_engine_and_the_cli_never_import_mlflow() -> None:
    code = (
        "import sys\n"
        "import gpudesk.engine.daemon, gpudesk.cli.main, gpudesk.cli.top\n"
        "assert 'mlflow' not in sys.modules, 'mlflow was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_missing_extra_is_one_paragraph_naming_it(monkeypatch: Any) -> None:
    from gpudesk.tracking import available

    monkeypatch.setattr(available, "_installed", lambda module: module == "mlflow")
    text = available.missing_for(URI)
    assert text is not None and "pip install 'gpudesk[mlflow]'" in text
    assert "sqlalchemy, alembic" in text and "\n" not in text
    assert available.missing_for("http://127.0.0.1:5000") is None


def test_what_a_new_worker_must_know_goes_ahead_of_what_waited_for_it() -> None:
    outbox = Outbox()
    outbox.put(b"metrics\n", droppable=True)
    outbox.partial = b"half"
    outbox.restart()
    outbox.put_first([b"bind a\n", b"bind b\n"])
    assert [line for line, _ in outbox.lines] == [b"bind a\n", b"bind b\n", b"metrics\n"]


def test_a_tracked_submit_without_the_extra_is_refused_whole(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from conftest import EngineInProcess

    from gpudesk.core.identity import Caller
    from gpudesk.core.station import StationConfig
    from gpudesk.paths import Home
    from gpudesk.tracking import available

    monkeypatch.setattr(available, "_installed", lambda module: False)
    station = EngineInProcess(Home(tmp_path / "home"), StationConfig(backend="none", slots=1))
    caller = Caller.of_process()
    try:
        plain = {"name": "plain", "command": ["true"]}
        tracked = {"name": "tracked", "command": ["true"], "tracking": {"mlflow_uri": URI}}
        reply = station.call(caller, "submit", jobs=[plain, tracked])
        assert not reply["ok"] and reply["error"]["code"] == "refused"
        assert "pip install 'gpudesk[mlflow]'" in reply["error"]["message"]
        assert station.ok(caller, "jobs")["jobs"] == []  # neither job: all or none
    finally:
        station.close()


def test_a_sweeps_best_child_is_rolled_up_by_its_objective_or_its_first_result_metric() -> None:
    from gpudesk.tracking.rollup import Rollups

    rollups = Rollups()
    first = rollups.child_ended("p", (None, None), (1, "a", "k1"), {"val_acc": 0.5, "loss": 2.0})
    assert first is not None and (first.metric, first.value, first.job, first.step) == (
        "val_acc", 0.5, 1, 0,
    )  # fmt: skip
    assert first.tags("run1")["gpudesk.best_goal"] == "max (no [report] metric)"
    assert rollups.child_ended("p", (None, None), (2, "b", "k2"), {"val_acc": 0.4}) is None
    third = rollups.child_ended("p", (None, None), (3, "c", "k3"), {"val_acc": 0.9})
    assert third is not None and (third.value, third.name, third.step) == (0.9, "c", 2)
    assert third.tags(None) == {
        "gpudesk.best_metric": "val_acc",
        "gpudesk.best_goal": "max (no [report] metric)",
        "gpudesk.best_job_id": "3",
        "gpudesk.best_run_name": "c",
    }
    assert rollups.best_key("p") == "k3" and rollups.known("p") == {1, 2, 3}
    # an objective: a loss, minimised; a child without the metric does not count
    told = rollups.child_ended("q", ("loss", "min"), (4, "d", "k4"), {"loss": 0.3})
    assert told is not None and told.tags("r4")["gpudesk.best_goal"] == "min"
    assert rollups.child_ended("q", ("loss", "min"), (5, "e", "k5"), {"acc": 1.0}) is None
    lower = rollups.child_ended("q", ("loss", "min"), (6, "f", "k6"), {"loss": 0.1})
    assert lower is not None and (lower.metric, lower.value, lower.job) == ("loss", 0.1, 6)
    assert lower.tags("r6")["gpudesk.best_run_id"] == "r6"
