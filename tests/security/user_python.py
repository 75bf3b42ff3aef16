"""A Python the test users may run, with this project and its packages (root only).

A system engine starts each user's tracking worker, as that user, with the engine's own
interpreter. The tests' interpreter may sit where the users cannot reach it (a pyenv under
root's 0700 home), so a test of the workers runs its engine with this one instead: a virtual
environment of the system's python3 (same minor version as the tests' own, so the project's
compiled packages load), whose one `.pth` puts this checkout first on the path and then adds the
tests' own site-packages (their `.pth` files included). Nothing is installed.

    python = user_python(tmp_folder)   # skips the test, saying why, where that cannot be
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SYSTEM_PYTHON = "/usr/bin/python3"
REPO = Path(__file__).resolve().parents[2]


def _version_of(python: str) -> str:
    done = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip()


def _readable_by_all(path: Path) -> bool:
    """Whether every folder down to `path` is searchable by others and `path` readable."""
    for folder in [*reversed(path.parents), path]:
        mode = folder.stat().st_mode
        if not mode & 0o001 or (folder == path and not mode & 0o004):
            return False
    return True


def user_python(folder: Path) -> str:
    """The path of such an interpreter made in `folder` (which must be reachable by the
    users); skips the test where it cannot be made."""
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"{SYSTEM_PYTHON} is missing: the users' tracking workers need a Python")
    ours = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if _version_of(SYSTEM_PYTHON) != ours:
        pytest.skip(f"{SYSTEM_PYTHON} is not Python {ours}: it cannot load this venv's packages")
    packages = Path(sysconfig.get_paths()["purelib"])
    for needed in (packages, REPO / "gpudesk"):
        if not _readable_by_all(needed):
            pytest.skip(f"{needed} is not readable by other users: their workers cannot run it")
    env = folder / "user-python"
    done = subprocess.run(
        [SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(env)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"python3 -m venv failed: {done.stderr.strip()[-300:]}")
    (site,) = (env / "lib").glob("python3*/site-packages")
    (site / "gpudesk-tests.pth").write_text(
        f"{REPO}\nimport site; site.addsitedir({str(packages)!r})\n"
    )
    for path in [env, *env.rglob("*")]:
        if not path.is_symlink():  # bin/python links to the system's: left alone
            path.chmod(path.stat().st_mode | (0o755 if path.is_dir() else 0o644))
    return str(env / "bin" / "python")


@contextlib.contextmanager
def user_python_folder() -> Iterator[str]:
    """A user Python (`user_python`) in a folder of /tmp the test users can read, removed after."""
    folder = Path(tempfile.mkdtemp(prefix="gd-upy-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield user_python(folder)
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)
