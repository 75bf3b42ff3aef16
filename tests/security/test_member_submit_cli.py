"""`gpudesk submit` as a member of a shared station: what the engine refuses of a job's field
is said as the option that gave it (`--priority: …`, not the request's `jobs[0] ('x').priority`),
exit 1 for a refusal (exit 2 for bad input), nothing queued. Real users, a real system engine
and the real CLI, run by each user as `gpudesk` is (root only)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from station_fixture import Station

# one station (and user Python) for the module's two tests: neither leaves a job of ada's
# (its module-scoped fixture is made once: the module stays on one worker, --dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_member_submit_cli")


def test_a_members_raised_priority_is_refused_as_the_option(user_station: Station) -> None:
    station = user_station
    done = station.gpudesk_as("ada", "submit", "--name", "jump", "--priority", "5", "--", "true")
    assert done.returncode == 1, done.stdout + done.stderr
    said = done.stderr
    assert said.startswith("error: --priority: refused: only "), said
    assert station.admin_group in said and "Nothing was submitted" in said
    assert "jobs[" not in said and "Traceback" not in said
    assert len(said.strip().splitlines()) == 1, said
    assert station.ok("ada", "jobs")["jobs"] == []
    # an admin may: the same command queues it
    done = station.gpudesk_as("admin", "submit", "--name", "jump", "--priority", "5", "--", "true")
    assert done.returncode == 0, done.stderr


def test_a_member_asking_for_the_station_engine_is_told_it_is_roots(
    user_station: Station,
) -> None:
    """The station's state folder is root's, 0711: click's own Path check refused it as "not
    readable" (exit 2), its default value too, before the command could say what is wrong."""
    station = user_station
    state = Path(tempfile.mkdtemp(prefix="gd-state-", dir="/tmp"))
    try:
        state.chmod(0o711)  # as a station's engine leaves its own
        argv = [station.python, "-P", "-m", "gpudesk", "engine", "start", "--system"]
        argv += ["--state-dir", str(state), "--socket", str(state / "run" / "control.sock")]
        done = station.run_as("ada", *argv)
    finally:
        state.rmdir()
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: a system engine runs as root"), done.stderr
    assert "not readable" not in done.stderr
