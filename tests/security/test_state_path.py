"""A system engine's state folder and socket folder lie only where no member can change what
their path names (gpudesk/secure_path.py, the rule of OpenSSH's StrictModes): every folder on
the way root's and writable by root alone, or sticky (/tmp) with the next name root's. A state
folder under a member's own folder let her move root's folder aside and put hers, holding a
link, in its place; root then made a job's folders and records where the link pointed. Real
users, the real engine daemon (root only)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from local_users import LocalAccounts, local_accounts
from station_fixture import Station, make_station

from gpudesk.engine.startup import EXIT_BAD_HOME
from gpudesk.paths import user_name
from gpudesk.secure_path import insecure_step


@pytest.fixture
def accounts() -> Iterator[LocalAccounts]:
    with local_accounts({"alice": ["station"]}, groups=["station"], homes=True) as made:
        yield made


@pytest.fixture
def top() -> Iterator[Path]:
    """A folder of root's in the sticky /tmp, 0755, for the engines' paths and the targets."""
    folder = Path(tempfile.mkdtemp(prefix="gdsp-", dir="/tmp"))
    os.chmod(folder, 0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def as_alice(accounts: LocalAccounts, *argv: str) -> None:
    name = accounts.users["alice"].name
    subprocess.run(["runuser", "-u", name, "--", *argv], check=True, cwd="/", timeout=30)


def alice_home(accounts: LocalAccounts) -> Path:
    return Path(os.path.expanduser(f"~{accounts.users['alice'].name}"))


def start_system_engine(
    accounts: LocalAccounts, state_dir: Path, socket: Path, timeout: float = 15.0
) -> subprocess.CompletedProcess[str] | None:
    """The daemon started as the service starts it: its exit and words where it stopped within
    `timeout`; None where it was still running (it was then stopped)."""
    argv = [sys.executable, "-P", "-m", "gpudesk.engine.daemon", "--system"]
    argv += ["--state-dir", str(state_dir), "--socket", str(socket), "--group"]
    argv.append(str(accounts.groups["station"]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUDESK_")}
    env["GPUDESK_BACKEND"] = "none"
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.terminate()
        process.communicate(timeout=15)
        return None
    return subprocess.CompletedProcess(argv, process.returncode, out.decode(), "")


def test_a_state_folder_under_a_members_folder_is_refused_and_nothing_is_made(
    accounts: LocalAccounts, top: Path
) -> None:
    home = alice_home(accounts)
    as_alice(accounts, "mkdir", "-p", str(home / "st"))
    target = top / "target"
    target.mkdir()
    # what she would do once root made its folder there: hers in its place, a link in it
    as_alice(accounts, "mkdir", str(home / "st" / "new"))
    as_alice(accounts, "ln", "-s", str(target), str(home / "st" / "new" / "jobs"))
    for state_dir in (home / "st" / "new", home / "st" / "other"):
        done = start_system_engine(accounts, state_dir, top / "run" / "control.sock")
        assert done is not None, "the engine started on a state folder under hers"
        assert done.returncode == EXIT_BAD_HOME, done.stdout
        said = done.stdout
        assert f"lies under {home}, which belongs to {accounts.users['alice'].name}" in said
        assert "Traceback" not in said and "Nothing was changed" in said
        assert list(target.iterdir()) == []
        assert not (home / "st" / "other").exists() and not (top / "run").exists()


def test_a_socket_folder_under_a_members_folder_is_refused(
    accounts: LocalAccounts, top: Path
) -> None:
    home = alice_home(accounts)
    done = start_system_engine(accounts, top / "state", home / "run" / "control.sock")
    assert done is not None and done.returncode == EXIT_BAD_HOME, done
    assert f"socket folder {home / 'run'} lies under {home}" in done.stdout
    assert not (top / "state").exists() and not (home / "run").exists()


def test_a_folder_others_may_write_on_the_way_is_refused(
    accounts: LocalAccounts, top: Path
) -> None:
    shared = top / "shared"
    shared.mkdir()
    os.chown(shared, 0, accounts.groups["station"])
    os.chmod(shared, 0o775)  # root's, but the station's members may rename what is in it
    done = start_system_engine(accounts, shared / "a" / "state", top / "run" / "control.sock")
    assert done is not None and done.returncode == EXIT_BAD_HOME, done
    assert f"lies under {shared}, which others than its owner may write (mode 775)" in done.stdout
    assert list(shared.iterdir()) == []


def test_the_rule_folder_by_folder(accounts: LocalAccounts, top: Path) -> None:
    alice = accounts.users["alice"]
    hers = top / "hers"
    hers.mkdir()
    os.chown(hers, alice.uid, alice.gid)
    sticky = top / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    (sticky / "roots").mkdir()
    (sticky / "alices").mkdir()
    os.chown(sticky / "alices", alice.uid, alice.gid)
    (top / "roots-link").symlink_to(sticky / "roots")
    os.symlink(top / "hers", sticky / "alices-link")
    os.lchown(sticky / "alices-link", alice.uid, alice.gid)
    said = {
        path: insecure_step(path, user_name)
        for path in (
            top / "hers" / "x",
            sticky / "roots" / "state",
            sticky / "alices" / "state",
            sticky / "alices-link" / "state",
            top / "roots-link" / "state",
            top / "roots-link" / ".." / "alices" / "state",
            sticky / "alices",  # the last name is the caller's: it refuses another's folder
        )
    }
    assert said == {
        top / "hers" / "x": f"lies under {top / 'hers'}, which belongs to {alice.name}",
        sticky / "roots" / "state": None,
        sticky / "alices" / "state": (
            f"lies under {sticky / 'alices'}, which belongs to {alice.name}"
        ),
        sticky / "alices-link" / "state": (
            f"lies under {sticky / 'alices-link'}, which belongs to {alice.name}"
        ),
        top / "roots-link" / "state": None,
        top / "roots-link" / ".." / "alices" / "state": (
            f"lies under {sticky / 'alices'}, which belongs to {alice.name}"
        ),
        sticky / "alices": None,
    }


def test_a_root_path_under_the_sticky_tmp_starts_and_the_folders_made_are_reachable(
    accounts: LocalAccounts, top: Path
) -> None:
    state_dir, socket = top / "a" / "b" / "state", top / "r" / "s" / "control.sock"
    assert start_system_engine(accounts, state_dir, socket, timeout=5.0) is None
    # what the engine made on the way: root's, 0755 (members reach their logs and the socket)
    for folder in (top / "a", top / "a" / "b", top / "r"):
        info = os.lstat(folder)
        assert (info.st_uid, info.st_mode & 0o7777) == (0, 0o755), folder
    assert os.stat(state_dir).st_mode & 0o7777 == 0o711
    info = os.stat(socket.parent)
    assert (info.st_gid, info.st_mode & 0o7777) == (accounts.groups["station"], 0o750)


@pytest.fixture
def station() -> Iterator[Station]:
    yield from make_station()


def test_a_running_engine_makes_nothing_through_a_folder_a_member_was_later_let_write(
    station: Station,
) -> None:
    """The start check holds only while the folders on the way stay as they were: an admin who
    later lets the members write one (here the state folder's parent) must not let a member's
    link take root's writes. Root checks the way again before each job's folders and each
    put-back, and writes the database back only into the folder it put back."""
    top = station.state_dir.parent
    os.chmod(top, 0o777)
    target = Path(tempfile.mkdtemp(prefix="gdsp-target-", dir="/tmp"))
    try:
        mine = station.state_dir
        station.run_as("ada", "mv", str(mine), f"{mine}.old").check_returncode()
        station.run_as("ada", "mkdir", str(mine)).check_returncode()
        station.run_as("ada", "ln", "-s", str(target), str(mine / "jobs")).check_returncode()
        job = {"name": "planted", "command": ["echo", "planted"], "workdir": "/", "gpus": 0}
        job_id = station.submit("ada", job)
        failed = station.wait_state(job_id, "failed")
        said = station.ok(None, "show", job=job_id)["attempts"][0]["reason"]
        assert f"lies under {top}, which others than its owner may write" in said, failed
        time.sleep(2.5)  # the engine's looks at its folder, once a second
        assert list(target.iterdir()) == []
        assert sorted(os.listdir(mine)) == ["jobs"]  # no database, lock or log of root's
        assert "lies under" in station.log.read_text()  # the put-back, refused, says why
    finally:
        shutil.rmtree(target, ignore_errors=True)
