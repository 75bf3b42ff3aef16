"""A user database that does not answer keeps only the asker waiting (root only; real users,
a real system engine: station_fixture).

A submit names its owner from the user database (NSS), which over LDAP or SSSD may take
seconds. The lookup is made slow for real, in the engine alone: it runs in a private mount
namespace (`unshare -m`) whose /etc/nsswitch.conf asks `systemd` first for users and groups,
and whose /run/systemd/userdb (where nss-systemd finds the userdb services it asks) is a folder
of the test's. While that folder is empty a lookup goes on to `files` at once; once the test puts a
socket there that never answers, nss-systemd waits for it (45 s, its varlink timeout). Nothing
is faked inside the engine: glibc, nss-systemd and the varlink socket are real. Root's own
lookups stay quick (nss-systemd answers uid 0 itself), so the test's root client sees what
every other client of the engine sees while ada's submit waits."""

from __future__ import annotations

import base64
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from raw_client import read_reply, request_frame
from station_fixture import SYSTEM_PYTHON, Station, make_station

pytestmark = pytest.mark.xdist_group("test_slow_user_database")

NAME_BOUND_S = 10.0  # engine/requests/submission.py's


def _namespace_python(folder: Path, userdb: Path, python: str = sys.executable) -> str:
    """A wrapper that runs `python` (this one) in a private mount namespace where user and group
    lookups ask nss-systemd first, and nss-systemd's userdb folder is `userdb`."""
    lines = Path("/etc/nsswitch.conf").read_text().splitlines()
    nss = folder / "nsswitch.conf"
    others = [line for line in lines if not line.startswith(("passwd:", "group:"))]
    nss.write_text("\n".join(["passwd: systemd files", "group: systemd files", *others]) + "\n")
    wrapper = folder / "python-in-namespace"
    mounts = (
        "mount -t tmpfs gdtest /run/systemd && mkdir /run/systemd/userdb && "
        'mount --bind "$1" /run/systemd/userdb && mount --bind "$2" /etc/nsswitch.conf && '
        'shift 2 && exec "$@"'
    )
    wrapper.write_text(
        "#!/bin/sh\n"
        f"exec unshare -m --propagation private sh -c '{mounts}' sh {userdb} {nss} "
        f'{python} "$@"\n'
    )
    wrapper.chmod(0o700)
    return str(wrapper)


def _slow_nss_stations(
    folder: Path, python: str = sys.executable, engine_env: dict[str, str] | None = None
) -> Iterator[tuple[Station, Path]]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1): the engine gets a mount namespace of its own")
    if not os.path.isdir("/run/systemd") or not glob.glob("/usr/lib/*/libnss_systemd.so.2"):
        pytest.skip("needs nss-systemd (libnss_systemd.so.2) and /run/systemd to mount over")
    userdb = folder / "userdb"
    userdb.mkdir()
    wrapper = _namespace_python(folder, userdb, python)
    stations = make_station(python=wrapper, engine_env=engine_env)
    yield from ((station, userdb) for station in stations)


@pytest.fixture
def slow_nss_station(tmp_path: Path) -> Iterator[tuple[Station, Path]]:
    yield from _slow_nss_stations(tmp_path)


@pytest.fixture
def slow_nss_user_python_station(tmp_path: Path) -> Iterator[tuple[Station, Path]]:
    """A slow_nss_station whose engine runs a Python the users may run (tests/security/
    user_python.py): the producers and tracking workers it starts run as members."""
    from user_python import user_python_folder

    with user_python_folder() as python:
        # a tracked job waits for its MLflow run a second at most: no store answers here
        yield from _slow_nss_stations(tmp_path, python, {"GPUDESK_TRACKING_WAIT_S": "1"})


def _as_root(station: Station, op: str, timeout: float, **args: object) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(station.socket))
        sock.sendall(request_frame(op, args))
        return json.loads(read_reply(sock))  # type: ignore[no-any-return]


def released_into_silence(
    station: Station, silent: socket.socket, job_id: int, asked: list[socket.socket]
) -> tuple[float, dict]:
    """Root releases the held job (asking the database nothing of hers); once what its start
    needs asks the `silent` service (its connection kept in `asked`), root's `ping` and
    `status` are answered within 5 s each: (when it was asked, root's status reply)."""
    station.ok(None, "release", jobs=[job_id])
    asked.append(silent.accept()[0])
    started = time.monotonic()
    assert _as_root(station, "ping", timeout=5.0)["ok"]
    status = _as_root(station, "status", timeout=5.0)
    assert status["ok"], status
    return started, status


def silent_service(userdb: Path) -> socket.socket:
    """A userdb service that takes every connection and never answers: from now on, the user
    database NSS asks through `userdb` (systemd-userdbd's folder) is silent."""
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(str(userdb / "io.gdtest.Silent"))
    silent.listen(16)
    silent.settimeout(30)
    return silent


def test_a_user_database_that_does_not_answer_keeps_only_the_submitter_waiting(
    slow_nss_station: tuple[Station, Path],
) -> None:
    station, userdb = slow_nss_station
    job = {"name": "j", "command": ["true"], "workdir": "/tmp"}  # held: listed until the end
    first = station.submit("ada", job, hold=True)  # the database answers: stored with her name
    assert station.job(first)["user"] == station.users["ada"].name
    silent = silent_service(userdb)
    asked: list[socket.socket] = []
    args = json.dumps({"jobs": [job], "env": {"PATH": "/usr/bin:/bin"}, "hold": True})
    argv = [SYSTEM_PYTHON, str(station.client), str(station.socket), "submit", args]
    submitter = subprocess.Popen(
        ["runuser", "-u", station.users["ada"].name, "--", *argv],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    try:
        conn, _ = silent.accept()  # the engine's lookup of ada's name is asking the silent one
        asked.append(conn)
        started = time.monotonic()
        # every other client is answered meanwhile (before: the loop waited 45 s in getpwuid)
        assert _as_root(station, "ping", timeout=5.0)["ok"]
        assert _as_root(station, "jobs", timeout=5.0)["ok"]
        assert time.monotonic() - started < 5.0
        out, _ = submitter.communicate(timeout=NAME_BOUND_S + 20)
        reply = json.loads(out)
        assert not reply["ok"] and reply["error"]["code"] == "refused", reply
        uid = station.users["ada"].uid
        said = f"nothing was queued: asking the user database for uid {uid}'s name took longer"
        assert reply["error"]["message"].startswith(said), reply
        assert time.monotonic() - started >= NAME_BOUND_S - 1.0
    finally:
        submitter.kill()
        for conn in asked:
            conn.close()
        silent.close()
        (userdb / "io.gdtest.Silent").unlink()
    # the lookup's late answer (the socket gone: at once) is dropped, never stored
    time.sleep(1.0)
    listed = station.ok(None, "jobs")["jobs"]
    assert [j["id"] for j in listed] == [first]
    second = station.submit("ada", job, hold=True)  # the database answers again: queued, once
    assert [j["id"] for j in station.ok(None, "jobs")["jobs"]] == [first, second]


_SLOTS = {"station": {"slots": 3}}  # an admin's change of a station setting


def _popen_as(station: Station, role: str, op: str, args: dict) -> subprocess.Popen[str]:
    """`op` asked by `role`'s user through raw_client.py, its reply (JSON) on stdout."""
    argv = [SYSTEM_PYTHON, str(station.client), str(station.socket), op, json.dumps(args)]
    argv = ["runuser", "-u", station.users[role].name, "--", *argv]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd="/")


def test_while_the_user_database_does_not_answer_status_and_a_suspend_keep_the_loop_free(
    slow_nss_station: tuple[Station, Path],
) -> None:
    """`status` names its users as stored with their jobs, never asking the database on the
    loop (before: one lookup a user, on every desk's poll); a member's suspend names her once,
    off the loop (before: one lookup a job, each on the loop), as an admin's configure does.
    Unanswered in NAME_BOUND_S, each is done, its caller named "uid N" (before: refused): who
    may do it is judged by uid and the kernel's groups; the name is only its events' text."""
    station, userdb = slow_nss_station
    ada, admin = station.users["ada"], station.users["admin"]
    job = {"name": "long", "command": ["sleep", "600"], "workdir": "/tmp"}
    running = station.submit("ada", job)  # the database answers: stored with her name
    station.wait_state(running, "running")
    silent = silent_service(userdb)
    asked: list[socket.socket] = []
    asks: dict[str, tuple[str, dict]] = {"ada": ("suspend", {"jobs": [running]})}
    asks["admin"] = ("configure", _SLOTS)
    try:
        started = time.monotonic()
        status = _as_root(station, "status", timeout=5.0)
        assert status["ok"], status
        assert [(u["user"], u["uid"]) for u in status["result"]["users"]] == [(ada.name, ada.uid)]
        assert time.monotonic() - started < 5.0
        askers = {role: _popen_as(station, role, op, args) for role, (op, args) in asks.items()}
        try:
            for _ in askers:  # the engine asks the silent one for each asker's name
                asked.append(silent.accept()[0])
            started = time.monotonic()
            assert _as_root(station, "ping", timeout=5.0)["ok"]
            assert _as_root(station, "status", timeout=5.0)["ok"]
            assert time.monotonic() - started < 5.0
            out = {r: p.communicate(timeout=NAME_BOUND_S + 20)[0] for r, p in askers.items()}
            assert time.monotonic() - started < NAME_BOUND_S + 5.0
        finally:
            for asker in askers.values():
                asker.kill()
        [outcome] = json.loads(out["ada"])["result"]["results"]
        assert outcome["ok"] and outcome["outcome"] == "suspended", outcome
        assert json.loads(out["admin"])["result"]["changed"], out["admin"]
        assert station.wait_state(running, "suspended")["state"] == "suspended"
        shown = json.dumps(station.ok(None, "show", job=running))  # its events with it
        assert f"suspended by uid {ada.uid}" in shown, shown
        changes = json.dumps(station.ok(None, "status")["station_changes"])
        assert f"(by uid {admin.uid})" in changes, changes
    finally:
        for conn in asked:
            conn.close()
        silent.close()
        (userdb / "io.gdtest.Silent").unlink()
    # the database answers again: her resume and his next change are said as theirs
    [outcome] = station.ok("ada", "resume", jobs=[running])["results"]
    assert outcome["ok"], outcome
    assert station.wait_state(running, "running")["state"] == "running"
    assert f"resumed by {ada.name}" in json.dumps(station.ok(None, "show", job=running))
    assert station.ok("admin", "configure", station={"slots": 4})["changed"]
    changes = station.ok(None, "status")["station_changes"]
    assert f"(by {admin.name})" in json.dumps(changes), changes
    [cancelled] = station.ok(None, "cancel", jobs=[running], grace=1)["results"]
    assert cancelled["ok"], cancelled
    assert station.wait_state(running, "cancelled")["state"] == "cancelled"


def test_while_the_user_database_does_not_answer_a_listing_by_user_name_waits_alone(
    slow_nss_station: tuple[Station, Path],
) -> None:
    """`gpudesk queue --user NAME` sends her uid, looked up on its own machine: answered while
    the engine's user database is silent (before: the engine's loop asked it for the name). A
    name sent as is (an older client, an API user) is looked up off the loop. And a member's
    refusal names the admins without asking the database."""
    station, userdb = slow_nss_station
    ada = station.users["ada"]
    job = {"name": "j", "command": ["true"], "workdir": "/tmp"}
    held = station.submit("ada", job, hold=True)
    bobs = station.submit("bob", job, hold=True)
    silent = silent_service(userdb)
    asked: list[socket.socket] = []
    try:
        # a member's refusal names the admins: their group named at the engine's start (before:
        # asked of the database once a job, on the loop)
        started = time.monotonic()
        [raised] = station.ok("bob", "priority", jobs=[bobs], priority=5)["results"]
        assert not raised["ok"] and f"only a member of {station.admin_group}" in raised["outcome"]
        assert time.monotonic() - started < 5.0
        env = {**os.environ, "GPUDESK_SOCKET": str(station.socket), "COLUMNS": "300"}
        argv = [sys.executable, "-m", "gpudesk", "queue", "--user", ada.name, "--json"]
        listed = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=8, cwd="/")
        assert listed.returncode == 0, listed.stderr
        assert [j["id"] for j in json.loads(listed.stdout)["jobs"]] == [held]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as by_name:
            by_name.settimeout(NAME_BOUND_S + 20)
            by_name.connect(str(station.socket))
            by_name.sendall(request_frame("jobs", {"user": ada.name}))
            conn, _ = silent.accept()  # the engine asks the silent one for her uid
            asked.append(conn)
            started = time.monotonic()
            assert _as_root(station, "ping", timeout=5.0)["ok"]
            assert time.monotonic() - started < 5.0
            reply = json.loads(read_reply(by_name))
        said = f"asking the user database for the uid of '{ada.name}' took longer than"
        assert not reply["ok"] and reply["error"]["message"].startswith(said), reply
    finally:
        for conn in asked:
            conn.close()
        silent.close()
        (userdb / "io.gdtest.Silent").unlink()
    jobs = station.ok(None, "jobs", user=ada.name)["jobs"]  # the database answers again
    assert [j["id"] for j in jobs] == [held]


def test_while_the_user_database_does_not_answer_a_members_job_starts_without_the_engine(
    slow_nss_station: tuple[Station, Path],
) -> None:
    """A system engine runs a job only for the user who submitted it, still in the station's
    group, as the user database says at its start. Its wrapper asks (hw/wrapper.py
    owner_refused), not the engine (before: its loop asked, once a job start, and every client
    waited out a silent database with it). The job waits alone, and runs once it answers."""
    station, userdb = slow_nss_station
    ada = station.users["ada"]
    job = {"name": "who", "command": ["id", "-un"], "workdir": "/tmp"}
    job_id = station.submit("ada", job, hold=True)  # the database answers: stored with her name
    silent = silent_service(userdb)
    asked: list[socket.socket] = []
    try:
        # her job's start asks the silent one who she is
        started, _ = released_into_silence(station, silent, job_id, asked)
        shown = _as_root(station, "show", timeout=5.0, job=job_id)
        assert shown["ok"] and shown["result"]["job"]["state"] == "running", shown
        assert time.monotonic() - started < 5.0
    finally:
        for conn in asked:
            conn.close()
        silent.close()
        (userdb / "io.gdtest.Silent").unlink()
    # the database answers again: her job runs, as her
    assert station.wait_state(job_id, "succeeded", "failed", timeout=60)["state"] == "succeeded"
    said = station.ok(None, "log", job=job_id)
    assert base64.b64decode(said["data"]).decode().split() == [ada.name]


def _loader(station: Station, name: str) -> dict:
    [loader] = [v for v in station.ok(None, "status")["loaders"] if v["name"] == name]
    return loader  # type: ignore[no-any-return]


def test_while_the_user_database_does_not_answer_a_shared_loaders_start_waits_alone(
    slow_nss_user_python_station: tuple[Station, Path],
) -> None:
    """A station's producer runs as its dataset's owner, as the user database has her now, with
    her HOME from it: asked on a worker thread (loaders.launch_as), the producer shown as
    starting, and started once it answers (before: on the loop, at the start of the job that
    needed it, every client waiting out the silent database with it). Her job, started with
    it, waits for it as for any producer coming up."""
    station, userdb = slow_nss_user_python_station
    ada, name = station.users["ada"], "slowowner"
    dataset = {"name": name, "factory": "gpudesk.workloads.synthetic:make_dataset"}
    dataset |= {"args": {"size": 16, "shape": [4]}, "batch_size": 8, "workers": 0, "slots": 4}
    station.ok(None, "datasets", datasets=[dataset])
    job = {"name": "reads", "command": ["true"], "workdir": "/", "dataset": name}
    job_id = station.submit("ada", job, hold=True)  # the database answers: stored with her name
    silent = silent_service(userdb)
    asked: list[socket.socket] = []
    try:
        # her producer's start (and her job's) asks the silent one
        started, status = released_into_silence(station, silent, job_id, asked)
        [loader] = [v for v in status["result"]["loaders"] if v["name"] == name]
        assert loader["starting"] and loader["pid"] is None, loader
        assert time.monotonic() - started < 5.0
    finally:
        for conn in asked:
            conn.close()
        silent.close()
        (userdb / "io.gdtest.Silent").unlink()
    # the database answers again: the producer starts, as her; her job ran
    assert station.wait_state(job_id, "succeeded", "failed", timeout=60)["state"] == "succeeded"
    deadline = time.monotonic() + 30
    while (loader := _loader(station, name))["pid"] is None or loader.get("starting"):
        assert time.monotonic() < deadline, loader
        time.sleep(0.2)
    assert psutil.Process(loader["pid"]).uids().real == ada.uid, loader


def _tracking_worker(uid: int) -> psutil.Process | None:
    for process in psutil.process_iter(["cmdline", "uids"]):
        uids = process.info["uids"]
        if "gpudesk.tracking.worker" in (process.info["cmdline"] or []) and uids.real == uid:
            return process
    return None


def test_while_the_user_database_does_not_answer_a_tracking_workers_start_waits_alone(
    slow_nss_user_python_station: tuple[Station, Path],
) -> None:
    """A member's tracking worker runs as her, as the user database has her now, with her HOME
    from it: asked on a worker thread (trust.known_environment), her run's updates queued for it
    meanwhile, and started once the database answers (before: on the loop, as her job was
    placed, every client waiting out the silent database with it). Status marks it starting
    meanwhile, as it marks a producer whose owner is being asked."""
    station, userdb = slow_nss_user_python_station
    ada = station.users["ada"]
    tracking = {"mlflow_uri": "http://127.0.0.1:1/", "experiment": "slow"}  # no store answers
    job = {"name": "tracked", "command": ["true"], "workdir": "/", "tracking": tracking}
    job_id = station.submit("ada", job, hold=True)  # the database answers: stored with her name
    silent = silent_service(userdb)
    asked: list[socket.socket] = []
    try:
        # her worker's start asks the silent one who she is
        started, status = released_into_silence(station, silent, job_id, asked)
        [store] = [s for s in status["result"]["tracking"] if s["uid"] == ada.uid]
        assert store.get("error") is None and store["queued"], store  # her run waits for it
        assert store["starting"], store  # shown as a producer being started is
        assert time.monotonic() - started < 5.0
        assert _tracking_worker(ada.uid) is None
    finally:
        for conn in asked:
            conn.close()
        silent.close()
        (userdb / "io.gdtest.Silent").unlink()
    # the database answers again: her worker starts, as her; her job runs
    deadline = time.monotonic() + 30
    while (worker := _tracking_worker(ada.uid)) is None:
        assert time.monotonic() < deadline, station.ok(None, "status")["tracking"]
        time.sleep(0.2)
    assert worker.uids().real == ada.uid
    [store] = [s for s in station.ok(None, "status")["tracking"] if s["uid"] == ada.uid]
    assert not store.get("starting"), store  # sent only when set (omit_defaults)
    assert station.wait_state(job_id, "succeeded", "failed", timeout=60)["state"] == "succeeded"
