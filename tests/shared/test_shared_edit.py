"""`edit` on a shared station: one system engine (root), real users (root only; see
station_fixture). Another member's edit is refused and changes nothing; the owner's runs as
her, and a working directory she cannot enter is refused to her as it would be at submit (the
engine, root, never runs her job there)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from station_fixture import Station, make_station

# one station for the module's two tests, which act on jobs of their own (its module-scoped
# fixture is made once: the module stays on one worker, --dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_shared_edit")


@pytest.fixture(scope="module")
def station() -> Iterator[Station]:
    yield from make_station()


def test_only_the_owner_or_an_admin_edits_and_the_job_runs_as_its_owner(
    station: Station,
) -> None:
    ada = station.users["ada"]
    home = Path(f"/home/{ada.name}")
    job = {"name": "ada-job", "command": ["true"], "workdir": str(home)}
    job_id = station.submit("ada", job, hold=True)
    bob = station.call("bob", "edit", job=job_id, fields={"name": "bobs", "workdir": "/root"})
    assert bob["ok"] is False and bob["error"]["code"] == "refused", bob
    message = bob["error"]["message"]
    assert ada.name in message and station.admin_group in message and "may edit it" in message
    script = "id -u; pwd"
    edited = station.ok(
        "ada", "edit", job=job_id, fields={"command": ["sh", "-c", script], "name": "adas"}
    )
    assert edited["changes"][0] == "name ada-job -> adas"
    station.ok("admin", "edit", job=job_id, fields={"time_limit_s": 600})
    assert station.job(job_id)["user"] == ada.name  # an admin's edit leaves the job hers
    station.ok("ada", "release", jobs=[job_id])
    done = station.wait_state(job_id, "succeeded", "failed")
    assert done["state"] == "succeeded", done
    assert Path(done["log"]).read_text().split("\n")[:2] == [str(ada.uid), str(home)]
    kinds = [e["kind"] for e in station.ok(None, "show", job=job_id)["events"]]
    assert kinds.count("edit") == 2


def test_a_workdir_the_owner_cannot_enter_fails_as_at_submit(station: Station) -> None:
    """Root's engine does not look at the new folder itself: the job starts as its owner,
    who cannot enter /root, exactly as a submit naming it would."""
    job = {"name": "nosy", "command": ["sh", "-c", "ls"], "workdir": "/tmp"}
    edited = station.submit("ada", job, hold=True)
    station.ok("ada", "edit", job=edited, fields={"workdir": "/root"})
    submitted = station.submit("ada", {**job, "workdir": "/root"})
    station.ok("ada", "release", jobs=[edited])
    ends = [station.wait_state(j, "succeeded", "failed") for j in (edited, submitted)]
    assert [e["state"] for e in ends] == ["failed", "failed"], ends
    assert ends[0]["reason"] == ends[1]["reason"] and "/root" in ends[0]["reason"], ends
