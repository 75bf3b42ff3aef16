"""A station shared by two users, in a real engine on a SIMULATED station: fair share starts
the lighter user's job first, two users' jobs never run under one MPS server at once, and the
per-user limits hold. Jobs are queued for two owners through the store (the engine takes each
caller's identity from the kernel, so one test process cannot submit as two users); the engine
loads them at start as it loads any queue after a restart."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from conftest import EngineHandle, wait_for
from local_users import local_accounts

from gpudesk.api.connection import EngineError
from gpudesk.core.identity import Identity, user_name
from gpudesk.core.jobs import JobSpec
from gpudesk.engine.store.database import Store
from gpudesk.paths import Home

ADA = Identity.of_process().named()  # the engine's own user, named as a submit stores her


@pytest.fixture
def bob() -> Iterator[Identity]:
    """Another user. An engine run by root runs his jobs as him (so they use only what anyone
    may run, from a folder anyone may enter), and only as a user the system knows (its
    wrapper asks: core/known_owner.py): a real throwaway one there. Elsewhere the engine cannot
    switch users, and a uid with no passwd entry stands for him."""
    if os.geteuid() != 0:
        yield Identity.of(61002, 61002, [])
        return
    with local_accounts({"bob": []}) as made:
        user = made.users["bob"]
        yield Identity.of(user.uid, user.gid, user.groups)


def queue_for(home: Home, *jobs: tuple[Identity, dict]) -> list[int]:
    home.root.mkdir(parents=True, exist_ok=True)
    store = Store.open(home.db)
    try:
        ids = []
        for owner, spec in jobs:
            full = JobSpec.from_dict({"workdir": "/", **spec})
            (record,) = store.submit([full], dict(os.environ), owner=owner)
            ids.append(record.id)
        return ids
    finally:
        store.close()


def sleeper(seconds: float) -> list[str]:
    return ["/bin/sleep", str(seconds)]


def test_the_lighter_users_job_starts_first(home: Home, bob: Identity) -> None:
    whole_gpu = {"gpus": 1, "memory_gb": 30, "sm_pct": 90}  # two never share a 40 GB GPU
    warm, ada_next, bob_first = queue_for(
        home,
        (ADA, {"name": "ada-warm", "command": sleeper(1.5), **whole_gpu}),
        (ADA, {"name": "ada-next", "command": sleeper(0.5), **whole_gpu}),
        (bob, {"name": "bob-first", "command": sleeper(0.5), **whole_gpu}),
    )
    engine = EngineHandle(home)
    engine.start(backend="sim:a100-40gbx1", policy="auto", sample_interval=0.2)
    engine.wait_state(warm, "running")
    # ada's running job counts already: bob's waiting job goes ahead of ada's
    waiting = engine.show(ada_next).waiting
    assert waiting.startswith(
        f"fair share: behind 1 job of users with less recent usage; {ADA.name}'s usage "
    ), waiting
    assert "GPU-h (decayed, half-life 168 h)" in waiting
    done = {j.id: j for j in engine.wait_all_done([warm, ada_next, bob_first], timeout=60)}
    assert all(j.state == "succeeded" for j in done.values())
    # ada had used the GPU; bob, submitted later at the same priority, went first
    assert done[bob_first].started_at < done[ada_next].started_at
    assert done[bob_first].user == user_name(bob.uid)
    bobs = engine.client.request("jobs", user=bob.uid)["jobs"]
    assert [j["id"] for j in bobs] == [bob_first]


def test_two_users_never_share_an_mps_server(home: Home, bob: Identity) -> None:
    light = {"gpus": 1, "memory_gb": 4, "sm_pct": 20}
    ids = queue_for(
        home,
        *(
            (owner, {"name": f"{tag}-{i}", "command": sleeper(2.5), **light})
            for i in range(3)
            for owner, tag in ((ADA, "ada"), (bob, "bob"))
        ),
    )
    engine = EngineHandle(home)
    engine.start(backend="sim:a100-40gbx1", policy="auto", sample_interval=0.2)
    seen_running = 0

    def check_and_finish() -> list[dict] | None:
        nonlocal seen_running
        jobs = engine.client.request("jobs", ids=ids)["jobs"]
        under_mps: dict[int, set[int]] = {}
        for j in jobs:
            if j["state"] == "running" and j["mode"] == "mps":
                for index in j["gpus"]:
                    under_mps.setdefault(index, set()).add(j["uid"])
        assert all(len(owners) == 1 for owners in under_mps.values()), jobs
        seen_running = max(seen_running, sum(j["state"] == "running" for j in jobs))
        return jobs if all(j["state"] == "succeeded" for j in jobs) else None

    wait_for(check_and_finish, 60.0, interval=0.1, what="every job to succeed")
    assert seen_running >= 2  # they did share the GPU
    reasons = [engine.show(i).attempts[0].placement.reason for i in ids]
    assert any(
        r.startswith(f"time-sliced: GPU 0's MPS server serves {ADA.name}'s jobs") for r in reasons
    ), reasons


def test_per_user_limits_hold(home: Home) -> None:
    light = {"gpus": 1, "memory_gb": 4, "sm_pct": 20}
    first, second = queue_for(
        home,
        (ADA, {"name": "ada-1", "command": sleeper(2), **light}),
        (ADA, {"name": "ada-2", "command": sleeper(0.2), **light}),
    )
    engine = EngineHandle(home)
    engine.start(
        backend="sim:a100-40gbx2",
        policy="auto",
        sample_interval=0.2,
        max_running_gpus_per_user=1,
        max_queued_per_user=2,
    )
    engine.wait_state(first, "running")
    waiting = engine.show(second).waiting
    assert waiting == (
        f"waiting: {ADA.name}'s running jobs hold 1 GPU and this one asks for 1; the station "
        "allows 1 per user ([station] max_running_gpus_per_user)"
    )
    with pytest.raises(EngineError) as refused:
        engine.submit(*({"name": f"more-{i}", "command": ["true"]} for i in range(2)))
    assert refused.value.code == "refused"
    assert "[station] max_queued_per_user" in str(refused.value)
    assert "Nothing was submitted" in str(refused.value)
    assert len(engine.client.request("jobs")["jobs"]) == 2
    done = engine.wait_all_done([first, second], timeout=30)
    assert done[1].started_at >= done[0].ended_at
