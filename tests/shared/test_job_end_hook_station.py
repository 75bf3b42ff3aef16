"""Job-end hooks on a system engine with real users (root only; station_fixture): the station's
hook is taken only from a hooks.toml of root's and runs as root; a member's `--notify` runs as
her, with an environment the engine built, never the one her request sent."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import wait_for
from station_fixture import Station, make_station


@pytest.fixture
def station() -> Iterator[Station]:
    yield from make_station()


def _restart(station: Station) -> None:
    station.stop()
    station.start()


def _variables(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_the_station_hook_is_roots_alone_and_a_members_notify_runs_as_her(
    station: Station,
) -> None:
    ada = station.users["ada"]
    top = station.state_dir.parent
    ran = top / "hook-ran"
    config = station.state_dir / "hooks.toml"
    # each hook writes its files, then renames the one the test waits for into place: a file
    # seen is a file complete (the test once read `hook-ran.env` while `hook-ran` alone existed)
    script = f"env > {ran}.env; id -u > {ran}.part; mv {ran}.part {ran}"
    config.write_text(f'[job_end]\ncommand = ["/bin/sh", "-c", "{script}"]\n')
    # a hooks.toml a member wrote (or could write) is not root's word: no hook runs
    os.chown(config, ada.uid, ada.gid)
    _restart(station)
    first = station.submit("ada", {"name": "one", "command": ["true"], "workdir": "/"})
    station.wait_state(first, "succeeded")
    wait_for(lambda: "hooks.toml: not used" in station.log.read_text(), 10, what="the refusal")
    assert "owned by uid" in station.log.read_text()
    assert not ran.exists() and not (station.state_dir / "hooks.log").exists()
    os.chown(config, 0, 0)
    os.chmod(config, 0o664)
    _restart(station)
    wait_for(lambda: "others may write it" in station.log.read_text(), 10, what="the refusal")
    os.chmod(config, 0o644)
    _restart(station)

    home = Path(f"/home/{ada.name}")
    notify = "id -u > $HOME/notified; env > $HOME/env.part; mv $HOME/env.part $HOME/notified.env"
    sent = {
        "PATH": "/usr/bin:/bin",
        "LD_PRELOAD": "/nonexistent/evil.so",
        "ADA_SECRET": "from her request",
        "HOME": "/tmp/elsewhere",
    }
    job = {"name": "two", "command": ["true"], "workdir": "/", "notify": notify}
    job_id = station.submit("ada", job, sent, umask=0o027)  # her shell's umask, as sent
    station.wait_state(job_id, "succeeded")
    wait_for(lambda: ran.exists() and (home / "notified.env").exists(), 20, what="both hooks")
    # the station's hook: root, told whose job it was
    assert ran.read_text().strip() == "0"
    told = _variables(Path(f"{ran}.env"))
    assert told["GPUDESK_JOB_ID"] == str(job_id) and told["GPUDESK_JOB_OWNER"] == ada.name
    assert told["GPUDESK_JOB_STATE"] == "succeeded" and "ADA_SECRET" not in told
    # hers: as her, in an environment the engine built (her HOME from the password database)
    assert (home / "notified").read_text().strip() == str(ada.uid)
    assert os.stat(home / "notified").st_uid == ada.uid
    # with her job's umask (the submitter's); the station's hook, root's, with the engine's 077
    assert oct(os.stat(home / "notified").st_mode & 0o777) == oct(0o640)
    assert oct(os.stat(ran).st_mode & 0o777) == oct(0o600)
    env = _variables(home / "notified.env")
    assert env["HOME"] == str(home) and env["USER"] == ada.name
    assert "LD_PRELOAD" not in env and "ADA_SECRET" not in env
    assert env["GPUDESK_JOB_ID"] == str(job_id) and env["GPUDESK_JOB_STATE"] == "succeeded"


def test_a_members_hanging_notify_hooks_never_delay_another_members(station: Station) -> None:
    """Ada's three jobs end with --notify hooks that hang (killed at 30 s); Bob's job, ending
    after them, has his hook run at once, as Bob, on a worker of his own lane's."""
    bob = station.users["bob"]
    hanging = [
        station.submit(
            "ada", {"name": f"hang{n}", "command": ["true"], "workdir": "/", "notify": "sleep 60"}
        )
        for n in range(3)
    ]
    for job_id in hanging:
        station.wait_state(job_id, "succeeded")
    mark = Path(f"/home/{bob.name}/bob-notified")
    notify = "id -u > $HOME/bob.part; mv $HOME/bob.part $HOME/bob-notified"
    spec = {"name": "b", "command": ["true"], "workdir": "/", "notify": notify}
    mine = station.submit("bob", spec)
    asked = time.monotonic()
    station.wait_state(mine, "succeeded")
    wait_for(mark.exists, 20, what="Bob's hook, while Ada's hang")
    assert time.monotonic() - asked < 25  # Ada's hooks are killed at 30 s: his did not wait
    assert mark.read_text().strip() == str(bob.uid) and os.stat(mark).st_uid == bob.uid


def test_a_stopping_engine_kills_a_members_hanging_hooks_and_starts_none_of_those_waiting(
    station: Station,
) -> None:
    """Ada's three jobs end with --notify hooks that hang: two run (her lane's share), the
    third waits. The engine stops: her two are killed, and the third never starts (a worker the
    kill freed used to start it, as her, and it then ran on with no engine to end it)."""
    ada = station.users["ada"]
    home = Path(f"/home/{ada.name}")
    notify = "touch $HOME/hook-started-$GPUDESK_JOB_ID; exec sleep 300"
    jobs = [
        station.submit(
            "ada", {"name": f"h{n}", "command": ["true"], "workdir": "/", "notify": notify}
        )
        for n in range(3)
    ]
    for job_id in jobs:
        station.wait_state(job_id, "succeeded")
    wait_for(lambda: len(list(home.glob("hook-started-*"))) == 2, 20, what="two of her hooks")
    station.stop()
    # a hook started as the engine stopped would outlive it (sleep 300): none of hers may
    wait_for(lambda: not _processes_of(ada.uid), 10, what="none of her hooks left running")
    assert len(list(home.glob("hook-started-*"))) == 2, sorted(home.glob("hook-started-*"))


def _processes_of(uid: int) -> list[list[str]]:
    return [
        p.info["cmdline"]
        for p in psutil.process_iter(["uids", "cmdline", "status"])
        if p.info["uids"].real == uid and p.info["status"] != psutil.STATUS_ZOMBIE
    ]
