"""Who may `edit` a job, at the request level (a system engine's handlers; the loop is not
running, so no job starts): its owner and an admin; anyone else is refused, naming the rule,
and nothing changes. The identities are values, as the kernel would report them
(tests/shared has the same with real users)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from conftest import EngineInProcess

from gpudesk.core.identity import Caller, Identity
from gpudesk.core.known_owner import group_name
from gpudesk.core.station import StationConfig
from gpudesk.paths import Home
from gpudesk.policy.access import Access

ADMINS = 7000
ADA = Caller(Identity.of(5001, 5001, [5001]), 101)
BOB = Caller(Identity.of(5002, 5002, [5002]), 102)
ALICE = Caller(Identity.of(5003, 5003, [5003, ADMINS]), 103)  # an admin, by her group


@pytest.fixture
def system(home: Home) -> Iterator[EngineInProcess]:
    handlers = EngineInProcess(
        home, StationConfig(backend="none", slots=1), Access(os.getuid(), ADMINS)
    )
    yield handlers
    handlers.close()


def submit(engine: EngineInProcess, caller: Caller, name: str) -> int:
    job = {"name": name, "command": ["true"], "env": {"TOKEN": "t"}}
    return engine.ok(caller, "submit", jobs=[job], env={"PATH": "/bin"})["ids"][0]  # type: ignore[no-any-return]


def test_only_the_owner_or_an_admin_edits_a_job(system: EngineInProcess) -> None:
    job = submit(system, ADA, "adas")
    before = system.ok(ADA, "show", job=job, env=True)
    reply = system.call(BOB, "edit", job=job, fields={"name": "bobs"}, unset_env=["TOKEN"])
    assert reply["error"] == {
        "code": "refused",
        "message": f"refused: job {job} belongs to {ADA.name}, and only its owner or a member "
        f"of {group_name(ADMINS)} may edit it",
    }
    assert system.ok(ADA, "show", job=job, env=True) == before
    assert system.ok(ADA, "edit", job=job, fields={"name": "adas-2"})["changes"] == [
        "name adas -> adas-2"
    ]
    by_admin = system.ok(ALICE, "edit", job=job, fields={"gpus": 0, "time_limit_s": 60})
    assert by_admin["changes"] == ["time none -> 00:01:00"]
    shown = system.ok(ADA, "show", job=job)
    assert shown["job"]["user"] == ADA.name  # an admin's edit leaves the job hers
    assert [e["kind"] for e in shown["events"]].count("edit") == 2


def test_unsetting_a_submitted_variable_changes_the_jobs_environment(
    system: EngineInProcess,
) -> None:
    job = submit(system, ADA, "adas")
    reply = system.ok(ADA, "edit", job=job, unset_env=["PATH", "TOKEN"])
    assert reply["changes"] == ["env -TOKEN", "env -PATH"]
    env = system.ok(ADA, "show", job=job, env=True)["env"]
    assert "PATH" not in env and "TOKEN" not in env


def test_an_admin_changes_how_anothers_job_is_scheduled_never_what_it_runs_as_her(
    system: EngineInProcess,
) -> None:
    """Her command, workdir or environment changed by an admin who is not root would be the
    admin's code run as her: refused, nothing changed. Root may (root may become her anyway)."""
    job = submit(system, ADA, "adas")
    before = system.ok(ADA, "show", job=job, env=True)
    for asked in (
        {"fields": {"command": ["sh", "-c", "id"]}},
        {"fields": {"workdir": "/tmp"}},
        {"fields": {"shell": True}},
        {"set_env": {"LD_PRELOAD": "/tmp/x.so"}},
        {"unset_env": ["TOKEN"]},
        {"fields": {"time_limit_s": 60, "command": ["true", "x"]}},
    ):
        reply = system.call(ALICE, "edit", job=job, **asked)
        assert reply["error"]["code"] == "refused", asked
        assert "runs as her" in reply["error"]["message"]
        assert "not what it runs" in reply["error"]["message"]
    assert system.ok(ADA, "show", job=job, env=True) == before
    root = Caller(Identity.of(0, 0, [0]), 100)
    assert system.ok(root, "edit", job=job, fields={"command": ["true", "y"]})["changes"]
