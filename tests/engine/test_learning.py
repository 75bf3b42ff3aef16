"""Learning on the station: the learner's observations and the rates alone in the store, the
learner refitted from them by a new engine (and from a store written before the refit, which kept
only totals), and observations over the wire. Progress lines in a log are
tests/joblog/test_progress.py's."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from telemetry_views import gpu_view, process_view, snapshot

import gpudesk.engine.learning as learning_module
from gpudesk.core.wire.telemetry import ProcessView, Snapshot
from gpudesk.engine.learning import StationLearning
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.model_params import ParamTotal, StoredObservation
from gpudesk.engine.store.schema import MIGRATIONS
from gpudesk.policy.command_family import owner_key
from gpudesk.policy.demand import signature
from gpudesk.policy.interference import (
    DEFAULT_PARAMS,
    PARAM_NAMES,
    PRIOR_WEIGHT,
    REFIT_TOLERANCE,
    LearnedParam,
    Learner,
    Observation,
    Workload,
    workload,
)
from gpudesk.policy.learner import predicted_rate
from gpudesk.policy.observation_wire import observation_from_dict, observation_from_json
from gpudesk.policy.progress_intervals import alone_rate_after

A100 = "NVIDIA A100-SXM4-40GB"


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = Store.open(tmp_path / "db")
    yield s
    s.close()


def learning(store: Store) -> StationLearning:
    """The learner without a running engine: no attempts, a station of one A100."""
    telemetry = SimpleNamespace(
        monitor=SimpleNamespace(
            inventory=[SimpleNamespace(index=0, name=A100)], latest=None, simulated=True
        ),
        station=SimpleNamespace(config=SimpleNamespace(sample_interval=1.0)),
    )
    return StationLearning(store, [], telemetry, min_s=60.0)  # type: ignore[arg-type]


def pair(rate: float) -> Observation:
    """Two light jobs under MPS (below a full GPU): the per-co-tenant cost is 1 - rate."""
    light = Workload(0.2, 0.1)
    return Observation("mps", light, (light,), rate)


def version_5_store(path: Path, totals: Sequence[tuple[object, ...]]) -> None:
    """A store as gpudesk wrote it before the joint refit (schema 5): per (GPU model,
    parameter) the sum and count of the values observations implied, no observations."""
    conn = sqlite3.connect(path)
    for script in MIGRATIONS[:5]:
        conn.executescript(script)
    conn.execute("PRAGMA user_version = 5")
    conn.executemany(
        "INSERT INTO model_params (gpu_model, param, total, count, calibrated, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        totals,
    )
    conn.commit()
    conn.close()


def test_observations_old_totals_and_rates_alone_round_trip(tmp_path: Path) -> None:
    version_5_store(
        tmp_path / "db",
        [
            (A100, "mps_tenant_cost", 0.5, 3, 1, 2000.0),
            ("NVIDIA H100", "contention", 0.1, 1, 0, None),
        ],
    )
    store = Store.open(tmp_path / "db")
    assert store.model_param_totals() == [
        ParamTotal(A100, "mps_tenant_cost", 0.5, 3, 1, 2000.0),
        ParamTotal("NVIDIA H100", "contention", 0.1, 1, 0, None),
    ]
    assert store.model_observations() == []
    rows = [StoredObservation(A100, "learned", float(i), f'{{"n": {i}}}') for i in range(5)]
    h100 = StoredObservation("NVIDIA H100", "calibrated", None, "{}")
    store.add_model_observations(rows[:3], keep=4)
    store.add_model_observations([*rows[3:], h100], keep=4)
    # oldest first; each GPU model keeps its newest 4
    assert store.model_observations() == [*rows[1:], h100]
    store.record_alone_rate("sig", 10.0, now=5.0)
    store.record_alone_rate("sig", 20.0, now=6.0)
    alone = store.alone_rates()["sig"]
    assert (alone.rate, alone.runs, alone.updated_at) == (15.0, 2, 6.0)
    assert store.reset_model_params(A100) == 5  # 4 observations and the old totals
    assert store.model_observations() == [h100]
    assert [t.gpu_model for t in store.model_param_totals()] == ["NVIDIA H100"]
    assert store.reset_model_params() == 2
    assert store.model_param_totals() == [] and store.model_observations() == []
    assert store.alone_rates()["sig"].runs == 2  # what commands measured is kept
    store.close()


def test_what_was_learned_survives_a_new_engine(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db")
    first = learning(store)
    assert first.observe(A100, pair(0.5), "learned", at=100.0) == "mps_tenant_cost"
    assert first.observe(A100, pair(0.7), "calibrated", at=200.0) == "mps_tenant_cost"
    # alone on a GPU says nothing: not stored
    assert first.observe(A100, Observation("mps", Workload(0.2, 0.1), (), 0.9)) is None
    learned = first.model.params(A100).mps_tenant_cost
    expected = (DEFAULT_PARAMS.mps_tenant_cost * PRIOR_WEIGHT + 0.5 + 0.3) / (PRIOR_WEIGHT + 2)
    assert learned == pytest.approx(expected)
    assert first.model.params("").mps_tenant_cost == DEFAULT_PARAMS.mps_tenant_cost
    store.close()

    store = Store.open(tmp_path / "db")
    second = learning(store)
    assert second.model.params(A100).mps_tenant_cost == pytest.approx(expected)
    by_name = {p.name: p for p in second.describe(A100)}
    tenant = by_name["mps_tenant_cost"]
    assert (tenant.observations, tenant.calibrated, tenant.updated_at) == (2, 1, 200.0)
    assert tenant.kind == "calibrated"  # probes took part
    assert tenant.prior == DEFAULT_PARAMS.mps_tenant_cost
    assert by_name["contention"].kind == "derived"
    assert by_name["naive_switch_cost"].kind == "assumption"
    assert second.gpu_models() == [A100]

    assert second.reset() == 1
    assert second.model.params(A100) == DEFAULT_PARAMS
    store.close()
    store = Store.open(tmp_path / "db")
    assert learning(store).model.params(A100) == DEFAULT_PARAMS
    assert store.model_observations() == []
    store.close()


def crowded(sm: float, rate: float) -> Observation:
    """Three jobs past a full GPU under MPS: says what contention is, given the co-tenant cost."""
    job = Workload(sm, sm / 2)
    return Observation("mps", job, (job, job), rate)


def test_a_new_engine_refits_the_stored_observations_to_the_same_parameters(
    tmp_path: Path,
) -> None:
    store = Store.open(tmp_path / "db")
    first = learning(store)
    light = Workload(0.2, 0.1)
    # contention first, read while the co-tenant cost is still the prior, then the cost
    for i, obs in enumerate([crowded(0.4, 0.55), crowded(0.45, 0.5), pair(0.8), pair(0.85)]):
        first.observe(A100, obs, "learned", at=float(i))
    # a calibration's batch: one refit, one transaction; the alone probe says nothing
    names = first.observe_many(
        A100,
        [
            Observation("naive", light, (light,), 0.6),
            Observation("mps", light, (), 1.0),
            Observation("mig", Workload(0.6, 0.3), (), 0.6, 3, 4),
        ],
        "calibrated",
        at=10.0,
    )
    assert names == ["naive_switch_cost", None, "kernel_active_extra"]
    assert len(store.model_observations()) == 6
    before = first.model.params(A100)
    shown = first.describe(A100)
    assert {p.name: p.kind for p in shown if p.observations} == {
        "mps_tenant_cost": "learned",
        "contention": "learned",
        "naive_switch_cost": "calibrated",
        "kernel_active_extra": "calibrated",
    }
    store.close()

    store = Store.open(tmp_path / "db")
    second = learning(store)
    after = second.model.params(A100)
    for name in PARAM_NAMES:
        assert getattr(after, name) == pytest.approx(getattr(before, name), abs=REFIT_TOLERANCE)

    def provenance(params: Sequence[LearnedParam]) -> list[tuple[object, ...]]:
        return [(p.name, p.observations, p.calibrated, p.kind, p.updated_at) for p in params]

    assert provenance(second.describe(A100)) == provenance(shown)
    store.close()


def test_a_store_from_before_the_refit_still_loads(tmp_path: Path) -> None:
    # what the learner before the refit stored: two values of mps_tenant_cost summing to 0.5
    # (one from a calibration probe); the observations themselves are gone
    version_5_store(tmp_path / "db", [(A100, "mps_tenant_cost", 0.5, 2, 1, 1000.0)])
    prior = DEFAULT_PARAMS.mps_tenant_cost
    store = Store.open(tmp_path / "db")
    station = learning(store)
    assert station.model.params(A100).mps_tenant_cost == pytest.approx(
        (prior * PRIOR_WEIGHT + 0.5) / (PRIOR_WEIGHT + 2)
    )
    (tenant,) = [p for p in station.describe(A100) if p.name == "mps_tenant_cost"]
    assert (tenant.observations, tenant.calibrated, tenant.kind) == (2, 1, "calibrated")
    assert tenant.updated_at == 1000.0
    assert station.gpu_models() == [A100]
    # a new observation is refitted with the old totals, which count as they are
    station.observe(A100, pair(0.7), at=3000.0)
    expected = (prior * PRIOR_WEIGHT + 0.5 + 0.3) / (PRIOR_WEIGHT + 3)
    assert station.model.params(A100).mps_tenant_cost == pytest.approx(expected)
    store.close()

    store = Store.open(tmp_path / "db")
    station = learning(store)
    assert station.model.params(A100).mps_tenant_cost == pytest.approx(expected)
    (tenant,) = [p for p in station.describe(A100) if p.name == "mps_tenant_cost"]
    assert (tenant.observations, tenant.calibrated, tenant.updated_at) == (3, 1, 3000.0)
    assert station.reset() == 1
    assert station.model.params(A100) == DEFAULT_PARAMS
    assert store.model_param_totals() == [] and store.model_observations() == []
    store.close()


def test_learned_only_on_the_station_is_labelled_learned(store: Store) -> None:
    station = learning(store)
    station.observe(A100, pair(0.8))
    (tenant,) = [p for p in station.describe(A100) if p.name == "mps_tenant_cost"]
    assert (tenant.kind, tenant.calibrated) == ("learned", 0)


def test_an_observation_from_the_wire() -> None:
    obs = observation_from_dict(
        {
            "mechanism": "mig",
            "job": {"sm": 0.5, "membw": 0.2, "thread_cap": None},
            "others": [],
            "rate": 0.6,
            "compute_slices": 3,
            "memory_slices": 4,
        }
    )
    assert obs == Observation("mig", Workload(0.5, 0.2), (), 0.6, 3, 4)
    for bad, says in (
        ({"mechanism": "mps", "job": {"sm": 2, "membw": 0}, "rate": 1}, "job.sm"),
        ({"mechanism": "fast", "job": {"sm": 0.1, "membw": 0}, "rate": 1}, "mechanism"),
        ({"mechanism": "mps", "job": {"sm": 0.1, "membw": 0}, "rate": 0}, "rate"),
        ({"mechanism": "mps", "job": {"sm": 0.1, "membw": 0}, "rate": 1, "x": 1}, "x"),
    ):
        with pytest.raises(ValueError, match=says):
            observation_from_dict(bad)


def fake_attempt(
    store: Store, tmp_path: Path, attempt_id: int, job_id: int, sm_hint: float = 20.0
) -> Any:
    log = tmp_path / f"attempt-{attempt_id}.log"
    log.write_bytes(b"")
    record = SimpleNamespace(
        id=attempt_id,
        job_id=job_id,
        placement={"demand": {"sm_pct": sm_hint, "memory_mib": 2048}},
        log_path=str(log),
    )
    return SimpleNamespace(
        attempt=record, gpus=(0,), mode="mps", mig_slice=None, is_child=True, suspended_since=None
    )


class StepClock:
    """The learning station's clock (gpudesk.engine.learning's `time`), moved by the test: an
    interval it measures is the one the test says, not what a loaded machine made of a sleep
    (a CI run under load once read the second run's 0.1 s as longer than the first's)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize("members", [False, True], ids=["her-own-run", "another-members-run"])
def test_a_rate_alone_remembered_from_an_earlier_run_serves_a_later_one(
    store: Store, tmp_path: Path, members: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """... of the same owner only (schema 19): a member's run of the same command in a shared
    folder has no rate alone of hers to be read against, and teaches nothing."""
    from gpudesk.core.identity import Identity
    from gpudesk.core.jobs import JobSpec

    same, other = store.submit(
        [
            JobSpec(name="same", command=("train",), workdir="/w"),
            JobSpec(name="other", command=("other",), workdir="/w"),
        ],
        None,
    )
    later = same
    if members:  # the second run of the same command, in the same folder, is another member's
        ada = Identity.of(os.getuid() + 1, os.getgid(), ())
        (later,) = store.submit([JobSpec(name="same", command=("train",), workdir="/w")], owner=ada)
    # the co-tenant's command: its steady SM share alone, measured by an earlier run
    store.record_alone_rate(command_key(store, other.id), 3.0, sm_pct=30.0)
    clock = StepClock()
    monkeypatch.setattr(learning_module, "time", clock)
    station = learning(store)
    station.min_s = 0.05
    station.telemetry.station.config.sample_interval = 0.0  # type: ignore[attr-defined]
    live: list[Any] = []
    station.attempts = live  # type: ignore[assignment]

    def progress(attempt: Any, done: int) -> None:
        with open(attempt.attempt.log_path, "ab") as out:
            out.write(f"progress {done}\n".encode())

    # a first run alone: 10 steps in 0.1 s, its GPU read at 20 % SM activity meanwhile (and
    # always kernel-active, which cuts the kernel-active gap off: it teaches none)
    first = fake_attempt(store, tmp_path, 1, same.id)
    live.append(first)
    progress(first, 1)
    for _ in range(4):  # the first is read with its first line: not counted
        sample(station, 20.0, 99.0)
    clock.sleep(0.1)
    progress(first, 11)
    station.step()
    live.clear()
    station.step()  # it ended: its interval alone closes
    first_key = command_key(store, same.id)
    assert store.alone_rates()[first_key].runs == 1
    assert store.alone_rates()[first_key].sm_pct == pytest.approx(20.0)

    # a second run of the same command shares from its start: 5 steps in 0.1 s
    second = fake_attempt(store, tmp_path, 2, later.id)
    if members and os.geteuid() == 0:  # a root engine reads her log only if it is hers
        os.chown(second.attempt.log_path, ada.uid, -1)
    beside = fake_attempt(store, tmp_path, 3, other.id)
    live.extend([second, beside])
    progress(second, 1)
    station.step()
    clock.sleep(0.1)
    progress(second, 6)
    station.step()
    live.remove(beside)
    station.step()  # the co-tenant left: the shared interval closes
    if members:
        assert station.counts.without_alone_rate == 1
        assert station.counts.observations == 0 and store.model_observations() == []
        return
    assert station.counts.observations == 1
    (stored,) = store.model_observations()
    assert stored.gpu_model == A100 and stored.source == "learned"
    (tenant,) = [p for p in station.describe(A100) if p.name == "mps_tenant_cost"]
    assert tenant.observations == 1
    implied = tenant.value * (PRIOR_WEIGHT + 1) - DEFAULT_PARAMS.mps_tenant_cost * PRIOR_WEIGHT
    assert 0.3 < implied < 0.7, implied  # about 1 - 0.5
    assert any(e.kind == "model" for e in store.events(same.id))


def test_a_suspended_co_tenant_is_no_tenant_while_stopped(store: Store, tmp_path: Path) -> None:
    """A job beside a suspended one runs as alone (the stopped one uses nothing): no shared
    interval is learned from it, and the suspended job itself teaches nothing."""
    from gpudesk.core.jobs import JobSpec

    same, other = store.submit(
        [
            JobSpec(name="same", command=("train",), workdir="/w"),
            JobSpec(name="other", command=("other",), workdir="/w"),
        ],
        None,
    )
    station = learning(store)
    station.min_s = 0.05
    station.telemetry.station.config.sample_interval = 0.0  # type: ignore[attr-defined]
    runs, beside = (
        fake_attempt(store, tmp_path, 1, same.id),
        fake_attempt(store, tmp_path, 2, other.id),
    )
    beside.suspended_since = 1.0
    station.attempts = [runs, beside]  # type: ignore[assignment]
    with open(runs.attempt.log_path, "ab") as out:
        out.write(b"progress 1\n")
    station.step()
    time.sleep(0.1)
    with open(runs.attempt.log_path, "ab") as out:
        out.write(b"progress 11\n")
    station.step()
    assert station.trackers.keys() == {1}  # the suspended one is not followed
    beside.suspended_since = None  # resumed: the tenancy changes, the interval alone closes
    station.step()
    assert station.counts.observations == 0
    assert store.alone_rates()[next(iter(station.alone))].runs == 1


def command_key(store: Store, job_id: int) -> str:
    """The key the job's command's rate and steady SM share alone are remembered by."""
    job = store.job(job_id)
    return owner_key(job.owner.uid, signature(job.spec.command, job.spec.workdir))


def sample(station: StationLearning, sm: float, active: float) -> None:
    """A new telemetry sample of GPU 0 (SM activity and kernel-active time, %), then a step."""
    latest = station.telemetry.monitor.latest
    at = (latest.taken_at if latest else 0.0) + 1.0
    station.telemetry.monitor.latest = reading(at, sm, active, [])
    station.step()


def reading(at: float, sm: float, active: float, processes: list[ProcessView]) -> Snapshot:
    """The monitor's latest view of GPU 0 as the learner reads it."""
    gpu = gpu_view(0, sm_activity_pct=sm, kernel_active_pct=active, processes=processes)
    return snapshot(at, [gpu])


@pytest.mark.parametrize("foreign", [False, True])
def test_a_job_alone_teaches_the_kernel_active_gap_from_telemetry(
    store: Store, tmp_path: Path, foreign: bool
) -> None:
    from gpudesk.core.jobs import JobSpec

    (job,) = store.submit([JobSpec(name="alone", command=("train",), workdir="/w")], None)
    station = learning(store)
    station.min_s = 2.0
    station.telemetry.station.config.sample_interval = 0.0  # type: ignore[attr-defined]
    live: list[Any] = []
    station.attempts = live  # type: ignore[assignment]
    live.append(fake_attempt(store, tmp_path, 1, job.id))
    processes = [process_view(10, job.id)]
    processes.append(process_view(11, mps="server"))  # its MPS server
    if foreign:
        processes.append(process_view(12))  # someone else's
    monitor = station.telemetry.monitor
    with open(live[0].attempt.log_path, "ab") as out:
        out.write(b"progress 1\n")  # its steady phase: its samples count after this read
    monitor.latest = reading(0.0, 0.0, 0.0, processes)
    station.step()
    for at, active in ((1.0, 52.0), (2.0, 54.0), (2.0, 99.0), (3.0, 56.0)):
        monitor.latest = reading(at, 40.0, active, processes)
        station.step()
    live.clear()
    station.step()  # it ended: its time alone closes
    (gap,) = [p for p in station.describe(A100) if p.name == "kernel_active_extra"]
    if foreign:
        # a process outside gpudesk on its GPU: the readings are not the job's own
        assert gap.observations == 0 and store.model_observations() == []
        return
    assert (gap.kind, gap.observations) == ("learned", 1)
    # the sample read twice (at 2.0) counts once: kernel-active 54 % against SM activity 40 %
    implied = gap.value * (PRIOR_WEIGHT + 1) - DEFAULT_PARAMS.kernel_active_extra * PRIOR_WEIGHT
    assert implied == pytest.approx(0.14)
    (stored,) = store.model_observations()
    assert stored.source == "learned"
    assert any(e.kind == "model" and "kernel-active 54%" in e.message for e in store.events(job.id))


def test_each_member_is_one_voice_and_a_new_engine_hears_them_so(tmp_path: Path) -> None:
    # ada's jobs read a co-tenant cost of 0.5 twenty times, bob's and cy's 0.05 twice each:
    # the station learns the median of the three (0.05), and so does the next engine from the
    # store, which keeps whose job showed each observation (schema 18); a v17 row (no owner)
    # reads back as None, a calibration's voice
    store = Store.open(tmp_path / "db")
    first = learning(store)
    for i in range(20):
        first.observe(A100, pair(0.5), "learned", at=float(i), owner=1001)
    for who in (1002, 1003):
        for i in range(2):
            first.observe(A100, pair(0.95), "learned", at=float(30 + i), owner=who)
    learned = first.model.params(A100).mps_tenant_cost
    assert learned == pytest.approx((0.04 * PRIOR_WEIGHT + 24 * 0.05) / (PRIOR_WEIGHT + 24))
    assert sorted({o.owner for o in store.model_observations()}, key=str) == [1001, 1002, 1003]
    store.close()
    store = Store.open(tmp_path / "db")
    assert learning(store).model.params(A100).mps_tenant_cost == pytest.approx(learned)
    store.close()
    conn = sqlite3.connect(tmp_path / "db")
    conn.execute("UPDATE model_observations SET owner_uid = NULL")
    conn.commit()
    conn.close()
    store = Store.open(tmp_path / "db")
    one_voice = (0.04 * PRIOR_WEIGHT + 20 * 0.5 + 4 * 0.05) / (PRIOR_WEIGHT + 24)
    assert learning(store).model.params(A100).mps_tenant_cost == pytest.approx(one_voice)
    store.close()


def test_a_commands_steady_sm_share_is_read_after_its_first_progress_line(
    store: Store, tmp_path: Path
) -> None:
    """Its start-up (SM 0 % before its first progress line) is not its demand: the H200's
    heaviest probe read 54 % over its whole time alone, 79 % in its steady phase."""
    from gpudesk.core.jobs import JobSpec

    (job,) = store.submit([JobSpec(name="alone", command=("train",), workdir="/w")], None)
    station = learning(store)
    station.min_s = 0.05
    station.telemetry.station.config.sample_interval = 0.0  # type: ignore[attr-defined]
    live: list[Any] = [fake_attempt(store, tmp_path, 1, job.id)]
    station.attempts = live  # type: ignore[assignment]
    for _ in range(4):  # loading its data, building its model: no kernels yet
        sample(station, 0.0, 2.0)
    log = Path(live[0].attempt.log_path)
    with log.open("ab") as out:
        out.write(b"progress 1\n")
    sample(station, 0.0, 2.0)  # read with its first line: taken before it, not counted
    for done in (2, 3, 4):
        time.sleep(0.03)
        with log.open("ab") as out:
            out.write(f"progress {done}\n".encode())
        sample(station, 80.0, 85.0)
    live.clear()
    station.step()  # it ended: its time alone closes
    remembered = store.alone_rates()[command_key(store, job.id)]
    assert (remembered.sm_pct, remembered.sm_runs, remembered.runs) == (pytest.approx(80.0), 1, 1)
    kept = station.alone[command_key(store, job.id)]
    assert (kept.sm_pct, kept.sm_runs) == (pytest.approx(80.0), 1)
    # the kernel-active gap is read from the same samples: 85 % against 80 %
    (gap,) = [p for p in station.describe(A100) if p.name == "kernel_active_extra"]
    implied = gap.value * (PRIOR_WEIGHT + 1) - DEFAULT_PARAMS.kernel_active_extra * PRIOR_WEIGHT
    assert gap.observations == 1 and implied == pytest.approx(0.05)


# The H200's probes (2026-12-04): SM share hinted (their life-long average, start-up included)
# and measured alone in their steady phase, in per cent. The hints add up to 1.46 GPUs, the
# steady shares to 2.32.
PROBES = {
    "heavy": (49.0, 79.0),
    "medium": (22.0, 33.0),
    "membw": (26.0, 41.0),
    "heavy2": (49.0, 79.0),
}
RATE_ALONE = 10.0  # DONE per second


def shared_interval(
    store: Store, tmp_path: Path, rate: float, unknown: str | None = None
) -> StationLearning:
    """The heavy probe runs under MPS beside the other three at `rate` x its rate alone, until
    one of them ends. Every command's rate alone and steady SM share are remembered from earlier
    runs (but `unknown`'s steady SM share: its runs had no SM activity reading); each attempt is
    placed with its hint."""
    from gpudesk.core.jobs import JobSpec

    jobs = store.submit([JobSpec(name=n, command=(n,), workdir="/w") for n in PROBES], None)
    for job, (_, steady) in zip(jobs, PROBES.values(), strict=True):
        sm = None if job.name == unknown else steady
        store.record_alone_rate(command_key(store, job.id), RATE_ALONE, sm_pct=sm)
    station = learning(store)
    station.min_s = 0.2
    station.telemetry.station.config.sample_interval = 0.0  # type: ignore[attr-defined]
    live = [
        fake_attempt(store, tmp_path, i + 1, job.id, sm_hint=hint)
        for i, (job, (hint, _)) in enumerate(zip(jobs, PROBES.values(), strict=True))
    ]
    station.attempts = list(live)  # type: ignore[assignment]
    log = Path(live[0].attempt.log_path)
    with log.open("ab") as out:
        out.write(b"progress 1\n")
    started = time.monotonic()  # the step reads the clock first: the line's time
    station.step()
    time.sleep(0.4)
    # DONE grown so that its rate is `rate` x its rate alone at the next step's read
    done = 1.0 + rate * RATE_ALONE * (time.monotonic() - started)
    with log.open("ab") as out:
        out.write(f"progress {done:.6f}\n".encode())
    station.step()
    station.attempts = live[:-1]  # type: ignore[assignment]
    station.step()  # a co-tenant ended: the heavy probe's shared interval closes
    return station


def learned(station: StationLearning) -> dict[str, float]:
    return {p.name: p.value for p in station.describe(A100)}


def test_a_shared_interval_is_read_against_its_tenants_steady_sm_shares_not_their_hints(
    store: Store, tmp_path: Path
) -> None:
    """The GPU shared as the model says, given what the jobs really demand: the heavy probe's
    rate is the model's fair share of the steady SM shares (2.32 GPUs), less its mechanism
    costs at their published values. Read so, the interval confirms contention and the
    co-tenant cost; read against the hints (1.46 GPUs), as before, the same rate said that
    MPS costs more than the published contention (the H200's learner: 0.228 -> 1.397)."""
    steady = [workload(s, None, DEFAULT_PARAMS) for _, s in PROBES.values()]
    rate = predicted_rate(DEFAULT_PARAMS, Observation("mps", steady[0], tuple(steady[1:]), 1.0))
    station = shared_interval(store, tmp_path, rate)
    assert station.counts.observations == 1
    (stored,) = store.model_observations()
    obs = observation_from_json(stored.observation)
    assert obs.rate == pytest.approx(rate, rel=0.02)
    assert [obs.job.sm, *(o.sm for o in obs.others)] == pytest.approx([0.79, 0.33, 0.41, 0.79])
    now = learned(station)
    for name in ("contention", "mps_tenant_cost"):
        assert now[name] == pytest.approx(getattr(DEFAULT_PARAMS, name), abs=0.01), name

    # the same interval with the hints as the workloads (what the engine read before)
    hinted = [workload(h, None, DEFAULT_PARAMS) for h, _ in PROBES.values()]
    before = Learner()
    before.observe(A100, Observation("mps", hinted[0], tuple(hinted[1:]), obs.rate))
    assert before.params(A100).contention > DEFAULT_PARAMS.contention + 0.2


def test_a_shared_interval_beside_a_command_of_unknown_steady_sm_teaches_nothing(
    store: Store, tmp_path: Path
) -> None:
    station = shared_interval(store, tmp_path, 0.3, unknown="membw")
    assert station.counts.without_measured_sm == 1
    assert station.counts.observations == 0 and store.model_observations() == []
    assert learned(station) == learned(learning(store))  # the defaults


def test_a_version_19_stores_rates_alone_load_and_learn_steady_sm_shares(tmp_path: Path) -> None:
    """A store from before steady SM shares were kept (schema 19): its rates alone stay, with
    no SM share known, and the next run's is folded in."""
    conn = sqlite3.connect(tmp_path / "db")
    for script in MIGRATIONS[:19]:
        conn.executescript(script)
    conn.execute("PRAGMA user_version = 19")
    conn.execute("INSERT INTO alone_rates VALUES ('1000:abc', 12.5, 2, 100.0)")
    conn.commit()
    conn.close()
    store = Store.open(tmp_path / "db")
    assert store.schema_version == len(MIGRATIONS) > 19
    (old,) = store.alone_rates().values()
    assert (old.rate, old.runs, old.updated_at, old.sm_pct, old.sm_runs) == (
        12.5,
        2,
        100.0,
        None,
        0,
    )
    store.record_alone_rate("1000:abc", 15.5, sm_pct=60.0, now=200.0)
    store.record_alone_rate("1000:abc", 17.0, now=300.0)  # a run without SM activity read
    store.record_alone_rate("1000:abc", 17.5, sm_pct=70.0, now=400.0)
    (now,) = store.alone_rates().values()
    assert (now.rate, now.runs, now.sm_pct, now.sm_runs) == (15.0, 5, 65.0, 2)
    # the same means the engine keeps as it goes (policy.progress_intervals.alone_rate_after)
    kept = alone_rate_after(
        alone_rate_after(alone_rate_after(old, 15.5, 200.0, 60.0), 17.0, 300.0), 17.5, 400.0, 70.0
    )
    assert kept == now
    store.close()
