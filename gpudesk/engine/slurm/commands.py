"""Slurm's client commands, run and read: sbatch, squeue, scontrol, scancel, sinfo, sacct.

Every failure becomes a `SlurmError` whose message is one paragraph a user can act on: what
gpudesk asked, what Slurm said, and what to check. Nothing here keeps state; the engine's
Slurm backend (gpudesk.engine.slurm.backend) decides what to ask and when.

Facts this relies on (Slurm 22.05, Debian's slurm-wlm; docs/slurm.md):
- a client whose slurm.conf is missing retries for 60 s before it gives up, so the file is
  checked first;
- `squeue -t all -j IDS` lists jobs that ended less than MinJobAge ago too (with no exit code),
  and exits 1 with "Invalid job id specified" when it knows none of them;
- `scontrol show job -o ID` gives an ended job's ExitCode ("3:0": code 3, no signal) while it
  is kept (MinJobAge); after that only accounting has it: `sacct -c` reads a jobcomp/filetxt log
  (plain `sacct` needs slurmdbd) — tried in that order.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpudesk.engine.identity import Identity
from gpudesk.engine.slurm.request import GresOffer
from gpudesk.text import safe_text

DEFAULT_CONF = "/etc/slurm/slurm.conf"
TIMEOUT_S = 30.0  # a controller that does not answer: Slurm's own MessageTimeout is 10 s
SQUEUE_FORMAT = "%i|%A|%T|%r|%N"  # array-task id, own job id, state, reason, nodes
# Slurm's states, by what gpudesk calls them (JOB_STATE_* in slurm.h; squeue's long names).
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING"})
QUEUED_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "RESV_DEL_HOLD",
    }
)
SUCCEEDED_STATES = frozenset({"COMPLETED"})
CANCELLED_STATES = frozenset({"CANCELLED", "REVOKED"})
FAILED_STATES = frozenset(
    {"FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"}
)
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:]*)=")


class SlurmError(Exception):
    """A Slurm command failed; str() is one paragraph for the user."""


@dataclass(frozen=True)
class QueueLine:
    """One line of squeue: a job, an array task, or an array's pending tasks ("12_[3-7]")."""

    slurm_id: str  # "12", "12_3", "12_[3-7]"
    own_id: str  # the job's own id (an array task has one of its own once it runs)
    state: str
    reason: str | None
    node: str | None

    @property
    def pending_tasks(self) -> bool:
        """An array's tasks that have not started yet, listed together."""
        return "[" in self.slurm_id


@dataclass(frozen=True)
class Ended:
    """How an ended job ended, from scontrol or the job completion log."""

    state: str  # COMPLETED, FAILED, CANCELLED, TIMEOUT ...
    exit_code: int | None
    signal: int | None
    reason: str | None
    node: str | None
    started: str | None  # Slurm's timestamps, "2026-11-25T02:20:42"
    ended: str | None


def conf_path(conf: str | None) -> str:
    return conf or os.environ.get("SLURM_CONF") or DEFAULT_CONF


def parse_fields(line: str) -> dict[str, str]:
    """`Key=Value Key=Value` as scontrol -o and the jobcomp log write them. A value may hold
    spaces (a WorkDir); it runs to the next ` Key=`."""
    matches = list(_KEY.finditer(line))
    fields: dict[str, str] = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(line)
        fields[match.group(1)] = line[match.end() : end].strip()
    return fields


def _exit(text: str | None) -> tuple[int | None, int | None]:
    """Slurm's "code:signal" ("3:0", "0:9")."""
    if not text or ":" not in text:
        return None, None
    code, _, sig = text.partition(":")
    try:
        return int(code), int(sig)
    except ValueError:
        return None, None


def _null(value: str | None) -> str | None:
    return None if value in (None, "", "(null)", "None", "N/A", "Unknown") else value


class SlurmCommands:
    """The commands for one cluster, named by its slurm.conf (None: SLURM_CONF or Slurm's
    default)."""

    def __init__(self, conf: str | None = None, env: Mapping[str, str] | None = None) -> None:
        base = env if env is not None else os.environ
        # the submitter's SLURM_CONF (its environment comes with the request) before the
        # engine's own
        self.conf = conf or base.get("SLURM_CONF") or conf_path(None)
        self.env = {**base, "SLURM_CONF": self.conf}

    def run(
        self,
        args: Sequence[str],
        what: str,
        *,
        env: Mapping[str, str] | None = None,
        owner: Identity | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client (as `owner` when given: a system engine submits as the job's
        owner); raises SlurmError when it cannot be run at all (its exit status is the
        caller's to read)."""
        program = shutil.which(args[0], path=(env or self.env).get("PATH"))
        if program is None:
            raise SlurmError(
                f"Slurm's {args[0]} is not on this machine's PATH, so gpudesk cannot {what}. "
                "Run gpudesk on a machine of the cluster (a login node), or install Slurm's "
                "client commands (Debian: slurm-client)."
            )
        if not os.path.isfile(self.conf):
            raise SlurmError(
                f"there is no Slurm configuration at {self.conf}"
                + (" (SLURM_CONF)" if self.conf != DEFAULT_CONF else "")
                + f", so gpudesk cannot {what}. Set SLURM_CONF to the cluster's slurm.conf, or "
                "run gpudesk on a machine of the cluster."
            )
        try:
            return subprocess.run(
                [program, *args[1:]],
                env={**(env or self.env), "SLURM_CONF": self.conf},
                capture_output=True,
                text=True,
                errors="replace",
                timeout=TIMEOUT_S,
                stdin=subprocess.DEVNULL,
                check=False,
                user=owner.uid if owner is not None else None,
                group=owner.gid if owner is not None else None,
                extra_groups=list(owner.groups) if owner is not None else None,
            )
        except subprocess.TimeoutExpired:
            raise SlurmError(
                f"{args[0]} did not answer within {TIMEOUT_S:g} s, so gpudesk could not {what}; "
                f"is the cluster's controller up (scontrol ping)?"
            ) from None
        except OSError as exc:
            raise SlurmError(f"could not run {program} to {what}: {exc.strerror or exc}") from None

    @staticmethod
    def said(done: subprocess.CompletedProcess[str]) -> str:
        """What a failed command said, in one line, without Slurm's `sbatch: error:` prefixes."""
        text = " ".join(
            re.sub(r"^\w+: (error|fatal): ", "", line.strip())
            for line in (done.stderr or done.stdout).splitlines()
            if line.strip()
        )
        return safe_text(text)[:600] or f"exit status {done.returncode}"

    # --------------------------------------------------------------- asking
    def cluster_name(self) -> str:
        """The cluster's ClusterName (scontrol show config)."""
        done = self.run(["scontrol", "show", "config"], "read the cluster's configuration")
        if done.returncode == 0:
            for line in done.stdout.splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "ClusterName" and value.strip():
                    return value.strip()
        return "slurm"

    def offer(self, partition: str | None = None) -> GresOffer:
        """The GPU gres the partition's nodes (default: every node) offer."""
        args = ["sinfo", "-h", "-o", "%G"] + (["-p", partition] if partition else [])
        done = self.run(args, "read what the cluster's nodes offer")
        if done.returncode != 0:
            raise SlurmError(
                f"sinfo could not list the cluster's nodes: {self.said(done)}"
                + (f" (partition {partition!r}; sinfo -s lists them)" if partition else "")
            )
        return GresOffer.parse(done.stdout.splitlines())

    def partitions(self) -> list[str]:
        done = self.run(["sinfo", "-h", "-o", "%R"], "list the cluster's partitions")
        return sorted({line.strip() for line in done.stdout.splitlines() if line.strip()})

    def queue(self, ids: Sequence[str]) -> list[QueueLine]:
        """squeue's lines for these jobs (arrays: every task), ended ones within MinJobAge too."""
        if not ids:
            return []
        done = self.run(
            ["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", SQUEUE_FORMAT],
            "read the state of its Slurm jobs",
        )
        if done.returncode != 0:
            if "Invalid job id" in (done.stderr or ""):
                return []
            raise SlurmError(f"squeue failed: {self.said(done)}")
        lines = []
        for line in done.stdout.splitlines():
            parts = line.split("|")
            if len(parts) != 5:
                continue
            lines.append(
                QueueLine(parts[0], parts[1], parts[2].upper(), _null(parts[3]), _null(parts[4]))
            )
        return lines

    def ended(self, slurm_id: str) -> Ended | None:
        """How a job ended: scontrol while Slurm keeps it, else the job completion log (`sacct
        -c`); None when neither knows it."""
        done = self.run(["scontrol", "show", "job", "-o", slurm_id], "read how a Slurm job ended")
        if done.returncode == 0 and done.stdout.strip():
            fields = parse_fields(done.stdout.splitlines()[0])
            code, sig = _exit(fields.get("ExitCode"))
            return Ended(
                fields.get("JobState", "UNKNOWN").upper(),
                code,
                sig,
                _null(fields.get("Reason")),
                _null(fields.get("NodeList")),
                _null(fields.get("StartTime")),
                _null(fields.get("EndTime")),
            )
        return self._completion_log(slurm_id)

    def _completion_log(self, slurm_id: str) -> Ended | None:
        done = self.run(
            [
                "sacct",
                "-c",
                "-X",
                "-n",
                "-P",
                "-j",
                slurm_id,
                "--format=JobID,State,ExitCode,NodeList,Start,End",
            ],
            "read the job completion log",
        )
        for line in done.stdout.splitlines():
            parts = line.split("|")
            if len(parts) != 6 or parts[0] != slurm_id:
                continue
            code, sig = _exit(parts[2])
            state = parts[1].split()[0].upper() if parts[1] else "UNKNOWN"
            return Ended(state, code, sig, None, _null(parts[3]), _null(parts[4]), _null(parts[5]))
        return None

    # --------------------------------------------------------------- acting
    def sbatch(
        self,
        script: str,
        env: Mapping[str, str],
        args: Sequence[str] = (),
        owner: Identity | None = None,
    ) -> str:
        """Submit a script file; the job's id (an array's: its id)."""
        done = self.run(
            ["sbatch", "--parsable", *args, script], "submit to Slurm", env=env, owner=owner
        )
        if done.returncode != 0:
            raise SlurmError(f"sbatch refused the job: {self.said(done)}")
        answer = done.stdout.strip().splitlines()
        job_id = answer[-1].split(";")[0].strip() if answer else ""
        if not job_id.isdigit():
            raise SlurmError(f"sbatch answered {safe_text(done.stdout)[:200]!r}, not a job id")
        return job_id

    def cancel(self, slurm_ids: Sequence[str]) -> str | None:
        """scancel; what it said when it failed (None: it did not)."""
        if not slurm_ids:
            return None
        done = self.run(["scancel", *slurm_ids], "cancel Slurm jobs")
        return None if done.returncode == 0 else self.said(done)
