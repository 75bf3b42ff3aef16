"""A Slurm submit's work off the engine's loop, as the job's owner: step 1 (`prepare`: the
cluster's offer, its partition, the mapping, its name) and step 3 (`send`: each sbatch in
dependency order, all or nothing), with the records the loop passes between the steps
(`Prepared`, `SendPlan`, `Sent`). The three steps and why are in gpudesk.engine.backends.slurm
(SlurmBackend); these
run on a worker thread and read no store and no state of the loop's.
"""

from __future__ import annotations

import contextlib
import pwd
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec

from gpudesk import __version__
from gpudesk.core.cluster import ClusterSpec
from gpudesk.core.identity import Identity
from gpudesk.core.jobs import JobSpec
from gpudesk.slurm.as_owner import acts_for_other
from gpudesk.slurm.commands import SlurmCommands, SlurmError, site_conf
from gpudesk.slurm.records import SlurmRow
from gpudesk.slurm.request import GresOffer, SbatchOption, SlurmMappingError
from gpudesk.slurm.script import ARRAY_TASK, Submission, literal, plan, render
from gpudesk.text import safe_text


class SubmitRefused(Exception):
    """Slurm (or the mapping onto it) refused a request's jobs; nothing of them is left."""


def _header(submission: Submission, cluster_name: str, cluster: ClusterSpec) -> list[str]:
    first = submission.tasks[0]
    ids = [t.job_id for t in submission.tasks]
    what = (
        f"gpudesk jobs {ids[0]}-{ids[-1]}, the sweep {first.spec.sweep!r}"
        if submission.is_array
        else f"gpudesk job {ids[0]} ({first.spec.name})"
    )
    return [
        f"{what}, written by gpudesk {__version__} on {time.strftime('%Y-%m-%d %H:%M:%S')}",
        f"for Slurm cluster {cluster_name}"
        + (f", partition {cluster.partition}" if cluster.partition else ""),
        "gpudesk submitted it with `sbatch --parsable`; cancel it with `gpudesk cancel`.",
    ]


def _refused(submission: Submission, why: str) -> str:
    """sbatch's refusal `why`, naming its job as every per-job refusal names one
    (gpudesk.api.errors: `gpudesk run` says it at the profile's table): "job 'big': sbatch
    refused the job: …", and for a sweep's array "(one array with the 2 other jobs of its
    sweep)"."""
    first = submission.tasks[0]
    others = len(submission.tasks) - 1
    more = f" (one array with the {others} other job(s) of its sweep)" if others else ""
    return f"job {safe_text(first.spec.name)!r}: {why}{more}"


def conf_for(cluster: ClusterSpec, base_env: Mapping[str, str] | None, owner: Identity) -> str:
    """The slurm.conf a job's clients read: the one its [cluster] names, else the site's. A
    personal engine takes its submitter's SLURM_CONF over its own, as her shell would; a system
    engine never a variable of her request (her `conf` is hers to name, and read as her)."""
    if cluster.conf:
        return cluster.conf
    if base_env is not None and not acts_for_other(owner) and base_env.get("SLURM_CONF"):
        return base_env["SLURM_CONF"]
    return site_conf()


class Prepared(msgspec.Struct, frozen=True):
    """What step 1 found out (off the loop): the cluster, its clients, its offer, its name."""

    cluster: ClusterSpec
    commands: SlurmCommands
    offer: GresOffer
    name: str
    # the owner's home as the password database has it ("" where it has none): a system
    # engine's Slurm folders go under it, and the lookup may wait on LDAP or SSSD
    home: str = ""


class SendPlan(msgspec.Struct, frozen=True):
    """One sbatch as the loop planned it (step 2), for the worker to send (step 3)."""

    submission: Submission
    folder: Path
    log_name: str
    rows: list[SlurmRow]  # its intent rows, one per job
    after: tuple[int, ...]  # the first job's parents (gpudesk ids)
    inside: tuple[int, ...]  # those in this request: sent before it, or never
    waiting: tuple[str, ...]  # Slurm ids of parents outside it that have not succeeded
    never: str  # why it can never run ("" while it can): a parent outside already failed

    @property
    def job_ids(self) -> list[int]:
        return [row.job_id for row in self.rows]


class Sent(msgspec.Struct, frozen=True):
    """Step 3's outcome: (job id, Slurm id of its submission) for each job sent, the jobs that
    can never run (a parent failed), or why the whole request was refused (all undone)."""

    ids: list[tuple[int, str]]
    never: list[tuple[int, str]]
    refused: str | None = None


def prepare(
    specs: list[JobSpec],
    cluster: ClusterSpec,
    conf: str,
    owner: Identity,
    known_name: str | None,
) -> Prepared:
    """Step 1, as the owner, off the loop: raises SubmitRefused."""
    commands = SlurmCommands(conf, owner)
    try:
        offer = commands.offer(cluster.partition)
        # sinfo -p NOSUCH answers nothing and exits 0: the partition is checked on its own
        known_partitions = commands.partitions() if cluster.partition is not None else []
        if cluster.partition is not None and cluster.partition not in known_partitions:
            known = ", ".join(known_partitions) or "none"
            raise SubmitRefused(
                f"the cluster has no partition {cluster.partition!r} (it has: {known}); "
                "name one of those in [cluster] partition or --partition. Nothing was "
                "submitted."
            )
        plan(specs, cluster, offer)  # a job the cluster cannot be asked for is refused here
        # ClusterName is asked once per slurm.conf and owner (scontrol show config prints
        # hundreds of lines)
        name = known_name or commands.cluster_name()
    except (SlurmError, SlurmMappingError) as exc:
        raise SubmitRefused(f"{str(exc).rstrip('.')}. Nothing was submitted.") from None
    home = ""
    if acts_for_other(owner):
        with contextlib.suppress(KeyError):
            home = pwd.getpwuid(owner.uid).pw_dir
    return Prepared(cluster, commands, offer, name, home)


def send(
    commands: SlurmCommands,
    cluster: ClusterSpec,
    name: str,
    sends: list[SendPlan],
    environment: Mapping[str, str],
    unset: Sequence[str],
) -> Sent:
    """Step 3, as the owner, off the loop: each sbatch in order; when one fails, those already
    sent are cancelled and the folders removed (all or nothing)."""
    ids: list[tuple[int, str]] = []
    never: list[tuple[int, str]] = []
    by_job: dict[int, str] = {}  # job id -> its submission's Slurm id, as they are sent
    never_by_job: dict[int, str] = {}
    sent: list[str] = []
    folders: list[Path] = []
    current: Submission | None = None  # the one being sent
    try:
        for send in sends:
            parent = next((i for i in send.inside if i in never_by_job), None)
            why_not = send.never or (
                f"job {parent}, which it runs after, can never run ({never_by_job[parent]})"
                if parent is not None
                else ""
            )
            if why_not:
                never += [(i, why_not) for i in send.job_ids]
                never_by_job.update(dict.fromkeys(send.job_ids, why_not))
                continue
            waiting = list(send.waiting) + [by_job[i] for i in send.inside if i in by_job]
            dependency = (
                SbatchOption(
                    "--dependency",
                    "afterok:" + ":".join(waiting),
                    f"after = gpudesk job(s) {', '.join(map(str, send.after))}: start only once "
                    "they succeeded",
                )
                if waiting
                else None
            )
            folders.append(send.folder)
            text = render(
                send.submission,
                output=literal(f"{send.folder}/") + send.log_name.format(ARRAY_TASK),
                header=_header(send.submission, name, cluster),
                dependency=dependency,
                environment=environment,
                unset=unset,
            )
            current = send.submission
            submitted = commands.sbatch(str(send.folder), str(send.folder / "job.sbatch"), text)
            sent.append(submitted)
            for row in send.rows:
                by_job[row.job_id] = submitted if row.task is None else f"{submitted}_{row.task}"
                ids.append((row.job_id, submitted))
    except (SlurmError, SlurmMappingError, OSError) as exc:  # render: a value no #SBATCH holds
        refused = commands.cancel(sent) if sent else None
        for folder in folders:
            commands.remove_folder(str(folder))
        what = exc if isinstance(exc, SlurmError) else f"could not write the sbatch script: {exc}"
        if isinstance(exc, SlurmError) and current is not None:  # sbatch refused it
            what = _refused(current, str(exc).rstrip("."))
        undone = f" The {len(sent)} already submitted were cancelled (scancel)." if sent else ""
        if refused:
            undone = f" Cancelling the {len(sent)} already submitted failed: {refused}."
        return Sent([], [], f"{what}.{undone} Nothing was submitted.")
    return Sent(ids, never)
