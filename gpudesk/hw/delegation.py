"""The cgroup subtree systemd hands a system engine: its unit's own cgroup, with `Delegate=yes`.

systemd owns the cgroup tree on a systemd host; a service may manage the subtree below its own
cgroup only when its unit delegates it (`Delegate=yes`), and systemd then marks that cgroup with
the `trusted.delegate` extended attribute (`user.delegate` too, since systemd 251). The engine
finds its own cgroup in /proc/self/cgroup (the `0::` line: cgroup v2), and knows it was started
by systemd from INVOCATION_ID, which systemd sets for every process of a service.

cgroup v2's "no internal processes" rule: a cgroup that offers controllers to its children (its
`cgroup.subtree_control`, here pids and memory, for the jobs' limits) may hold no process
itself. So the engine cannot sit in the unit's cgroup beside its jobs' cgroups: the shipped unit
has `DelegateSubgroup=engine` (systemd 254), which starts the engine in the leaf `engine` below
it, and the jobs' cgroups go in `jobs` beside that leaf:

    <unit's cgroup>/            e.g. /sys/fs/cgroup/gpudesk.slice/gpudesk.service
        engine/                 the engine (and nothing else)
        jobs/job-<id>-<n>/      each attempt, as under the raw path

Where the engine finds itself at the top of its delegated cgroup (a systemd before 254 ignores
`DelegateSubgroup=`), it does not move itself into a leaf: with the controllers turned on there,
the next start of the unit (a restart while jobs run) would fail, systemd being unable to put
the new engine in the unit's cgroup ("Device or resource busy"). The engine then keeps the raw
path of a host without systemd (gpudesk.hw.containment) and says why.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import msgspec

PROC_SELF_CGROUP = "/proc/self/cgroup"
ENGINE_LEAF = "engine"  # the unit's DelegateSubgroup=
JOBS_FOLDER = "jobs"  # beside the engine's leaf: the attempts' cgroups
DELEGATE_XATTRS = ("trusted.delegate", "user.delegate")  # set by systemd on a delegated cgroup


def unified_path(text: str) -> str | None:
    """The cgroup v2 path in a /proc/PID/cgroup's text (its `0::` line), or None."""
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or None
    return None


def is_delegated(cgroup: Path) -> bool:
    """Whether systemd marked `cgroup` as delegated to the unit's processes."""
    for name in DELEGATE_XATTRS:
        try:
            if os.getxattr(cgroup, name).strip() == b"1":
                return True
        except OSError:  # absent, no xattrs on this file system, or not ours to read
            continue
    return False


class Delegation(msgspec.Struct, frozen=True):
    """The engine's delegated subtree: the unit's cgroup and the leaf the engine runs in."""

    unit: Path
    engine: Path

    @property
    def jobs(self) -> Path:
        return self.unit / JOBS_FOLDER


def find(
    mount: str,
    environ: Mapping[str, str] | None = None,
    proc_cgroup: str = PROC_SELF_CGROUP,
) -> tuple[Delegation | None, str]:
    """This process's delegated subtree in the v2 hierarchy mounted at `mount`, or None and why
    there is none ("" where the engine was not started by systemd)."""
    env = os.environ if environ is None else environ
    if not env.get("INVOCATION_ID"):
        return None, ""
    try:
        with open(proc_cgroup) as fh:
            own = unified_path(fh.read())
    except OSError:
        own = None
    if own is None or own == "/":
        return None, "started by systemd, in no cgroup v2 of its own"
    here = Path(mount) / own.lstrip("/")
    if here.name == ENGINE_LEAF and is_delegated(here.parent):
        return Delegation(unit=here.parent, engine=here), ""
    if is_delegated(here):
        return None, (
            f"its unit delegates {here} but started it there, not in a leaf below (systemd "
            f"before 254 ignores DelegateSubgroup={ENGINE_LEAF})"
        )
    return None, f"its unit does not delegate its cgroup {here} (Delegate=yes)"
