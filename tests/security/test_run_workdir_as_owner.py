"""`gpudesk run` checks its jobs' working directories before it submits anything, on a shared
station too: in the member's own process, as she sees them, never as root. Root's engine still
does not look at a member's folder (tests/shared/test_shared_edit.py): her job starts as her,
and learns there what she may enter.

Needs root (real users), a real system engine and a Python the users may run; skipped, saying
why, where it cannot run."""

from __future__ import annotations

import subprocess

from station_fixture import Station


def test_a_members_workdirs_are_checked_as_she_sees_them_before_anything_is_submitted(
    user_station: Station,
) -> None:
    station = user_station
    folder = station.state_dir.parent  # the station's own, 0755 (make_station)
    ada = station.users["ada"]
    own = folder / "ada"
    own.mkdir()
    (own / "notes").write_text("a file, not a folder\n")
    # root's own folder, closed to her: root would see a file in it, she sees nothing
    closed = folder / "root-only"
    closed.mkdir(mode=0o700)
    (closed / "secret").write_text("root's\n")
    for path in (own, own / "notes"):
        subprocess.run(["chown", f"{ada.uid}:{ada.gid}", str(path)], check=True)

    profile = own / "p.toml"
    profile.write_text(
        f'[[jobs]]\nname = "filed"\ncommand = ["true"]\nworkdir = "{own / "notes"}"\n'
    )
    subprocess.run(["chown", f"{ada.uid}:{ada.gid}", str(profile)], check=True)
    refused = station.gpudesk_as("ada", "run", str(profile))
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    assert (
        f"p.toml:4: jobs[0].workdir: the working directory {own / 'notes'} is not a "
        in " ".join(refused.stderr.split())
    ), refused.stderr
    assert "a regular file" in refused.stderr and "Traceback" not in refused.stderr
    assert station.ok(None, "jobs")["jobs"] == []  # nothing submitted

    # what she cannot see into is not judged by her check (root's view is not hers either):
    # submitted, and the job, started as her, fails entering it
    profile.write_text(
        f'[[jobs]]\nname = "nosy"\ncommand = ["true"]\nworkdir = "{closed / "secret"}"\n'
    )
    tried = station.gpudesk_as("ada", "run", str(profile))
    assert tried.returncode == 1, (tried.stdout, tried.stderr)
    (job,) = station.ok(None, "jobs")["jobs"]
    assert job["state"] == "failed" and str(closed / "secret") in job["reason"], job
    assert "regular file" not in job["reason"]  # root never said what lies behind her reach
