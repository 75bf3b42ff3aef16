"""A job's environment never reaches a root process (issue 35, finding 1).

On a system engine each job's wrapper stays root (it joins the cgroup and writes the exit
record) until it forks the command as the job's owner. The dynamic loader obeys `LD_PRELOAD`,
`LD_AUDIT`, `GCONV_PATH` … (trust.LOADER_VARIABLES) in every process it starts, before any code
of ours: a wrapper started with the environment a member sent ran her library as root. The
wrapper now gets an environment the engine built (trust.engine_environment); the job's own is
applied by its child after the switch to the owner. Real users, a real system engine
(tests/shared/station_fixture.py); root only, each test says why it skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import wait_for
from station_fixture import Station, make_station

from gpudesk import trust

# A library whose constructor leaves a mark of the uid it ran as: as root in ROOT_MARK, as
# anyone else in USER_MARK (proof that the job itself still got her LD_PRELOAD).
EVIL_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

__attribute__((constructor)) static void mark(void) {
    const char *path = geteuid() == 0 ? "ROOT_MARK" : "USER_MARK";
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0666);
    if (fd >= 0) {
        char line[64];
        int n = snprintf(line, sizeof line, "euid %d pid %d\n", (int)geteuid(), (int)getpid());
        write(fd, line, n);
        close(fd);
    }
}
"""


# one station for the module's two tests, which act on jobs and files of their own (its
# module-scoped fixture is made once: the module stays on one worker, --dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_job_launch")


@pytest.fixture(scope="module")
def station() -> Iterator[Station]:
    yield from make_station()


def home_of(station: Station, role: str) -> Path:
    return Path(f"/home/{station.users[role].name}")


def give(station: Station, role: str, path: Path) -> None:
    user = station.users[role]
    os.chown(path, user.uid, user.gid)


def test_ld_preload_in_a_submitted_environment_never_runs_as_root(
    station: Station, tmp_path: Path
) -> None:
    """ada submits `true` with LD_PRELOAD naming a library of hers: it runs in her job (as
    her), never in a root process (today: in the wrapper, with euid 0)."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler (gcc) to build the preloaded library")
    home = home_of(station, "ada")
    root_mark = tmp_path / "root-ran-it"  # root's folder: only root can write the mark here
    user_mark = home / "ada-ran-it"
    source = home / "evil.c"
    source.write_text(
        EVIL_C.replace("ROOT_MARK", str(root_mark)).replace("USER_MARK", str(user_mark))
    )
    library = home / "evil.so"
    built = subprocess.run(
        [gcc, "-shared", "-fPIC", "-o", str(library), str(source)], capture_output=True, text=True
    )
    if built.returncode != 0:
        pytest.skip(f"could not build the preloaded library: {built.stderr}")
    for path in (source, library):
        give(station, "ada", path)
    os.chmod(library, 0o755)
    job = {"name": "innocent", "command": ["true"], "workdir": str(home), "gpus": 0}
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LD_PRELOAD": str(library)}
    job_id = station.submit("ada", job, env)
    done = station.wait_state(job_id, "succeeded", "failed")
    assert done["state"] == "succeeded", done
    assert not root_mark.exists(), f"her library ran as root: {root_mark.read_text()}"
    ada = station.users["ada"]
    assert user_mark.read_text().startswith(f"euid {ada.uid} "), "her job lost her LD_PRELOAD"


def environ(pid: int) -> dict[str, str]:
    data = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (entry.partition(b"=") for entry in data.split(b"\0") if entry)
    return {os.fsdecode(name): os.fsdecode(value) for name, _, value in pairs}


def test_the_wrapper_runs_with_the_engines_environment_and_the_job_with_hers(
    station: Station,
) -> None:
    """Every variable the dynamic loader and glibc honour, and one of her own, submitted with
    a job: the wrapper's /proc/PID/environ is exactly the environment the engine builds (none of
    hers), while her job's own process holds all she sent."""
    home = home_of(station, "ada")
    go = home / "go"  # the job waits for it: it runs while the test reads the environments
    script = f"while [ ! -e {go} ]; do sleep 0.05; done"
    job = {"name": "waits", "command": ["sh", "-c", script], "workdir": str(home), "gpus": 0}
    sent = {name: f"/nonexistent/gdsec/{name}" for name in trust.LOADER_VARIABLES}
    sent.update(PATH="/usr/bin:/bin", HOME=str(home), GDSEC_HERS="ada's own value")
    job_id = station.submit("ada", job, sent)
    running = station.wait_state(job_id, "running")
    wrapper = psutil.Process(running["pgid"])  # the wrapper leads the attempt's session

    def her_command() -> psutil.Process | None:
        """The wrapper's child once it is her command: forked, it is the wrapper still (its
        environment the wrapper's, job.env not yet read) until it execs `sh`."""
        for child in wrapper.children():
            try:
                if child.cmdline()[:2] == ["sh", "-c"]:
                    return child
            except psutil.Error:
                continue
        return None

    command = wait_for(her_command, what="the job's command to start")
    try:
        wrapper_env = environ(wrapper.pid)
        job_env = environ(command.pid)
        # read while both run: once `go` exists her command ends (a loaded machine lost the
        # race when these were read after it)
        wrapper_uid, command_uid = wrapper.uids().effective, command.uids().effective
        # the file that carried her environment to the wrapper's child (root's) is gone
        left = sorted(os.listdir(Path(running["log"]).parent))
    finally:
        go.touch()
    assert "job.env" not in left, left
    assert wrapper_uid == 0  # the process that must not have her environment
    root = trust.engine_environment(None)
    expected = {**root, "PATH": station.env.get("PATH") or trust.DEFAULT_SITE_PATH}
    assert wrapper_env == expected, sorted(set(wrapper_env.items()) ^ set(expected.items()))
    leaked = [name for name in (*trust.LOADER_VARIABLES, "GDSEC_HERS") if name in wrapper_env]
    assert not leaked, f"in the root wrapper's environment: {leaked}"
    assert command_uid == station.users["ada"].uid
    for name, value in sent.items():
        assert job_env.get(name) == value, (name, job_env.get(name))
    done = station.wait_state(job_id, "succeeded", "failed")
    assert done["state"] == "succeeded", done
