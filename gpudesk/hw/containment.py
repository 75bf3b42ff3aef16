"""What holds an attempt's processes together: a cgroup v2 of its own where the engine may make
one, else the attempt's process group.

A process group is left by anything that calls setsid() or forks twice (a daemon, `setsid cmd &`),
so a cancel or the job's end that signals the group misses such a process and it runs on,
untracked. A cgroup cannot be left that way: the wrapper moves itself into the attempt's cgroup
before it starts the command, so every descendant is born inside; a cancel signals every process
in `cgroup.procs`, and when the attempt settles the engine kills what is left (`cgroup.kill`, or
SIGKILL to each member on kernels before 5.14) and removes the cgroup. A restarted engine sweeps
the cgroups of attempts that are no longer running.

Layout: `<cgroup v2 mount>/gpudesk-u<uid>-<home digest>/job-<job id>-<attempt number>`. The v2
mount is read from /proc/self/mounts (/sys/fs/cgroup on a unified host, /sys/fs/cgroup/unified on
a hybrid one). One folder per home, so two engines of one user never touch each other's jobs;
the engine holds its home's folder (flock) while it runs, so a second engine of the same home
(its state folder removed under the first) is refused rather than sweeping the first one's jobs
as leftovers.
A system engine that systemd runs in a unit with `Delegate=yes` keeps its attempts in its unit's
delegated subtree instead (`<unit's cgroup>/jobs/job-<job id>-<attempt number>`; how it is found
and why the engine runs in a leaf beside it: gpudesk.hw.delegation).
Where no v2 hierarchy is mounted, where it is not writable (a personal engine under systemd, which
delegates no cgroup to it here) or where GPUDESK_CGROUP=off, attempts keep the process group alone
and `gpudesk show` says why.

Limits: each attempt's cgroup gets `pids.max` and `memory.max` (`[station] job_pids_max`,
`job_memory_max_gb`), so one job can neither fork until the machine has no pid left nor take its
memory from everyone: past pids.max its fork() fails with EAGAIN; past memory.max the kernel
reclaims and then ends it inside its own cgroup. The engine enables the pids and memory
controllers for its folder (`cgroup.subtree_control`); where the hierarchy does not offer them
(a hybrid host whose controllers sit in v1), the wrapper's containment line, which `gpudesk show`
prints, says which limit is missing and why.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import re
import signal
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec

from gpudesk.home_lock import AlreadyRunning
from gpudesk.hw import delegation

log = logging.getLogger("gpudesk.engine")

SWITCH_ENV = "GPUDESK_CGROUP"  # "off" keeps every attempt to its process group
MOUNTS = "/proc/self/mounts"
REMOVE_WAIT_S = 0.5  # how long a settle waits for killed processes to leave before rmdir
_KILL_ROUNDS = 50  # without cgroup.kill: SIGKILL every member until none is left (forks race)


def _flock_holder(fd: int, locks: str = "/proc/locks") -> int | None:
    """The pid /proc/locks gives for the flock on `fd`'s file, or None."""
    st = os.fstat(fd)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    with contextlib.suppress(OSError, ValueError), open(locks) as fh:
        for line in fh:
            fields = line.split()
            if "FLOCK" in fields and key in fields and "->" not in fields:
                return int(fields[fields.index(key) - 1])
    return None


def v2_mount(mounts: str = MOUNTS) -> str | None:
    """Where the cgroup v2 hierarchy is mounted, or None."""
    try:
        with open(mounts) as fh:
            for line in fh:
                fields = line.split()
                if len(fields) >= 3 and fields[2] == "cgroup2":
                    # /proc/mounts escapes blanks in paths as octal (\040)
                    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[1])
    except OSError:
        return None
    return None


def home_folder(mount: str, home_root: Path) -> Path:
    """The folder of this home's attempts in the v2 hierarchy mounted at `mount`."""
    digest = hashlib.sha1(str(home_root).encode("utf-8", "surrogateescape")).hexdigest()
    return Path(mount) / f"gpudesk-u{os.getuid()}-{digest[:12]}"


LIMITED_CONTROLLERS = ("pids", "memory")  # enabled for this home's folder, for the limits below


class JobLimits(msgspec.Struct, frozen=True):
    """What one attempt's cgroup may hold: tasks (pids.max) and bytes (memory.max); 0: none."""

    pids_max: int = 0
    memory_max_bytes: int = 0


def limits_for(pids_max: int, memory_max_gb: float | None, memory_fraction: float) -> JobLimits:
    """`[station] job_pids_max` and `job_memory_max_gb` as a cgroup's limits; memory unset:
    `memory_fraction` of the host's physical memory (sysconf: MemTotal)."""
    if memory_max_gb is None:
        try:
            total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError):
            total = 0  # cannot tell: no memory limit rather than a wrong one
        memory = int(total * memory_fraction)
    else:
        memory = int(memory_max_gb * 2**30)
    return JobLimits(pids_max=pids_max, memory_max_bytes=memory)


def enable_controllers(base: Path) -> None:
    """Offer the limits' controllers to this home's attempts' cgroups. Best effort: a hierarchy
    without them (its root does not delegate them) leaves attempts unlimited, and each attempt's
    containment line says so (wrapper.limits_text)."""
    for controller in LIMITED_CONTROLLERS:
        with contextlib.suppress(OSError):
            (base / "cgroup.subtree_control").write_text(f"+{controller}")


def write_limits(cgroup: Path, limits: JobLimits) -> None:
    """Write the attempt's pids.max and memory.max ("max": no limit). A file that is missing
    (its controller is not enabled) is left to wrapper.limits_text to report."""
    for name, value in (("pids.max", limits.pids_max), ("memory.max", limits.memory_max_bytes)):
        with contextlib.suppress(OSError):
            (cgroup / name).write_text(str(value) if value > 0 else "max")


def _move(pid: int, cgroup: Path) -> None:
    with contextlib.suppress(OSError):  # gone already, or the wrapper says why it is not in
        (cgroup / "cgroup.procs").write_text(str(pid))


def members(cgroup: Path) -> list[int]:
    """The pids in a cgroup (not its sub-cgroups: the engine makes none)."""
    try:
        return [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def signal_members(cgroup: Path, sig: int) -> int:
    """Send `sig` to every process in the cgroup; how many there were."""
    pids = members(cgroup)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    return len(pids)


def kill_all(cgroup: Path) -> int:
    """SIGKILL every process in the cgroup, forks included; how many there were."""
    pids = members(cgroup)
    if not pids:
        return 0
    try:
        (cgroup / "cgroup.kill").write_text("1")  # atomic against forks (Linux 5.14)
        return len(pids)
    except OSError:
        pass
    for _ in range(_KILL_ROUNDS):
        if not signal_members(cgroup, signal.SIGKILL):
            break
        time.sleep(0.005)
    return len(pids)


def remove(cgroup: Path, wait: float = REMOVE_WAIT_S) -> bool:
    """rmdir the cgroup, waiting up to `wait` for killed processes to leave it; True when gone."""
    deadline = time.monotonic() + wait
    while True:
        try:
            cgroup.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                return False
        time.sleep(0.01)


class Containment:
    """The engine's cgroups: where they are (or why there are none) and their life cycle."""

    def __init__(
        self, base: Path | None, reason: str, note: str = "", earlier: Path | None = None
    ) -> None:
        self.base = base  # this home's folder in the v2 hierarchy; None: process groups only
        self.reason = reason  # why process groups only ("" with a base)
        self.note = note  # why the raw path although systemd started the engine ("" if not)
        # The raw path's folder, for a delegated engine: attempts an engine before the upgrade
        # started there keep their cgroups, found there until they settle
        self.earlier = earlier
        self.busy: set[Path] = set()  # cgroups whose processes had not left when they settled
        self._mover: ThreadPoolExecutor | None = None
        self._hold: int | None = None  # the folder, flock()ed while the engine runs (`_take`)

    @classmethod
    def probe(
        cls,
        home_root: Path,
        mount: str | None = None,
        proc_cgroup: str = delegation.PROC_SELF_CGROUP,
    ) -> Containment:
        """Make this home's folder in the cgroup v2 hierarchy (mounted at `mount`, default:
        found in /proc/self/mounts), or the jobs' folder in the engine's delegated subtree,
        or say why there is none."""
        if os.environ.get(SWITCH_ENV, "").strip().lower() in {"off", "0", "no", "false"}:
            return cls(None, f"cgroups turned off by {SWITCH_ENV}=off")
        mount = mount or v2_mount()
        if mount is None:
            return cls(None, "no cgroup v2 hierarchy is mounted")
        delegated, note = delegation.find(mount, proc_cgroup=proc_cgroup)
        raw = home_folder(mount, home_root)
        earlier = None
        if delegated is not None:
            base, earlier = delegated.jobs, raw if raw.is_dir() else None
            enable_controllers(delegated.unit)  # the engine is in its leaf: the unit holds none
        else:
            base = raw
        try:
            base.mkdir(exist_ok=True)
        except OSError as exc:
            return cls(None, f"cgroup v2 not writable ({mount}: {exc.strerror or exc})")
        if not os.access(base / "cgroup.procs", os.W_OK):
            with contextlib.suppress(OSError):
                base.rmdir()
            return cls(None, f"cgroup v2 not writable ({base}/cgroup.procs)")
        enable_controllers(base)
        made = cls(base, "", note, earlier)
        made._take()
        return made

    def _take(self) -> None:
        """Hold the folder (flock) for the engine's life, or AlreadyRunning. An engine whose
        state folder was removed under it runs on, with its jobs in this folder (named by the
        home's path, not by a file in it): a new engine of the same home must not start beside
        it, let alone kill its jobs as leftovers (`sweep`)."""
        assert self.base is not None
        fd = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        # Only the engine's user may open the folder, and so lock it: a member who could would
        # keep the station's next engine out. Others keep passing through it (x): a job reads
        # its own cgroup's files.
        os.fchmod(fd, stat.S_IMODE(os.fstat(fd).st_mode) & ~0o066)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _flock_holder(fd)
            os.close(fd)
            raise AlreadyRunning(
                f"another engine (pid {pid or '?'}) runs this home's jobs (their cgroups are in "
                f"{self.base}) without its state folder: the folder was removed or moved while "
                "it ran, and it puts it back within a second or two. Try again; to start afresh "
                f"instead, stop that engine first (`kill {pid or '<pid>'}`)."
            ) from None
        self._hold = fd

    def describe(self) -> str:
        if self.base is None:
            return f"process group only: {self.reason}"
        raw = f" (not in the unit's cgroup: {self.note})" if self.note else ""
        return f"each attempt in a cgroup of its own under {self.base}{raw}"

    def path(self, job_id: int, number: int) -> Path | None:
        if self.base is None:
            return None
        name = f"job-{job_id}-{number}"
        if self.earlier is not None and (self.earlier / name).is_dir():
            return self.earlier / name  # started before the engine's cgroup was delegated
        return self.base / name

    def prepare(self, job_id: int, number: int, limits: JobLimits | None = None) -> str:
        """Make the attempt's cgroup with its `limits`; what the wrapper is told: the cgroup's
        path to join, or why there is none (never starting with "/")."""
        cgroup = self.path(job_id, number)
        if cgroup is None:
            return self.reason
        try:
            cgroup.mkdir(exist_ok=True)
        except OSError as exc:
            return f"cgroup v2 not writable ({cgroup}: {exc.strerror or exc})"
        write_limits(cgroup, limits or JobLimits())
        return str(cgroup)

    def move_soon(self, pid: int, cgroup: str) -> None:
        """Move a wrapper just started into its cgroup, from a helper thread. A move waits for
        an RCU grace period in the kernel (5-20 ms on a busy host, measured): done here, it
        overlaps the wrapper's own start-up instead of adding to it. The wrapper checks before
        it starts the command and moves itself if this has not happened yet, so no descendant
        is ever born outside."""
        if self._mover is None:
            self._mover = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cgroup-move")
        self._mover.submit(_move, pid, Path(cgroup))

    def signal(self, job_id: int, number: int, sig: int) -> int:
        """Send `sig` to every process of the attempt's cgroup; 0 when it has none (the caller
        signals the process group)."""
        cgroup = self.path(job_id, number)
        return signal_members(cgroup, sig) if cgroup is not None else 0

    def kill(self, job_id: int, number: int) -> int:
        cgroup = self.path(job_id, number)
        return kill_all(cgroup) if cgroup is not None else 0

    def release(self, job_id: int, number: int) -> int:
        """The attempt has ended: kill what is left in its cgroup and remove it (later, from
        `retry`, if its processes take long to die). Returns how many processes were left."""
        cgroup = self.path(job_id, number)
        if cgroup is None or not cgroup.is_dir():
            return 0
        left = kill_all(cgroup)
        if not remove(cgroup):
            self.busy.add(cgroup)
        return left

    def retry(self) -> None:
        """Remove the cgroups whose killed processes had not left yet."""
        for cgroup in list(self.busy):
            kill_all(cgroup)
            if remove(cgroup, wait=0.0):
                self.busy.discard(cgroup)

    def sweep(self, running: set[tuple[int, int]]) -> int:
        """After a restart: kill and remove the cgroups of attempts that are not running
        (`running`: (job id, attempt number)); how many processes were left in them."""
        if self.base is None:
            return 0
        keep = {self.path(job_id, number) for job_id, number in running}
        left = 0
        for folder in (self.base, self.earlier):
            with contextlib.suppress(OSError):
                for cgroup in folder.iterdir() if folder is not None else ():
                    if cgroup.is_dir() and cgroup.name.startswith("job-") and cgroup not in keep:
                        left += kill_all(cgroup)
                        if not remove(cgroup):
                            self.busy.add(cgroup)
        return left

    def close(self) -> None:
        """The engine stops: remove this home's folder if no attempt is left in it."""
        if self._mover is not None:
            self._mover.shutdown(wait=True)
        for folder in (self.base, self.earlier):
            if folder is not None:
                with contextlib.suppress(OSError):
                    folder.rmdir()
        if self._hold is not None:
            os.close(self._hold)
            self._hold = None
