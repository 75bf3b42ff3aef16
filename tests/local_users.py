"""Real local users and groups for the tests that need them (root only): made with `groupadd`
and `useradd`, removed after the test even on failure: their processes killed first (`userdel`
refuses a user who still runs something), then `userdel -r`, then the groups.

    with local_accounts({"ada": ["team"], "bob": []}, groups=["team"]) as made:
        made.users["ada"].uid, made.groups["team"]

`other_user` is a fixture of one such user; import it into a test module as
`other_user = local_users.other_user`. The module sits beside conftest.py, so every test folder
can import it."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

TOOLS = ("useradd", "userdel", "groupadd", "groupdel", "pkill")


@dataclass(frozen=True)
class LocalUser:
    name: str
    uid: int
    gid: int

    @property
    def groups(self) -> list[int]:
        """Its primary and supplementary groups, as a login would get them."""
        return os.getgrouplist(self.name, self.gid)


@dataclass(frozen=True)
class LocalAccounts:
    users: dict[str, LocalUser]  # by the role the test gave it
    groups: dict[str, int]  # gid by the role the test gave it


def skip_unless_root(why: str) -> None:
    if os.geteuid() != 0:
        pytest.skip(f"needs root: {why}")
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


@contextmanager
def local_accounts(
    users: Mapping[str, Sequence[str]], groups: Sequence[str] = (), *, homes: bool = False
) -> Iterator[LocalAccounts]:
    """Throwaway users (role -> the roles of the groups they join) and groups, each with a
    unique name; `homes` gives each user a home folder (their shell's HOME)."""
    skip_unless_root("creates local users and groups")
    tag = uuid.uuid4().hex[:6]
    group_names = {role: f"gdg{role[:3]}{tag}" for role in groups}
    made_users: list[str] = []
    made_groups: list[str] = []
    try:
        for name in group_names.values():
            done = _run("groupadd", name)
            if done.returncode != 0:
                pytest.skip(f"groupadd failed: {done.stderr.strip()}")
            made_groups.append(name)
        made: dict[str, LocalUser] = {}
        for role, joins in users.items():
            name = f"gd{role[:3]}{tag}"
            argv = ["useradd", "-m" if homes else "--no-create-home", "-s", "/bin/sh", name]
            if joins:
                argv += ["-G", ",".join(group_names[g] for g in joins)]
            done = _run(*argv)
            if done.returncode != 0:
                pytest.skip(f"useradd failed: {done.stderr.strip()}")
            made_users.append(name)
            entry = pwd.getpwnam(name)
            made[role] = LocalUser(name, entry.pw_uid, entry.pw_gid)
        gids = {role: grp.getgrnam(name).gr_gid for role, name in group_names.items()}
        yield LocalAccounts(made, gids)
    finally:
        for name in made_users:
            _run("pkill", "-KILL", "-u", name)
        for name in made_users:
            for _ in range(50):  # userdel refuses while the killed processes are still exiting
                if _run("userdel", "-r", name).returncode in (0, 6):  # 6: no such user
                    break
                time.sleep(0.1)
        for name in made_groups:
            _run("groupdel", name)


@pytest.fixture
def other_user() -> Iterator[LocalUser]:
    """A throwaway local user, deleted after the test, even on failure."""
    with local_accounts({"other": []}) as made:
        yield made.users["other"]
