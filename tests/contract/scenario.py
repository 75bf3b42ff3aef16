"""A real engine put through everything it can say, every reply and event recorded as sent.

`run_station_scenario` drives an engine on a SIMULATED station: jobs placed under MPS and on
MIG slices, a shared loader with a consumer, a failed, a cancelled, a held and a requeued job,
a MIG layout applied, and every request of the protocol at least once. Each exchange goes
through the typed `Client`, so it is decoded strictly, and is kept as the engine's raw bytes for
the contract test and for recording the desk's replay (tests/desk/record_replay.py).
"""

from __future__ import annotations

import os
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudesk.api import Client, JobSpec, JobView, TrackingSpec
from gpudesk.api.connection import Connection, engine_pid, start_engine
from gpudesk.api.errors import EngineError
from gpudesk.core.datasets import DatasetSpec
from gpudesk.core.station import StationConfig
from gpudesk.paths import Home
from gpudesk.policy.interference import Observation, Workload
from gpudesk.tracking.available import missing_for

SIM_STATION = "sim:dgx-station-a100"
# GPU 2 is in MIG mode with two slices (jobs run there); GPU 3 is in MIG mode and idle, so a
# layout can be applied to it.
SIM_MIG = {"2": "3g.20gb,3g.20gb", "3": "7g.40gb"}

CONSUMER = textwrap.dedent("""
    import sys, time
    from gpudesk.loader import SharedLoader
    loader = SharedLoader(sys.argv[1])
    for epoch in range(int(sys.argv[2])):
        for batch in loader:
            time.sleep(0.15)
    print("read", flush=True)
""")

DATASET = DatasetSpec(
    name="syn",
    factory="gpudesk.workloads.synthetic:make_dataset",
    args={"size": 96, "shape": [4]},
    batch_size=8,
    workers=0,
    seed=3,
    slots=8,
)


@dataclass
class Exchange:
    op: str
    args: dict[str, Any]
    reply: bytes


@dataclass
class Recording:
    """Every request's raw reply and every event's raw frames, in order."""

    exchanges: list[Exchange] = field(default_factory=list)
    events: list[tuple[bytes, bytes]] = field(default_factory=list)

    def ops(self) -> set[str]:
        return {e.op for e in self.exchanges}


class RecordingTransport(Connection):
    """The ordinary transport, keeping a copy of each reply as the engine sent it."""

    def __init__(self, home: Home, recording: Recording, timeout: float = 15.0) -> None:
        super().__init__(home, timeout=timeout)
        self.recording = recording

    def exchange(self, op: str, args: dict[str, Any]) -> bytes:
        raw = super().exchange(op, args)
        self.recording.exchanges.append(Exchange(op, dict(args), raw))
        return raw


def sleeper(seconds: float) -> tuple[str, ...]:
    return (sys.executable, "-c", f"import time; time.sleep({seconds})")


def wait_until(
    predicate: Callable[[], object], timeout: float = 30.0, what: str = "condition"
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.05)


class StationDriver:
    """A typed client on a recording transport, plus the waits the scenario needs."""

    def __init__(self, home: Home, recording: Recording, workdir: Path) -> None:
        self.home = home
        self.recording = recording
        self.workdir = workdir
        self.client = Client(RecordingTransport(home, recording))

    def job(self, name: str, command: tuple[str, ...], **fields: Any) -> JobSpec:
        return JobSpec(name=name, command=command, workdir=str(self.workdir), **fields)

    def submit(self, *specs: JobSpec) -> list[int]:
        return self.client.submit(list(specs), env=dict(os.environ))

    def state(self, job_id: int) -> JobView:
        return self.client.jobs(ids=[job_id])[0]

    def wait_state(self, job_id: int, *states: str, timeout: float = 30.0) -> JobView:
        return wait_until(
            lambda: (job := self.state(job_id)).state in states and job,
            timeout,
            f"job {job_id} to be {'/'.join(states)}",
        )

    def wait_done(self, ids: list[int], timeout: float = 60.0) -> list[JobView]:
        return wait_until(
            lambda: (
                (jobs := self.client.jobs(ids=ids, usage=True))
                and all(j.terminal for j in jobs)
                and jobs
            ),
            timeout,
            f"jobs {ids} to finish",
        )


@contextmanager
def sim_engine(home: Home, **station: Any) -> Iterator[None]:
    """A real engine daemon for `home` on the simulated station, stopped afterwards."""
    config = StationConfig(
        backend=SIM_STATION,
        policy="auto",
        slots=2,
        sample_interval=0.2,
        mig=SIM_MIG,
        mig_repartition=True,
        metrics_listen="127.0.0.1:0",  # status carries the endpoint; any free port
        **station,
    )
    start_engine(home, config)
    try:
        yield
    finally:
        with Connection(home, timeout=5.0) as client, suppress(EngineError):
            if engine_pid(home) is not None:
                client.request("shutdown")  # unless the scenario shut it down already
        wait_until(lambda: engine_pid(home) is None, 15.0, "the engine to stop")


def track_mlflow(driver: StationDriver) -> None:
    """A job of a sweep tracked in an MLflow SQLite store (docs/tracking.md): its spec's
    `sweep` and `tracking`, `show`'s run, `status`'s store. Left out where the mlflow extra is
    not installed (the engine would refuse the job)."""
    uri = f"sqlite:///{driver.workdir}/mlflow.db"
    if missing_for(uri):
        return
    tracking = TrackingSpec(uri, "contract", {"lr": "0.1"}, {"lr": "0.1, 0.01"})
    (tracked,) = driver.submit(
        driver.job("tracked", sleeper(0.2), group="contract", sweep="lr", tracking=tracking)
    )
    driver.wait_done([tracked])
    wait_until(
        lambda: driver.client.show(tracked).tracking.run_id,  # type: ignore[union-attr]
        60.0,
        "the tracked job's MLflow run",
    )
    assert driver.client.status().tracking


def run_station_scenario(driver: StationDriver, subscribed: Callable[[], None]) -> None:
    """Everything the protocol can carry, on a simulated station. `subscribed` collects the
    events published so far (the caller's subscription)."""
    client = driver.client
    client.ping()
    client.status()
    client.register_datasets([DATASET])
    client.register_datasets([])  # listing only
    script = driver.workdir / "consumer.py"
    script.write_text(CONSUMER)

    # Whether a job would be accepted, queueing nothing.
    assert client.check_submit([driver.job("checked", sleeper(1), gpus=1)], env=dict(os.environ))

    # Two light jobs on one GPU under MPS, two on GPU 1's MIG slices, a loader's consumer.
    mig_a, mig_b, mps_a, mps_b = driver.submit(
        driver.job("mig-a", sleeper(4), gpus=1, memory_gb=8, sm_pct=30),
        driver.job("mig-b", sleeper(4), gpus=1, memory_gb=8, sm_pct=30),
        driver.job("mps-a", sleeper(4), gpus=1, memory_gb=4, sm_pct=20),
        driver.job("mps-b", sleeper(4), gpus=1, memory_gb=4, sm_pct=20),
    )
    (reader,) = driver.submit(
        driver.job("reader", (sys.executable, str(script), "syn", "2"), dataset="syn")
    )
    for job_id in (mig_a, mig_b, mps_a, mps_b, reader):
        driver.wait_state(job_id, "running", "succeeded")
    client.telemetry(history=5)
    wait_until(
        lambda: any(
            loader.status is not None and loader.status.consumers
            for loader in client.status(fresh_loaders=True).loaders
        ),
        what="the shared loader to report its consumer",
    )
    client.mig_plan()
    client.mig_plan(gpu=3)

    # A failure, a cancel, a hold with its release and priorities, a requeue.
    (failing,) = driver.submit(driver.job("failing", (sys.executable, "-c", "raise SystemExit(3)")))
    (victim,) = driver.submit(driver.job("victim", sleeper(60)))
    driver.wait_state(victim, "running")
    client.show(victim)  # a running job's remaining time
    client.hold([victim])  # refused: only a queued job can be held
    with suppress(EngineError):
        client.edit_job(victim, {"name": "late"})  # refused: it started
    # suspended (its view and event say so), resumed; the station drained a while
    client.suspend([victim])
    client.jobs(states=["suspended"])
    client.resume([victim])
    client.drain("contract")
    client.status()  # its `drain`
    client.undrain()
    client.cancel([victim], grace=1.0)
    (held,) = driver.submit(driver.job("held", sleeper(0.2)))
    client.hold([held])
    client.signal([held], "USR1")  # refused: only a running job is signalled
    # queued held at submit, so it cannot start before the edit; then released to run
    [edited] = client.submit_jobs([driver.job("edited", sleeper(0.2))], hold=True).ids
    client.edit_job(edited, {"time_limit_s": 60}, set_env={"EDITED": "1"})
    client.release([edited])
    client.set_priority([held], priority=5)
    client.set_priority([held], delta=-1)
    client.release([held])
    driver.wait_done([failing, victim, held, edited])
    client.requeue([failing])
    client.show(failing, env=True)
    client.show("victim")
    client.log(failing, 1, offset=0, max_bytes=4096)  # a log read through the engine
    track_mlflow(driver)
    driver.wait_done([mig_a, mig_b, mps_a, mps_b, reader, failing], timeout=90.0)
    client.show(mps_a, series=True)  # its telemetry over its life (`gpudesk show --plot`)

    # The idle MIG GPU takes a new layout; the station is reconfigured, its grid named by a
    # code of the bundled table (the replies then carry grid_region and grid_source).
    client.mig_apply(3, ["3g.20gb", "3g.20gb"], confirm=True)
    # a profile's [station] weighed first, as `gpudesk run` does without --apply-station
    weighed = client.check_configure(StationConfig(policy="fifo"), ["policy"])
    assert not weighed.changed and [c.key for c in weighed.changes] == ["policy"]
    client.configure(
        StationConfig(
            backend=SIM_STATION,
            policy="auto",
            slots=2,
            sample_interval=0.25,
            mig=SIM_MIG,
            mig_repartition=True,
            **StationConfig.from_dict({"grid_intensity": "FR"}).fields_of("grid_intensity"),
        )
    )
    assert client.status().station.grid_region == "FR"
    client.telemetry(history=3)

    # The interference model: shown, fed a calibration probe's observation, reset.
    shown = client.model_show()
    gpu_model = next(m.gpu_model for m in shown.models if m.gpu_model)
    light = Workload(0.2, 0.1)
    client.model_observe(gpu_model, [Observation("mps", light, (light,), 0.9)])
    with suppress(EngineError):
        client.model_reset(confirm=False)  # refused: an error reply, not a model
    client.model_reset(gpu_model, confirm=True)
    client.jobs(usage=True)
    client.jobs(states=["failed", "succeeded"], limit=3)
    # by name, as `gpudesk queue --name`: GLOB's own words, then a set fnmatch decides
    assert [job.name for job in client.jobs(name="fail*")] == ["failing"]
    assert [job.name for job in client.jobs(name="[!f]ictim", limit=1)] == ["victim"]
    mine = client.jobs(user=os.getuid())  # a user's jobs: here every job is the engine user's
    assert mine and mine == client.jobs(user=mine[0].user)
    subscribed()
