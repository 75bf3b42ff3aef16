"""Whether a job's owner is still the user the system knows by her uid: the one rule, in one
home, for every process a system engine starts for her.

It asks the user database (NSS: files, LDAP, SSSD …), which may take seconds or hang. A job's
wrapper (hw/wrapper.py `owner_refused`) asks it itself, as root, before it takes the owner's
identity, so a hung database holds that job's start alone, never the engine's loop; her
--notify, shared-loader producer and tracking worker ask it through
`core.identity.as_known_now`. The wrapper runs with `python -I -S`, gpudesk not on its path: it
loads this file by its path, so this module imports only modules of Python's own.
"""

from __future__ import annotations

import grp
import os
import pwd


def group_name(gid: int) -> str:
    """A group's name, or the gid as text when the system has no name for it."""
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def owner_problem(
    uid: int, gid: int, login: str | None, station_group: int | None
) -> tuple[str | None, set[int]]:
    """(why a process may not be started for the owner `uid`, submitted as `login` with the
    primary group `gid`, or None; the groups she holds now). Why not: the uid has no user any
    more, now names another user than the one who submitted (a deleted user's uid given to
    someone else), her primary group is no longer hers, or she is no longer in `station_group`
    (a system engine's, for her job): Slurm's slurmd refuses a job of a user the host does not
    know, likewise. `login` None: not known (a job stored before schema 21), not compared."""
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        anew = None  # the name she was submitted under, on a user made anew since
        try:  # noqa: SIM105 - contextlib would be one more import on the wrapper's start
            anew = pwd.getpwnam(login or "").pw_uid
        except KeyError:
            pass
        return (
            f"its owner, {login or 'uid'} (uid {uid}), is no longer a user of this system (the "
            "user database has no entry for the uid"
            + (f"; the name {login} is uid {anew}'s now, another user)" if anew else ")"),
            set(),
        )
    if login is not None and entry.pw_name != login:
        return (
            f"uid {uid} now belongs to {entry.pw_name}, not to {login}, who submitted it (the "
            "user was deleted and the uid given again)",
            set(),
        )
    holds = {entry.pw_gid, *os.getgrouplist(entry.pw_name, entry.pw_gid)}
    if gid not in holds:
        return (
            f"{entry.pw_name} (uid {uid}) no longer holds the group it was submitted with, "
            f"gid {gid}",
            holds,
        )
    if station_group is not None and station_group not in holds:
        return (
            f"{entry.pw_name} (uid {uid}) is no longer a member of {group_name(station_group)}, "
            "and the station serves its members only",
            holds,
        )
    return None, holds
