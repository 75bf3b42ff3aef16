"""A real single-node Slurm cluster for the tests: Debian's `slurm-wlm` (slurmctld and slurmd),
started in a temporary folder with a generated `slurm.conf`, torn down after.

What it relies on (checked on these machines; docs/slurm.md cites the same):
- `AuthType=auth/none` with `CredType=cred/none` works without munged;
- every client command needs `SLURM_CONF` in its environment;
- GPU gres without GPUs need device files: symlinks to /dev/null behave like character devices
  (plain files lose CUDA_VISIBLE_DEVICES); `mps` and `shard` need `File=` on their GPU lines;
- plain `sacct` needs slurmdbd, while `sacct -c` reads the `jobcomp/filetxt` log;
- `sched_interval=1,bf_interval=1,batch_sched_delay=0` bring a trivial job to about 1 s;
- teardown cancels every job and waits for the node to be idle before `scontrol shutdown`, or
  slurmstepd survives.

The node offers two whole GPUs of type `a100`, two MIG-like typed GPUs `1g.10gb`, MPS (100 per
GPU on the first a100) and shards (4 on the second a100).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import EngineHandle

CLUSTER_NAME = "gpudesk-test"
PARTITION = "gpu"
READY_S = 30.0


def missing_reason() -> str | None:
    """Why a real Slurm cannot be started here (None: it can)."""
    for program in ("slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel", "sacct"):
        if shutil.which(program) is None and not Path(f"/usr/sbin/{program}").exists():
            return (
                f"Slurm's {program} is not installed (Debian: apt-get install slurm-wlm; "
                ".ci/run installs it when it runs as root)"
            )
    if os.geteuid() != 0:
        return "a test Slurm runs its daemons as root (SlurmUser=root); not root here"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _memory_mb() -> int:
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 1024


def slurm_program(program: str, path: str | None = None) -> str:
    """Where Slurm's `program` is: the first on `path` (default: PATH), else in /usr/sbin,
    where Debian puts the daemons and which a user's PATH may lack."""
    found = shutil.which(program, path=path) or f"/usr/sbin/{program}"
    assert os.path.exists(found), f"Slurm's {program} is not installed"
    return found


@dataclass
class SlurmCluster:
    root: Path

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def jobcomp(self) -> Path:
        return self.root / "jobcomp.log"

    @property
    def env(self) -> dict[str, str]:
        """The environment every Slurm client command needs (SLURM_CONF), over os.environ."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    @property
    def name(self) -> str:
        return CLUSTER_NAME

    @property
    def partition(self) -> str:
        return PARTITION

    def run(self, *args: str, check: bool = True, timeout: float = 30.0) -> str:
        done = subprocess.run(
            list(args),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {done.returncode}: {done.stderr}")
        return done.stdout

    def node_state(self) -> str:
        return self.run("sinfo", "-h", "-N", "-o", "%T", check=False).strip()

    def wait_idle(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.node_state() == "idle" and not self.run("squeue", "-h", check=False).strip():
                return
            time.sleep(0.2)
        raise AssertionError(f"the test Slurm's node is {self.node_state()!r}, not idle")

    def cancel_all(self) -> None:
        self.run("scancel", "--full", "-u", "root", check=False)
        with contextlib.suppress(AssertionError):
            self.wait_idle()

    def logs(self) -> str:
        parts = []
        for name in ("slurmctld.log", "slurmd.log"):
            path = self.root / name
            if path.exists():
                parts.append(f"--- {name}\n" + path.read_text(errors="replace")[-4000:])
        return "\n".join(parts)


def write_config(root: Path) -> None:
    """slurm.conf and gres.conf for one node named localhost."""
    dev = root / "dev"
    dev.mkdir(parents=True)
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidia3"):
        (dev / name).symlink_to("/dev/null")
    for folder in ("state", "spool"):
        (root / folder).mkdir()
    # One CPU more than the machine has (SlurmdParameters=config_overrides lets slurmd believe
    # the configuration): a sleeping job must not keep a 2-core CI machine's other jobs
    # pending, and more would run more trainings at once than the cores can serve.
    cpus = (os.cpu_count() or 2) + 1
    memory = max(_memory_mb() * 8 // 10, 512)
    # A job that names no --mem (the engine's, unless [cluster] mem_gb) gets DefMemPerCPU per
    # CPU; without it, under CR_Core_Memory, it would get the whole node's memory and the node
    # would run one job at a time: an array's tasks in a row, all of them behind a sleeper.
    per_cpu = memory // cpus
    (root / "slurm.conf").write_text(
        "\n".join(
            [
                f"ClusterName={CLUSTER_NAME}",
                "SlurmctldHost=localhost",
                "AuthType=auth/none",
                "CredType=cred/none",
                # a requeued batch job waits out its credential's lifetime (default 120 s)
                "AuthInfo=cred_expire=5",
                "SlurmUser=root",
                "SlurmdUser=root",
                f"SlurmctldPort={_free_port()}",
                f"SlurmdPort={_free_port()}",
                f"StateSaveLocation={root}/state",
                f"SlurmdSpoolDir={root}/spool",
                f"SlurmctldPidFile={root}/slurmctld.pid",
                f"SlurmdPidFile={root}/slurmd.pid",
                f"SlurmctldLogFile={root}/slurmctld.log",
                f"SlurmdLogFile={root}/slurmd.log",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "MpiDefault=none",
                "SwitchType=switch/none",
                "SchedulerType=sched/backfill",
                "SchedulerParameters=sched_interval=1,bf_interval=1,batch_sched_delay=0",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core_Memory",
                f"DefMemPerCPU={per_cpu}",
                "GresTypes=gpu,mps,shard",
                "JobCompType=jobcomp/filetxt",
                f"JobCompLoc={root}/jobcomp.log",
                "AccountingStorageType=accounting_storage/none",
                "MinJobAge=600",
                "KillWait=5",
                "ReturnToService=2",
                "SlurmdParameters=config_overrides",
                "InactiveLimit=0",
                f"NodeName=localhost CPUs={cpus} RealMemory={memory} "
                "Gres=gpu:a100:2,gpu:1g.10gb:2,mps:100,shard:4 State=UNKNOWN",
                f"PartitionName={PARTITION} Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    (root / "gres.conf").write_text(
        "\n".join(
            [
                f"Name=gpu Type=a100 File={dev}/nvidia0",
                f"Name=gpu Type=a100 File={dev}/nvidia1",
                f"Name=gpu Type=1g.10gb File={dev}/nvidia2",
                f"Name=gpu Type=1g.10gb File={dev}/nvidia3",
                f"Name=mps Count=100 File={dev}/nvidia0",
                f"Name=shard Count=4 File={dev}/nvidia1",
                "",
            ]
        )
    )


@contextlib.contextmanager
def running_cluster(root: Path) -> Iterator[SlurmCluster]:
    """Start slurmctld and slurmd in `root`, wait until the node is idle, yield, tear down."""
    write_config(root)
    cluster = SlurmCluster(root)
    env = cluster.env
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        for command in (
            [slurm_program("slurmctld"), "-D", "-i"],
            [slurm_program("slurmd"), "-D", "-N", "localhost"],
        ):
            daemons.append(
                subprocess.Popen(
                    command,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=open(root / f"{Path(command[0]).name}.stderr", "wb"),  # noqa: SIM115
                    start_new_session=True,
                )
            )
        try:
            cluster.wait_idle(READY_S)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{cluster.logs()}") from None
        yield cluster
    finally:
        cluster.cancel_all()
        cluster.run("scontrol", "shutdown", check=False)
        _stop(daemons)


def _stop(daemons: Sequence[subprocess.Popen[bytes]]) -> None:
    for daemon in daemons:
        with contextlib.suppress(subprocess.TimeoutExpired):
            daemon.wait(10)
    for daemon in daemons:
        if daemon.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.pid, 9)
            daemon.wait(5)


@contextlib.contextmanager
def engine_on(cluster: SlurmCluster, home_root: Path) -> Iterator[EngineHandle]:
    """A personal engine in `home_root` whose submitters' environment names `cluster`
    (SLURM_CONF) and polls Slurm every 0.3 s; the environment restored after it stops."""
    from conftest import EngineHandle  # at run time: pytest has put tests/ on the path

    from gpudesk.paths import Home

    saved = dict(os.environ)
    os.environ.update(
        {"GPUDESK_HOME": str(home_root), "SLURM_CONF": str(cluster.conf)}
        | {"GPUDESK_SLURM_POLL_S": "0.3"}
    )
    os.environ.pop("GPUDESK_BACKEND", None)
    handle = EngineHandle(Home(home_root))
    try:
        handle.start()
        yield handle
    finally:
        handle.stop()
        handle.client.close()
        os.environ.clear()
        os.environ.update(saved)
