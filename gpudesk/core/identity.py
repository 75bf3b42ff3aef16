"""Who is asking, and whom a job belongs to.

An `Identity` is a uid with its primary group and supplementary groups, as the kernel reports them
for a process: the engine takes a caller's from the control socket's peer credentials
(SO_PEERCRED, SO_PEERGROUPS: `peer_caller`, which the shared loader's ring asks too), never from
what the client wrote in a request, and a job keeps its submitter's to run with (a system engine
runs each job as its owner). A personal engine's callers are all its own user; its jobs run as
that user, as before.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import msgspec

from gpudesk.core import protocol
from gpudesk.core.known_owner import owner_problem
from gpudesk.core.protocol import ProtocolError
from gpudesk.paths import user_name
from gpudesk.text import is_text, quoted


@dataclass(frozen=True)
class Identity:
    uid: int
    gid: int  # the primary group
    groups: tuple[int, ...]  # the supplementary groups, sorted, without duplicates
    # The uid's user name when the job was submitted (None: not known, or stored before schema
    # 21): a uid deleted and given to another user is not the same owner (`core.known_owner`).
    login: str | None = field(default=None, compare=False)

    @classmethod
    def of_process(cls) -> Identity:
        """This process's own identity (a personal engine's, and that of its jobs)."""
        return cls.of(os.getuid(), os.getgid(), os.getgroups())

    @classmethod
    def of(
        cls, uid: int, gid: int, groups: list[int] | tuple[int, ...], login: str | None = None
    ) -> Identity:
        return cls(uid, gid, tuple(sorted(set(groups))), login)

    def named(self) -> Identity:
        """This identity with the name the user database gives its uid now (as a job's owner is
        stored: a later check at its launch tells a deleted user's uid given to another). Asked
        afresh, not of `known_user_name`, which remembers a uid it did not know for a minute: a
        user made since would be stored nameless, her job open to her uid's next holder."""
        if self.login is not None:
            return self
        with contextlib.suppress(KeyError):
            return replace(self, login=pwd.getpwuid(self.uid).pw_name)
        return self

    @property
    def name(self) -> str:
        """The user's name: a job owner's as it was when she submitted it (her uid may name
        someone else now), else the system's now; the uid as text where it has none."""
        return self.login or user_name(self.uid)

    @property
    def stored_name(self) -> str:
        """Its name as stored (`login`: a job owner's at submit), else "uid N": never asked of
        the user database, which may take seconds (for text made on the engine's loop)."""
        return self.login or f"uid {self.uid}"

    def in_group(self, gid: int) -> bool:
        return gid == self.gid or gid in self.groups

    def to_dict(self) -> dict[str, object]:
        return {"uid": self.uid, "gid": self.gid, "groups": list(self.groups)}


class Caller(msgspec.Struct, frozen=True):
    """The process at the other end of a request: its identity and pid (from the kernel)."""

    identity: Identity
    pid: int | None

    @classmethod
    def of_process(cls) -> Caller:
        return cls(Identity.of_process(), os.getpid())

    @property
    def uid(self) -> int:
        return self.identity.uid

    @property
    def name(self) -> str:
        return self.identity.name


def user_id(name: str) -> int | None:
    """A user's uid by name (or a uid given as digits), or None when there is none."""
    return _number_of(name, lambda n: pwd.getpwnam(n).pw_uid)


def user_arg(value: str | int | None) -> int | None:
    """A request's `user` argument (a user name, or a uid: JobsArgs checks its type and range)
    as a uid; a name the system does not know is refused (ProtocolError)."""
    if value is None or isinstance(value, int):
        return value
    uid = user_id(value) if value and is_text(value) else None
    if uid is None:
        raise ProtocolError(
            protocol.INVALID_ARGS, f"'user': no user named {quoted(value)} on this station"
        )
    return uid


def group_id(name: str) -> int | None:
    """A group's gid by its name (or a gid given as digits), or None when there is none."""
    return _number_of(name, lambda n: grp.getgrnam(n).gr_gid)


def no_such_group(option: str, name: str) -> str:
    """What a system engine (and `engine start --system`) says of a --group or --admin-group
    that names no group: its bad-arguments paragraph."""
    if option != "--group":
        return f"{option} {name}: there is no such group on this system"
    return (
        f"--group {name}: there is no such group on this system. A system engine serves the "
        f"members of one group: create it (`sudo groupadd {name}`) and add the station's users "
        f"(`sudo usermod -aG {name} USER`), or name another with --group."
    )


# the largest uid or gid: id_t is 32 bits, and its all-ones value is (uid_t)-1, "no id"
MAX_ID = 2**32 - 2


def _number_of(name: str, lookup: Callable[[str], int]) -> int | None:
    """A uid or gid given as ASCII digits (at most MAX_ID; "²" is a name, not a number), else
    the one `lookup` finds by name; None when there is none (a NUL is in no name)."""
    if name.isascii() and name.isdigit():
        return int(name) if len(name) <= 10 and int(name) <= MAX_ID else None
    try:
        return lookup(name)
    except (KeyError, ValueError):
        return None


_SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux >= 4.13; Python has no name for it
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_MAX_GROUPS = 65536  # NGROUPS_MAX on Linux


def peer_caller(sock: socket.socket) -> Caller:
    """Who is at the other end of a connected Unix socket, as the kernel says: the pid, uid and
    gid the peer had when it connected, and its supplementary groups. Where SO_PEERGROUPS is
    missing (Linux before 4.13), the groups come from the user database for that uid and gid
    (what `initgroups` would give the user, not what that process holds)."""
    pid, uid, gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    groups: list[int]
    try:
        size = 4 * 256
        while True:
            try:
                raw = sock.getsockopt(socket.SOL_SOCKET, _SO_PEERGROUPS, size)
                break
            except OSError as exc:
                if exc.errno != errno.ERANGE or size >= 4 * _MAX_GROUPS:
                    raise
                size *= 4
        groups = list(struct.unpack(f"{len(raw) // 4}I", raw))
    except OSError:
        groups = _groups_of(uid, gid)
    return Caller(Identity.of(uid, gid, groups), pid or None)


def _groups_of(uid: int, gid: int) -> list[int]:
    try:
        return os.getgrouplist(pwd.getpwuid(uid).pw_name, gid)
    except (KeyError, OSError):
        return [gid]


def login_identity(user: int | pwd.struct_passwd) -> Identity:
    """A user's identity as a login gives it now (her primary group, and each group that lists
    her: initgroups), by uid or by her entry in the user database (found by name: a dataset's
    declared owner); a uid the user database does not know: that uid, as its own group. Whom a
    process started for a user runs as where nothing more is known of her (a tracking worker
    started again after an engine restart, a shared loader's producer)."""
    if isinstance(user, int):
        try:
            return login_identity(pwd.getpwuid(user))
        except KeyError:
            return Identity.of(user, user, ())
    try:
        groups = os.getgrouplist(user.pw_name, user.pw_gid)
    except OSError:
        groups = [user.pw_gid]
    return Identity.of(user.pw_uid, user.pw_gid, groups)


class OwnerGone(Exception):
    """A job's owner is not the user the system knows by her uid any more (`as_known_now`)."""


def as_known_now(owner: Identity, station_group: int | None = None) -> Identity:
    """`owner` as the user database has it now, for a process started for her (her --notify, a
    shared-loader producer, a tracking worker; her job's wrapper asks the same rule itself):
    with the groups she was submitted with that she still holds (a group taken from her since
    is not given back). Raises OwnerGone where `core.known_owner.owner_problem` says why not."""
    problem, holds = owner_problem(owner.uid, owner.gid, owner.login, station_group)
    if problem is not None:
        raise OwnerGone(problem)
    return Identity.of(owner.uid, owner.gid, [g for g in owner.groups if g in holds], owner.login)
