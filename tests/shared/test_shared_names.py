"""A job's name on a shared station names the member's own newest job of it, and only where she
has none the newest of anyone's (as Slurm's `scancel --name` is per user): another member's
newer job of the same name never shadows hers. Real users, a real system engine and the real
CLI, run by each user as `gpudesk` is (root only; see station_fixture)."""

from __future__ import annotations

from station_fixture import Station


def submitted(station: Station, role: str, *args: str) -> int:
    done = station.gpudesk_as(role, "submit", "--parsable", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return int(done.stdout)


def test_a_name_names_the_members_own_job_before_anothers_newer_one(
    user_station: Station,
) -> None:
    station = user_station
    bobs = submitted(station, "bob", "--hold", "--name", "common", "--", "true")
    adas = submitted(station, "ada", "--hold", "--name", "common", "--", "true")
    only_adas = submitted(station, "ada", "--hold", "--name", "adas-own", "--", "true")

    # --after NAME binds to bob's own job, not ada's newer one; a name only ada has is hers
    dep = submitted(station, "bob", "--hold", "--name", "bdep", "--after", "common", "--", "true")
    assert station.job(dep)["spec"]["after"] == [bobs]
    other = submitted(station, "bob", "--hold", "--name", "b2", "--after", "adas-own", "--", "true")
    assert station.job(other)["spec"]["after"] == [only_adas]

    # show: each member's own; root, who has no job of that name, sees the newest of anyone's
    assert station.ok("bob", "show", job="common")["job"]["id"] == bobs
    assert station.ok("ada", "show", job="common")["job"]["id"] == adas
    assert station.ok(None, "show", job="common")["job"]["id"] == adas

    # cancel by name acts on bob's own job and leaves ada's as it was
    done = station.gpudesk_as("bob", "cancel", "common")
    assert done.returncode == 0, done.stdout + done.stderr
    assert station.job(bobs)["state"] == "cancelled"
    assert station.job(adas)["state"] == "queued"
    # his dependant follows his job, never ada's (cancelled with it: its `after` failed)
    assert station.wait_state(dep, "cancelled")["state"] == "cancelled"

    # an admin with no job of that name acts on the newest of anyone's, as before
    done = station.gpudesk_as("admin", "cancel", "common")
    assert done.returncode == 0, done.stdout + done.stderr
    assert station.job(adas)["state"] == "cancelled"
