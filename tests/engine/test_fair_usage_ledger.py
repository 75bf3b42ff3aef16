"""Fair share's usage kept in a ledger (engine.fair_usage, placement.usage_ledger) answers what
the definition (fairshare.usage_by_user over every attempt of the horizon) answers, on a real
store: a few hundred attempts of several users, while attempts start and end, the horizon moves
past old ones, the weights change and the wall clock is stepped back."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from telemetry_views import usage_figures

from gpudesk.core.identity import Identity
from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.records import AttemptRecord
from gpudesk.engine.fair_usage import FairUsage
from gpudesk.engine.store.database import Store
from gpudesk.policy.fairshare import FairShare, usage_by_user

HOUR = 3600.0
# A short half-life, so that a test's hours cross the horizon (20 half-lives: 20 h here).
SHARE = FairShare(half_life_h=1.0, cpu_weight=1 / 16)
USERS = [Identity.of(uid, uid, [uid]) for uid in (61001, 61002, 61003, 61004)]
T0 = 1_900_000_000.0  # a fixed wall-clock time: the store is told every time explicitly


class Station:
    """A store whose attempts start and end at the times the test says."""

    def __init__(self, root: Path, seed: int = 36) -> None:
        self.store = Store.open(root / "gpudesk.db")
        self.jobs_root = root / "jobs"
        self.rng = random.Random(seed)
        self.running: list[AttemptRecord] = []

    def start(self, at: float, user: Identity | None = None) -> AttemptRecord:
        owner = user or self.rng.choice(USERS)
        (job,) = self.store.submit([JobSpec(name="j", command=("true",))], {}, at, owner)
        gpus = list(range(self.rng.choice((0, 0, 1, 1, 2, 4))))
        attempt = self.store.start_attempt(job.id, {"slot": "s", "gpus": gpus}, self.jobs_root, at)
        self.store.attempt_launched(attempt.id, 4242, at, now=at)
        self.running.append(attempt)
        return attempt

    def end(self, attempt: AttemptRecord, at: float, cpu_s: float | None = None) -> None:
        """End `attempt` at `at` and store its last CPU time (as settling does, in that order)."""
        self.running.remove(attempt)
        self.store.finish_attempt(
            attempt,
            attempt_state="exited",
            job_state=JobState.SUCCEEDED,
            message="exited 0",
            exit_code=0,
            ended_at=at,
            now=at,
        )
        if cpu_s is not None:
            self.store.record_usage([(attempt.id, attempt.job_id, usage_figures(cpu_s=cpu_s))], at)

    def ran(self, start: float, hours: float, cpu_cores: float = 0.0) -> None:
        attempt = self.start(start)
        self.end(attempt, start + hours * HOUR, cpu_cores * hours * HOUR if cpu_cores else None)


class Weights:
    """The station's weights, as `[station]` has them now."""

    def __init__(self, share: FairShare = SHARE) -> None:
        self.share = share


def ledger_of(
    store: Store, weights: Weights | None = None, chunk: int = 1000, slice_s: float = 0.025
) -> FairUsage:
    holder = weights or Weights()
    return FairUsage(store, lambda: holder.share, chunk, slice_s)


def asked(usage: FairUsage, now: float) -> dict[int, float]:
    """The usage at `now`, the ledger built first (as the loop's turns build it)."""
    usage.usage_by_user(now)  # where the clock went back, a build begins
    while usage.building:
        usage.step(now)
    return usage.usage_by_user(now)


def full(store: Store, now: float, share: FairShare) -> dict[int, float]:
    """The definition: every attempt of the horizon, read and summed."""
    return usage_by_user(store.usage_spans(now - share.horizon_s), now, share)


def assert_same(kept: dict[int, float], wanted: dict[int, float]) -> None:
    assert set(kept) == set(wanted)
    for uid, value in wanted.items():
        assert math.isclose(kept[uid], value, rel_tol=1e-9, abs_tol=1e-12), (uid, kept, wanted)


def history(station: Station, attempts: int) -> None:
    """`attempts` ended ones over the 30 h before T0 (some beyond the horizon), with CPU time
    for some, and a few still running at T0."""
    rng = station.rng
    for _ in range(attempts):
        start = T0 - rng.uniform(0.5, 30.0) * HOUR
        hours = rng.uniform(0.01, min(3.0, (T0 - start) / HOUR))
        station.ran(start, hours, rng.choice((0.0, 0.0, 1.5, 16.0)))
    for _ in range(6):
        station.start(T0 - rng.uniform(0.1, 4.0) * HOUR)


def test_the_ledger_matches_the_full_sum_as_attempts_start_end_and_leave_the_horizon(
    tmp_path: Path,
) -> None:
    station = Station(tmp_path)
    history(station, 300)
    usage = ledger_of(station.store)
    assert_same(asked(usage, T0), full(station.store, T0, SHARE))
    rng = station.rng
    now = T0
    for step in range(60):  # 30 h in half-hour steps: everything of the start leaves the horizon
        later = now + 0.5 * HOUR
        for _ in range(rng.randint(0, 4)):
            station.start(rng.uniform(now, later))
        for attempt in rng.sample(station.running, min(len(station.running), rng.randint(0, 3))):
            started = attempt.started_at or now
            station.end(attempt, rng.uniform(max(now, started), later), rng.uniform(0, 20_000))
        if step % 7 == 0:  # one found ended late: its end lies well before the last question
            station.ran(now - rng.uniform(1.0, 10.0) * HOUR, 0.5, 2.0)
        now = later
        assert_same(asked(usage, now), full(station.store, now, SHARE))
    # Asked again at the same moment, and a second later: nothing changed but the decay.
    assert_same(asked(usage, now), full(station.store, now, SHARE))
    assert_same(asked(usage, now + 1), full(station.store, now + 1, SHARE))


def test_a_user_whose_attempts_all_left_the_horizon_is_no_longer_named(tmp_path: Path) -> None:
    station = Station(tmp_path)
    ada, bob = USERS[0], USERS[1]
    station.end(station.start(T0 - 5 * HOUR, ada), T0 - 4 * HOUR, 3600.0)
    station.end(station.start(T0 - 2 * HOUR, bob), T0 - 1 * HOUR)
    usage = ledger_of(station.store)
    assert set(asked(usage, T0)) == {ada.uid, bob.uid}
    # Ada's attempt ended 4 h before T0: 16 h later it is 20 half-lives old, at the horizon.
    at_the_cut = T0 + 16 * HOUR
    kept = asked(usage, at_the_cut)
    assert set(kept) == {bob.uid}
    assert_same(kept, full(station.store, at_the_cut, SHARE))


def test_new_weights_and_a_clock_stepped_back_rebuild_the_same_numbers(tmp_path: Path) -> None:
    station = Station(tmp_path)
    history(station, 200)
    weights = Weights()
    usage = ledger_of(station.store, weights)
    asked(usage, T0)
    for share in (
        FairShare(half_life_h=2.0, cpu_weight=1 / 16),
        FairShare(half_life_h=2.0, cpu_weight=0.5),
        FairShare(half_life_h=168.0, cpu_weight=0.0),
    ):
        weights.share = share
        assert_same(asked(usage, T0 + HOUR), full(station.store, T0 + HOUR, share))
    # The wall clock stepped back an hour behind the last question.
    assert_same(asked(usage, T0), full(station.store, T0, weights.share))


def test_an_attempt_ending_after_now_counts_as_the_full_sum_counts_it(tmp_path: Path) -> None:
    """A clock stepped back after an attempt ended: its end lies in the future. The definition
    counts it up to now, as a running one, until now passes its end."""
    station = Station(tmp_path)
    history(station, 50)
    usage = ledger_of(station.store)
    asked(usage, T0)
    station.end(station.running[0], T0 + 2 * HOUR, 7200.0)
    for now in (T0 + HOUR, T0 + 2 * HOUR, T0 + 3 * HOUR):
        assert_same(asked(usage, now), full(station.store, now, SHARE))


@pytest.mark.parametrize("half_life_h", [0.001, 1e6])
def test_extreme_half_lives_neither_overflow_nor_drift(tmp_path: Path, half_life_h: float) -> None:
    """The sums are kept as of the last question, so no exponential grows with the engine's
    uptime: a half-life of 3.6 s asked about over days, and one of a century."""
    share = FairShare(half_life_h=half_life_h, cpu_weight=1 / 16)
    station = Station(tmp_path)
    history(station, 50)
    usage = ledger_of(station.store, Weights(share))
    for hours in range(0, 73, 8):
        now = T0 + hours * HOUR
        station.ran(now - 0.5 * HOUR, 0.25, 1.0)
        assert_same(asked(usage, now), full(station.store, now, share))


def test_attempts_found_ended_as_the_horizon_passes_their_end_are_never_taken_out(
    tmp_path: Path,
) -> None:
    """An attempt that ran while no engine watched can be found ended long after its end: one
    running at the last question, one never seen, both ended just inside the old horizon and
    outside the new one. Neither was counted, so neither may be subtracted."""
    station = Station(tmp_path)
    history(station, 100)
    ada = USERS[0]
    was_running = station.start(T0 - 30 * HOUR, ada)
    usage = ledger_of(station.store)
    asked(usage, T0)
    station.end(was_running, T0 - 19.5 * HOUR, 3600.0)
    station.ran(T0 - 21 * HOUR, 1.5, 4.0)  # never seen: ended at T0 - 19.5 h too
    now = T0 + HOUR  # the cut moves from T0 - 20 h to T0 - 19 h
    assert_same(asked(usage, now), full(station.store, now, SHARE))


def test_a_build_a_chunk_at_a_time_ends_exact_while_attempts_come_and_go(tmp_path: Path) -> None:
    """Built newest first, a chunk of attempts per turn of the loop, while attempts start and
    end and the horizon moves: meanwhile the answer lacks only unread (older) attempts, so it
    never exceeds the whole sum; once built it is the whole sum."""
    station = Station(tmp_path)
    history(station, 300)
    usage = ledger_of(station.store, chunk=25, slice_s=0.0)  # one chunk per turn
    now = T0
    turns = 0
    while usage.building:
        usage.step(now)
        turns += 1
        partial, whole = usage.usage_by_user(now), full(station.store, now, SHARE)
        assert all(value <= whole[uid] * (1 + 1e-9) for uid, value in partial.items())
        now += 0.2 * HOUR
        station.ran(now - 0.3 * HOUR, 0.2, 1.0)
        if station.running:
            station.end(station.running[0], now - 0.05 * HOUR, 100.0)
    assert turns >= 300 // 25
    assert_same(usage.usage_by_user(now), full(station.store, now, SHARE))


def test_a_build_stops_at_the_oldest_attempt_of_the_horizon(tmp_path: Path) -> None:
    """A store of years holds far more attempts than the horizon: those below its oldest one
    are not read."""
    station = Station(tmp_path)
    for k in range(200):  # ended 30-40 h before T0, beyond the 20 h horizon
        station.ran(T0 - 40 * HOUR + k * 180.0, 0.5)
    for k in range(40):
        station.ran(T0 - 10 * HOUR + k * 600.0, 0.5, 2.0)
    usage = ledger_of(station.store, chunk=10, slice_s=0.0)
    usage.usage_by_user(T0)
    turns = 0
    while usage.building:
        usage.step(T0)
        turns += 1
    assert turns == 4  # the 40 recent attempts, 10 a turn
    assert_same(usage.usage_by_user(T0), full(station.store, T0, SHARE))
