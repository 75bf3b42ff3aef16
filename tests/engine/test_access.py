"""Ownership and roles, at the request level: a real engine's handlers (its SQLite store, queue and
job control; the loop is not running, so no job starts) answer requests from callers of different
uids and groups. The identities are values, as the kernel would report them: no Unix users are
needed here (the system-engine tests with real users are the shared-station fixture's)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from conftest import EngineInProcess

from gpudesk.api.models import ConfigureResult
from gpudesk.core.identity import Caller, Identity
from gpudesk.core.known_owner import group_name
from gpudesk.core.station import StationConfig
from gpudesk.paths import Home
from gpudesk.policy.access import Access

ADMINS = 7000  # the admin group's gid (a name where the system has one)
ADA = Caller(Identity.of(5001, 5001, [5001]), 101)
BOB = Caller(Identity.of(5002, 5002, [5002]), 102)
ALICE = Caller(Identity.of(5003, 5003, [5003, ADMINS]), 103)  # an admin, by her group
# how a request names her: uid 5003 has no entry in this host's user database
ALICE_SAID = "uid 5003"
ROOT = Caller(Identity.of(0, 0, [0]), 104)


class Handlers(EngineInProcess):
    """The engine's request handlers, spoken to in raw bytes as the daemon does."""

    def submit(self, caller: Caller, name: str, **spec: Any) -> int:
        job = {"name": name, "command": ["true"], **spec}
        result = self.ok(caller, "submit", jobs=[job], env={"SECRET": name})
        return result["ids"][0]  # type: ignore[no-any-return]


def engine_at(home: Home, access: Access, config: StationConfig) -> Iterator[Handlers]:
    handlers = Handlers(home, config, access)
    try:
        yield handlers
    finally:
        handlers.close()


@pytest.fixture
def system(home: Home) -> Iterator[Handlers]:
    """A system engine's handlers: admin group ADMINS, a CPU station running `auto`."""
    yield from engine_at(home, Access(os.getuid(), ADMINS), StationConfig(backend="none", slots=1))


@pytest.fixture
def personal(home: Home) -> Iterator[Handlers]:
    yield from engine_at(home, Access.personal(), StationConfig(backend="none", slots=1))


def refusal(job_id: int | None, owner: Caller, verb: str) -> str:
    """The refusal to `verb` ("cancel", "see its environment") another's job: a request's
    error names it; a job-control outcome (`job_id` None), said after the job's id by every
    client, says "it" (`job 3 (x): refused: job 3 belongs to …` said the id twice)."""
    doing = verb if " " in verb else f"{verb} it"
    subject = "it" if job_id is None else f"job {job_id}"
    return (
        f"refused: {subject} belongs to {owner.name}, and only its owner or a member of "
        f"{group_name(ADMINS)} may {doing}"
    )


ACTIONS: list[tuple[str, dict[str, Any], str]] = [
    ("hold", {}, "hold"),
    ("release", {}, "release"),
    ("priority", {"delta": 1}, "re-prioritize"),
    ("requeue", {}, "requeue"),
    ("cancel", {}, "cancel"),
    ("suspend", {}, "suspend"),
    ("resume", {}, "resume"),
    ("signal", {"signal": "USR1"}, "signal"),
]


@pytest.mark.parametrize(("op", "extra", "verb"), ACTIONS)
def test_a_user_cannot_act_on_another_users_job(
    system: Handlers, op: str, extra: dict[str, Any], verb: str
) -> None:
    job = system.submit(ADA, "adas")
    before = system.ok(ADA, "show", job=job)["job"]
    [result] = system.ok(BOB, op, jobs=[job], **extra)["results"]
    assert result == {"id": job, "name": "adas", "outcome": refusal(None, ADA, verb), "ok": False}
    after = system.ok(ADA, "show", job=job)["job"]
    assert (after["state"], after["held"], after["spec"]["priority"]) == (
        before["state"],
        before["held"],
        before["spec"]["priority"],
    )


@pytest.mark.parametrize("actor", [ADA, ALICE, ROOT], ids=["owner", "admin-group", "root"])
def test_the_owner_and_the_admins_act_on_a_job(system: Handlers, actor: Caller) -> None:
    job = system.submit(ADA, "adas")
    assert system.ok(actor, "hold", jobs=[job])["results"][0]["outcome"] == "held"
    # lowering: the owner's to do (raising above 0 is an admin's: tests/security/test_limits.py)
    assert system.ok(actor, "priority", jobs=[job], priority=-5)["results"][0]["ok"]
    assert system.ok(actor, "release", jobs=[job])["results"][0]["outcome"] == "released"
    cancelled = system.ok(actor, "cancel", jobs=[job])["results"][0]
    assert (cancelled["outcome"], cancelled["ok"]) == ("cancelled", True)
    assert system.ok(actor, "requeue", jobs=[job])["results"][0]["outcome"] == "requeued"


def test_one_request_over_several_owners_refuses_only_the_others_jobs(system: Handlers) -> None:
    mine, theirs = system.submit(BOB, "bobs"), system.submit(ADA, "adas")
    results = system.ok(BOB, "cancel", jobs=[mine, theirs])["results"]
    assert [(r["id"], r["ok"]) for r in results] == [(mine, True), (theirs, False)]
    assert system.ok(BOB, "show", job=theirs)["job"]["state"] == "queued"


def test_an_actable_listing_holds_a_members_own_jobs_and_an_admins_every_job(
    system: Handlers,
) -> None:
    """`jobs`' `actable` (what `gpudesk cancel --name` picks from): without `user`, the jobs
    the caller may act on, and `own_only` says where that narrowed the listing."""
    adas, bobs = system.submit(ADA, "x-1"), system.submit(BOB, "x-2")

    def listed(caller: Caller, **args: Any) -> tuple[list[int], bool]:
        reply = system.ok(caller, "jobs", name="x-*", **args)
        return [j["id"] for j in reply["jobs"]], reply.get("own_only", False)

    assert listed(BOB, actable=True) == ([bobs], True)
    for admin in (ALICE, ROOT):
        assert listed(admin, actable=True) == ([adas, bobs], False)
    assert listed(BOB, actable=True, user=ADA.uid) == ([adas], False)  # an owner asked: hers
    assert listed(BOB) == ([adas, bobs], False)  # without it, every member lists every job


def test_every_user_lists_every_job_but_only_the_owner_and_admins_see_its_environment(
    system: Handlers,
) -> None:
    job = system.submit(ADA, "adas")
    listed = system.ok(BOB, "jobs")["jobs"]
    assert [(j["id"], j["user"], j["uid"]) for j in listed] == [(job, ADA.name, ADA.uid)]
    assert "env" not in listed[0]["spec"]
    assert "env" not in system.ok(BOB, "show", job=job)  # without env: anyone may look
    reply = system.call(BOB, "show", job=job, env=True)
    assert reply["error"] == {
        "code": "refused",
        "message": refusal(job, ADA, "see its environment"),
    }
    for reader in (ADA, ALICE):
        assert system.ok(reader, "show", job=job, env=True)["env"]["SECRET"] == "adas"


@pytest.mark.parametrize(
    ("op", "args", "what"),
    [
        ("shutdown", {}, "stop the engine"),
        ("mig_apply", {"gpu": 0, "profiles": ["1g.5gb"], "confirm": True}, "apply MIG layouts"),
        ("model_reset", {"confirm": True}, "reset the interference model"),
        (
            "datasets",
            {"datasets": [{"name": "d", "factory": "m:f"}]},
            "register shared-loader datasets or change their settings (d)",
        ),
    ],
)
def test_station_wide_actions_are_an_admins(
    system: Handlers, op: str, args: dict[str, Any], what: str
) -> None:
    reply = system.call(BOB, op, **args)
    assert reply["error"] == {
        "code": "refused",
        "message": f"refused: only a member of {group_name(ADMINS)} may {what}",
    }


def test_anyone_may_repeat_a_registered_dataset_and_list_them(system: Handlers) -> None:
    dataset = {"name": "d", "factory": "m:f"}
    system.ok(ALICE, "datasets", datasets=[dataset])
    assert system.ok(BOB, "datasets", datasets=[dataset])["datasets"] == ["d"]
    assert system.ok(BOB, "datasets", datasets=[])["datasets"] == ["d"]
    changed = {**dataset, "batch_size": 8}
    assert system.call(BOB, "datasets", datasets=[changed])["error"]["code"] == "refused"


# ------------------------------------------------------------------ station settings
QUICKSTART_STATION = {"backend": "auto", "policy": "fifo"}  # profiles/quickstart.toml's


def test_a_users_station_settings_are_reported_not_applied_on_a_system_engine(
    system: Handlers,
) -> None:
    result = system.ok(BOB, "configure", station={"policy": "fifo", "slots": 1})
    assert result["changed"] is False and result["changes"] == []
    assert result["station"]["policy"] == "auto"
    assert result["not_applied"] == [
        {
            "key": "policy",
            "value": "fifo",
            "current": "auto",
            "reason": f"the station runs auto; only an admin ({group_name(ADMINS)}) changes "
            "station settings",
            "message": f"not applied: policy fifo (the station runs auto; only an admin "
            f"({group_name(ADMINS)}) changes station settings)",
        }
    ]  # slots = 1 is what the station runs: nothing to say
    decoded = msgspec.convert(result, ConfigureResult)  # the api's model takes it, strictly
    assert decoded.not_applied[0].message == result["not_applied"][0]["message"]
    assert system.ok(BOB, "status")["station"]["policy"] == "auto"
    assert not [e for e in system.engine.store.events() if e.message.startswith("station")]


def test_an_admins_station_settings_are_applied_and_recorded(system: Handlers) -> None:
    system.ok(ALICE, "configure", station={"backend": "sim:h100"})  # a GPU job is accepted
    system.submit(ADA, "gpu-job", gpus=1)
    result = system.ok(ALICE, "configure", station=QUICKSTART_STATION)
    assert result["changed"] is True and result["not_applied"] == []
    assert [(c["key"], c["old"], c["new"]) for c in result["changes"]] == [
        ("backend", "sim:h100", "auto"),
        ("policy", "auto", "fifo"),
    ]
    assert result["changes"][0]["message"] == (
        "backend sim:h100 → auto (1 queued job(s) ask for GPUs: they run on the new backend's "
        "GPUs, and fail if it has none or too few)"
    )
    assert result["changes"][1]["message"] == "policy auto → fifo"
    assert system.ok(ALICE, "status")["station"]["policy"] == "fifo"
    events = [e.message for e in system.engine.store.events() if e.kind == "station"]
    assert f"station: policy auto → fifo (by {ALICE_SAID})" in events


def test_a_personal_engine_applies_only_the_keys_asked_and_says_so(personal: Handlers) -> None:
    me = Caller.of_process()
    personal.ok(me, "configure", station={"slots": 3})
    result = personal.ok(me, "configure", station={"policy": "fifo"})
    assert [c["message"] for c in result["changes"]] == ["policy auto → fifo"]
    assert result["station"]["slots"] == 3  # a key left out keeps the station's value
    again = personal.ok(me, "configure", station={"policy": "fifo"})
    assert (again["changed"], again["changes"], again["not_applied"]) == (False, [], [])


def test_the_engines_backend_override_wins_and_is_said(
    personal: Handlers, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUDESK_BACKEND", "none")
    result = personal.ok(Caller.of_process(), "configure", station={"backend": "sim:h100"})
    assert result["changes"] == [] and result["station"]["backend"] == "none"
    assert [n["message"] for n in result["not_applied"]] == [
        "not applied: backend sim:h100 (GPUDESK_BACKEND=none in the engine's environment wins)"
    ]


def test_a_personal_engines_admins_are_its_user_and_root() -> None:
    access = Access(1000)
    assert access.is_admin(Caller(Identity.of(1000, 1000, []), None))
    assert access.is_admin(ROOT) and not access.is_admin(ADA)
    assert access.admins.startswith("root or ")


def test_only_an_admin_drains_and_undrains_a_system_engine(system: Handlers) -> None:
    for op in ("drain", "undrain"):
        reply = system.call(BOB, op, reason="mine") if op == "drain" else system.call(BOB, op)
        assert reply["error"] == {
            "code": "refused",
            "message": f"refused: only a member of {group_name(ADMINS)} may {op} the station",
        }
    assert system.ok(BOB, "status").get("drain") is None
    drained = system.ok(ALICE, "drain", reason="swap a GPU")
    assert drained["changed"] and drained["drain"]["by"] == ALICE_SAID
    assert drained["drain"]["reason"] == "swap a GPU"
    assert system.ok(BOB, "status")["drain"]["reason"] == "swap a GPU"  # anyone sees it
    assert system.ok(ROOT, "undrain")["ended"]["by"] == ALICE_SAID
    assert system.ok(BOB, "status").get("drain") is None
