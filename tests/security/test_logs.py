"""Logs served by root through files a user may have planted (issue 35, finding 5, the log half).

Root reads a job's log for its owner and for admins (the engine's `log` request; the engine's
own tails, rotation). Every path it opens there (output.log, output.log.N, output.log.rotation)
may hold whatever a user can plant: a link, a hard link to a file of root's, a FIFO, a Unix
socket, a folder, a file of another user, a huge file. Each must be refused quickly (never a hang
in open(), never the target's bytes), the record believed only when it is root's and well formed,
and the engine must stay responsive. The attempt's folder is root's on a system engine, so the
unit tests plant these as root, chowned to a real test user (the places a user *can* write, a
Slurm folder in her home, get the same files); the end-to-end tests go through a real system
engine (tests/shared/station_fixture.py) as real users. Root only; each test says why it skips.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import EngineHandle, can_cut_head
from local_users import LocalUser, local_accounts, skip_unless_root
from station_fixture import Station, make_station

from gpudesk import joblog
from gpudesk.joblog.progress import ProgressLine, ProgressReader
from gpudesk.trust import RECORD_MAX_BYTES, UntrustedFileError

# its module-scoped fixture is made once: the module stays on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_logs")

SECRET = b"TOP SECRET: root's own bytes\n"
OUTPUT = b"the job's own output\n"
QUICK_S = 5.0  # a refusal is immediate; a read still going after this hangs


@dataclass(frozen=True)
class Users:
    owner: LocalUser  # ada: the job's owner
    other: LocalUser  # bob: another user


@pytest.fixture(scope="module")
def users() -> Iterator[Users]:
    skip_unless_root("plants files owned by real users where root reads logs")
    with local_accounts({"ada": [], "bob": []}) as made:
        yield Users(made.users["ada"], made.users["bob"])


@dataclass
class Attempt:
    """An attempt folder as the engine leaves it for a job run as `owner` after one rotation:
    output.log and output.log.1 hers, the record root's; a secret file of root's; and `target`,
    what a planted link names (the secret, unless a test names a file of root's it would rather
    have read)."""

    folder: Path
    users: Users
    secret: Path
    target: Path

    @property
    def owner(self) -> LocalUser:
        return self.users.owner

    @property
    def log(self) -> Path:
        return self.folder / "output.log"

    def rotated(self) -> None:
        """The files of a log rotated once: part 1 holds stream [0, 7), output.log the rest."""
        self.write_owned(self.log.with_name("output.log.1"), b"before\n")
        self.write_owned(self.log, OUTPUT)
        record = joblog.Rotation(7, 1, (joblog.Part(1, 0, 7),))
        joblog.record_path(self.log).write_text(record.to_json())  # root's, as the engine's

    def write_owned(self, path: Path, data: bytes, user: LocalUser | None = None) -> None:
        user = user or self.owner
        path.write_bytes(data)
        os.chown(path, user.uid, user.gid)
        os.chmod(path, 0o600)


@pytest.fixture
def attempt(tmp_path: Path, users: Users) -> Attempt:
    folder = tmp_path / "jobs" / "7" / "1"
    folder.mkdir(parents=True)
    secret = tmp_path / "shadow"
    secret.write_bytes(SECRET)
    os.chmod(secret, 0o600)
    return Attempt(folder, users, secret, secret)


# Each kind of file a user can put where root opens one: it replaces `path`.
def plant_link(attempt: Attempt, path: Path) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to(attempt.target)


def plant_hard_link(attempt: Attempt, path: Path) -> None:
    path.unlink(missing_ok=True)
    os.link(attempt.target, path)


def plant_fifo(attempt: Attempt, path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path, 0o600)
    os.chown(path, attempt.owner.uid, attempt.owner.gid)


def plant_socket(attempt: Attempt, path: Path) -> None:
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()  # the name stays: a socket file, not a regular one
    os.chown(path, attempt.owner.uid, attempt.owner.gid)


def plant_folder(attempt: Attempt, path: Path) -> None:
    path.unlink(missing_ok=True)
    path.mkdir()
    os.chown(path, attempt.owner.uid, attempt.owner.gid)


def plant_other_owner(attempt: Attempt, path: Path) -> None:
    """A regular file of someone else's (bob's: another user's output, or anything of his)."""
    path.unlink(missing_ok=True)
    attempt.write_owned(path, SECRET, attempt.users.other)


PLANTS: dict[str, Callable[[Attempt, Path], None]] = {
    "symlink": plant_link,
    "hard link": plant_hard_link,
    "fifo": plant_fifo,
    "socket": plant_socket,
    "folder": plant_folder,
    "another user's file": plant_other_owner,
}


def bounded(call: Callable[[], object]) -> object:
    """`call()` in a thread, given QUICK_S: a read that blocks (in open() on a FIFO) fails the
    test instead of hanging it. Returns what it returned, or the exception it raised."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(QUICK_S)
    if thread.is_alive():
        raise AssertionError(f"the read still runs after {QUICK_S:g}s: it hangs")
    return outcome[0]


@pytest.fixture(autouse=True)
def _unblock_fifos(tmp_path: Path) -> Iterator[None]:
    """A read that did block on a planted FIFO (today's code) is let go after the test."""
    yield
    for path in tmp_path.rglob("*"):
        if path.is_fifo():
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def read_all(log: Path, owner_uid: int) -> bytes:
    stream = joblog.LogStream(log, 0, owner_uid)
    out = b""
    while (piece := stream.read()) is not None:
        out += piece.data
    return out


@pytest.mark.parametrize("kind", sorted(PLANTS))
@pytest.mark.parametrize("name", ["output.log", "output.log.1"])
def test_a_planted_log_or_part_is_refused_quickly_and_never_served(
    attempt: Attempt, name: str, kind: str
) -> None:
    attempt.rotated()
    PLANTS[kind](attempt, attempt.folder / name)
    got = bounded(lambda: read_all(attempt.log, attempt.owner.uid))
    assert isinstance(got, UntrustedFileError), f"{kind} at {name} was read: {got!r}"
    assert name in str(got.filename)
    end = bounded(lambda: joblog.stream_end(attempt.log, attempt.owner.uid))
    if name == "output.log":
        assert isinstance(end, UntrustedFileError), end
    tail = bounded(lambda: joblog.tail(attempt.log, 1 << 20, attempt.owner.uid))
    assert isinstance(tail, UntrustedFileError), f"{kind} at {name}: the tail read {tail!r}"


@pytest.mark.parametrize("kind", [*sorted(PLANTS), "huge file", "the owner's own record"])
def test_a_planted_rotation_record_is_not_believed(attempt: Attempt, kind: str) -> None:
    """What stands at output.log.rotation, unless it is root's (the engine's) and well formed,
    is no record: the parts it names are never opened, and the read is output.log alone."""
    attempt.rotated()
    record = joblog.record_path(attempt.log)
    # the record she would write: part 1 longer than hers, and a link names it (root's, well
    # formed: only how it is reached is wrong)
    forged = joblog.Rotation(7, 1, (joblog.Part(1, 0, 5),)).to_json().encode()
    attempt.target = attempt.folder.parent / "forged.rotation"
    attempt.target.write_bytes(forged)
    if kind == "huge file":
        record.write_bytes(forged + b" " * RECORD_MAX_BYTES)  # root's: only its size is wrong
    elif kind == "the owner's own record":
        attempt.write_owned(record, forged)
    elif kind == "another user's file":
        attempt.write_owned(record, forged, attempt.users.other)
    else:
        PLANTS[kind](attempt, record)
    assert bounded(lambda: joblog.read_rotation(attempt.log)) == joblog.Rotation()
    got = bounded(lambda: read_all(attempt.log, attempt.owner.uid))
    assert got == OUTPUT


@pytest.mark.parametrize(
    "record",
    [
        "not json",
        "[]",
        '{"base": 7, "rotations": 1}',
        '{"base": -1, "rotations": 1, "parts": []}',
        '{"base": 7, "rotations": true, "parts": [[1, 0, 7]]}',
        '{"base": 7, "rotations": 1, "parts": [["1", 0, 7]]}',
        '{"base": 7, "rotations": 1, "parts": [[1, 0, 7.5]]}',
        '{"base": 7, "rotations": 1, "parts": [[1, 5, 3]]}',
        '{"base": 7, "rotations": 1, "parts": [[2, 0, 7]]}',
        '{"base": 7, "rotations": 1, "parts": [[0, 0, 7]]}',
        '{"base": 7, "rotations": 2, "parts": [[2, 0, 3], [1, 3, 7]]}',
        '{"base": 7, "rotations": 2, "parts": [[1, 0, 5], [2, 3, 7]]}',
        '{"base": 5, "rotations": 1, "parts": [[1, 0, 7]]}',
        '{"base": 7, "rotations": 1, "parts": [[1, 0, 7, 9]]}',
        '{"base": 99999999999999999999, "rotations": 1, "parts": []}',
        json.dumps(
            {"base": 10**6, "rotations": 5000, "parts": [[n, n, n] for n in range(1, 2000)]}
        ),
        "[" * 100000,
    ],
    ids=lambda record: record if len(record) < 80 else f"{record[:20]}... ({len(record)} chars)",
)
def test_a_malformed_record_is_an_empty_rotation_never_an_exception(record: str) -> None:
    assert joblog.parse_rotation(record.encode()) == joblog.Rotation()


def test_a_well_formed_record_is_believed() -> None:
    record = joblog.Rotation(20, 3, (joblog.Part(2, 4, 9), joblog.Part(3, 9, 20)))
    assert joblog.parse_rotation(record.to_json().encode()) == record


def test_the_rotation_record_is_roots_and_the_parts_are_the_owners(attempt: Attempt) -> None:
    """Rotating a log of hers (as the engine does, as root) leaves a record she cannot write;
    today's code chowned it to her, and believed what she then wrote into it."""
    attempt.write_owned(attempt.log, b"x" * 100 + b"\n" + b"y" * 100 + b"\n")
    assert joblog.rotate(attempt.log, 150, keep=2)
    record = os.stat(joblog.record_path(attempt.log))
    part = os.stat(joblog.part_path(attempt.log, 1))
    assert (record.st_uid, record.st_mode & 0o777) == (0, joblog.RECORD_MODE)
    assert part.st_uid == attempt.owner.uid
    assert read_all(attempt.log, attempt.owner.uid) == b"y" * 100 + b"\n"


def grant_write_by_acl(folder: Path, uid: int) -> None:
    """A POSIX access ACL on `folder` giving user `uid` rwx (as `setfacl -m u:UID:rwx` sets
    it: its mask rwx too), its mode's other entries kept; skips where the file system has no
    ACLs. The xattr's format: linux/posix_acl_xattr.h (version 2, then tag, perm, id)."""
    mode = folder.stat().st_mode
    anyone = 0xFFFFFFFF  # the id of an entry that names no one (the owner, its group ...)
    entries = [(0x01, mode >> 6 & 7, anyone), (0x02, 7, uid), (0x04, mode >> 3 & 7, anyone)]
    entries += [(0x10, 7, anyone), (0x20, mode & 7, anyone)]
    acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in entries)
    try:
        os.setxattr(folder, "system.posix_acl_access", acl)
    except OSError as exc:
        pytest.skip(f"no POSIX ACLs on {folder}'s file system: {exc.strerror}")


@pytest.mark.parametrize("folder", ["root's alone", "group-writable", "hers", "acl"])
def test_her_linked_log_is_rotated_only_in_a_folder_root_alone_writes(
    attempt: Attempt, tmp_path: Path, folder: str
) -> None:
    """Her log with a second name of hers (gpudesk.untrusted._names_are_ours): rotated in place
    where only root makes names in its folder (a system engine's attempt folder), so it is the
    file root made there; refused, untouched, where someone else could have put it there. An
    ACL entry granting her write is seen in the mode's group bits, which hold the ACL's mask
    (POSIX.1e: no named entry can write past the mask), so the mode bits alone tell it."""
    body = b"x" * 100 + b"\n" + b"y" * 100 + b"\n"
    attempt.write_owned(attempt.log, body)
    os.link(attempt.log, tmp_path / "hers.log")  # her second name, as ln(1) makes it for her
    if folder == "group-writable":
        attempt.folder.chmod(0o775)
    elif folder == "hers":
        os.chown(attempt.folder, attempt.owner.uid, attempt.owner.gid)
    elif folder == "acl":
        grant_write_by_acl(attempt.folder, attempt.owner.uid)
    result = bounded(lambda: joblog.rotate(attempt.log, 150, keep=2))
    if folder == "root's alone":
        assert result is True, result
        assert read_all(attempt.log, attempt.owner.uid) == b"y" * 100 + b"\n"
        assert (tmp_path / "hers.log").read_bytes() == attempt.log.read_bytes()
    else:
        assert isinstance(result, OSError) and "second name" in str(result), result
        assert attempt.log.read_bytes() == body


# (the line rotation drops, the line it keeps, the cap): a log under a block is copied and
# truncated; one past a block boundary is cut in place (gpudesk.joblog.collapse, where the file
# system can), its part ending at the boundary inside the kept line
ROTATIONS = {
    "copy-truncate": (b"x" * 100 + b"\n", b"y" * 100 + b"\n", 150),
    "cut": (b"x" * 8000 + b"\n", b"y" * 400 + b"\n", 450),
}


@pytest.mark.parametrize("rotation", sorted(ROTATIONS))
@pytest.mark.parametrize("kind", sorted(PLANTS))
@pytest.mark.parametrize("name", ["output.log.1", "output.log.1.tmp", "output.log.rotation.tmp"])
def test_rotation_never_acts_on_a_planted_file(
    attempt: Attempt, name: str, kind: str, rotation: str
) -> None:
    """The names rotation creates, replaces or unlinks: whatever stands there goes by its name
    (a link is replaced, never followed) or the rotation stops before the log is cut."""
    dropped, kept, cap = ROTATIONS[rotation]
    body = dropped + kept
    attempt.write_owned(attempt.log, body)
    PLANTS[kind](attempt, attempt.folder / name)
    try:
        rotated = bounded(lambda: joblog.rotate(attempt.log, cap, keep=2))
    finally:
        assert attempt.secret.read_bytes() == SECRET  # never written through a name
        assert os.stat(attempt.secret).st_uid == 0
    if isinstance(rotated, BaseException):  # refused: then before the log was truncated
        assert isinstance(rotated, OSError), rotated
        assert attempt.log.read_bytes() == body
    else:
        assert rotated is True
        assert read_all(attempt.log, attempt.owner.uid) == kept
        if rotation == "cut" and can_cut_head(attempt.folder):  # cut, not truncated
            assert 0 < attempt.log.stat().st_size < len(kept)


@pytest.mark.parametrize("kind", ["symlink", "hard link", "fifo", "socket", "folder"])
def test_rotation_leaves_a_planted_log_alone(attempt: Attempt, kind: str) -> None:
    PLANTS[kind](attempt, attempt.log)
    big = b"z" * 4096
    attempt.secret.write_bytes(big)
    result = bounded(lambda: joblog.rotate(attempt.log, 100, keep=2))
    assert result is False or isinstance(result, OSError), result
    assert attempt.secret.read_bytes() == big
    assert not joblog.part_path(attempt.log, 1).exists()


# ----------------------------------------------------------------------- a real system engine
@pytest.fixture
def station() -> Iterator[Station]:
    yield from make_station()


def finished_job(station: Station, command: str) -> tuple[int, Path]:
    job = {"name": "printer", "command": ["sh", "-c", command], "workdir": "/", "gpus": 0}
    job_id = station.submit("ada", job)
    done = station.wait_state(job_id, "succeeded", "failed")
    assert done["state"] == "succeeded", done
    return job_id, Path(done["log"])


def test_a_fifo_at_a_finished_jobs_log_is_refused_and_the_engine_answers_on(
    station: Station,
) -> None:
    """Today the engine blocks in open() on the FIFO for good: her `log` request (and every
    request after it) gets no answer."""
    job_id, log = finished_job(station, "echo hello")
    ada = station.users["ada"]
    log.unlink()
    os.mkfifo(log, 0o600)
    os.chown(log, ada.uid, ada.gid)
    try:
        reply = station.call("ada", "log", job=job_id)
        assert reply["ok"] is False, reply
        message = reply["error"]["message"]
        assert "output.log" in message and "not a regular file" in message, message
        assert station.call("bob", "ping")["ok"]  # another user, right after
    finally:  # let an engine that did block go, so it can stop
        with contextlib.suppress(OSError):
            os.close(os.open(log, os.O_WRONLY | os.O_NONBLOCK))


def test_a_linked_part_is_never_served_by_the_engine(station: Station) -> None:
    """A rotated part that is a link to root's file: today the engine opened it with open()
    and served /etc/shadow's bytes to the job's owner."""
    job_id, log = finished_job(station, "echo hello")
    secret = log.parent.parent.parent.parent / "secret"  # the station's state folder: root's
    secret.write_bytes(SECRET)
    os.chmod(secret, 0o600)
    joblog.part_path(log, 1).symlink_to(secret)
    record = joblog.Rotation(len(SECRET), 1, (joblog.Part(1, 0, len(SECRET)),))
    joblog.record_path(log).write_text(record.to_json())
    for role in ("ada", "admin"):
        reply = station.call(role, "log", job=job_id)
        assert b"TOP SECRET" not in json.dumps(reply).encode(), reply
        if reply["ok"]:
            assert b"TOP SECRET" not in base64.b64decode(reply["result"]["data"])
        else:
            assert "output.log.1" in reply["error"]["message"], reply
    assert station.call("bob", "ping")["ok"]


# ------------------------------------------------------------------- `gpudesk logs` itself
GPUDESK = [sys.executable, "-m", "gpudesk"]


def test_gpudesk_logs_refuses_a_fifo_in_one_paragraph(engine: EngineHandle) -> None:
    """`gpudesk logs` of a job whose output.log became a FIFO or a link (read directly, as a
    personal engine's user reads it): one paragraph on stderr and a non-zero exit, no traceback
    and no hang (it blocked in open() for good); `--json` the same paragraph and exit (it was
    an UntrustedFileError traceback)."""
    [job_id] = engine.submit({"name": "printer", "command": ["echo", "hello"]})
    log = Path(engine.wait_state(job_id, "succeeded").log)
    for plant, said in (
        (lambda: os.mkfifo(log, 0o600), "not a regular file"),
        (lambda: log.symlink_to("/dev/zero"), "is a link, not followed"),
    ):
        log.unlink()
        plant()
        try:
            refusals = [refused_logs(str(job_id), *extra) for extra in ((), ("--json",))]
        finally:
            with contextlib.suppress(OSError):
                os.close(os.open(log, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW))
        (code, line), (json_code, json_line) = refusals
        assert "output.log" in line and said in line, line
        assert (json_code, json_line) == (code, line)


def refused_logs(*args: str) -> tuple[int, str]:
    """(exit status, its one stderr line) of a `gpudesk logs` that must refuse, quickly."""
    try:
        done = subprocess.run([*GPUDESK, "logs", *args], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError("gpudesk logs hangs on a FIFO at the job's log") from exc
    assert done.returncode != 0 and done.stdout == "", done
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return done.returncode, lines[0]


@pytest.mark.parametrize("kind", sorted(PLANTS))
def test_no_progress_is_read_from_a_planted_log(attempt: Attempt, kind: str) -> None:
    """The engine (root on a station) reads a running job's `progress DONE/TOTAL` lines from its
    log to learn its rate and remaining time (joblog.progress.ProgressReader). What she planted
    there — a link or hard link to a file of root's, a FIFO, a socket, a folder, a file of
    bob's, each holding a progress line where it holds anything — gives no progress, at once;
    her own log with the same line does."""
    line = b"progress 7/9\n"
    attempt.secret.write_bytes(line)
    attempt.write_owned(attempt.log, line)
    assert ProgressReader(str(attempt.log), 0, attempt.owner.uid).read_lines() == [
        ProgressLine(7.0, 9.0)
    ]
    PLANTS[kind](attempt, attempt.log)
    if kind == "another user's file":
        attempt.write_owned(attempt.log, line, attempt.users.other)
    got = bounded(lambda: ProgressReader(str(attempt.log), 0, attempt.owner.uid).read_lines())
    assert got == [], f"{kind}: {got!r}"
