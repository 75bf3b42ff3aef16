"""A member's job on a shared station writes with her umask, as under Slurm, not the system
engine's 077: what she means her group to read (umask 027, in a project folder of the group's)
her colleague reads. Real users, a real system engine and the real `gpudesk submit`, run by
her from a shell under umask 027 (root only)."""

from __future__ import annotations

import grp
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from station_fixture import Station

# its module-scoped station is made once: the module stays on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_station_umask")


@pytest.fixture
def project(user_station: Station) -> Iterator[Path]:
    """A group project folder: ada's, the station group's, setgid (2770), as a group's
    shared folder is set up."""
    folder = Path(tempfile.mkdtemp(prefix="gd-project-", dir="/tmp"))
    try:
        os.chown(folder, user_station.users["ada"].uid, grp.getgrnam(user_station.group).gr_gid)
        folder.chmod(0o2770)
        yield folder
    finally:
        for child in folder.iterdir():
            child.unlink()
        folder.rmdir()


def test_a_members_job_writes_with_her_umask(user_station: Station, project: Path) -> None:
    station = user_station
    under_027 = ["sh", "-c", 'umask 027 && exec "$@"', "sh"]
    argv = station.gpudesk_argv("submit", "--parsable", "-C", str(project), "--", "touch", "out")
    done = station.run_as("ada", *under_027, *argv)
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout.strip())
    assert station.wait_state(job_id, "succeeded", "failed")["state"] == "succeeded"
    made = (project / "out").stat()
    assert made.st_uid == station.users["ada"].uid  # hers, not root's
    assert oct(stat.S_IMODE(made.st_mode)) == oct(0o640)  # not the engine's 0600
    # her colleague reads it, as she meant
    assert station.run_as("bob", "cat", str(project / "out")).returncode == 0
    shown = station.gpudesk_as("ada", "show", str(job_id))
    assert shown.returncode == 0, shown.stderr
    assert "umask 0027" in shown.stdout, shown.stdout
