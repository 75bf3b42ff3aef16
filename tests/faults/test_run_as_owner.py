"""Jobs run as their owner (issue 17), with real Unix users: root only.

A real engine's collaborators run in this (root) process and are driven step by step, as the
daemon's loop drives them; requests come in as raw bytes from callers whose identities are those
of two real users made for the test (as the kernel would report them). A job of another user runs
as that user: its uid, primary and supplementary groups, the PATH it was sent, its working
directory entered as that user; its log is its owner's alone, its folders the engine's; a cancel
kills everything it started; its log is read through the engine by its owner and an admin only.
The users' jobs use system binaries: the project's interpreter sits in root's home, which they
cannot read.
"""

from __future__ import annotations

import base64
import grp
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from conftest import EngineInProcess
from local_users import local_accounts

from gpudesk.core.identity import Caller, Identity
from gpudesk.core.station import StationConfig
from gpudesk.paths import Home
from gpudesk.policy.access import Access

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: makes real users and runs jobs as them"
)


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    caller: Caller


@dataclass(frozen=True)
class Users:
    ada: User  # owns the jobs; also in `team`
    bob: User  # another user
    team: int  # a supplementary group of ada's


@pytest.fixture
def users() -> Iterator[Users]:
    with local_accounts({"ada": ["team"], "bob": []}, groups=["team"]) as made:

        def user(role: str) -> User:
            account = made.users[role]
            identity = Identity.of(account.uid, account.gid, account.groups)
            return User(account.name, account.uid, account.gid, Caller(identity, None))

        yield Users(user("ada"), user("bob"), made.groups["team"])


class Station(EngineInProcess):
    """A personal engine's collaborators, run by root, driven step by step."""

    def submit(self, user: User, command: str, workdir: str, env: dict[str, str]) -> int:
        job = {"name": "j", "command": command, "shell": True, "workdir": workdir}
        return self.ok(user.caller, "submit", jobs=[job], env=env)["ids"][0]  # type: ignore[no-any-return]

    def wait(self, user: User, job_id: int, states: set[str], timeout: float = 20.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            self.step()
            job = self.ok(user.caller, "show", job=job_id)["job"]
            if job["state"] in states:
                return job  # type: ignore[no-any-return]
            assert time.monotonic() < deadline, f"job {job_id} is still {job['state']}"
            time.sleep(0.05)


@pytest.fixture
def station() -> Iterator[Station]:
    # The home in a folder others may pass through, so that what keeps a user from another's
    # log is the job's own folder and file, not the home around them.
    top = Path(tempfile.mkdtemp(prefix="gd-owner-", dir="/tmp"))
    top.chmod(0o711)
    home = Home(top / "home")
    station = Station(home, StationConfig(backend="none", slots=2), Access(os.getuid(), None))
    try:
        yield station
    finally:
        station.close()
        shutil.rmtree(top, ignore_errors=True)


def open_up(home: Home) -> None:
    """Let anyone pass through the home and its jobs folder (a system engine's layout decides
    this; here it shows that the job's folder and log are private on their own)."""
    home.root.chmod(0o711)
    home.jobs_dir.chmod(0o711)


def as_user(user: User, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        user=user.uid,
        group=user.gid,
        extra_groups=[],
        cwd="/",
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )


@pytest.fixture
def workdir(users: Users) -> Iterator[Path]:
    """A folder of ada's with a `python` of hers on a bin folder of hers."""
    folder = Path(tempfile.mkdtemp(prefix="gd-ada-", dir="/tmp"))
    bindir = folder / "bin"
    bindir.mkdir()
    (bindir / "python").write_text("#!/bin/sh\necho the python of ada\n")
    (bindir / "python").chmod(0o755)
    for path in (folder, bindir, bindir / "python"):
        os.chown(path, users.ada.uid, users.ada.gid)
    folder.chmod(0o700)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def log_of(station: Station, job_id: int) -> Path:
    return station.engine.home.attempt_dir(job_id, 1) / "output.log"


def test_a_job_runs_as_its_owner_with_her_groups_path_and_workdir(
    station: Station, users: Users, workdir: Path
) -> None:
    ada = users.ada
    path = f"{workdir}/bin:/usr/bin:/bin"
    job_id = station.submit(
        ada, "id -u; id -g; id -G; pwd; command -v python; python", str(workdir), {"PATH": path}
    )
    job = station.wait(ada, job_id, {"succeeded", "failed"})
    lines = log_of(station, job_id).read_text().splitlines()
    assert job["state"] == "succeeded", lines
    assert lines[0] == str(ada.uid)
    assert lines[1] == str(ada.gid)
    assert sorted(int(g) for g in lines[2].split()) == sorted({ada.gid, users.team})
    assert lines[3] == str(workdir)
    assert lines[4:] == [f"{workdir}/bin/python", "the python of ada"]


def test_a_command_is_looked_up_on_her_path_and_a_miss_names_that_path(
    station: Station, users: Users, workdir: Path
) -> None:
    """A bare name (no shell) is found on the PATH she sent, as her: her own `python`, which
    root's PATH has not. One found nowhere fails with 127, and the line her log gets names
    her PATH (read from the job's environment, never the engine's own)."""
    ada = users.ada
    path = f"{workdir}/bin:/usr/bin:/bin"
    ids = [
        station.ok(
            ada.caller,
            "submit",
            jobs=[{"name": name, "command": [program], "workdir": str(workdir)}],
            env={"PATH": path},
        )["ids"][0]
        for name, program in (("hers", "python"), ("missing", "python-not-hers-xyz"))
    ]
    found, missing = (station.wait(ada, job_id, {"succeeded", "failed"}) for job_id in ids)
    assert found["state"] == "succeeded"
    assert log_of(station, ids[0]).read_text() == "the python of ada\n"
    attempt = station.ok(ada.caller, "show", job=ids[1])["attempts"][-1]
    assert (missing["state"], attempt["exit_code"]) == ("failed", 127)
    assert attempt["reason"] == (
        "command not found: python-not-hers-xyz (not on the job's PATH, the submitting shell's; "
        "was its virtual environment active?)"
    )
    assert log_of(station, ids[1]).read_text().splitlines()[-1] == (
        f"gpudesk: the job's PATH: {path}"
    )


def test_the_log_is_the_owners_alone_and_the_folders_the_engines(
    station: Station, users: Users, workdir: Path
) -> None:
    ada, bob = users.ada, users.bob
    job_id = station.submit(ada, "echo secret of ada", str(workdir), {"PATH": "/usr/bin:/bin"})
    station.wait(ada, job_id, {"succeeded"})
    open_up(station.engine.home)
    log = log_of(station, job_id)
    st = log.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (ada.uid, 0o600)
    for folder in (log.parent, log.parent.parent):  # jobs/<id>/<n> and jobs/<id>
        st = folder.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o711), folder
    assert as_user(ada, "cat", str(log)).stdout == "secret of ada\n"
    read = as_user(bob, "cat", str(log))
    assert read.returncode != 0 and "Permission denied" in read.stderr
    listed = as_user(bob, "ls", str(log.parent))
    assert listed.returncode != 0 and "Permission denied" in listed.stderr
    # the engine's records are the engine's alone
    for name in ("wrapper.json", "exit.json", "launch.lock"):
        st = (log.parent / name).stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode) & 0o077) == (0, 0), name


def test_the_owner_cannot_plant_a_link_for_root_to_follow(
    station: Station, users: Users, workdir: Path
) -> None:
    """The attempt's folder is the engine's: a job cannot put a name there that the engine's
    records (written by root) would follow; the records stay the engine's own files."""
    ada = users.ada
    target = workdir / "target"
    target.write_text("ada's file\n")
    os.chown(target, ada.uid, ada.gid)
    folder = station.engine.home.attempt_dir(1, 1)
    plant = (
        f"ln -s {target} {folder}/exit.json; ln -s {target} {folder}/wrapper.json.tmp; "
        f"ln {target} {folder}/output.log.1; echo planted=$?"
    )
    job_id = station.submit(ada, plant, str(workdir), {"PATH": "/usr/bin:/bin"})
    assert job_id == 1
    job = station.wait(ada, job_id, {"succeeded", "failed"})
    text = log_of(station, job_id).read_text()
    assert "Permission denied" in text and "planted=1" in text, text
    assert target.read_text() == "ada's file\n"
    assert job["state"] == "succeeded"  # its own exit record, not one it planted
    assert not (folder / "exit.json").is_symlink()


def test_a_workdir_the_owner_cannot_enter_fails_the_job(station: Station, users: Users) -> None:
    """Root could enter it: the job must not (126, and the line says why)."""
    ada = users.ada
    closed = Path(tempfile.mkdtemp(prefix="gd-closed-", dir="/tmp"))
    try:
        closed.chmod(0o700)  # root's
        job_id = station.submit(ada, "pwd", str(closed), {"PATH": "/usr/bin:/bin"})
        job = station.wait(ada, job_id, {"succeeded", "failed"})
        shown = station.ok(ada, "show", job=job_id)
        attempt = shown["attempts"][-1]
        assert job["state"] == "failed" and attempt["exit_code"] == 126
        said = f"cannot enter the working directory {closed}: Permission denied"
        assert said in log_of(station, job_id).read_text()
        assert said in attempt["reason"], attempt
    finally:
        shutil.rmtree(closed, ignore_errors=True)


def test_cancel_kills_everything_the_owners_job_started(
    station: Station, users: Users, workdir: Path
) -> None:
    ada = users.ada
    command = "sleep 300 & setsid sleep 301 & (sleep 302 &) ; echo started; wait"
    job_id = station.submit(ada, command, str(workdir), {"PATH": "/usr/bin:/bin"})
    station.wait(ada, job_id, {"running"})

    def adas() -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["uids"]) if p.info["uids"].real == ada.uid]

    deadline = time.monotonic() + 10
    while len(adas()) < 4 and time.monotonic() < deadline:  # sh and its three sleeps
        time.sleep(0.05)
    assert len(adas()) >= 4
    [result] = station.ok(ada, "cancel", jobs=[job_id], grace=1)["results"]
    assert result["ok"], result
    assert station.wait(ada, job_id, {"cancelled"})["state"] == "cancelled"
    deadline = time.monotonic() + 5
    while adas() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert adas() == []


def test_the_log_op_serves_the_owner_and_the_admins_only(
    station: Station, users: Users, workdir: Path
) -> None:
    ada, bob = users.ada, users.bob
    job_id = station.submit(ada, "printf 'one\\ntwo\\n'", str(workdir), {"PATH": "/usr/bin:/bin"})
    station.wait(ada, job_id, {"succeeded"})
    root = Caller(Identity.of(0, 0, [0]), None)
    for reader in (ada.caller, root):
        chunk = station.ok(reader, "log", job=job_id)
        assert base64.b64decode(chunk["data"]) == b"one\ntwo\n"
        assert (chunk["attempt"], chunk["skipped"], chunk["next"], chunk["end"]) == (1, 0, 8, 8)
    part = station.ok(ada, "log", job=job_id, offset=4, max_bytes=2)
    assert (base64.b64decode(part["data"]), part["next"]) == (b"tw", 6)
    refused = station.call(bob.caller, "log", job=job_id)
    assert refused["error"]["code"] == "refused"
    assert refused["error"]["message"] == (
        f"refused: job {job_id} belongs to {ada.name}, and only its owner or root may read its logs"
    )


def _held(station: Station, user: User, command: str) -> int:
    job = {"name": "j", "command": command, "shell": True, "workdir": "/"}
    args = {"jobs": [job], "env": {"PATH": "/usr/bin:/bin"}, "hold": True}
    return station.ok(user.caller, "submit", **args)["ids"][0]  # type: ignore[no-any-return]


def _released_reason(station: Station, user: User, job_id: int) -> str:
    station.ok(user.caller, "release", jobs=[job_id])
    job = station.wait(user, job_id, {"succeeded", "failed"})
    assert job["state"] == "failed", job
    attempt = station.ok(user.caller, "show", job=job_id)["attempts"][-1]
    assert not log_of(station, job_id).exists()  # nothing ran: no log was made for anyone
    return str(attempt["reason"])


def test_a_deleted_owners_job_runs_neither_as_her_uids_next_holder_nor_as_no_one(
    station: Station, users: Users
) -> None:
    """Slurm's slurmd refuses a job whose user the host does not know. Here a job waits, its
    owner is deleted and her uid given to a new user (useradd -o -u): run, it would be his
    process with her groups. It fails at launch naming both; once no one holds the uid, it
    fails saying so."""
    ada = users.ada
    reused, gone = _held(station, ada, "id"), _held(station, ada, "id")
    newcomer = f"gdnew{ada.name[-6:]}"
    assert subprocess.run(["userdel", ada.name], capture_output=True).returncode == 0
    made = subprocess.run(
        ["useradd", "-o", "-u", str(ada.uid), "--no-create-home", newcomer], capture_output=True
    )
    assert made.returncode == 0, made.stderr
    try:
        said = _released_reason(station, ada, reused)
        assert f"uid {ada.uid} now belongs to {newcomer}, not to {ada.name}" in said, said
    finally:
        subprocess.run(["userdel", newcomer], capture_output=True)
    said = _released_reason(station, ada, gone)
    assert f"its owner, {ada.name} (uid {ada.uid}), is no longer a user" in said, said


def test_a_group_taken_from_her_while_her_job_waits_is_not_given_to_it(
    station: Station, users: Users
) -> None:
    """The groups a job runs with are those it was submitted with that she still holds."""
    ada = users.ada
    job_id = _held(station, ada, "id -G")
    team = grp.getgrgid(users.team).gr_name
    assert subprocess.run(["gpasswd", "-d", ada.name, team], capture_output=True).returncode == 0
    station.ok(ada.caller, "release", jobs=[job_id])
    assert station.wait(ada, job_id, {"succeeded", "failed"})["state"] == "succeeded"
    ran_with = {int(g) for g in log_of(station, job_id).read_text().split()}
    assert ran_with == {ada.gid}


def test_a_deleted_owner_gets_no_notify_loader_producer_or_tracking_worker(
    users: Users, tmp_path: Path
) -> None:
    """The job's own launch is not the only process started as its owner: her --notify, a
    shared loader's producer for her job and her MLflow tracking worker are too, each with the
    identity the job was submitted with. None runs once her uid names no user."""
    from gpudesk.core.identity import OwnerGone
    from gpudesk.engine.services.tracking.sidecar import Sidecar
    from gpudesk.hw.job_hooks import HookRun, run_hook
    from gpudesk.loader.station_access import producer_identity

    ada = users.ada
    owner = Identity.of(ada.uid, ada.gid, [ada.gid, users.team], ada.name)
    assert producer_identity(None, owner, None) == Identity.of(
        ada.uid, ada.gid, [ada.gid, users.team], ada.name
    )
    assert subprocess.run(["userdel", ada.name], capture_output=True).returncode == 0
    said = producer_identity(None, owner, None)
    assert isinstance(said, str) and f"{ada.name} (uid {ada.uid}), is no longer a user" in said
    notify = HookRun(("/bin/sh", "-c", "true"), {}, owner, 10.0, "its --notify", 1, "")
    with pytest.raises(OwnerGone):
        run_hook(notify)
    # nor her MLflow tracking worker
    worker = Sidecar(ada.uid, owner, str(tmp_path / "worker.log"), lambda restart: None)
    worker.ensure_running()
    assert worker.process is None
    assert f"{ada.name} (uid {ada.uid}), is no longer a user" in str(worker.state.problem)
