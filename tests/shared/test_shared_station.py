"""A shared station: one system engine, several real users (root only; see station_fixture)."""

from __future__ import annotations

import base64
import grp
import json
import os
import sqlite3
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import wait_for
from station_fixture import SYSTEM_PYTHON, Station, make_station

# The tests on `station` share one system engine and its users (made once: the module-scoped
# fixture stays on one worker, --dist loadgroup). Each leaves it as it found it: what it left
# queued, running or suspended is cancelled, the policy set back, the station undrained.
on_station = pytest.mark.xdist_group("test_shared_station")
LIVE = ["queued", "running", "suspended"]


@pytest.fixture(scope="module")
def shared_station() -> Iterator[tuple[Station, str]]:
    """The station, and its policy as it started."""
    for made in make_station():
        yield made, made.ok(None, "status")["station"]["policy"]


@pytest.fixture
def station(shared_station: tuple[Station, str]) -> Iterator[Station]:
    made, policy = shared_station
    yield made
    live = [j["id"] for j in made.ok(None, "jobs", states=LIVE, limit=1000)["jobs"]]
    if live:
        made.ok(None, "cancel", jobs=live, grace=0)
        for job in live:
            made.wait_state(job, "cancelled", "succeeded", "failed")
    status = made.ok(None, "status")
    if status["station"]["policy"] != policy:
        made.ok(None, "configure", station={"policy": policy})
    if status.get("drain"):
        made.ok(None, "undrain")


@on_station
def test_the_socket_serves_the_group_and_no_one_else(station: Station) -> None:
    folder = os.stat(station.socket.parent)
    sock = os.stat(station.socket)
    assert stat.S_IMODE(folder.st_mode) == 0o750 and folder.st_uid == 0
    assert stat.S_IMODE(sock.st_mode) == 0o660
    assert folder.st_gid == sock.st_gid == grp.getgrnam(station.group).gr_gid
    outsider = station.call("outsider", "ping")
    assert outsider.get("connect_error") == "EACCES", outsider
    assert station.call("ada", "ping")["ok"]


@on_station
def test_a_job_belongs_to_whoever_the_kernel_says_submitted_it(station: Station) -> None:
    job = {"name": "mine", "command": ["true"]}
    job_id = station.submit("ada", job)
    # what a client writes about itself is ignored: the kernel named the caller
    forged = station.submit("bob", job, user="root", uid=0)
    assert station.job(job_id)["user"] == station.users["ada"].name
    assert station.job(job_id)["uid"] == station.users["ada"].uid
    assert station.job(forged)["user"] == station.users["bob"].name


@on_station
def test_one_user_cannot_control_anothers_job_and_an_admin_can(station: Station) -> None:
    held = {"name": "ada-job", "command": ["sleep", "30"], "gpus": 0}
    job_id = station.submit("ada", held)
    for op in ("hold", "cancel", "requeue", "release"):
        args = {"jobs": [job_id]}
        result = station.ok("bob", op, **args)["results"][0]
        assert result["ok"] is False, (op, result)
        assert station.users["ada"].name in result["outcome"], result
        assert station.admin_group in result["outcome"], result
    result = station.ok("bob", "priority", jobs=[job_id], priority=5)["results"][0]
    assert result["ok"] is False
    env = station.call("bob", "show", job=job_id, env=True)
    assert env["ok"] is False and station.admin_group in env["error"]["message"]
    cancelled = station.ok("admin", "cancel", jobs=[job_id], grace=0)["results"][0]
    assert cancelled["ok"] is True
    assert station.wait_state(job_id, "cancelled")["state"] == "cancelled"


@on_station
def test_an_arrays_id_reaches_no_task_of_another_member(station: Station) -> None:
    """An array's id names all its tasks (as Slurm's `scancel 144`): bob naming ada's array by
    its id, or one task as `ID_TASK`, is refused for each of her tasks, none touched; an admin's
    cancel by the id reaches every task."""
    tasks = [
        {"name": f"ada-{k}", "command": ["sleep", "30"], "array_task": k}
        | ({"array_job": -1} if k else {})
        for k in range(3)
    ]
    ids = station.ok("ada", "submit", jobs=tasks, env={"PATH": "/usr/bin:/bin"}, hold=True)["ids"]
    for ref in (ids[0], f"{ids[0]}_2"):
        results = station.ok("bob", "cancel", jobs=[ref])["results"]
        assert [r["id"] for r in results] == (ids if ref == ids[0] else [ids[2]]), results
        assert all(r["ok"] is False for r in results), results
    assert all(
        station.call("ada", "show", job=i)["result"]["job"]["state"] == "queued" for i in ids
    )
    results = station.ok("admin", "cancel", jobs=[ids[0]], grace=0)["results"]
    assert [r["id"] for r in results] == ids and all(r["ok"] for r in results), results


@on_station
def test_a_non_admins_station_settings_are_reported_not_applied(station: Station) -> None:
    before = station.ok(None, "status")["station"]["policy"]
    wanted = "fifo" if before != "fifo" else "auto"
    reply = station.ok("ada", "configure", station={"policy": wanted})
    assert reply["changes"] == []
    assert [n["key"] for n in reply["not_applied"]] == ["policy"]
    assert station.admin_group in reply["not_applied"][0]["reason"]
    assert station.ok(None, "status")["station"]["policy"] == before
    applied = station.ok("admin", "configure", station={"policy": wanted})
    assert [c["key"] for c in applied["changes"]] == ["policy"]
    assert station.ok(None, "status")["station"]["policy"] == wanted


@on_station
def test_weighing_a_profiles_station_changes_nothing_for_member_or_admin(
    station: Station,
) -> None:
    """What `gpudesk run` asks of a profile's [station] without --apply-station
    (`check_configure`), from real users of a system engine: a member hears that the change
    would not be applied and why, the admin what would change; neither changes anything."""
    before = station.ok(None, "status")["station"]["policy"]
    wanted = "fifo" if before != "fifo" else "auto"
    member = station.ok("ada", "check_configure", station={"policy": wanted})
    assert member["changed"] is False and member["changes"] == []
    assert [n["key"] for n in member["not_applied"]] == ["policy"]
    assert station.admin_group in member["not_applied"][0]["reason"]
    admin = station.ok("admin", "check_configure", station={"policy": wanted})
    assert admin["changed"] is False and admin["not_applied"] == []
    assert [(c["key"], c["new"]) for c in admin["changes"]] == [("policy", wanted)]
    assert station.ok(None, "status")["station"]["policy"] == before


@on_station
def test_jobs_run_as_their_owner_with_the_environment_they_sent(station: Station) -> None:
    ada = station.users["ada"]
    home = Path(f"/home/{ada.name}")
    shim = home / "bin"
    shim.mkdir()
    (shim / "python").symlink_to("/usr/bin/python3")
    os.chown(shim, ada.uid, ada.gid)
    script = "id -u; id -g; id -G; pwd; command -v python; echo $GREETING"
    job = {"name": "who", "command": ["sh", "-c", script], "workdir": str(home), "gpus": 0}
    env = {"PATH": f"{shim}:/usr/bin:/bin", "GREETING": "hello from ada", "HOME": str(home)}
    job_id = station.submit("ada", job, env)
    done = station.wait_state(job_id, "succeeded", "failed")
    assert done["state"] == "succeeded", done
    log = Path(done["log"])
    lines = log.read_text().split("\n")
    groups = {int(g) for g in lines[2].split()}
    assert lines[0] == str(ada.uid) and lines[1] == str(ada.gid)
    assert grp.getgrnam(station.group).gr_gid in groups  # her supplementary group too
    assert lines[3:6] == [str(home), str(shim / "python"), "hello from ada"]
    # the log is hers and private: she reads it, bob cannot; the engine serves it to an admin
    assert os.stat(log).st_uid == ada.uid and stat.S_IMODE(os.stat(log).st_mode) == 0o600
    for role, allowed in (("ada", True), ("bob", False)):
        read = subprocess.run(
            ["runuser", "-u", station.users[role].name, "--", "cat", str(log)],
            capture_output=True,
            text=True,
        )
        assert (read.returncode == 0) is allowed, (role, read.stderr)
    refused = station.call("bob", "log", job=job_id)
    assert refused["ok"] is False and station.admin_group in refused["error"]["message"]
    served = station.ok("admin", "log", job=job_id)
    assert base64.b64decode(served["data"]).decode().startswith(str(ada.uid))


@pytest.fixture
def sim_station() -> Iterator[Station]:
    yield from make_station("sim:a100-40gbx1")


def test_fair_share_starts_the_lighter_users_job_first(sim_station: Station) -> None:
    whole_gpu = {"gpus": 1, "memory_gb": 30, "sm_pct": 90, "workdir": "/"}  # one at a time
    warm = sim_station.submit("ada", {"name": "ada-warm", "command": ["sleep", "2"], **whole_gpu})
    sim_station.wait_state(warm, "running")
    ada_next = sim_station.submit(
        "ada", {"name": "ada-next", "command": ["sleep", "1"], **whole_gpu}
    )
    bob_first = sim_station.submit(
        "bob", {"name": "bob-first", "command": ["sleep", "1"], **whole_gpu}
    )
    waiting = sim_station.ok("ada", "show", job=ada_next)["waiting"]
    assert waiting.startswith("fair share: behind 1 job of users with less recent usage"), waiting
    bob = sim_station.wait_state(bob_first, "succeeded", timeout=60)
    ada = sim_station.wait_state(ada_next, "succeeded", timeout=60)
    # submitted after ada's, at the same priority: bob, who had used nothing, went first
    assert bob["started_at"] < ada["started_at"]
    # and `status` shows both as fair share weighs them, the lighter first
    users = sim_station.ok("bob", "status")["users"]
    names = [u["user"] for u in users]
    assert names == [sim_station.users["bob"].name, sim_station.users["ada"].name], users
    assert 0 < users[0]["usage_gpu_h"] < users[1]["usage_gpu_h"]


def test_two_users_never_share_an_mps_server(sim_station: Station) -> None:
    light = {"gpus": 1, "memory_gb": 4, "sm_pct": 20, "workdir": "/"}
    ids = {}
    for role in ("ada", "bob", "ada", "bob"):
        job = {"name": f"{role}-light", "command": ["sleep", "3"], **light}
        job_id = sim_station.submit(role, job)
        ids[job_id] = role
    seen_mps: set[str] = set()
    reasons: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        # one reply, one instant: read job by job, a job that ended between two reads showed
        # as running beside the next user's first MPS client (a loaded machine did that)
        jobs = [j for j in sim_station.ok(None, "jobs")["jobs"] if j["id"] in ids]
        assert len(jobs) == len(ids), jobs
        under_mps = {j["user"] for j in jobs if j["state"] == "running" and j["mode"] == "mps"}
        assert len(under_mps) <= 1, f"two users under one MPS server: {jobs}"
        seen_mps |= under_mps
        if all(j["state"] in ("succeeded", "failed") for j in jobs):
            break
        time.sleep(0.1)
    assert all(sim_station.job(job_id)["state"] == "succeeded" for job_id in ids)
    for job_id in ids:
        for event in sim_station.ok(None, "show", job=job_id)["events"]:
            reasons.append(event["message"])
    assert seen_mps, "no job ran under MPS at all"
    assert any("an MPS server serves one user at a time" in r for r in reasons), reasons


LEAVES_WHEN_ASKED = """
import os, signal, sys, time
if os.environ.get("GPUDESK_PREEMPTED") == "1":
    print("resumed as", os.getuid(), flush=True)
    sys.exit(0)
def leave(*_):  # os.write: a print here may land inside the print below (reentrant)
    os.write(1, f"asked to leave as {os.getuid()}\\n".encode())
    os._exit(75)
signal.signal(signal.SIGUSR1, leave)
print("started as", os.getuid(), flush=True)
time.sleep(300)
"""


def test_a_preempted_job_is_signalled_and_resumed_as_its_owner(sim_station: Station) -> None:
    """Root's engine preempts bob's job for ada's: the signal reaches bob's own process (which
    catches it as bob), and the resumed attempt runs as bob again, told it was preempted."""
    whole_gpu = {"gpus": 1, "memory_gb": 30, "sm_pct": 90, "workdir": "/"}  # one at a time
    bob = sim_station.users["bob"]
    low = sim_station.submit(
        "bob",
        {
            "name": "bob-long",
            "command": ["python3", "-c", LEAVES_WHEN_ASKED],
            "priority": -10,
            "preemptible": True,
            "preempt_grace_s": 1.0,
            **whole_gpu,
        },
    )
    running = sim_station.wait_state(low, "running")
    log = Path(running["log"])
    wait_for(lambda: "started as" in log.read_text(), 30.0, what="bob's job to start")
    # past its protection (2 x (1 s grace + 1 s restart) of running): ada's job may preempt it
    protected_until = running["started_at"] + 2 * (1.0 + 1.0) + 0.5
    wait_for(lambda: time.time() > protected_until, 30.0, what="the end of its protection")
    high = sim_station.submit("ada", {"name": "ada-now", "command": ["true"], **whole_gpu})
    assert sim_station.wait_state(high, "succeeded", "failed", timeout=60.0)["state"] == "succeeded"
    done = sim_station.wait_state(low, "succeeded", "failed", timeout=60.0)
    assert done["state"] == "succeeded", done
    first = log.read_text()
    assert f"started as {bob.uid}" in first and f"asked to leave as {bob.uid}" in first, first
    assert f"resumed as {bob.uid}" in Path(done["log"]).read_text()
    assert os.stat(done["log"]).st_uid == bob.uid


def _group_states(pgid: int) -> dict[int, tuple[str, int]]:
    """Each process of the group: its /proc state letter and real uid (a vfork parent waiting
    for its stopped child counts as stopped, T)."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or os.getpgid(int(entry.name)) != pgid:
                continue
            letter = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            waits = (entry / "wchan").read_text()
            uid = int((entry / "status").read_text().split("\nUid:")[1].split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if letter == "D" and ("vfork" in waits or waits == "kernel_clone"):
            letter = "T"
        if letter != "Z":
            found[int(entry.name)] = (letter, uid)
    return found


@on_station
def test_a_member_suspends_and_resumes_her_job_and_only_an_admin_drains(station: Station) -> None:
    job = {"name": "ada-loop", "command": ["sh", "-c", "while true; do sleep 0.05; done"]}
    job_id = station.submit("ada", job)
    pgid = station.wait_state(job_id, "running")["pgid"]
    for op, extra in (("suspend", {}), ("signal", {"signal": "USR1"})):
        refused = station.ok("bob", op, jobs=[job_id], **extra)["results"][0]
        assert refused["ok"] is False and station.admin_group in refused["outcome"], refused
    assert station.ok("ada", "suspend", jobs=[job_id])["results"][0]["outcome"] == "suspended"
    ada = station.users["ada"].uid
    wait_for(
        lambda: {s for s, _ in _group_states(pgid).values()} == {"T"},
        what="ada's job stopped",
    )
    assert ada in {uid for _, uid in _group_states(pgid).values()}  # her command, stopped
    assert station.job(job_id)["state"] == "suspended"
    assert station.ok("ada", "resume", jobs=[job_id])["results"][0]["outcome"] == "resumed"
    wait_for(lambda: "T" not in {s for s, _ in _group_states(pgid).values()}, what="continued")
    drain = station.call("ada", "drain", reason="mine")
    assert drain["ok"] is False and station.admin_group in drain["error"]["message"]
    assert station.ok("admin", "drain", reason="maintenance")["changed"] is True
    assert station.ok("ada", "status")["drain"]["by"] == station.users["admin"].name
    assert station.ok("admin", "undrain")["changed"] is True
    # cancelled while suspended, by her: the root engine stores the cancel and its resume,
    # then continues her stopped processes to see the SIGTERM (bob may do neither)
    assert station.ok("ada", "suspend", jobs=[job_id])["results"][0]["outcome"] == "suspended"
    wait_for(lambda: {s for s, _ in _group_states(pgid).values()} == {"T"}, what="stopped")
    assert station.ok("bob", "cancel", jobs=[job_id], grace=0)["results"][0]["ok"] is False
    assert station.job(job_id)["state"] == "suspended"
    station.ok("ada", "cancel", jobs=[job_id], grace=30)
    assert station.wait_state(job_id, "cancelled")["state"] == "cancelled"


@on_station
def test_an_array_is_continued_by_its_owner_alone(station: Station) -> None:
    """A submission too large for one request continues its array in the next part, naming
    the array's first job by id (gpudesk.api.submit_parts): bob may not add tasks to ada's
    array (they would count against its limit), ada may."""
    head = {"name": "sweep_0", "command": ["true"], "array_task": 0, "array_limit": 1}
    head_id = station.submit("ada", head, hold=True)
    task = {**head, "name": "sweep_1", "array_job": head_id, "array_task": 1}
    refused = station.call("bob", "submit", jobs=[task], env={"PATH": "/usr/bin:/bin"})
    assert refused["ok"] is False, refused
    assert "is another user's; an array is continued only by its owner" in str(refused)
    task_id = station.submit("ada", task, hold=True)
    assert station.job(task_id)["user"] == station.users["ada"].name


@on_station
def test_one_request_naming_several_members_jobs_changes_only_the_callers(
    station: Station,
) -> None:
    """Job control writes a request's station jobs in one transaction: the caller's rights are
    still weighed job by job, so bob's request naming ada's jobs beside his own changes his."""
    job = {"command": ["true"]}
    adas = [station.submit("ada", {**job, "name": f"ada-{k}"}, hold=True) for k in range(2)]
    bobs = [station.submit("bob", {**job, "name": f"bob-{k}"}, hold=True) for k in range(2)]
    for op, his in (("release", bobs[0]), ("cancel", bobs[1])):
        results = station.ok("bob", op, jobs=[adas[0], his, adas[1]])["results"]
        assert [r["id"] for r in results] == [adas[0], his, adas[1]], results
        assert [r["ok"] for r in results] == [False, True, False], results
        assert all(station.users["ada"].name in r["outcome"] for r in results if not r["ok"])
    assert [station.job(j)["state"] for j in adas] == ["queued", "queued"]
    assert all(station.job(j)["held"] for j in adas)
    assert station.job(bobs[1])["state"] == "cancelled"
    station.wait_state(bobs[0], "succeeded")  # released: it ran


@on_station
def test_a_release_said_to_end_a_submission_in_parts_changes_only_the_callers_jobs(
    station: Station,
) -> None:
    """`in_parts` (the client's release of a submission it sent in parts) is a claim of the
    caller's, words in the history of the jobs it acts on: bob's naming ada's held job beside
    his own is refused for hers, whose history still says she held it, and worded for his."""
    job = {"command": ["true"]}
    hers = station.submit("ada", {**job, "name": "ada-0"}, hold=True)
    parts = {"jobs": 2, "parts": 2}
    his = station.submit("bob", {**job, "name": "bob-0"}, hold=True, in_parts=parts)
    results = station.ok("bob", "release", jobs=[hers, his], in_parts=parts)["results"]
    assert [r["ok"] for r in results] == [False, True], results

    def hold_events(job_id: int) -> list[str]:
        events = station.ok(None, "show", job=job_id)["events"]
        return [e["message"] for e in events if e["kind"] in ("hold", "release")]

    assert hold_events(hers) == ["held by user"]
    assert station.job(hers)["held"]
    assert hold_events(his) == [
        "held until all 2 jobs of its submission are queued (sent in 2 parts)",
        "released: all 2 jobs of its submission are queued",
    ]
    station.wait_state(his, "succeeded")


# A client that connects and is accepted (a ping), says "ready", then sends the one request it
# reads from stdin, says "sent", and prints the reply: run as a member, beside raw_client.py.
_WAITING_CLIENT = """\
import json, socket, sys
from raw_client import read_reply, request_frame
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(120)
sock.connect(sys.argv[1])
sock.sendall(request_frame("ping", {}))
read_reply(sock)
print("ready", flush=True)
asked = json.loads(sys.stdin.readline())
sock.sendall(request_frame(asked["op"], asked["args"]))
print("sent", flush=True)
print(read_reply(sock).decode(), flush=True)
"""


@on_station
def test_a_request_naming_another_members_jobs_does_not_make_her_wait(
    station: Station,
) -> None:
    """Job control acts on many jobs a slice a turn, and a later request naming a job waits for
    the one before it to have acted on it (policy/job_claims.py). Bob's cancel of 760 of his
    held jobs and, last, ada's, and then ada's release of her own job, read in one turn (the
    engine stopped while both are sent): once his first slice is done, her release is done
    before his last, since his request, refused on her job, does not claim it. When it did,
    her release waited for his fourth slice, after all 760 of his cancels (and her queued job
    could not start meanwhile). The engine may read her request first (then nothing is
    shown): the round is run again, up to eight times."""
    script = station.client.parent / "waiting_client.py"
    script.write_text(_WAITING_CLIENT)
    script.chmod(0o755)
    for _ in range(8):
        cancels, release = _his_cancel_and_her_release(station, script)
        if cancels[0] < release:  # his request was read first
            assert release < cancels[-1], (cancels[0], release, cancels[-1])
            return
    raise AssertionError("the engine read her request first in every round")


def _his_cancel_and_her_release(station: Station, script: Path) -> tuple[list[int], int]:
    """One round: the event ids of bob's 760 cancels, and of ada's release."""
    env = {"PATH": "/usr/bin:/bin"}
    his: list[int] = []
    for part in range(2):  # at most 500 jobs a submit on the station
        jobs = [{"name": f"bob-{part}-{k}", "command": ["true"]} for k in range(380)]
        his += station.ok("bob", "submit", jobs=jobs, env=env, hold=True)["ids"]
    hers = station.submit("ada", {"name": "ada-0", "command": ["true"]}, hold=True)
    argv = (SYSTEM_PYTHON, str(script), str(station.socket))
    assert station.process is not None
    engine = psutil.Process(station.process.pid)
    with station.popen_as("bob", *argv) as bob, station.popen_as("ada", *argv) as ada:
        for member in (bob, ada):  # accepted in this order
            assert member.stdout is not None and member.stdout.readline() == "ready\n"
        engine.suspend()
        try:
            wait_for(lambda: engine.status() == psutil.STATUS_STOPPED, what="the engine stopped")
            for member, op, jobs in ((bob, "cancel", [*his, hers]), (ada, "release", [hers])):
                assert member.stdin is not None and member.stdout is not None
                member.stdin.write(json.dumps({"op": op, "args": {"jobs": jobs}}) + "\n")
                member.stdin.flush()
                assert member.stdout.readline() == "sent\n"
        finally:
            engine.resume()
        assert ada.stdout is not None and bob.stdout is not None
        assert json.loads(ada.stdout.readline())["result"]["results"][0]["outcome"] == "released"
        outcomes = json.loads(bob.stdout.readline())["result"]["results"]
        assert [r["ok"] for r in outcomes] == [True] * len(his) + [False]
    conn = sqlite3.connect(station.state_dir / "gpudesk.db")
    try:
        marks = ",".join("?" * len(his))
        cancels = [i for (i,) in conn.execute(
            f"SELECT id FROM events WHERE message = 'cancelled while queued' AND job_id IN "
            f"({marks}) ORDER BY id", his)]  # fmt: skip
        ((release,),) = conn.execute(
            "SELECT id FROM events WHERE kind = 'release' AND job_id = ?", (hers,)
        ).fetchall()
    finally:
        conn.close()
    assert len(cancels) == len(his)
    return cancels, release
