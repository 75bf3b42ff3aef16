"""Shared loaders on a system engine (issue 40, item 3; docs/loader.md, "On a shared station"):
a producer runs as its dataset's owner, never as root; its loader is read by that owner's jobs,
and by another member's only when the dataset says share = "group"; refused in one line
otherwise.

Root only: real users (tests/local_users.py), a real system engine (tests/shared/
station_fixture.py) whose Python the users may run (user_python.py: the producer and the
consumer jobs run as the members), real producer and consumer processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from station_fixture import Station, user_python_station

from gpudesk.core.datasets import DatasetSpec
from gpudesk.loader.protocol import ProducerInfo, read_info
from gpudesk.paths import Home

# A job: reads one epoch of the shared loader, checks every sample against its id, and prints
# one JSON line (its ids and whether it read the producer or loaded locally).
CONSUMER = textwrap.dedent("""
    import json, os, sys
    from gpudesk.loader import SharedLoader
    loader = SharedLoader(sys.argv[1], with_ids=True, fallback=False)
    ids = []
    for (x, y), i in loader:
        assert (y == i).all() and (x[:, 0].long() == i).all(), "corrupt batch"
        ids += i.tolist()
    print(json.dumps({"ids": sorted(ids), "mode": loader.mode, "uid": os.getuid()}))
""")

SIZE = 48


def dataset(name: str, **extra: object) -> dict[str, object]:
    return {
        "name": name,
        "factory": "gpudesk.workloads.synthetic:make_dataset",
        "args": {"size": SIZE, "shape": [4]},
        "batch_size": 8,
        "workers": 0,
        "slots": 8,
        **extra,
    }


@contextlib.contextmanager
def adas_folder(tmp_path: Path, name: str) -> Iterator[tuple[Any, Home, Path]]:
    """A real user ada, a system home under `tmp_path`, and the folder root makes for her
    group-shared dataset `name` (station_access.prepare_folder): (ada, the home, the folder)."""
    from local_users import local_accounts

    from gpudesk.core.identity import Identity
    from gpudesk.loader.station_access import prepare_folder

    with local_accounts({"ada": []}) as made:
        ada = made.users["ada"]
        run = tmp_path / "run"
        run.mkdir(mode=0o750)
        home = Home.system(run / "control.sock", tmp_path / "state")
        identity = Identity.of(ada.uid, ada.gid, ada.groups)
        yield ada, home, prepare_folder(home, name, identity, None, "group")


# The tests on a station share one (its users, engine and Python made once): each registers
# datasets of its own names, so none reads another's loader. The module-scoped fixture is made
# once where these tests stay on one worker (--dist loadgroup); their slow marks (wall-s on a
# 2-core machine) start the group early.
on_station = pytest.mark.xdist_group("test_loader_station")


@pytest.fixture(scope="module")
def station() -> Iterator[tuple[Station, str, Path]]:
    # producers stay up between the jobs of a test (a sweep's next job)
    for made in user_python_station(engine_env={"GPUDESK_LOADER_GRACE_S": "60"}):
        script = made.state_dir.parent / "consumer.py"  # in the station's folder, 0755
        script.write_text(CONSUMER)
        script.chmod(0o644)
        yield made, made.python, script


def run_job(station: Station, python: str, script: Path, role: str, name: str) -> tuple[dict, str]:
    """`role`'s job reading loader `name` to its end: (its job record, its output)."""
    job_id = station.submit(
        role,
        {
            "name": f"{role}-{name}",
            "command": [python, str(script), name],
            "workdir": "/",
            "dataset": name,
        },
    )
    job = station.wait_state(job_id, "succeeded", "failed", timeout=120)
    log = station.state_dir / "jobs" / str(job_id) / "1" / "output.log"
    return job, log.read_text(errors="replace")


def producer_of(station: Station, name: str) -> psutil.Process:
    """The producer serving `name`, waiting for it to have said so (it may still be starting:
    a refused job does not wait for it)."""
    path = station.socket.parent / "loaders" / name / f"{name}.json"
    deadline = time.monotonic() + 60
    while (info := read_info(path)) is None or info.control is None:
        assert time.monotonic() < deadline, f"no producer serves {name}"
        time.sleep(0.1)
    return psutil.Process(info.pid)


def result(output: str) -> dict:
    lines = [line for line in output.splitlines() if line.startswith("{")]
    assert lines, output
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def serving(station: Station, name: str) -> psutil.Process:
    """Ada's producer of a group-shared dataset `name`, once it serves: started by a job of
    hers naming the dataset (the engine starts the producer as it starts the job; the job need
    not read it, so it runs no consumer: `true`)."""
    station.ok(None, "datasets", datasets=[dataset(name, share="group")])
    job = {"name": f"ada-{name}", "command": ["true"], "workdir": "/", "dataset": name}
    done = station.wait_state(station.submit("ada", job), "succeeded", "failed", timeout=120)
    assert done["state"] == "succeeded", done
    return producer_of(station, name)


def ended(producer: psutil.Process) -> None:
    """The producer whose control path a test's stand-in took is stopped (the engine then
    forgets it): the station's later tests ask no socket of hers."""
    with contextlib.suppress(psutil.NoSuchProcess):
        producer.kill()
        producer.wait(30)


@on_station
@pytest.mark.slow(12)
def test_a_group_shared_loader_is_read_by_another_members_job(
    station: tuple[Station, str, Path],
) -> None:
    st, python, script = station
    st.ok(None, "datasets", datasets=[dataset("grp", share="group")])
    ada, bob = st.users["ada"], st.users["bob"]

    job, out = run_job(st, python, script, "ada", "grp")
    assert job["state"] == "succeeded", out
    assert result(out) == {"ids": list(range(SIZE)), "mode": "shared", "uid": ada.uid}
    producer = producer_of(st, "grp")
    assert producer.uids().real == ada.uid and producer.uids().effective == ada.uid
    folder = st.socket.parent / "loaders" / "grp"
    mode = folder.stat()
    assert mode.st_uid == ada.uid and stat.S_IMODE(mode.st_mode) == 0o2750

    job, out = run_job(st, python, script, "bob", "grp")  # bob's job joins ada's producer
    assert job["state"] == "succeeded", out
    assert result(out) == {"ids": list(range(SIZE)), "mode": "shared", "uid": bob.uid}
    assert producer_of(st, "grp").pid == producer.pid  # the same producer, still ada's


@on_station
@pytest.mark.slow(12)
def test_a_private_loader_refuses_another_members_job_in_one_line(
    station: tuple[Station, str, Path],
) -> None:
    st, python, script = station
    st.ok(None, "datasets", datasets=[dataset("priv")])
    ada = st.users["ada"]

    job, out = run_job(st, python, script, "ada", "priv")
    assert job["state"] == "succeeded", out
    assert result(out)["mode"] == "shared"
    producer = producer_of(st, "priv")
    assert producer.uids().real == ada.uid
    folder = st.socket.parent / "loaders" / "priv"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700

    job, out = run_job(st, python, script, "bob", "priv")
    assert job["state"] == "failed", out
    refusal = [line for line in out.splitlines() if "is not shared with" in line]
    assert len(refusal) == 1, out
    assert f"{ada.name}'s" in refusal[0] and 'share = "group"' in refusal[0], refusal

    # Should ada open her folder and the ring's socket to everyone, the producer still asks
    # the kernel who connects, and refuses bob the ring in one line.
    folder.chmod(0o711)
    (folder / "priv.fd").chmod(0o666)
    probe = (
        "from pathlib import Path; from gpudesk.loader.protocol import receive_fd, LoaderError\n"
        f"try:\n    receive_fd(Path({str(folder / 'priv.fd')!r}))\n"
        "except LoaderError as exc:\n    print(exc)\n"
    )
    done = subprocess.run(
        ["runuser", "-u", st.users["bob"].name, "--", python, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert "refused" in done.stdout and "is not shared with" in done.stdout, done


@on_station
@pytest.mark.slow(6)
def test_a_declared_owner_runs_the_producer_and_none_runs_as_root(
    station: tuple[Station, str, Path],
) -> None:
    st, python, script = station
    st.ok(None, "datasets", datasets=[dataset("owned", owner=st.users["bob"].name)])
    job, out = run_job(st, python, script, "ada", "owned")  # private, declared bob's
    assert job["state"] == "failed" and "is not shared with" in out, out
    assert producer_of(st, "owned").uids().real == st.users["bob"].uid
    for proc in psutil.process_iter(["cmdline", "uids"]):
        cmdline = proc.info["cmdline"] or []
        if cmdline[:1] == [python] and "serve" in cmdline and "--managed" in cmdline:
            assert proc.info["uids"].real != 0, cmdline


@on_station
@pytest.mark.slow(10)
def test_a_refused_producer_start_tells_its_waiting_job_at_once(
    station: tuple[Station, str, Path],
) -> None:
    """A station's producer whose owner is refused (here: its declared owner is no user) is
    asked for off the loop, its job started meanwhile and waiting for it (START_WAIT_S, 60 s):
    the engine says why where that job's consumer looks, which stops waiting at once and says
    it in its paragraph (before: it waited the minute out, then blamed a producer that was
    never started). The engine says "not started" once, not that it died, nor tries again
    for that job."""
    st, python, script = station
    name = "nobodys"
    st.ok(None, "datasets", datasets=[dataset(name, owner="gdnosuchuser")])
    began = time.monotonic()
    job, out = run_job(st, python, script, "ada", name)
    took = time.monotonic() - began
    assert job["state"] == "failed", out
    assert "did not start the producer" in out and "'gdnosuchuser' is not a user" in out, out
    assert "waited" not in out and took < 40, (took, out)
    said = [line for line in st.log.read_text().splitlines() if f"loader {name!r}" in line]
    assert len([line for line in said if "not started" in line]) == 1, said
    assert not [line for line in said if "died" in line], said


@on_station
@pytest.mark.slow(6)
def test_why_a_members_producer_is_down_is_shown_to_her_and_the_admins_only(
    station: tuple[Station, str, Path],
) -> None:
    """Why her producer is down may quote what it wrote (its log's last line, or why it
    failed in its info file: tests/engine/test_loader_restart_backoff.py), which is hers as her
    jobs' logs are: `engine status` shows the reason to her and the admins; another member
    sees that it is down and not restarted, not why. Before, every member's status carried
    it. (Here her dataset's arguments cannot work: it fails for good at once.)"""
    st, python, script = station
    name = "herwords"
    broken = dataset(name, args={"size": SIZE, "shape": [4], "gd_no_such_argument": 1})
    st.ok(None, "datasets", datasets=[broken])
    job, out = run_job(st, python, script, "ada", name)
    assert job["state"] == "failed", out

    def problem(role: str | None) -> str:
        [view] = [v for v in st.ok(role, "status")["loaders"] if v["name"] == name]
        return str(view["problem"])

    why = "it exited with status 4: its settings cannot work"
    assert problem("ada") == problem("admin") == problem(None) == why
    others = problem("bob")
    assert "status 4" not in others and "settings" not in others, others
    assert "not restarted until its dataset is registered again" in others, others
    assert "why is shown to its owner and the admins" in others, others


# A job reading its loader until it fails, slowly, saying each epoch it read.
SLOW_READER = textwrap.dedent("""
    import sys, time
    from gpudesk.loader import SharedLoader
    loader = SharedLoader(sys.argv[1], with_ids=True, fallback=False)
    for epoch in range(100_000):
        for _batch in loader:
            time.sleep(0.05)
        print(f"epoch {epoch} read", flush=True)
""")


def slow_reader_of(st: Station, python: str, name: str) -> tuple[int, Path]:
    """Dataset `name` registered, and ada's job reading it slowly (SLOW_READER) once it has
    read its first epoch: (its id, its output log)."""
    reader = st.state_dir.parent / f"slow_reader_{name}.py"
    reader.write_text(SLOW_READER)
    reader.chmod(0o644)
    st.ok(None, "datasets", datasets=[dataset(name)])
    job = {"name": f"reads-{name}", "command": [python, str(reader), name], "workdir": "/"}
    job_id = st.submit("ada", {**job, "dataset": name})
    output = st.state_dir / "jobs" / str(job_id) / "1" / "output.log"
    deadline = time.monotonic() + 60
    while "epoch 0 read" not in _read(output):
        assert time.monotonic() < deadline, st.job(job_id)
        time.sleep(0.1)
    return job_id, output


@on_station
@pytest.mark.slow(20)
def test_a_members_producer_that_cannot_be_restarted_is_given_up_and_her_job_told(
    station: tuple[Station, str, Path],
) -> None:
    """Her producer dies while her job reads it, and every restart is refused at launch (root's
    log of it is a link, which the engine does not open through): the engine tries 5 times,
    backing off, then gives up and says why in root's file, which her consumer, resuming, reads
    at once (before: never tried again, and she waited her 30 s out), having said at each
    restart how it went down. Nothing of hers is read: the word is root's, 0644, in root's
    loaders folder. Then a producer she starts by hand is waited for, not root's word."""
    from gpudesk.loader.station_access import not_started_path
    from gpudesk.paths import Home

    st, python, script = station
    name = "givenup"
    job_id, output = slow_reader_of(st, python, name)
    log = st.state_dir / "loaders" / f"{name}.log"
    log.unlink()
    log.symlink_to(os.devnull)
    producer = producer_of(st, name)
    producer.kill()
    killed = time.monotonic()
    done = st.wait_state(job_id, "failed", "succeeded", timeout=90)
    took = time.monotonic() - killed
    said = " ".join(output.read_text(errors="replace").split())
    assert done["state"] == "failed", said
    assert took < 25, (took, said)
    assert f"the station's engine did not start the producer of the shared loader {name!r}" in said
    assert "after 5 restarts in a row" in said and "registered again" in said, said
    home = Home.system(st.socket, st.state_dir)
    word = not_started_path(home, name).stat()
    assert word.st_uid == 0 and stat.S_IMODE(word.st_mode) == 0o644
    events = [line for line in st.log.read_text().splitlines() if f"loader {name!r}" in line]
    assert len([line for line in events if "restarting it, attempt" in line]) == 5, events
    assert len([line for line in events if "given up" in line]) == 1, events
    # while it was restarted, her consumer said how it went down, from root's word
    assert f"waiting for the shared loader {name!r}: its producer died (pid " in said, said
    assert "killed by SIGKILL); the engine restarts it (attempt 1 of 5)" in said, said
    assert "could not be restarted (" in said, said
    started_by_hand_after_the_engine_gave_up(st, python, script, name)


@on_station
@pytest.mark.slow(12)
def test_her_producers_last_line_stays_out_of_the_word_every_member_may_read(
    station: tuple[Station, str, Path],
) -> None:
    """Her producer dies while her job reads it: the engine restarts it and says so where the
    waiting consumers look, root's 0644 file in the loaders folder, which any member may read.
    The engine's own log quotes her producer's last line (and `engine status` shows it to her
    and the admins); the word says where to read it, not the line. Before, the word quoted it."""
    from gpudesk.loader.station_access import not_started_path
    from gpudesk.paths import Home

    st, python, _script = station
    name = "herline"
    job_id, _output = slow_reader_of(st, python, name)
    deadline = time.monotonic() + 30
    with (st.state_dir / "loaders" / f"{name}.log").open("a") as log:
        log.write("gd_her_private_line\n")  # as her dataset's code would print it
    producer_of(st, name).kill()
    word = not_started_path(Home.system(st.socket, st.state_dir), name)
    while "restarting" not in (said := _read(word)):
        assert time.monotonic() < deadline, said
        time.sleep(0.01)
    assert word.stat().st_mode & 0o004, "the word is for every member's consumers"
    pointer = "its log's last line: `gpudesk engine status` shows it to its owner and the admins"
    assert pointer in said and said.count("its log's last line") == 1, said
    events = [line for line in st.log.read_text().splitlines() if f"loader {name!r}" in line]
    [restart] = [line for line in events if "restarting it, attempt 1" in line]
    assert "its log's last line: " in restart and pointer not in restart, restart
    st.ok("ada", "cancel", jobs=[job_id], grace=0)
    st.wait_state(job_id, "cancelled", "failed", "succeeded", timeout=60)


# A dataset built only once the test opens its gate (a file): the producer holds its name
# meanwhile, its info file not yet written.
GATED = textwrap.dedent("""
    import os, time
    from gpudesk.workloads.synthetic import make_dataset
    def make(gate, **kwargs):
        while not os.path.exists(gate):
            time.sleep(0.05)
        return make_dataset(**kwargs)
""")


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def started_by_hand_after_the_engine_gave_up(
    st: Station, python: str, script: Path, name: str
) -> None:
    """She then starts its producer by hand (`gpudesk loader serve`, in the folder root gave
    her), and a job of hers naming the dataset waits for it and reads it, rather than fail at
    once with root's word (it did before: that producer writes its info file only once its
    first batch is made). Root reads nothing of hers for it: her consumer asks who holds her
    producer's lock."""
    from gpudesk.loader.station_access import name_holder
    from gpudesk.paths import Home

    modules = st.state_dir.parent / "modules"
    modules.mkdir(mode=0o755)
    (modules / "gd_gated.py").write_text(GATED)
    (modules / "gd_gated.py").chmod(0o644)
    gate = st.state_dir.parent / f"gate-{name}"
    args = ["--dataset=gd_gated:make", f'--arg=gate="{gate}"', f"--arg=size={SIZE}"]
    args += ["--arg=shape=[4]", "--batch-size=8", "--slots=8", "--idle-exit=2"]
    serve = st.gpudesk_argv("loader", "serve", name, *args, env=(f"PYTHONPATH={modules}",))
    with st.popen_as("ada", *serve) as by_hand:
        home = Home.system(st.socket, st.state_dir)
        deadline = time.monotonic() + 60
        while (holder := name_holder(home, name)) is None:
            assert by_hand.poll() is None and time.monotonic() < deadline, by_hand.stderr
            time.sleep(0.05)
        job = {"name": "by-hand", "command": [python, str(script), name], "workdir": "/"}
        job_id = st.submit("ada", {**job, "dataset": name})
        output = st.state_dir / "jobs" / str(job_id) / "1" / "output.log"
        while "holds its name" not in (text := _read(output)):
            assert st.job(job_id)["state"] in ("queued", "running"), text
            assert time.monotonic() < deadline + 60, text
            time.sleep(0.05)
        gate.touch()
        done = st.wait_state(job_id, "failed", "succeeded", timeout=90)
        text = _read(output)
        said = " ".join(text.split())
        assert done["state"] == "succeeded", said
        assert result(text)["mode"] == "shared" and result(text)["uid"] == st.users["ada"].uid
        assert f"another producer (pid {holder}) holds its name, although the station's" in said


def test_share_and_owner_are_checked() -> None:
    assert DatasetSpec.from_dict(dataset("d", share="group")).argv()[-2:] == ["--share", "group"]
    assert "--share" not in DatasetSpec.from_dict(dataset("d")).argv()
    for bad, key in (
        ({"share": "all"}, "share"),
        ({"owner": "root"}, "never runs as root"),
        ({"owner": "a b"}, "owner"),
    ):
        with pytest.raises(ValueError, match=key):
            DatasetSpec.from_dict(dataset("d", **bad))


def test_what_the_engine_says_of_a_producer_it_did_not_start_is_believed_only_as_roots(
    tmp_path: Path,
) -> None:
    """The engine's word that it did not start a producer (its consumers stop waiting on it) is
    root's file in root's loaders folder, readable by the station's users; one of anyone else's
    there is no such word, and starting the producer again takes the word back."""
    from gpudesk.loader.station_access import (
        engines_word,
        forget_not_started,
        not_started_path,
        said_not_started,
        say_not_started,
    )
    from gpudesk.paths import Home

    if os.geteuid() != 0:
        pytest.skip("needs root: the engine's file, and one of another user's")
    run = tmp_path / "run"
    run.mkdir(mode=0o750)
    home = Home.system(run / "control.sock", tmp_path / "state")
    assert engines_word(home, "d") is None
    say_not_started(home, "d", "its declared owner 'x' is not a user of this machine")
    said = engines_word(home, "d")
    assert said_not_started(said) and said is not None and "'x' is not a user" in str(said.failed)
    assert stat.S_IMODE(not_started_path(home, "d").stat().st_mode) == 0o644
    os.chown(not_started_path(home, "d"), 12345, 12345)  # not root's: not the engine's word
    assert engines_word(home, "d") is None
    forget_not_started(home, "d")
    assert not not_started_path(home, "d").exists()


def test_root_believes_no_pid_a_member_writes() -> None:
    from gpudesk.loader.station_access import believed_pid

    if os.geteuid() != 0:
        pytest.skip("needs root: a pid of root's process named in a member's file")
    assert believed_pid(ProducerInfo(pid=1), 12345) is False  # init is root's, not uid 12345's
    assert believed_pid(ProducerInfo(pid=os.getpid()), 0) is True
    assert believed_pid(ProducerInfo(pid=0), 0) is False  # no pid named


def test_an_info_file_is_read_as_untrusted(tmp_path: Path) -> None:
    """What root reads of a member's producer: never through a link, never blocking on a FIFO,
    only a plain file of the expected owner, at most INFO_MAX_BYTES."""
    from gpudesk.loader.protocol import INFO_MAX_BYTES, write_info

    real = tmp_path / "real.json"
    write_info(real, ProducerInfo(pid=1))
    assert read_info(real) == ProducerInfo(pid=1)
    assert read_info(real, os.geteuid()) == ProducerInfo(pid=1)
    assert read_info(real, os.geteuid() + 1) is None  # another user's file
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert read_info(link) is None
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert read_info(fifo) is None  # returns at once: the open does not wait for a writer
    big = tmp_path / "big.json"
    big.write_text('{"pid": 1, "pad": "' + "x" * INFO_MAX_BYTES + '"}')
    assert read_info(big) is None


def test_a_folder_of_a_former_owner_is_set_aside_and_made_the_new_owners(tmp_path: Path) -> None:
    """A producer started as bob where ada's stood gets a folder of his own: hers (and what she
    left in it) goes, nothing of hers is followed or kept."""
    from local_users import local_accounts

    from gpudesk.core.identity import Identity
    from gpudesk.loader.station_access import folder_owner, prepare_folder
    from gpudesk.paths import Home

    with local_accounts({"ada": [], "bob": []}) as made:
        ada, bob = made.users["ada"], made.users["bob"]
        run = tmp_path / "run"
        run.mkdir(mode=0o750)
        home = Home.system(run / "control.sock", tmp_path / "state")
        who = {u.uid: Identity.of(u.uid, u.gid, u.groups) for u in (ada, bob)}
        folder = prepare_folder(home, "d", who[ada.uid], None, "private")
        assert folder_owner(home, "d") == ada.uid
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        (folder / "d.json").symlink_to("/etc/shadow")  # what she could leave there
        folder = prepare_folder(home, "d", who[bob.uid], None, "group")
        assert folder_owner(home, "d") == bob.uid
        assert stat.S_IMODE(folder.stat().st_mode) == 0o2750
        assert list(folder.iterdir()) == []
        assert Path("/etc/shadow").exists()
        assert stat.S_IMODE(home.loader_dir.stat().st_mode) == 0o755


def test_a_producer_its_owner_cannot_run_is_not_started_and_says_why(tmp_path: Path) -> None:
    """Where the engine's Python is not one the members may run (this project's may sit in
    root's home), the producer does not start as root instead: the engine says why, and the
    job gets no loader settings (it loads its data itself)."""
    from local_users import local_accounts

    from gpudesk.core.identity import Identity
    from gpudesk.engine.services.loaders import LoaderSupervisor
    from gpudesk.paths import Home

    python = Path(sys.executable).resolve()
    if all(p.stat().st_mode & 0o001 for p in python.parents):
        pytest.skip(f"{python} is one other users may run: nothing to refuse here")
    with local_accounts({"ada": []}) as made:
        ada = made.users["ada"]
        run = tmp_path / "run"
        run.mkdir(mode=0o750)
        home = Home.system(run / "control.sock", tmp_path / "state")
        supervisor = LoaderSupervisor(home)
        supervisor.register([DatasetSpec.from_dict(dataset("d"))])
        assert supervisor.job_env("d", Identity.of(ada.uid, ada.gid, ada.groups)) == {}
        (said,) = supervisor.events
        assert "not started" in said and "the station's users may run" in said, said
        assert supervisor.producers["d"].process is None


def test_a_members_job_is_told_what_restarts_a_failed_station_producer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A station's producer that failed for good: the consumer's paragraph sends its user to an
    admin's `loader register`, not to `gpudesk loader serve`, which a station refuses."""
    from gpudesk.loader import LoaderError, SharedLoader
    from gpudesk.loader.protocol import write_info

    with adas_folder(tmp_path, "d") as (ada, home, folder):
        info = folder / "d.json"
        failed = "cannot import the dataset module 'nope'"
        said = ProducerInfo(name="d", pid=os.getpid(), managed=True, failed=failed, transient=False)
        write_info(info, said)
        os.chown(info, ada.uid, ada.gid)
        monkeypatch.setenv("GPUDESK_SOCKET", str(home.system_socket))
        with pytest.raises(LoaderError) as raised:
            SharedLoader("d", fallback=False)
    said = str(raised.value)
    assert "failed for good" in said and "cannot import the dataset module 'nope'" in said
    assert "sudo gpudesk loader register PROFILE" in said and "loader serve" not in said, said


def test_root_believes_a_members_info_file_only_where_each_field_is_of_its_type(
    tmp_path: Path,
) -> None:
    """The engine (root) reads a member's info file as a ProducerInfo: a file of hers naming her
    process is believed; one with a field of another type, or naming root's process, is no
    producer to the engine, and `loader status` (root's too) says the file is not one."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the engine reading another user's file")

    from gpudesk.engine.services.loaders import LoaderSupervisor
    from gpudesk.hw import process_start
    from gpudesk.loader.protocol import write_info
    from gpudesk.loader.status import DAMAGED, collect

    with adas_folder(tmp_path, "d") as (ada, home, folder):
        info = folder / "d.json"
        hers = subprocess.Popen(["sleep", "60"], user=ada.uid, group=ada.gid)
        try:
            started = process_start.started(hers.pid)
            supervisor = LoaderSupervisor(home)
            for text, believed in (
                (json.dumps({"name": "d", "pid": hers.pid, "started": started}), True),
                (json.dumps({"name": "d", "pid": str(hers.pid), "started": started}), False),
                (json.dumps({"name": "d", "pid": hers.pid, "started": "soon"}), False),
                (json.dumps({"name": "d", "pid": os.getpid()}), False),  # root's process
            ):
                info.write_text(text)
                os.chown(info, ada.uid, ada.gid)
                said = supervisor._info("d")
                assert (said is not None and said.pid == hers.pid) is believed, text
            info.write_text(json.dumps({"name": "d", "pid": "twelve"}))
            os.chown(info, ada.uid, ada.gid)
            assert collect("d", home) == [{"name": "d", "error": DAMAGED}]
            write_info(info, ProducerInfo(name="d", pid=hers.pid))
            os.chown(info, 0, 0)  # not hers: not read at all
            assert supervisor._info("d") is None
        finally:
            hers.kill()
            hers.wait()


# A member's stand-in for her producer: she owns her loader's folder, so she may put her own
# socket at its control path and answer the engine's status requests with what she likes.
HOSTILE = textwrap.dedent("""
    import json, os, sys, time
    import zmq
    path = sys.argv[1]
    os.unlink(path)
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.bind(f"ipc://{path}")
    print("ready", flush=True)
    junk = json.dumps({"type": "status", "name": sys.argv[2], "pid": os.getpid(),
                       "consumers": "all of them", "orphaned": "since forever"}).encode()
    if sys.argv[3] == "nested":  # valid JSON that json.loads cannot take: past the stack
        junk = b'{"type": "status", "consumers": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if sock.poll(100):
            who, _ = sock.recv_multipart()
            sock.send_multipart([who, junk])
""")


@on_station
@pytest.mark.slow(6)
@pytest.mark.parametrize("junk", ["shape", "nested"])
def test_a_members_forged_status_breaks_no_ones_view(
    station: tuple[Station, str, Path], junk: str
) -> None:
    """What a member's producer answers is hers: ada binds her own socket at her loader's
    control path and answers root's status requests with a report of the wrong shape (a
    string for its consumers, another for its orphaned state), or with JSON nested past
    Python's stack (a RecursionError, which root's decoding let through). Root keeps the last
    report that was a LoaderStatus, and bob's `status`, with the producers asked afresh, still
    answers; before, root passed her JSON into every member's view, and the view failed to
    build for everyone."""
    st, python, _ = station
    name = f"own-{junk}"
    producer = serving(st, name)
    control = st.socket.parent / "loaders" / name / f"{name}.ctl"
    hostile = subprocess.Popen(
        [
            *("runuser", "-u", st.users["ada"].name, "--", python, "-c", HOSTILE),
            *(str(control), name, junk),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    try:
        assert hostile.stdout is not None and hostile.stdout.readline().strip() == "ready"
        for _ in range(3):  # the engine asks her socket each time, and takes nothing of it
            view = st.ok("bob", "status", fresh_loaders=True)
            (own,) = [loader for loader in view["loaders"] if loader["name"] == name]
            status = own["status"]
            assert status is None or status.get("orphaned") is None, status
            assert status is None or isinstance(status.get("consumers"), list), status
    finally:
        for child in psutil.Process(hostile.pid).children(recursive=True):
            child.kill()  # her python, under runuser: killing runuser alone leaves it
        hostile.kill()
        hostile.wait()
        ended(producer)


# A member's stand-in that, asked for its status, says in her info file that it stops, in words
# holding terminal escapes, and never answers (root's ask then reads her file between steps).
STOPPING = textwrap.dedent("""
    import json, os, sys, time
    import zmq
    control, info_path = sys.argv[1], sys.argv[2]
    info = json.load(open(info_path))
    os.unlink(control)
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.bind(f"ipc://{control}")
    print("ready", flush=True)
    end = time.monotonic() + 60
    asked = False
    while time.monotonic() < end:
        asked = asked or bool(sock.poll(50) and sock.recv_multipart())
        if asked:  # over and over: her producer still rewrites its info file now and then
            said = dict(info, stopping="\\x1b]0;pwned\\x07\\x1b[2Jbye")
            with open(info_path + ".tmp", "w") as out:
                json.dump(said, out)
            os.replace(info_path + ".tmp", info_path)
            time.sleep(0.005)
""")


@on_station
@pytest.mark.slow(6)
def test_a_members_stopping_words_reach_no_terminal_and_hold_no_ask(
    station: tuple[Station, str, Path],
) -> None:
    """Root asks each producer between steps whether it stops, reading its owner's info file
    (`status.answer`, `protocol.gone`). Ada's stand-in says so as she is asked, in words with
    terminal escapes, and never answers: the ask lists it as stopping at once (not after its
    1 s), her escapes spelled out for whoever's terminal `gpudesk loader status` prints them on,
    and the engine's view for bob keeps none of her words."""
    from gpudesk.loader.status import collect
    from gpudesk.paths import Home

    st, python, _ = station
    name = "own-stop"
    producer = serving(st, name)
    folder = st.socket.parent / "loaders" / name
    paths = (str(folder / f"{name}.ctl"), str(folder / f"{name}.json"))
    hostile = subprocess.Popen(
        ["runuser", "-u", st.users["ada"].name, "--", python, "-c", STOPPING, *paths],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    try:
        assert hostile.stdout is not None and hostile.stdout.readline().strip() == "ready"
        started = time.monotonic()
        (entry,) = collect(name, home=Home.system(st.socket, st.state_dir))
        assert time.monotonic() - started < 1.0, entry
        assert entry["stopping"].startswith("\\x1b]0;pwned\\x07\\x1b[2J"), entry
        assert "\x1b" not in entry["stopping"] and "\x07" not in entry["stopping"]
        view = st.ok("bob", "status", fresh_loaders=True)
        assert "pwned" not in json.dumps(view), view
    finally:
        for child in psutil.Process(hostile.pid).children(recursive=True):
            child.kill()  # her python, under runuser: killing runuser alone leaves it
        hostile.kill()
        hostile.wait()
        ended(producer)


# A member's job that tries every way to write the ring of another member's producer: a shared
# writable mapping, writing or truncating the descriptor it was handed (EINVAL: it is read-only;
# the seal against shrinking is test_loader_ring.py's), and opening that descriptor again for
# writing. It prints what each did (the errno's name, or "wrote"). Every way to change the
# pages another job reads goes through one of them (or ptrace of her producer: another user's).
RING_WRITER = textwrap.dedent("""
    import errno, json, mmap, os, sys
    from gpudesk.loader import SharedLoader
    loader = SharedLoader(sys.argv[1], with_ids=True, fallback=False)
    fd = loader.ring.fd

    def attempt(action):
        try:
            action()
        except OSError as exc:
            return errno.errorcode.get(exc.errno, str(exc.errno))
        return "wrote"

    def reopened():
        os.close(os.open(f"/proc/self/fd/{fd}", os.O_RDWR))

    tried = {
        "mmap_shared_write": attempt(
            lambda: mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        ),
        "write": attempt(lambda: os.pwrite(fd, b"x", 0)),
        "truncate": attempt(lambda: os.ftruncate(fd, 0)),
        "reopen_for_writing": attempt(reopened),
    }
    print(json.dumps({"tried": tried, "mode": loader.mode, "uid": os.getuid()}))
""")


@on_station
@pytest.mark.slow(8)
def test_a_member_reading_anothers_loader_cannot_write_its_ring(
    station: tuple[Station, str, Path],
) -> None:
    """Bob reads ada's group-shared loader: he gets a read-only descriptor of a 0600 segment,
    so no batch that ada's or carol's job reads can be changed by his (ring.py)."""
    st, python, consumer = station
    writer = consumer.parent / "ring_writer.py"
    writer.write_text(RING_WRITER)
    writer.chmod(0o644)
    producer = serving(st, "sealed")
    try:
        job, out = run_job(st, python, writer, "bob", "sealed")
        assert job["state"] == "succeeded", out
        got = result(out)
        assert got["mode"] == "shared" and got["uid"] == st.users["bob"].uid
        assert got["tried"] == {
            "mmap_shared_write": "EACCES",
            "write": "EBADF",
            "truncate": "EINVAL",
            "reopen_for_writing": "EACCES",
        }, got
        job, out = run_job(st, python, consumer, "ada", "sealed")  # ada's own job reads on
        assert job["state"] == "succeeded", out
        assert result(out)["ids"] == list(range(SIZE))
    finally:
        ended(producer)
