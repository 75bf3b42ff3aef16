"""A wall-clock step (NTP, `date -s`, a VM resumed from a snapshot) as the processes under test
see it, without touching the machine's clock: a mount namespace of their own where /proc/stat is
a copy of the real one with `btime` (the wall clock less the uptime, proc(5)) STEP_S seconds
later, bind-mounted over it. What the kernel tells them of every process's start (ticks from
boot) is unchanged, as after a real step; the tests beside them are not disturbed. Root only."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

STEP_S = 2

needs_namespaces = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a mount namespace with /proc/stat bind-mounted over needs root and unshare(1)",
)


def stepped_proc_stat(folder: Path) -> Path:
    """/proc/stat as it reads after the wall clock is stepped STEP_S seconds forward."""
    lines = Path("/proc/stat").read_text().splitlines()
    stepped = [
        f"btime {int(line.split()[1]) + STEP_S}" if line.startswith("btime ") else line
        for line in lines
    ]
    path = folder / "stat"
    path.write_text("\n".join(stepped) + "\n")
    return path


def after_the_step(fake_stat: Path) -> list[str]:
    """The argv prefix that runs a command (and all it starts) in a mount namespace whose
    /proc/stat is `fake_stat`."""
    mount_then_run = 'mount --bind "$1" /proc/stat && shift && exec "$@"'
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount_then_run]
    return [*argv, "sh", str(fake_stat)]


def refused(done: subprocess.CompletedProcess[str]) -> bool:
    """Whether the command failed in unshare(1) or mount(8), before it ran: a container without
    CAP_SYS_ADMIN, or a /proc that takes no mount over its files."""
    return done.returncode != 0 and any(tool in done.stderr for tool in ("unshare:", "mount:"))


def btime_seen_by(pid: int) -> int | None:
    """The `btime` process `pid` reads (nsenter(1) into its mount namespace); None where
    nsenter cannot tell."""
    if shutil.which("nsenter") is None:
        return None
    done = subprocess.run(
        ["nsenter", "--target", str(pid), "--mount", "grep", "^btime", "/proc/stat"],
        capture_output=True,
        text=True,
    )
    return int(done.stdout.split()[1]) if done.returncode == 0 else None


def real_btime() -> int:
    return int(Path("/proc/stat").read_text().split("btime ")[1].split()[0])


def skip_if_refused(fake_stat: Path) -> None:
    """Skip, saying why, where this host gives no such namespace."""
    done = subprocess.run([*after_the_step(fake_stat), "true"], capture_output=True, text=True)
    if refused(done):
        pytest.skip(f"this host refuses the namespace or the mount: {done.stderr.strip()}")
