"""Where gpudesk keeps its state: one directory per `GPUDESK_HOME`.

Layout::

    $GPUDESK_HOME/
      gpudesk.db          SQLite store (WAL)
      engine.log          the daemon's own log
      engine.lock         single-instance lock (flock), holds the daemon's pid
      run/                0700: the daemon's control socket (in a 0700 folder of the
                          temporary directory when the home's path is too long for a socket)
      jobs/<id>/<n>/      one folder per attempt: output.log (and its rotated parts,
                          gpudesk.joblog), wrapper.json, exit.json
      run/loaders/        each shared loader's sockets and its NAME.json (pid, settings)
      selection/          data-selection orderings, one folder per (dataset, method, params)

Every folder and file gpudesk keeps its state or sockets in must belong to the user running it
and is never reached through a symbolic link (`private_dir`, `open_private_file`): a folder that
another user created first (the predictable socket folder in /tmp), or a link planted where a
state file belongs, is refused with one paragraph that names it, its owner and what to do; it is
never used, followed, truncated or chmod-ed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import socket
import stat
import time
from pathlib import Path

import msgspec

from gpudesk.secure_path import insecure_step, insecure_text
from gpudesk.text import file_kind, is_text, quoted

# sun_path in sockaddr_un is 108 bytes on Linux: a longer socket path cannot be bound.
_MAX_SOCKET_PATH = 100


class HomeError(RuntimeError):
    """This home cannot be used by this user; the message is one paragraph saying what to do."""


# uid -> when a lookup found no user for it (time.monotonic()). A uid the system does not know
# costs a scan of the whole user database (0.1 ms here, far more over LDAP), and an engine names
# every job's owner in every `jobs` reply; a known uid is a quick hit (0.01 ms), and is never
# remembered, so a uid deleted and given to someone else is named right at once.
_UNKNOWN_UIDS: dict[int, float] = {}
UNKNOWN_UID_RECHECK_S = 60.0  # a user created for such a uid is named within this


def known_user_name(uid: int) -> str | None:
    """The system's name for a uid, or None."""
    missed = _UNKNOWN_UIDS.get(uid)
    if missed is not None and time.monotonic() - missed < UNKNOWN_UID_RECHECK_S:
        return None
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        if len(_UNKNOWN_UIDS) > 4096:
            _UNKNOWN_UIDS.clear()
        _UNKNOWN_UIDS[uid] = time.monotonic()
        return None
    _UNKNOWN_UIDS.pop(uid, None)
    return name


def user_name(uid: int) -> str:
    """A user's name, or their uid when the system has no name for it."""
    return known_user_name(uid) or str(uid)


def check_owner(root: Path) -> None:
    """Raise HomeError when `root` exists and belongs to another user, or is no folder (or
    lies under a file, so none can be made). A home is one user's: sharing another's would fail
    on their files, or (as root) leave files they cannot use."""
    try:
        st = root.stat()
    except FileNotFoundError:
        _check_not_made_for_another(root)
        return
    except NotADirectoryError:
        raise _not_a_folder(root) from None
    except PermissionError as exc:
        said = f"cannot use the gpudesk home {root}: {exc.strerror}."
        raise HomeError(f"{said} Set GPUDESK_HOME to a folder of your own.") from None
    except OSError as exc:  # a path too long for the file system (ENAMETOOLONG)
        raise unwritable_state(root, exc) or exc from None
    if not stat.S_ISDIR(st.st_mode):
        raise _not_a_folder(root)
    owner, me = st.st_uid, os.geteuid()
    if owner != me and me == 0:  # `sudo -E` kept her HOME: her home, never "chown" it to root
        _check_not_made_for_another(root)
    if owner != me:
        default = default_home()
        elsewhere = f" (the default is {default})" if default != root else ""
        raise HomeError(
            _station_state(root, st)
            or f"the gpudesk home {root} belongs to {user_name(owner)} (uid {owner}), and you "
            f"are {user_name(me)} (uid {me}): each user keeps a home of their own, and an engine "
            "here would mix your jobs with theirs or fail on their files. Set GPUDESK_HOME to a "
            f"folder of your own{elsewhere}, or, if this home is yours, take it back: "
            f"`sudo chown -R {user_name(me)} {root}`."
        )


def _station_state(root: Path, st: os.stat_result) -> str | None:
    """What to say of a system engine's state folder (root's, 0711, with a database) named as a
    home: never "take it back", which would hand the station to one member."""
    if st.st_uid != 0 or not st.st_mode & 0o001 or not os.path.lexists(root / "gpudesk.db"):
        return None
    return (
        f"{root} is the state folder of a shared station's engine (root's), not a gpudesk home: "
        "its members talk to it through its socket. Unset GPUDESK_HOME, and set GPUDESK_SOCKET "
        f"to the station's socket where it is not {SYSTEM_SOCKET} (its admin knows where); or "
        "set GPUDESK_HOME to a folder of your own for a personal engine."
    )


def _check_not_made_for_another(root: Path) -> None:
    """Root must not make or use a home inside another user's folder: `sudo -E` (or a sudoers
    env_keep) leaves HOME naming the user's, and root-owned folders there break her own
    gpudesk, `pip --user` and every program that writes under ~/.local."""
    if os.geteuid() != 0:
        return  # anyone else cannot make folders in another user's (or is let, as in /tmp)
    # Every folder on the way, by lstat: a link of hers (~/.local -> /etc) is hers too, and
    # root follows nothing she made to decide where its folders go.
    for folder in root.parents:
        try:
            owner = os.lstat(folder).st_uid
        except OSError:
            continue
        if owner != 0:
            raise HomeError(
                f"you are root, and the gpudesk home {root} lies inside {folder}, "
                f"which belongs to {user_name(owner)} (uid {owner}): root's folders there would "
                "be in that user's way. This happens where sudo keeps HOME (`sudo -E`): run it "
                "with `sudo -H` or as root's own login, or set GPUDESK_HOME to a folder of root's."
            )


def _not_a_folder(root: Path, system: bool = False) -> HomeError:
    """The home `root` is a file, or lies under one: what it is, and what to do, which depends
    on what named it (GPUDESK_HOME, the default, a path given, or a system engine's
    --state-dir)."""
    blocker, kind = root, "not a folder"
    for folder in [*reversed(root.parents), root]:  # the first on the way that is no folder
        with contextlib.suppress(OSError):
            mode = os.stat(folder).st_mode
            if not stat.S_ISDIR(mode):
                blocker, kind = folder, file_kind(mode)
                break
    what = f"{root} is {kind}" if blocker == root else f"{root} lies under {blocker}, {kind}"
    if system:
        return HomeError(f"the system engine's state folder {what}, not a folder. {SYSTEM_REMEDY}")
    named = os.environ.get("GPUDESK_HOME")
    if named and resolve_home() == root:
        return HomeError(
            f"GPUDESK_HOME names {'a file' if blocker == root else 'a path under a file'}, not "
            f"a folder: {what}. Point GPUDESK_HOME at a folder (gpudesk creates it when "
            f"missing), or unset it for the default, {default_home()}."
        )
    if root == default_home():
        return HomeError(
            f"gpudesk's home {what}, not a folder. It is not gpudesk's: move it away, and "
            "gpudesk makes its folder there, or set GPUDESK_HOME to a folder elsewhere."
        )
    return HomeError(
        f"the gpudesk home {what}, not a folder: name a folder (gpudesk creates it when missing)."
    )


def _not_utf8(root: Path, system: bool) -> HomeError:
    """A home whose path is not UTF-8 (a byte such as 0xff in a folder's name): the store
    keeps the paths of jobs' logs as text, so an engine there could start no job (each start
    failed, and the job waited for ever)."""
    named = "--state-dir" if system else "GPUDESK_HOME"
    return HomeError(
        f"the gpudesk home {quoted(str(root))} has bytes that are not UTF-8 in its path: gpudesk "
        "keeps the paths of its jobs' logs as text, and could start no job there. Set "
        f"{named} to a folder whose path is UTF-8."
    )


def default_home() -> Path:
    """`$XDG_STATE_HOME/gpudesk`, or `~/.local/state/gpudesk`: the XDG spec has a relative
    XDG_STATE_HOME ignored (taken as it is, the home would follow the current directory)."""
    state = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):
        state = os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "gpudesk"


def resolve_home(explicit: str | os.PathLike[str] | None = None) -> Path:
    raw = explicit if explicit is not None else os.environ.get("GPUDESK_HOME")
    home = Path(raw).expanduser() if raw else default_home()
    return home.absolute()


class UnsafePath(HomeError):
    """A state or socket path that is a link, not what it should be, or someone else's: gpudesk
    refuses to use it. The message is one paragraph for the user."""


def _owner(uid: int) -> str:
    name = known_user_name(uid)
    return f"{name} (uid {uid})" if name else f"uid {uid}"


def listens_at(path: Path) -> bool:
    """Whether something listens at the Unix socket `path` (a dead engine's socket refuses)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as probe:
        probe.setblocking(False)
        return probe.connect_ex(str(path)) in (0, errno.EAGAIN)


def _refuse(path: Path, problem: str, remedy: str) -> UnsafePath:
    return UnsafePath(
        f"{path} {problem}. gpudesk keeps its state and sockets only in folders and files that "
        f"belong to you, {_owner(os.geteuid())}, and never through a link: whoever controls this "
        f"path could read gpudesk's requests (environment variables included), answer them, or "
        f"make it overwrite other files. Nothing was changed. {remedy}"
    )


def _link_target(path: Path) -> str:
    with contextlib.suppress(OSError):
        return os.readlink(path)
    return "?"


def check_private(path: Path, st: os.stat_result, want_dir: bool, remedy: str) -> None:
    """Refuse `path` (its lstat/fstat `st`) unless it is a folder (file) of this user."""
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(
            path,
            f"is a symbolic link (to {_link_target(path)}) made by {_owner(st.st_uid)}",
            remedy,
        )
    wanted = stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)
    if not wanted:
        raise _refuse(
            path,
            f"is {file_kind(st.st_mode)} where gpudesk expects "
            f"{'a folder' if want_dir else 'a file'}",
            remedy,
        )
    if st.st_uid != os.geteuid():
        raise _refuse(path, f"belongs to {_owner(st.st_uid)}", remedy)
    if not want_dir and st.st_nlink != 1:
        raise _refuse(path, f"has {st.st_nlink} names (hard links)", remedy)


def unwritable_state(folder: Path, exc: OSError) -> HomeError | None:
    """What an OSError making or opening something in the state folder `folder` says when the
    file system, not whoever controls the path, is the cause: a read-only file system (EROFS),
    or a path longer than the file system takes (ENAMETOOLONG). None for any other error: a
    link or another user's file is `check_private`'s paragraph, which these must never get
    (nothing there was planted, and removing it would not help)."""
    if exc.errno == errno.EROFS:
        return HomeError(
            f"the state folder {quoted(str(folder))} is on a read-only file system: gpudesk "
            "keeps its engine's database, logs and sockets there and must write them. Remount "
            "it read-write, or set GPUDESK_HOME (a system engine: --state-dir) to a folder on a "
            "writable file system."
        )
    if exc.errno == errno.ENAMETOOLONG:
        return HomeError(
            f"the state folder {quoted(str(folder))} cannot be used: {too_long_text(exc)}. Set "
            "GPUDESK_HOME (a system engine: --state-dir) to a shorter path."
        )
    return None


def too_long_text(exc: OSError) -> str:
    """An ENAMETOOLONG said with the limits it passed, for a paragraph that names the path."""
    limits = f"{os.pathconf('/', 'PC_PATH_MAX')} bytes, each name in it"
    return f"{exc.strerror} (a path holds at most {limits} {os.pathconf('/', 'PC_NAME_MAX')})"


def private_dir(path: Path, remedy: str) -> Path:
    """A folder only this user can reach: made 0700 when missing (its parents as usual), checked
    when present (not a link, a folder, this user's; group and other access removed)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
        # O_NOFOLLOW: a link in the last component fails here instead of being followed; the
        # checks and the chmod act on the folder that was opened, not on a name that could
        # change.
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        said = unwritable_state(path, exc)
        if said is not None:
            raise said from None
        check_private(path, os.lstat(path), True, remedy)  # says why (a link, a file, …)
        raise _refuse(path, f"cannot be opened ({exc.strerror})", remedy) from None
    try:
        st = os.fstat(fd)
        check_private(path, st, True, remedy)
        if st.st_mode & 0o077:
            os.fchmod(fd, 0o700)
    except OSError as exc:  # the chmod, on a read-only file system
        raise unwritable_state(path, exc) or exc from None
    finally:
        os.close(fd)
    return path


def open_private_file(path: Path, flags: int, remedy: str) -> int:
    """Open (with O_CREAT in `flags`: create 0600) a state file of this user, never through a
    link, and only when it is a plain file of this user with no other name; returns the fd
    (close-on-exec). Raises FileNotFoundError when it is missing and not created."""
    try:
        # O_NONBLOCK: a named pipe planted here must not hang the open; dropped again below.
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        said = unwritable_state(path.parent, exc)
        try:
            st = os.lstat(path)
        except OSError:
            raise said or _refuse(path, f"cannot be opened ({exc.strerror})", remedy) from None
        check_private(path, st, False, remedy)  # a link or another's file: said so first
        # else a plain file of this user, on a read-only file system, say
        raise said or _refuse(path, f"cannot be opened ({exc.strerror})", remedy) from None
    try:
        check_private(path, os.fstat(fd), False, remedy)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


_STATION_DIR_REMEDY = (
    "The station's socket folder must be root's, reached through no link, and writable by root "
    "alone; remove it (`sudo rm -rf` it) and start the system engine again, which makes it."
)


def station_dir(path: Path, group: int | None) -> Path:
    """The system engine's socket folder (as root): made when missing, 0750 and of the
    station's group, so its members (and no one else) can reach the socket; refused when it is
    a link or not root's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        check_private(path, os.fstat(fd), True, _STATION_DIR_REMEDY)
        if group is not None:
            os.fchown(fd, 0, group)
        os.fchmod(fd, 0o750 if group is not None else 0o700)
    finally:
        os.close(fd)
    return path


def check_station_dir(path: Path) -> Path:
    """A client's check of a system engine's socket folder before it sends anything: root's,
    not a link, writable by no one else (so the socket in it is the engine's)."""
    st = os.lstat(path)
    problem = None
    if stat.S_ISLNK(st.st_mode):
        problem = f"is a symbolic link (to {_link_target(path)})"
    elif not stat.S_ISDIR(st.st_mode):
        problem = f"is {file_kind(st.st_mode)}, not a folder"
    elif st.st_uid != 0:
        problem = f"belongs to {_owner(st.st_uid)}, not root"
    elif st.st_mode & 0o022:
        problem = f"is writable by others (mode {st.st_mode & 0o7777:o})"
    if problem is not None:
        raise UnsafePath(
            f"{path} {problem}: it cannot be the station's engine's, and gpudesk sends nothing "
            "to a socket anyone else could have put there (environment variables included). "
            "Tell the station's admin."
        )
    return path


# What to do about a refused folder or file inside the home
_RECREATED = "Remove it; gpudesk creates it again."


def open_state_file(path: Path, flags: int) -> int:
    """Open one of the home's own files (engine.lock, engine.log, a producer's log) as
    `open_private_file` does: never through a link, only a plain file of this user."""
    return open_private_file(path, flags, _RECREATED)


def check_state_file(path: Path) -> None:
    """A state file another program opens by name (SQLite's): when it exists, it must be a
    plain file of this user, not a link."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    check_private(path, st, False, _RECREATED)


SYSTEM_STATE_DIR = Path("/var/lib/gpudesk")
# What to do about a system engine's unusable state folder: it is named by --state-dir (the
# service's unit passes it), never by GPUDESK_HOME
SYSTEM_REMEDY = (
    f"Name a folder of root's with --state-dir (default {SYSTEM_STATE_DIR}; the service's unit "
    "passes it: `gpudesk engine print-unit`), not a link to one; gpudesk creates it when missing."
)
SYSTEM_SOCKET = Path("/run/gpudesk/control.sock")
SYSTEM_GROUP = "gpudesk"
SYSTEM_ADMIN_GROUP = "gpudesk-admin"  # a system engine's admin group, unless told another


def system_socket_from_env() -> Path | None:
    """The system engine a client should talk to, or None for a personal engine: GPUDESK_SOCKET
    when set; else, unless GPUDESK_HOME names a personal home, the station's default socket on a
    station: where its socket, its socket's folder or its state folder is there. The folders
    count too: a station's engine that an admin stopped has no socket (and a user outside the
    station's group cannot see into its folder), and its users are then told so, never given an
    engine of their own beside it."""
    chosen = os.environ.get("GPUDESK_SOCKET")
    if chosen:
        return Path(chosen).expanduser().absolute()
    if os.environ.get("GPUDESK_HOME"):
        return None
    station = (SYSTEM_SOCKET, SYSTEM_SOCKET.parent, SYSTEM_STATE_DIR)
    return SYSTEM_SOCKET if any(os.path.lexists(path) for path in station) else None


class Home(msgspec.Struct, frozen=True):
    """Where an engine keeps its state (`root`) and where it listens. A personal engine's home
    is one user's (`$GPUDESK_HOME`, its socket inside or in a private folder of the temporary
    directory); a system engine's (`system_socket` set) is root's state dir, with the socket
    in a folder of its own (/run/gpudesk) that the station's group may reach."""

    root: Path
    system_socket: Path | None = None

    @classmethod
    def from_env(cls, explicit: str | os.PathLike[str] | None = None) -> Home:
        """An explicit home (`--home`) is a personal engine's; else GPUDESK_SOCKET, GPUDESK_HOME
        and the station's socket decide (`system_socket_from_env`)."""
        if explicit is None:
            socket = system_socket_from_env()
            if socket is not None:
                return cls.system(socket)
        return cls(resolve_home(explicit))

    @classmethod
    def system(cls, socket: Path = SYSTEM_SOCKET, state_dir: Path = SYSTEM_STATE_DIR) -> Home:
        return cls(state_dir.absolute(), socket.absolute())

    @property
    def log_hint(self) -> str:
        """Where to read the engine's log, for people."""
        if self.system_socket is not None:
            return "`journalctl -u gpudesk`, or engine.log in its state folder"
        return str(self.engine_log)

    @property
    def is_system(self) -> bool:
        return self.system_socket is not None

    @property
    def description(self) -> str:
        """Which engine this is, for people: "the station's engine at /run/gpudesk/control.sock"
        or "the personal engine of /home/ada/.local/state/gpudesk"."""
        if self.system_socket is not None:
            return f"the station's engine at {self.system_socket}"
        return f"the personal engine of {self.root}"

    @property
    def db(self) -> Path:
        return self.root / "gpudesk.db"

    @property
    def engine_log(self) -> Path:
        return self.root / "engine.log"

    @property
    def lock(self) -> Path:
        return self.root / "engine.lock"

    @property
    def jobs_dir(self) -> Path:
        return self.root / "jobs"

    def attempt_dir(self, job_id: int, attempt: int) -> Path:
        return self.jobs_dir / str(job_id) / str(attempt)

    @property
    def socket_dir(self) -> Path:
        """A 0700 folder for the sockets; outside the home when the home's path is too long.
        A system engine's: the folder of its socket."""
        if self.system_socket is not None:
            return self.system_socket.parent
        inside = self.root / "run"
        if self.sockets_inside:
            return inside
        import hashlib  # here: every command imports this module, few homes need this
        import tempfile

        digest = hashlib.sha1(os.fsencode(self.root)).hexdigest()[:16]  # bytes: any name
        return Path(tempfile.gettempdir()) / f"gpudesk-{os.getuid()}" / digest

    @property
    def sockets_inside(self) -> bool:
        return len(str(self.root / "run" / "control.sock")) <= _MAX_SOCKET_PATH

    def _socket_chain(self) -> list[tuple[Path, str]]:
        """The folders a client must trust before it sends anything to a socket, outermost
        first, each with what to do when it is refused."""
        if self.sockets_inside:
            return [(self.root, self._home_remedy), (self.socket_dir, _RECREATED)]
        shared = (
            f"gpudesk puts the sockets of a GPUDESK_HOME whose path is too long for a Unix socket "
            f"({self.root}) in this folder of the temporary directory, and another user may have "
            f"created it first. Remove it (as root if need be: rm -rf "
            f"{self.socket_dir.parent}), or choose a GPUDESK_HOME of at most "
            f"{_MAX_SOCKET_PATH - len('/run/control.sock')} characters."
        )
        return [(self.socket_dir.parent, shared), (self.socket_dir, shared)]

    @property
    def _home_remedy(self) -> str:
        if self.system_socket is not None:
            return SYSTEM_REMEDY
        return (
            "Point GPUDESK_HOME at a folder of your own (gpudesk creates it when missing), "
            "not at a link to one."
        )

    def refusal(self) -> str | None:
        """Why `ensure` would refuse this personal home (not UTF-8, another user's, a link, a file)
        or None, found without creating anything: what a read that starts no engine says."""
        try:
            self._check_name_and_owner()
            with contextlib.suppress(FileNotFoundError):
                check_private(self.root, os.lstat(self.root), True, self._home_remedy)
        except HomeError as exc:  # UnsafePath too
            return str(exc)
        return None

    def checked_socket_dir(self) -> Path:
        """The socket folder, checked (nothing created): every folder on the way is this
        user's, none a link, so no one else can have put a socket there (a system engine's:
        root's, writable by root alone). Raises UnsafePath, or FileNotFoundError when it does
        not exist (no engine made it)."""
        if self.system_socket is not None:
            return check_station_dir(self.socket_dir)
        for folder, remedy in self._socket_chain():
            st = os.lstat(folder)
            check_private(folder, st, True, remedy)
        if st.st_mode & 0o022:  # others could put a socket of theirs beside the engine's
            raise _refuse(folder, f"is writable by others (mode {st.st_mode & 0o7777:o})", remedy)
        return self.socket_dir

    @property
    def control_socket(self) -> Path:
        """The engine's control socket (requests, and events for those who subscribe)."""
        if self.system_socket is not None:
            return self.system_socket
        return self.socket_dir / "control.sock"

    @property
    def selection_dir(self) -> Path:
        """The data-selection cache (gpudesk.selection.cache)."""
        return self.root / "selection"

    @property
    def loader_dir(self) -> Path:
        return self.socket_dir / "loaders"

    def loader_paths(self, name: str) -> tuple[Path, Path, Path]:
        """A shared loader's control socket, descriptor socket and info file. A system
        engine's each have a folder of their own, of the producer's user (loader/station_access)."""
        folder = self.loader_dir / name if self.system_socket is not None else self.loader_dir
        return folder / f"{name}.ctl", folder / f"{name}.fd", folder / f"{name}.json"

    def checked_loader_dir(self) -> Path:
        """The shared loaders' folder, checked as `checked_socket_dir` (nothing created)."""
        self.checked_socket_dir()
        check_private(self.loader_dir, os.lstat(self.loader_dir), True, _RECREATED)
        return self.loader_dir

    def loader_log(self, name: str) -> Path:
        """Where the engine's producer for loader `name` logs."""
        return self.root / "loaders" / f"{name}.log"

    def private_subdir(self, path: Path) -> Path:
        """A private folder inside the home (jobs/, loaders/, …), checked as `private_dir`."""
        return private_dir(path, _RECREATED)

    def ensure(self, group: int | None = None) -> Home:
        """Create the home and its private folders (idempotent); check what is there already.
        Raises UnsafePath (one paragraph for the user) when any of them, or a state file, is
        a link or someone else's; HomeError when the home itself is another user's. A system
        engine's (root's): the socket folder is made 0750 with the station's `group`."""
        self._check_name_and_owner()
        if self.system_socket is not None:
            return self._ensure_system(group)
        private_dir(self.root, self._home_remedy)
        for folder, remedy in self._socket_chain()[1 if self.sockets_inside else 0 :]:
            private_dir(folder, remedy)
        self.private_subdir(self.jobs_dir)
        for name in (self.db, f"{self.db}-wal", f"{self.db}-shm", self.lock, self.engine_log):
            check_state_file(Path(name))
        return self

    def _check_name_and_owner(self) -> None:
        """`ensure`'s and `refusal`'s first checks: a text name; a personal home not another's."""
        if not is_text(str(self.root)):
            raise _not_utf8(self.root, system=self.system_socket is not None)
        if self.system_socket is None:
            check_owner(self.root)

    def _ensure_system(self, group: int | None) -> Home:
        if os.geteuid() != 0:
            raise HomeError(
                f"a system engine runs as root (it runs each job as its owner), and you are "
                f"{user_name(os.geteuid())}. Start it from its service (`sudo systemctl start "
                "gpudesk`) or as root (`sudo gpudesk engine start --system`); without root, "
                "use a personal engine (unset GPUDESK_SOCKET)."
            )
        try:
            self.root.stat()
        except NotADirectoryError:  # under a file: no folder can be made there
            raise _not_a_folder(self.root, system=True) from None
        except FileNotFoundError:
            pass
        for make in (False, True):  # both checked before either is made
            for folder, state in ((self.root, True), (self.socket_dir, False)):
                if problem := insecure_step(folder, _owner, make):
                    raise UnsafePath(insecure_text(folder, problem, state))
        private_dir(self.root, self._home_remedy)
        # Owners reach their own jobs' logs under jobs/ (the files are theirs and private);
        # nothing else in the state dir is readable to them.
        os.chmod(self.root, 0o711)
        self.private_subdir(self.jobs_dir)
        os.chmod(self.jobs_dir, 0o711)
        station_dir(self.socket_dir, group)
        for name in (self.db, f"{self.db}-wal", f"{self.db}-shm", self.lock, self.engine_log):
            check_state_file(Path(name))
        return self
