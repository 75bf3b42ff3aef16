"""An engine holds its home's cgroup folder (flock) while it runs: the folder is named by the
home's path, not by a file in it, so it is still there when the state folder went under the
engine. A second engine of the same home is refused, naming the first; it never sweeps (kills)
the first's jobs as leftovers. Against a fake cgroup v2 tree (the kernel's cgroup file system is
the hardware boundary), as tests/hw/test_delegation.py; a real one in
tests/faults/test_state_folder_gone.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudesk.home_lock import AlreadyRunning
from gpudesk.hw import containment
from gpudesk.hw.containment import Containment


@pytest.fixture
def mount(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A v2 hierarchy in tmp holding this home's folder, as a writable host's would."""
    monkeypatch.delenv("INVOCATION_ID", raising=False)  # not started by systemd
    monkeypatch.delenv(containment.SWITCH_ENV, raising=False)
    tree = tmp_path / "cgroup"
    folder = containment.home_folder(str(tree), tmp_path / "home")
    folder.mkdir(parents=True)
    for name in ("cgroup.procs", "cgroup.subtree_control"):
        (folder / name).write_text("")
    return tree


def test_a_second_engine_of_the_home_is_refused_naming_the_first(
    mount: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    first = Containment.probe(home, mount=str(mount))
    assert first.base is not None
    try:
        with pytest.raises(AlreadyRunning) as refused:
            Containment.probe(home, mount=str(mount))
        said = " ".join(str(refused.value).split())
        assert f"another engine (pid {os.getpid()}) runs this home's jobs" in said
        assert f"their cgroups are in {first.base}" in said
        assert f"`kill {os.getpid()}`" in said
    finally:
        first.close()
    Containment.probe(home, mount=str(mount)).close()  # free again once the first closed


# In an interpreter of its own: in the test worker, another test's leftover thread forking at
# that moment holds the folder's descriptor until its child's exec (a CI run saw it once, the
# holder gone by the time /proc/locks was read), which is no job's.
HELD_BY_A_JOB = """
import subprocess, sys
from pathlib import Path
from gpudesk.hw.containment import Containment
home, mount = Path(sys.argv[1]), sys.argv[2]
first = Containment.probe(home, mount=mount)
child = subprocess.Popen(
    [sys.executable, "-c", "import sys; sys.stdin.read()"],
    stdin=subprocess.PIPE,
    close_fds=False,  # what the engine's descriptors say for themselves (close-on-exec)
)
try:
    first.close()
    Containment.probe(home, mount=mount).close()  # the child holds nothing
finally:
    child.communicate(b"")
"""


def test_the_hold_is_not_inherited_by_what_the_engine_starts(mount: Path, tmp_path: Path) -> None:
    """A job outliving its engine must not keep the next engine out."""
    argv = [sys.executable, "-c", HELD_BY_A_JOB, str(tmp_path / "home"), str(mount)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_holders_pid_is_read_from_proc_locks(tmp_path: Path) -> None:
    folder = tmp_path / "held"
    folder.mkdir()
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    st = os.fstat(fd)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    locks = tmp_path / "locks"
    locks.write_text(
        f"1: POSIX  ADVISORY  WRITE 11 00:01:5 0 EOF\n"
        f"2: FLOCK  ADVISORY  WRITE 4242 {key} 0 EOF\n"
        f"2: -> FLOCK  ADVISORY  WRITE 5151 {key} 0 EOF\n"  # one waiting for it
    )
    try:
        assert containment._flock_holder(fd, str(locks)) == 4242
        locks.write_text("")
        assert containment._flock_holder(fd, str(locks)) is None
    finally:
        os.close(fd)
