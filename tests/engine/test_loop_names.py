"""Names made on the engine's loop ask the user database nothing there (docs/reliability.md):
a caller the database answered quickly that it has no name for is named "uid N" by that answer
(`requests.common.named`), and a producer's owner in an error text is named as stored."""

from __future__ import annotations

import os
import pwd
from typing import Any

from conftest import EngineInProcess

from gpudesk.core.identity import Caller, Identity
from gpudesk.core.station import StationConfig
from gpudesk.engine.offloop import Later
from gpudesk.engine.requests.common import named
from gpudesk.paths import Home
from gpudesk.policy.access import Access


def _nameless_uid() -> int:
    """A uid the user database has no name for."""
    known = {entry.pw_uid for entry in pwd.getpwall()}
    return next(uid for uid in range(61000, 65000) if uid not in known)


def _handled(undone: str | None, uid: int) -> Caller:
    seen: list[Caller] = []

    def handler(_args: Any, caller: Caller) -> str:
        seen.append(caller)
        return "done"

    later = named(handler, undone)(None, Caller(Identity.of(uid, uid, ()), 7))
    assert isinstance(later, Later)
    assert later.finish(later.work()) == "done"  # the work is what the worker thread runs
    (caller,) = seen
    assert caller.pid == 7
    return caller


def test_a_caller_the_user_database_has_no_name_for_is_named_by_its_answer() -> None:
    uid = _nameless_uid()
    caller = _handled(None, uid)  # suspend's "by ...": text only
    assert caller.identity.login == f"uid {uid}"
    assert caller.name == f"uid {uid}"  # read from the answer: `user_name` not asked again
    assert _handled(None, 0).name == pwd.getpwuid(0).pw_name


def test_a_submits_nameless_owner_stays_nameless_for_its_jobs() -> None:
    """A submit stores its owner's login (None: no name at submit, judged by uid at launch)."""
    assert _handled("nothing was queued", _nameless_uid()).identity.login is None


def test_a_stored_name_is_never_asked_of_the_user_database() -> None:
    assert Identity.of(4242, 4242, (), "ada").stored_name == "ada"
    assert Identity.of(0, 0, ()).stored_name == "uid 0"  # root has a name; it is not asked


def test_status_names_a_user_with_no_stored_name_by_uid(home: Home) -> None:
    """`status`, asked twice a second by every desk, names each user as stored with her newest
    job; a uid none of whose jobs has a name (stored before schema 21) by its digits, not by
    asking the user database on the loop (here: uid 1, which the database does name)."""
    old = Caller(Identity.of(1, 1, [1]), 101)
    config = StationConfig(backend="none", slots=1)
    engine = EngineInProcess(home, config, Access(os.getuid(), 7000))
    try:
        job = {"name": "old", "command": ["true"]}
        engine.ok(old, "submit", jobs=[job], env={"PATH": "/bin"}, hold=True)
        assert [u["user"] for u in engine.ok(old, "status")["users"]] == [pwd.getpwuid(1).pw_name]
        engine.store._conn.execute("UPDATE jobs SET owner_login = NULL")  # as before schema 21
        assert [u["user"] for u in engine.ok(old, "status")["users"]] == ["1"]
    finally:
        engine.close()
