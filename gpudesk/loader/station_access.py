"""Shared loaders on a system engine: whom a producer runs as, where it serves, who may read it.

A system engine (root, serving a group: docs/shared-station.md) never runs a producer as root:
the producer imports the dataset's code and reads its files, so it runs as the dataset's owner
(a declared `owner`, else the owner of the job that needed it when it started). Each dataset
has a folder of its own in the station's socket folder, made by root, handed to that owner:

    /run/gpudesk/               root:GROUP 0750 (the station's socket folder)
      loaders/                  root 0755: only root adds a name here
        .not-started-NAME.json  root 0644: why the engine did not start NAME's producer, or
                                how the one it restarts went down (a personal engine writes
                                its own in its loaders folder)
        NAME/                   OWNER:GROUP, 0700 (share = "private") or 2750 (share = "group")
          NAME.ctl NAME.fd      the producer's sockets: 0600, or 0660 when shared
          NAME.json NAME.lock   its info file (0640 when shared) and its lock

A job's consumer finds it through GPUDESK_SOCKET (set by the engine), as every client finds the
station. Who may read: the folder's mode decides for the control socket (zmq's ipc socket has no
peer check); the descriptor socket, which hands out the ring, also asks the kernel who connects
(SO_PEERCRED, SO_PEERGROUPS) and refuses, in one line, a peer the dataset is not shared with.

Root reads nothing here as it finds it: the info file only as a plain file of the folder's owner,
and only where each field is of its type (`protocol.read_info`, a `ProducerInfo`), a pid in it
only while that process is the owner's, and the control socket only where it is a socket of the
owner's.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pwd
import shutil
import socket
import stat
import struct
import threading
import time
from pathlib import Path

from gpudesk.core.identity import Identity, OwnerGone, as_known_now, login_identity, peer_caller
from gpudesk.loader.orphan import ENV_ENGINE_PID
from gpudesk.loader.protocol import (
    LoaderError,
    ProducerInfo,
    final_failure,
    info_json,
    read_info,
    recorded_pid,
)
from gpudesk.loader.restarts import RestartNote
from gpudesk.paths import Home, UnsafePath, check_station_dir, user_name
from gpudesk.trust import OWNER_BOUND_S as OWNER_BOUND_S
from gpudesk.trust import RunsAs as RunsAs
from gpudesk.trust import engine_environment

PRIVATE_MODE = 0o700
SHARED_MODE = 0o2750  # setgid: the sockets and the info file get the station's group
SHARED_SOCKET_MODE = 0o660  # connecting to a Unix socket needs write permission on it

Launch = RunsAs | str  # whom a station's producer runs as, its environment; or why no one


# ----------------------------------------------------------------- the engine (root)
def producer_identity(
    declared: str | None, first: Identity | None, folder_uid: int | None
) -> Identity | str:
    """Whom a system engine's producer runs as: its dataset's declared owner, else the owner of
    the job that needs it now, else the owner of its folder (a producer restarted for running
    jobs after an engine restart). Never root: a string says why there is no one."""
    if declared is not None:
        try:
            entry = pwd.getpwnam(declared)
        except KeyError:
            return f"its declared owner {declared!r} is not a user of this machine"
        return login_identity(entry) if entry.pw_uid != 0 else "its declared owner is root"
    if first is not None and first.uid != 0:
        try:  # the job's owner as the system knows her now, as her job is launched
            return as_known_now(first)
        except OwnerGone as exc:
            return f"the job that needs it cannot: {exc}"
    if folder_uid is not None and folder_uid != 0:
        try:
            return login_identity(pwd.getpwuid(folder_uid))
        except KeyError:
            return f"its folder's owner (uid {folder_uid}) is not a user any more"
    return (
        "a producer never runs as root, and no member's job has named it yet; declare an "
        'owner (owner = "USER" in its [datasets] table)'
    )


def launch_as(
    declared: str | None, first: Identity | None, folder_uid: int | None, extra: dict[str, str]
) -> Launch:
    """Whom a station's producer runs as (`producer_identity`) and its whole environment (her
    HOME … from the password database: `trust.engine_environment`, with `extra`), or why no one
    may run it. Each is asked of the user database, which may take seconds or hang (LDAP down):
    the engine asks on a worker thread, never its loop."""
    who = producer_identity(declared, first, folder_uid)
    return who if isinstance(who, str) else (who, engine_environment(who, **extra))


def producer_variables(home: Home, gpu: str | None) -> dict[str, str]:
    """The engine's variables in a producer's environment: who started it (it stops once that
    engine is gone and no job reads it: loader/orphan.py); the GPU it stages on (`gpu`, the
    first job's, as its only visible device; None: not staging); a station's socket (no
    GPUDESK_HOME: the state folder is root's, no home of the owner's), and the staging setting
    of root's service, never hers."""
    ours = {ENV_ENGINE_PID: str(os.getpid())}
    ours |= {"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {}
    if home.system_socket is not None:
        # imported here: the engine imports this module, and staging (with the batch layout,
        # ~3 ms) is the producer's
        from gpudesk.loader.staging import ENV_STAGING

        ours["GPUDESK_SOCKET"] = str(home.system_socket)
        ours |= {ENV_STAGING: os.environ[ENV_STAGING]} if os.environ.get(ENV_STAGING) else {}
    return ours


def popen_as(home: Home, name: str, share: str, who: RunsAs) -> dict[str, object]:
    """As root, on the engine's loop (quick: nothing asks the user database): the dataset's
    folder made `who`'s (`prepare_folder`, with the station's group, the one root gave the
    socket folder: `Home.ensure`), and how to start her producer (subprocess.Popen's keywords)."""
    owner, env = who
    prepare_folder(home, name, owner, os.lstat(home.socket_dir).st_gid, share)
    return {"env": env, "user": owner.uid, "group": owner.gid, "extra_groups": list(owner.groups)}


def folder_owner(home: Home, name: str) -> int | None:
    """The uid root handed the dataset's folder to, or None when there is none."""
    try:
        st = os.lstat(home.loader_dir / name)
    except OSError:
        return None
    return st.st_uid if stat.S_ISDIR(st.st_mode) else None


def prepare_folder(home: Home, name: str, owner: Identity, group: int | None, share: str) -> Path:
    """As root, before the producer starts: the loaders folder (root's) and the dataset's
    folder, made or set aside and made again when it is another user's, given to `owner` with
    the station's `group`, private or group-readable by `share`. Quick: nothing here waits."""
    loaders = home.loader_dir
    _root_folder(loaders)
    folder = loaders / name
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=PRIVATE_MODE)
    fd = _open_folder(folder)
    try:
        if os.fstat(fd).st_uid != owner.uid:  # a former owner's: her sockets and files go
            os.close(fd)
            _set_aside(folder)
            folder.mkdir(mode=PRIVATE_MODE)
            fd = _open_folder(folder)
        os.fchown(fd, owner.uid, group if group is not None else owner.gid)
        os.fchmod(fd, SHARED_MODE if share == "group" else PRIVATE_MODE)
    finally:
        os.close(fd)
    return folder


def not_started_path(home: Home, name: str) -> Path:
    """Where the engine says why it did not start (or gave up restarting) a loader's producer:
    in its loaders folder (a station's: root's), under a name no loader's files have (none
    starts with a dot)."""
    return home.loader_dir / f".not-started-{name}.json"


def say_not_started(home: Home, name: str, why: str, given_up: bool = False) -> None:
    """As the engine (a station's: root), on the loop (quick): why the producer was not started
    (a station's owner refused, or not known in time; a launch that failed) or is not restarted
    (it kept dying), for the jobs waiting for it (`engines_word`): they stop waiting at once
    and say why, as for a producer that failed. Best effort: a consumer that finds nothing
    waits its START_WAIT_S (or resume wait), as before. `given_up`: restarted no more until
    its dataset is registered again (else the next job naming it tries again)."""
    said = ProducerInfo(name=name, failed=why, transient=False, not_started=True, given_up=given_up)
    _say(home, name, said)


def say_restarting(home: Home, name: str, note: RestartNote | None) -> None:
    """As the engine, on the loop (quick), as it restarts a producer that went down: how, and
    which restart in a row this is (`restarts.RestartNote`), where its waiting consumers look
    (`engines_word`): they wait on, saying it. In the file of `say_not_started`, which the
    restart's start has just cleared (`forget_not_started`), and which the engine's giving up
    replaces; cleared again once a restarted one serves a consumer."""
    if note is not None:
        _say(home, name, ProducerInfo(name=name, restarting=note))


def _say(home: Home, name: str, said: ProducerInfo) -> None:
    path = not_started_path(home, name)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    mode = 0o644 if home.is_system else 0o600  # a station's engine's umask is 077: users read it
    with contextlib.suppress(OSError, UnsafePath):
        if home.is_system:
            _root_folder(home.loader_dir)
        else:
            home.private_subdir(home.loader_dir)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, mode)
        try:
            os.fchmod(fd, mode)
            os.write(fd, info_json(said).encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)


def forget_not_started(home: Home, name: str) -> None:
    """As the engine, as the producer is started again (its jobs' consumers wait for this one),
    and once a restarted one serves (its restart note is done with)."""
    with contextlib.suppress(OSError):
        not_started_path(home, name).unlink()


def engines_word(home: Home, name: str) -> ProducerInfo | None:
    """What the engine said of a loader's producer, for its consumers: it did not start it, or
    gave it up (`said_not_started`), or it is restarting it (`restarts.restart_note`). Read
    only as the engine's file: on a station root's, on a personal engine this user's (its
    engine's). Read by every consumer waiting for a producer, first or resuming: one check for
    all. A producer that holds the name (`name_holder`) outweighs a word that it was not
    started: the consumer waits for that one."""
    return read_info(not_started_path(home, name), 0 if home.is_system else os.geteuid())


def said_not_started(said: ProducerInfo | None) -> bool:
    """Whether the engine's word (`engines_word`) is that it did not start the producer, or
    gave it up: a final failure, `protocol.final_failure`, with `not_started`."""
    return said is not None and final_failure(said) is not None and said.not_started


# struct flock as Linux's fcntl takes it on 64-bit machines: l_type, l_whence, l_start, l_len,
# l_pid, padded to its 32 bytes
_FLOCK = "hhqqi4x"


def name_holder(home: Home, name: str) -> int | None:
    """The pid of a producer that holds the loader's name (its lock, taken as it claims the name,
    `producer_info.claim`, before it builds its dataset and writes its info file), or None: none
    does, or this user may not open the lock (another member's: 0600). A producer started by
    hand (`gpudesk loader serve`) after the engine said it did not start one holds it while it
    comes up: its consumers wait for it, not for the engine's word. Asked with F_GETLK, which
    takes no lock (a test lock would make a producer starting that moment fail its claim); the
    lock opened as untrusted (no link followed, no FIFO waited on)."""
    from gpudesk.untrusted import open_untrusted

    try:
        fd = open_untrusted(home.loader_paths(name)[2].with_suffix(".lock"), None)
    except OSError:
        return None
    try:
        asked = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        kind, _whence, _start, _length, pid = struct.unpack(
            _FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, asked)
        )
    except OSError:
        return None
    finally:
        os.close(fd)
    return pid if kind != fcntl.F_UNLCK and pid > 0 else None


def _root_folder(path: Path) -> None:
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o755)
    fd = _open_folder(path)
    try:
        if os.fstat(fd).st_uid != 0:
            raise UnsafePath(f"{path} is not root's: remove it; the engine makes it again")
        os.fchmod(fd, 0o755)
    finally:
        os.close(fd)


def _open_folder(path: Path) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePath(f"{path} is not a folder: remove it") from None
        raise


def _set_aside(folder: Path) -> None:
    """Remove a former owner's folder: renamed first (its name is free at once), then removed
    on a thread of its own (she may have filled it: the engine's loop does not wait), without
    following a link in it (shutil.rmtree works on file descriptors on Linux)."""
    aside = folder.with_name(f".gone-{folder.name}-{time.time_ns()}")
    os.rename(folder, aside)
    threading.Thread(
        target=shutil.rmtree, args=(aside,), kwargs={"ignore_errors": True}, daemon=True
    ).start()


def believed_pid(info: ProducerInfo | None, owner_uid: int) -> bool:
    """Whether root may believe the pid in a member's info file: only while that process is
    the owner's (her producer could name any process, one root would then signal)."""
    import psutil

    pid = recorded_pid(info) if info else 0
    if not pid:
        return False
    try:
        return bool(psutil.Process(pid).uids().real == owner_uid)
    except psutil.Error:
        return False


def socket_of(path: Path, owner_uid: int | None) -> bool:
    """Whether `path` is a socket (not a link) of `owner_uid` (None: any owner), before root
    connects to it."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISSOCK(st.st_mode) and (owner_uid is None or st.st_uid == owner_uid)


# ----------------------------------------------------------- consumers and status
def checked_folder(home: Home, name: str) -> Path:
    """The folder a loader's sockets and info file are in, checked (nothing created): a
    personal home's private loaders folder; a system engine's dataset folder, in root's
    loaders folder, and reachable by this user, else one line saying whose it is and why not.
    Raises UnsafePath, FileNotFoundError (none yet) or LoaderError (not shared with you)."""
    if not home.is_system:
        return home.checked_loader_dir()
    check_station_dir(home.socket_dir)
    _check_root_dir(home.loader_dir)
    folder = home.loader_dir / name
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid == 0:
        raise UnsafePath(f"{folder} is not a producer's folder the station's engine made")
    if not os.access(folder, os.X_OK):
        raise LoaderError(not_shared(name, st.st_uid, os.geteuid()))
    return folder


def _check_root_dir(path: Path) -> None:
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise UnsafePath(
            f"{path} is not root's folder writable by root alone: it cannot be the station's "
            "engine's, and gpudesk reads no loader there. Tell the station's admin."
        )


def info_files(home: Home) -> list[tuple[Path, int | None]]:
    """Every producer info file this user may read, with the uid it must belong to (None: a
    personal home's, all its user's). Raises UnsafePath, FileNotFoundError (no loaders)."""
    if not home.is_system:  # not the engine's word beside them (`not_started_path`: a dot)
        found = sorted(home.checked_loader_dir().glob("*.json"))
        return [(path, None) for path in found if not path.name.startswith(".")]
    check_station_dir(home.socket_dir)
    _check_root_dir(home.loader_dir)
    out: list[tuple[Path, int | None]] = []
    for folder in sorted(home.loader_dir.iterdir()):
        owner = folder_owner(home, folder.name)
        if owner is not None and owner != 0 and os.access(folder, os.X_OK):
            out.append((folder / f"{folder.name}.json", owner))
    return out


def not_shared(name: str, owner_uid: int, reader_uid: int) -> str:
    """The one line a job gets when a loader it names is not shared with its user."""
    return (
        f"the shared loader {name!r} is {user_name(owner_uid)}'s (its producer runs as them) "
        f"and is not shared with {user_name(reader_uid)}: its dataset says share = "
        f'"private", since sharing a loader shares its data; an admin sets share = "group" '
        f"in its [datasets] table to let the station's group read it"
    )


# ------------------------------------------------------------------- the producer
def prepare_serving(home: Home, name: str, share: str) -> int | None:
    """Before a producer claims its name: a personal home's private folders (made); a system
    engine's dataset folder (made by root, checked to be this user's), and the umask that lets
    the station's group read the info file when shared. Returns the group peers must be in to
    be handed the ring (None: no group check)."""
    if not home.is_system:
        home.ensure()
        home.private_subdir(home.loader_dir)
        return None
    try:
        folder = checked_folder(home, name)
    except FileNotFoundError:
        raise LoaderError(
            f"{home.loader_dir / name} is missing: on a station, the engine makes a loader's "
            "folder and starts its producer (name the dataset in a job's profile)"
        ) from None
    st = os.lstat(folder)
    if st.st_uid != os.geteuid():
        raise LoaderError(f"{folder} is {user_name(st.st_uid)}'s, not this producer's user's")
    os.umask(0o027 if share == "group" else 0o077)
    return st.st_gid


def open_sockets_to(paths: tuple[Path, ...], home: Home, share: str) -> None:
    """After binding: a shared dataset's sockets may be connected to by its folder's group."""
    if home.is_system and share == "group":
        for path in paths:
            os.chmod(path, SHARED_SOCKET_MODE)


def hand_out_ring(
    server: socket.socket, ring_fd: int, name: str, share: str, group: int | None
) -> None:
    """Serve every waiting connection of the descriptor socket: the ring's fd to a peer the
    loader is shared with, else one line saying why not (`protocol.receive_fd` shows it)."""
    while True:
        try:
            conn, _ = server.accept()
        except (BlockingIOError, InterruptedError):
            return
        with conn:
            conn.settimeout(1.0)
            with contextlib.suppress(OSError):
                refusal = peer_refusal(conn, name, share, group)
                if refusal is None:
                    socket.send_fds(conn, [b"ring"], [ring_fd])
                else:
                    conn.sendall(refusal.encode())


def peer_refusal(conn: socket.socket, name: str, share: str, group: int | None) -> str | None:
    """Why the process at the other end may not have the ring (None: it may): its own user's
    and root's always; another user's only when shared, and only a member of `group`."""
    peer = peer_caller(conn).identity
    if peer.uid in (os.geteuid(), 0):
        return None
    if share != "group":
        return not_shared(name, os.geteuid(), peer.uid)
    if group is None or group == peer.gid or group in peer.groups:
        return None
    return f"the shared loader {name!r} is shared with the station's group only"
