"""A station shared by several users, in the pure placement code: an MPS server serves one user
at a time (placement never puts two users' jobs under MPS on one GPU), fair share orders the
queue across users by decayed usage, and one user's queue keeps its order."""

from __future__ import annotations

import math
from dataclasses import replace

import msgspec
from test_collocation import gpu, job, station, tenant

from gpudesk.core.identity import Identity, user_name
from gpudesk.core.records import AttemptRecord, JobRecord, UsageSpan
from gpudesk.engine.live_attempt import LiveAttempt
from gpudesk.policy.carma import CarmaPolicy
from gpudesk.policy.collocation import SharingPolicy
from gpudesk.policy.fairshare import (
    FairShare,
    ahead_by_fair_share,
    decayed_hours,
    fair_order,
    usage_by_user,
)
from gpudesk.policy.policy import GpuState, Tenant

ADA, BOB = 61001, 61002  # uids no test user has: named by their digits
HOUR = 3600.0
WEEK_H = 7 * 24.0


def owned(record: JobRecord, uid: int, priority: int = 0) -> JobRecord:
    return msgspec.structs.replace(
        record,
        owner=Identity.of(uid, uid, []),
        spec=msgspec.structs.replace(record.spec, priority=priority),
    )


def mps_tenant(
    job_id: int, uid: int, memory_gb: float = 4, sm: float = 20, login: str | None = None
) -> Tenant:
    return replace(tenant(job_id, memory_gb, sm, "mps"), uid=uid, login=login)


def mps_owners(gpu_state: GpuState, placements: list, jobs: dict[int, JobRecord]) -> set[int]:
    owners = {t.uid for t in gpu_state.tenants if t.mode == "mps"}
    owners |= {
        jobs[p.job_id].owner.uid
        for p in placements
        if p.mode == "mps" and gpu_state.index in p.gpus
    }
    return {o for o in owners if o is not None}


# ------------------------------------------------------------------ MPS across users
def test_another_users_job_time_slices_beside_an_mps_server_and_says_why() -> None:
    view = station(gpu(0, mps_tenant(1, ADA)))
    bobs = owned(job(2, 4, 20), BOB)
    (placed,) = SharingPolicy("auto").place([bobs], view).placements
    assert placed.gpus == (0,) and placed.mode == "naive"
    assert placed.reason.startswith(
        f"time-sliced: GPU 0's MPS server serves {ADA}'s jobs; an MPS server "
        "serves one user at a time; collocated on GPU 0 under naive"
    )


def test_the_reason_names_the_mps_servers_user_as_stored_with_her_job() -> None:
    """Placement runs on the engine's loop: the other user is named as her job was stored
    (Tenant.login, from LiveAttempt's owner), never asked of the user database, which may hang
    (before: `user_name(uid)`, which for uid 0 says "root")."""
    view = station(gpu(0, mps_tenant(1, 0, login="stored-name")))
    (placed,) = SharingPolicy("auto").place([owned(job(2, 4, 20), BOB)], view).placements
    assert "GPU 0's MPS server serves stored-name's jobs" in placed.reason, placed.reason
    assert user_name(0) not in placed.reason
    attempt = AttemptRecord(
        1, 1, 1, "running", {"mode": "mps"}, "/", 1, None, 0.0, None, None, None, None
    )
    live = LiveAttempt(attempt, pid=1, start_time=None, slot="gpu:0", gpus=(0,))
    live.owner = Identity.of(0, 0, [], "stored-name")
    assert (live.running().uid, live.running().login) == (0, "stored-name")


def test_the_same_users_job_still_joins_the_mps_server() -> None:
    view = station(gpu(0, mps_tenant(1, ADA)))
    (placed,) = SharingPolicy("auto").place([owned(job(2, 4, 20), ADA)], view).placements
    assert placed.mode == "mps" and "time-sliced" not in placed.reason


def test_an_idle_gpu_gives_another_user_an_mps_server_of_their_own() -> None:
    view = station(gpu(0, mps_tenant(1, ADA)), gpu(1))
    (placed,) = SharingPolicy("mps").place([owned(job(2, 4, 20), BOB)], view).placements
    assert placed.mode == "mps" and placed.gpus == (1,)


def test_within_one_pass_two_users_never_share_an_mps_server() -> None:
    """A pass places several users' jobs on a station that fills up: after every placement no
    GPU has MPS clients of two users."""
    queue = [owned(job(i, 3, 15), ADA if i % 2 else BOB) for i in range(1, 13)]
    jobs = {j.id: j for j in queue}
    sliced = 0
    for view in (station(gpu(0), gpu(1)), station(gpu(0))):
        for policy in (SharingPolicy("auto"), SharingPolicy("mps"), CarmaPolicy()):
            decision = policy.place(queue, view)
            assert decision.placements, policy.name
            for state in view.gpu_states:
                assert len(mps_owners(state, decision.placements, jobs)) <= 1, policy.name
            shared = [p for p in decision.placements if p.mode == "naive"]
            assert all("MPS server serves" in p.reason for p in shared), policy.name
            sliced += len(shared)
    assert sliced  # on one GPU the other user's jobs time-slice beside the MPS server


def test_carma_time_slices_another_users_job_beside_an_mps_server() -> None:
    view = station(gpu(0, mps_tenant(1, ADA), sm=10.0))
    (placed,) = CarmaPolicy().place([owned(job(2, 4, 20), BOB)], view).placements
    assert placed.mode == "naive" and "MPS server serves" in placed.reason


def test_isolation_keeps_another_user_off_the_gpu_and_the_wait_says_whose_server() -> None:
    view = station(gpu(0, mps_tenant(1, ADA)))
    isolated = msgspec.structs.replace(
        view, config=msgspec.structs.replace(view.config, isolation=True)
    )
    bobs = owned(job(2, 4, 20), BOB)
    assert SharingPolicy("auto").place([bobs], isolated).placements == []
    text = SharingPolicy("auto").explain_wait(bobs, [bobs], isolated)
    assert f"MPS server serves {ADA}'s jobs" in text


# ------------------------------------------------------------------ fair share
def test_decay_halves_usage_each_half_life() -> None:
    now = 1_000_000_000.0
    fresh = decayed_hours(now - HOUR, now, now, WEEK_H)
    week_old = decayed_hours(now - HOUR - WEEK_H * HOUR, now - WEEK_H * HOUR, now, WEEK_H)
    assert 0.997 < fresh < 1.0  # the last hour decays a little too (ln 2 / 336 on average)
    assert math.isclose(week_old, fresh / 2, rel_tol=1e-9)
    assert decayed_hours(now, now - 1, now, WEEK_H) == 0.0


def test_usage_is_gpu_hours_plus_weighted_cpu_hours_per_user() -> None:
    now = 2_000_000_000.0
    share = FairShare(half_life_h=1e9, cpu_weight=1 / 16)  # no decay to speak of
    spans = [
        UsageSpan(ADA, now - 2 * HOUR, now, gpus=1, cpu_s=0.0),  # 2 GPU-h
        UsageSpan(ADA, now - HOUR, None, gpus=2, cpu_s=0.0),  # running: 2 GPU-h so far
        UsageSpan(BOB, now - 4 * HOUR, now, gpus=0, cpu_s=16 * 4 * HOUR),  # 64 core-h = 4
    ]
    usage = usage_by_user(spans, now, share)
    assert math.isclose(usage[ADA], 4.0, rel_tol=1e-6)
    assert math.isclose(usage[BOB], 4.0, rel_tol=1e-6)


def test_the_lighter_users_job_goes_first_among_equal_priorities() -> None:
    heavy_first = owned(job(1, 4, 20), ADA)
    heavy_second = owned(job(2, 4, 20), ADA)
    light = owned(job(3, 4, 20), BOB)
    urgent = owned(job(4, 4, 20), ADA, priority=5)
    queue = [urgent, heavy_first, heavy_second, light]
    usage = {ADA: 12.4, BOB: 0.5}
    assert [j.id for j in fair_order(queue, usage)] == [4, 3, 1, 2]
    assert ahead_by_fair_share(heavy_first, queue, usage) == 1
    assert ahead_by_fair_share(light, queue, usage) == 0


def test_one_users_queue_keeps_its_order_whatever_the_usage() -> None:
    queue = [owned(job(i, 4, 20), ADA, priority=p) for i, p in ((2, 3), (1, 0), (5, 0))]
    assert fair_order(queue, {ADA: 99.0}) == queue
