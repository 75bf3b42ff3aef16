"""`gpudesk cancel`, `hold` and `release` picks on a shared station: real users, a real system
engine and the real CLI, run by each user as `gpudesk` is (root only; see station_fixture).

A member's picks without --user/--me choose her own jobs, where they chose every member's and
printed a refusal for each of the others' (exit 1 whenever another member had a job of the
same name); an admin's still choose anyone's, and `--user bob` still tries bob's jobs, each
refused to a member on its own line, which names the job's id once (`job 3 (x): refused: job 3
belongs to …` said it twice)."""

from __future__ import annotations

import pytest
from station_fixture import Station

# the module-scoped station is made once: the module stays on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_station_picks")


def submitted(station: Station, role: str, *args: str) -> int:
    done = station.gpudesk_as(role, "submit", "--parsable", "--hold", *args, "--", "true")
    assert done.returncode == 0, done.stdout + done.stderr
    return int(done.stdout)


def refused_line(station: Station, job_id: int, name: str, owner: str, verb: str) -> str:
    """The line a member's command prints for another's job: its id said once."""
    return (
        f"job {job_id} ({name}): refused: it belongs to {station.users[owner].name}, and only "
        f"its owner or a member of {station.admin_group} may {verb} it"
    )


def test_a_members_picks_choose_her_own_jobs_and_user_names_anothers(
    user_station: Station,
) -> None:
    station = user_station
    adas = [submitted(station, "ada", "--name", f"x-{k}") for k in range(2)]
    bobs = [submitted(station, "bob", "--name", f"x-{k}") for k in range(2)]
    bob_name = station.users["bob"].name

    # her picks are her jobs: bob's are neither touched nor said, and she exits 0
    done = station.gpudesk_as("ada", "cancel", "--name", "x*")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"job {j} (x-{k}): cancelled" for k, j in enumerate(adas)]
    assert bob_name not in done.stdout + done.stderr and done.stderr == "", done.stderr
    assert [station.job(j)["state"] for j in adas] == ["cancelled", "cancelled"]
    assert [(station.job(j)["state"], station.job(j)["held"]) for j in bobs] == [
        ("queued", True),
        ("queued", True),
    ]
    # none of hers left: said whose jobs were searched (bob's are still live)
    for argv, said in (
        (("cancel", "--name", "x*"), "no live job of yours matches"),
        (("release", "--name", "x*"), "no held job of yours matches"),
        (("hold", "--me"), "no queued job of yours matches"),
        (("cancel", "--user", bob_name, "--name", "y*"), f"no live job of {bob_name}'s matches"),
    ):
        done = station.gpudesk_as("ada", *argv)
        assert (done.returncode, done.stdout, done.stderr.strip()) == (0, "", said), argv

    # --user bob: his jobs are tried, each refused to her on a line that says its id once
    done = station.gpudesk_as("ada", "release", "--user", bob_name, "--name", "x*")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        refused_line(station, j, f"x-{k}", "bob", "release") for k, j in enumerate(bobs)
    ]
    # so is one named by its id, and the JSON's outcome, which every client prints after it
    done = station.gpudesk_as("ada", "cancel", str(bobs[0]))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines() == [refused_line(station, bobs[0], "x-0", "bob", "cancel")]
    assert [station.job(j)["held"] for j in bobs] == [True, True]

    # an admin's picks are anyone's, as before: bob's jobs are released by her --name
    done = station.gpudesk_as("admin", "release", "--name", "x*")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"job {j} (x-{k}): released" for k, j in enumerate(bobs)]
    for job_id in bobs:
        assert station.wait_state(job_id, "succeeded", "failed")["state"] == "succeeded"
