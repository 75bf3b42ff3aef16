"""Slurm's client commands, run and read: sbatch, squeue, scontrol, scancel, sinfo, sacct.

Every failure becomes a `SlurmError` whose message is one paragraph a user can act on: what
gpudesk asked, what Slurm said, and what to check. Nothing here keeps state; the engine's
Slurm backend (gpudesk.engine.backends.slurm) decides what to ask and when.

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

import contextlib
import os
import re
from collections.abc import Sequence

import msgspec

from gpudesk.core.cluster import has_control
from gpudesk.core.identity import Identity
from gpudesk.slurm.as_owner import Answer, TimedOut, acts_for_other, run_as
from gpudesk.slurm.request import GresOffer
from gpudesk.text import safe_text
from gpudesk.trust import engine_environment, site_path, site_program

DEFAULT_CONF = "/etc/slurm/slurm.conf"
TIMEOUT_S = 30.0  # a controller that does not answer: Slurm's own MessageTimeout is 10 s
# array-task id, own job id, state, reason, nodes, the owner's uid
# id, own id, state, reason, nodes, uid, start time: Slurm's own StartTime ("2026-11-25T02:20:42";
# a pending job's is an estimate or "N/A"), so a job's start is Slurm's, not when a poll first
# saw it running.
SQUEUE_FORMAT = "%i|%A|%T|%r|%N|%U|%S"
# What the owner's process runs to submit ($1 her folder, $2 the script in it, $3 sbatch from
# the site's PATH; the script's text on stdin): umask 077 keeps her folder hers alone.
SUBMIT_SCRIPT = 'umask 077 && mkdir -p -- "$1" && cat > "$2" && exec "$3" --parsable "$2"'
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


class QueueLine(msgspec.Struct, frozen=True):
    """One line of squeue: a job, an array task, or an array's pending tasks ("12_[3-7]")."""

    slurm_id: str  # "12", "12_3", "12_[3-7]"
    own_id: str  # the job's own id (an array task has one of its own once it runs)
    state: str
    reason: str | None
    node: str | None
    started: str | None = None  # Slurm's StartTime ("2026-11-25T02:20:42"), once it runs

    @property
    def pending_tasks(self) -> bool:
        """An array's tasks that have not started yet, listed together."""
        return "[" in self.slurm_id


class Ended(msgspec.Struct, frozen=True):
    """How an ended job ended, from scontrol or the job completion log."""

    state: str  # COMPLETED, FAILED, CANCELLED, TIMEOUT ...
    exit_code: int | None
    signal: int | None
    reason: str | None
    node: str | None
    started: str | None  # Slurm's timestamps, "2026-11-25T02:20:42"
    ended: str | None


def site_conf() -> str:
    """The site's slurm.conf: the engine's own SLURM_CONF (root's service unit sets it; a
    user's request never does), else Slurm's default."""
    return os.environ.get("SLURM_CONF") or DEFAULT_CONF


def conf_path(conf: str | None) -> str:
    return conf or site_conf()


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


def _number(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 20 else None


def _uid_of(user_id: str | None) -> int | None:
    """scontrol's `UserId=ada(1001)`: the uid."""
    match = re.fullmatch(r"[^()]*\((\d{1,20})\)", user_id or "")
    return int(match.group(1)) if match else None


def _null(value: str | None) -> str | None:
    """A field as the views keep it: None for Slurm's words for nothing, and for anything that
    is not one line of text (a client run as a user answers what she makes it: the views show
    it to everyone)."""
    if value is None or has_control(value) or len(value) > 1000:
        return None
    return None if value in ("", "(null)", "None", "N/A", "Unknown") else value


class SlurmCommands:
    """Slurm's clients for one owner's jobs on one cluster (named by its slurm.conf): each run
    as the owner, found on the site's PATH, with an environment the engine built
    (gpudesk.slurm.as_owner)."""

    def __init__(self, conf: str, owner: Identity) -> None:
        self.conf = conf
        self.owner = owner
        self.env = engine_environment(owner, SLURM_CONF=conf)
        self.conf_checked = False

    @classmethod
    def of_process(cls, conf: str | None) -> SlurmCommands:
        """The clients as this process runs them (the CLI's `export slurm`)."""
        return cls(conf_path(conf), Identity.of_process())

    def run(self, args: Sequence[str], what: str, stdin: bytes = b"") -> Answer:
        """Run a Slurm client (or a site program that prepares for one) as the owner; raises
        SlurmError when it cannot be run at all (its exit status is the caller's to read)."""
        program = site_program(args[0])
        if program is None:
            raise SlurmError(
                f"Slurm's {args[0]} is not on this machine's PATH ({site_path()}), so gpudesk "
                f"cannot {what}. Run gpudesk on a machine of the cluster (a login node), or "
                "install Slurm's client commands (Debian: slurm-client)."
            )
        if not self.conf_checked:
            self.conf_checked = True  # the check runs `test` through here itself
            try:
                self._check_conf(what)
            except SlurmError:
                self.conf_checked = False  # asked again next time: it may be there by then
                raise
        try:
            return run_as(
                self.owner, [program, *args[1:]], self.env, timeout=TIMEOUT_S, stdin=stdin
            )
        except TimedOut:
            raise SlurmError(
                f"{args[0]} did not answer within {TIMEOUT_S:g} s, so gpudesk could not {what}; "
                f"is the cluster's controller up (scontrol ping)?"
            ) from None
        except OSError as exc:
            raise SlurmError(f"could not run {program} to {what}: {exc.strerror or exc}") from None

    def _check_conf(self, what: str) -> None:
        """Is there a slurm.conf the owner can read? (Without one a client retries for 60 s.)
        Asked as the owner: the file may be one she names, in a place of hers."""
        if acts_for_other(self.owner):
            readable = self.run(["test", "-f", self.conf], "read slurm.conf").returncode == 0
        else:
            readable = os.path.isfile(self.conf)
        if not readable:
            raise SlurmError(
                f"there is no Slurm configuration at {self.conf}"
                + (" (SLURM_CONF)" if self.conf != DEFAULT_CONF else "")
                + (f" that {self.owner.name} can reach" if acts_for_other(self.owner) else "")
                + f", so gpudesk cannot {what}. Set SLURM_CONF to the cluster's slurm.conf, or "
                "run gpudesk on a machine of the cluster."
            )

    @staticmethod
    def said(done: Answer) -> str:
        """What a failed command said, in one line, without Slurm's `sbatch: error:` prefixes."""
        text = " ".join(
            re.sub(r"^\w+: (error|fatal): ", "", line.strip())
            for line in (done.err or done.out).splitlines()
            if line.strip()
        )
        return safe_text(text)[:600] or f"exit status {done.returncode}"

    # --------------------------------------------------------------- asking
    def cluster_name(self) -> str:
        """The cluster's ClusterName (scontrol show config)."""
        done = self.run(["scontrol", "show", "config"], "read the cluster's configuration")
        if done.returncode == 0:
            for line in done.out.splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "ClusterName" and value.strip():
                    # a label the views show everyone: what her slurm.conf says is not
                    # believed past one line of text
                    name = value.strip()
                    return name if not has_control(name) and len(name) <= 64 else "slurm"
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
        return GresOffer.parse(done.out.splitlines())

    def partitions(self) -> list[str]:
        done = self.run(["sinfo", "-h", "-o", "%R"], "list the cluster's partitions")
        return sorted({line.strip() for line in done.out.splitlines() if line.strip()})

    def queue(self, ids: Sequence[str]) -> list[QueueLine]:
        """squeue's lines for these jobs (arrays: every task), ended ones within MinJobAge too;
        only the owner's: a line of another user's job is no news of hers, whatever id she
        got gpudesk to ask about."""
        if not ids:
            return []
        done = self.run(
            ["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", SQUEUE_FORMAT],
            "read the state of its Slurm jobs",
        )
        if done.returncode != 0:
            if "Invalid job id" in done.err:
                return []
            raise SlurmError(f"squeue failed: {self.said(done)}")
        lines = []
        for line in done.out.splitlines():
            parts = line.split("|")
            if len(parts) != 7 or has_control(line) or _number(parts[5]) != self.owner.uid:
                continue
            state = parts[2].upper()
            started = _null(parts[6]) if state not in QUEUED_STATES else None
            lines.append(
                QueueLine(parts[0], parts[1], state, _null(parts[3]), _null(parts[4]), started)
            )
        return lines

    def sent_scripts(self) -> dict[str, str]:
        """The owner's jobs Slurm lists (ended ones within MinJobAge too), by the script sbatch
        was given (squeue %o) -> the submission's id (%F: an array's own id): how an intent
        whose engine stopped during its sbatch is found."""
        done = self.run(
            ["squeue", "-h", "-t", "all", "-u", str(self.owner.uid), "-o", "%F|%U|%o"],
            "look for jobs a stopped engine submitted",
        )
        if done.returncode != 0:
            raise SlurmError(f"squeue failed: {self.said(done)}")
        found: dict[str, str] = {}
        for line in done.out.splitlines():
            submission, _, rest = line.partition("|")
            uid, _, script = rest.partition("|")  # a path may hold "|": it comes last
            if has_control(line) or _number(uid) != self.owner.uid or _number(submission) is None:
                continue
            found[script] = submission
        return found

    def owns(self, slurm_id: str) -> bool:
        """Does Slurm know job `slurm_id` as the owner's? (What sbatch printed is checked so
        before gpudesk keeps it.)"""
        return any(
            slurm_id in (line.own_id, line.slurm_id.split("_")[0])  # an array: "12_[0-7]"
            for line in self.queue([slurm_id])
        )

    def ended(self, slurm_id: str) -> Ended | None:
        """How one of the owner's jobs ended: scontrol while Slurm keeps it, else the job
        completion log (`sacct -c`); None when neither knows it as hers."""
        done = self.run(["scontrol", "show", "job", "-o", slurm_id], "read how a Slurm job ended")
        if done.returncode == 0 and done.out.strip():
            first = done.out.splitlines()[0]
            fields = parse_fields(first)
            if has_control(first) or _uid_of(fields.get("UserId")) != self.owner.uid:
                return None
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
                "--format=JobID,State,ExitCode,NodeList,Start,End,UID",
            ],
            "read the job completion log",
        )
        for line in done.out.splitlines():
            parts = line.split("|")
            if (
                len(parts) != 7
                or has_control(line)
                or parts[0] != slurm_id
                or _number(parts[6]) != self.owner.uid
            ):
                continue
            code, sig = _exit(parts[2])
            state = parts[1].split()[0].upper() if parts[1] else "UNKNOWN"
            return Ended(state, code, sig, None, _null(parts[3]), _null(parts[4]), _null(parts[5]))
        return None

    # --------------------------------------------------------------- acting
    def sbatch(self, folder: str, script: str, text: str) -> str:
        """Make the owner's folder, write the script there and submit it, all in one process
        run as the owner (root writes nothing of hers); the job's id (an array's: its id),
        once Slurm confirmed the job is hers."""
        done = self.run(
            ["sh", "-c", SUBMIT_SCRIPT, "gpudesk-submit", folder, script, self._program("sbatch")],
            "submit to Slurm",
            stdin=text.encode("utf-8", "surrogateescape"),
        )
        if done.returncode != 0:
            raise SlurmError(f"sbatch refused the job: {self.said(done)}")
        answer = done.out.strip().splitlines()
        job_id = answer[-1].split(";")[0].strip() if answer else ""
        if not (job_id.isascii() and job_id.isdigit() and len(job_id) <= 20):
            raise SlurmError(f"sbatch answered {safe_text(done.out)[:200]!r}, not a job id")
        if not self.owns(job_id):
            raise SlurmError(
                f"sbatch answered job {job_id}, but Slurm does not list it as a job of "
                f"{self.owner.name}'s (squeue -j {job_id})"
            )
        return job_id

    def _program(self, name: str) -> str:
        program = site_program(name)
        if program is None:
            raise SlurmError(
                f"Slurm's {name} is not on this machine's PATH ({site_path()}); install Slurm's "
                "client commands (Debian: slurm-client)."
            )
        return program

    def cancel(self, slurm_ids: Sequence[str], signal: str | None = None) -> str | None:
        """scancel, as the owner (Slurm refuses her another user's job); what it said when it
        failed (None: it did not). With `signal` (SIGUSR1), `scancel --signal=USR1`: the
        signal to the job's steps and batch shell (`--full`), which go on."""
        if not slurm_ids:
            return None
        sent = [f"--signal={signal.removeprefix('SIG')}", "--full"] if signal else []
        what = f"send {signal} to Slurm jobs" if signal else "cancel Slurm jobs"
        done = self.run(["scancel", *sent, *slurm_ids], what)
        return None if done.returncode == 0 else self.said(done)

    def remove_folder(self, folder: str) -> None:
        """Remove a folder of the owner's (a submission that was undone), as her."""
        with contextlib.suppress(SlurmError):
            self.run(["rm", "-rf", "--", folder], "remove the Slurm folder of a refused job")
