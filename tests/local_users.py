"""A second, real local user for the fault tests that need one (root only): made with `useradd`,
removed with `userdel -r` after the test, even on failure. Import the fixture into a test module:
`from local_users import LocalUser, other_user`."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class LocalUser:
    name: str
    uid: int
    gid: int


@pytest.fixture
def other_user() -> Iterator[LocalUser]:
    """A throwaway local user, deleted (with its home) after the test, even on failure."""
    if os.geteuid() != 0:
        pytest.skip("needs root: creates a second local user with useradd")
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        pytest.skip("useradd/userdel are not installed")
    name = f"gdft{uuid.uuid4().hex[:8]}"
    made = subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"useradd failed: {made.stderr.strip()}")
    try:
        entry = pwd.getpwnam(name)
        yield LocalUser(name, entry.pw_uid, entry.pw_gid)
    finally:
        subprocess.run(["userdel", "-r", name], capture_output=True, check=False)
        subprocess.run(["userdel", name], capture_output=True, check=False)
