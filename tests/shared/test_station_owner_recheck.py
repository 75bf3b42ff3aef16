"""A member's job that waits is started only for the member who submitted it (root only; real
users and a real system engine: station_fixture).

A job keeps its owner's uid and, since schema 21, her user name. While it waits, the member can
be deleted and her uid given to a new user (`useradd` hands out the freed uid again), or be
taken out of the station's group. Started as it was, the job would run as the uid's new holder,
who may not even be a member, or as someone the station no longer serves. At its start the
engine checks the owner against the user database as it is then, and fails the job saying why
(as Slurm's slurmd refuses a job of a user the host does not know); `queue` and `show` keep
naming the member who submitted it."""

from __future__ import annotations

import grp
import os
import pwd
import sqlite3
import subprocess
import time
from collections.abc import Iterator

import pytest
from local_users import LocalUser
from station_fixture import Station, make_station

# one station for the module: each test changes a user of its own (ada deleted, bob taken out
# of the group), so neither disturbs the other (the module stays on one worker, --dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_station_owner_recheck")


@pytest.fixture(scope="module")
def station() -> Iterator[Station]:
    yield from make_station()


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


def _held(station: Station, role: str, name: str, attempts: int = 1) -> int:
    job = {"name": name, "command": ["id"], "workdir": "/", "gpus": 0, "max_attempts": attempts}
    return station.submit(role, job, hold=True)


def _released_and_failed(station: Station, job_id: int) -> str:
    """Root releases the job; it must fail at its start, and nothing of it run: its reason."""
    station.ok(None, "release", jobs=[job_id])
    done = station.wait_state(job_id, "succeeded", "failed")
    assert done["state"] == "failed", done
    [attempt] = station.ok(None, "show", job=job_id)["attempts"]
    assert attempt["exit_code"] is None, attempt  # it never ran: no `id` exited
    return str(attempt["reason"])


def test_a_deleted_members_uid_given_to_a_new_user_does_not_run_her_job(
    station: Station,
) -> None:
    ada = station.users["ada"]
    job_id = _held(station, "ada", "adajob")
    _run("pkill", "-KILL", "-u", ada.name)
    for _ in range(50):
        if _run("userdel", "-r", ada.name).returncode == 0:
            break
        time.sleep(0.1)
    newcomer = f"gdnew{ada.name[-6:]}"
    made = _run("useradd", "-M", "-o", "-u", str(ada.uid), "-s", "/bin/sh", newcomer)
    assert made.returncode == 0, made.stderr
    try:
        said = _released_and_failed(station, job_id)
        # (a test beside this one may have made a user on the freed uid first: -o above)
        assert f"uid {ada.uid} now belongs to " in said and f"not to {ada.name}, who" in said
        # the job is still ada's, by the name she submitted it under, for everyone who lists it
        assert station.job(job_id)["user"] == ada.name
        [listed] = [j for j in station.ok(None, "jobs")["jobs"] if j["id"] == job_id]
        assert listed["user"] == ada.name, listed
    finally:
        _run("userdel", newcomer)


def test_a_member_taken_out_of_the_station_group_has_her_waiting_job_failed(
    station: Station,
) -> None:
    bob = station.users["bob"]
    job_id = _held(station, "bob", "bobjob", attempts=3)  # a refusal is not retried: one attempt
    assert _run("gpasswd", "-d", bob.name, station.group).returncode == 0
    try:
        said = _released_and_failed(station, job_id)
        assert f"{bob.name} (uid {bob.uid}) is no longer a member of {station.group}" in said
        assert "the station serves its members only" in said, said
    finally:
        _run("gpasswd", "-a", bob.name, station.group)
    # back in the group, a job of his runs as before
    again = _held(station, "bob", "bobjob2")
    station.ok(None, "release", jobs=[again])
    assert station.wait_state(again, "succeeded", "failed")["state"] == "succeeded"
    assert grp.getgrnam(station.group).gr_gid in set(station.users["bob"].groups)


def _free_uid() -> int:
    """A uid no user has, above useradd's range (UID_MAX, 60000 by default): no other test's
    useradd takes it between our users, as it takes the lowest after the highest in use."""
    for uid in range(61000 + os.getpid() % 2000, 64000):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    raise AssertionError("no free uid in 61000-63999")


def _new_user(station: Station, role: str, uid: int) -> None:
    """A member of the station on `uid`, known to the tests as `role`."""
    name = f"gd{role}{station.users['ada'].name[-6:]}"
    made = _run("useradd", "-M", "-o", "-u", str(uid), "-s", "/bin/sh", "-G", station.group, name)
    assert made.returncode == 0, made.stderr
    station.users[role] = LocalUser(name, uid, pwd.getpwnam(name).pw_gid)


def test_a_member_made_on_a_uid_the_engine_had_just_missed_is_recorded_by_name(
    station: Station,
) -> None:
    """The engine remembers a uid it found no user for, for a minute (its listings name every
    job's owner). A member made on that uid within the minute had her jobs stored with no name,
    so a waiting one ran as whoever held the uid next, a member too: no check could tell."""
    uid = _free_uid()
    try:
        _new_user(station, "car", uid)
        carols = _held(station, "car", "carjob")
        assert _run("userdel", station.users["car"].name).returncode == 0
        # status names the waiting job's owner as stored with it, asking the user database
        # nothing (it would stall the engine's loop): carol, though her uid has no user now
        shares = station.ok(None, "status")["users"]
        carol = station.users["car"].name
        assert [s["user"] for s in shares if s["uid"] == uid] == [carol], shares
        _new_user(station, "dav", uid)
        daves = _held(station, "dav", "davjob")
        assert _run("userdel", station.users["dav"].name).returncode == 0
        _new_user(station, "eri", uid)
        erin, dave, carol = (station.users[r].name for r in ("eri", "dav", "car"))
        said = _released_and_failed(station, daves)
        assert f"uid {uid} now belongs to {erin}, not to {dave}, who submitted" in said, said
        said = _released_and_failed(station, carols)
        assert f"uid {uid} now belongs to {erin}, not to {carol}, who submitted" in said, said
    finally:
        for role in ("car", "dav", "eri"):
            if role in station.users:
                _run("userdel", station.users.pop(role).name)


def test_a_job_stored_before_names_were_kept_still_runs_and_names_its_owner(
    station: Station,
) -> None:
    """A store from before schema 21 has no name for its jobs' owners: such a job still runs
    (its uid's user now is all there is to go by) and is shown by that user's name."""
    admin = station.users["admin"]
    job_id = _held(station, "admin", "oldjob")
    station.stop()
    with sqlite3.connect(station.state_dir / "gpudesk.db") as db:
        db.execute("UPDATE jobs SET owner_login = NULL WHERE id = ?", (job_id,))
    station.start()
    assert station.job(job_id)["user"] == admin.name
    station.ok(None, "release", jobs=[job_id])
    assert station.wait_state(job_id, "succeeded", "failed")["state"] == "succeeded"
