"""The engine's collaborator for jobs on a Slurm cluster (docs/slurm.md).

- `submit`: a request's jobs that name a cluster are stored, written as sbatch scripts (one per
  job, one per sweep's array) into the owner's Slurm folder (`slurm_folder`), and submitted with
  `sbatch --parsable` in dependency order. All or nothing: when one sbatch fails, those already
  submitted are cancelled and the jobs forgotten, and the request is refused with what Slurm
  said.
- Every Slurm client for a job runs as its owner with an environment the engine built
  (gpudesk.engine.slurm.as_owner): a system engine (root) runs none for her, writes nothing in
  her folder, and believes a Slurm id only once Slurm lists it as hers.
- Following: a poller thread asks squeue (and, for ended jobs, scontrol or the completion log)
  about the jobs not ended yet, every POLL_S; the loop applies what it heard (`step`): queued ->
  running when Slurm starts one, the end state, exit code and reason when it ends. Every change
  is a job event, so `wait`, `run`, the desk and local jobs that run `after` it hear of it.
- `cancel`: scancel, from the poller thread; the job ends cancelled when Slurm says so.

Slurm jobs never enter the station's queue: Slurm places them. Nothing here waits on Slurm
in the loop but `submit`, which must answer the request with Slurm's verdict.
"""

from __future__ import annotations

import logging
import os
import pwd
import queue
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpudesk import __version__
from gpudesk.engine.cluster import ClusterSpec
from gpudesk.engine.dependencies import dependencies_of, jobs_by_id, verdict
from gpudesk.engine.env_seconds import env_seconds
from gpudesk.engine.events import EventPublisher
from gpudesk.engine.identity import Identity
from gpudesk.engine.jobs import JobSpec, JobState
from gpudesk.engine.slurm import commands as slurm
from gpudesk.engine.slurm.as_owner import acts_for_other
from gpudesk.engine.slurm.commands import Ended, QueueLine, SlurmCommands, SlurmError, site_conf
from gpudesk.engine.slurm.request import GresOffer, SbatchOption, SlurmMappingError
from gpudesk.engine.slurm.script import (
    ARRAY_TASK,
    Submission,
    job_environment,
    literal,
    plan,
    render,
)
from gpudesk.engine.state import PlacementDue
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.records import JobRecord
from gpudesk.engine.store.slurm import SlurmRow
from gpudesk.paths import Home

log = logging.getLogger("gpudesk.engine")

POLL_S = 2.0  # how often squeue is asked while Slurm jobs have not ended
POLL_ENV = "GPUDESK_SLURM_POLL_S"  # the engine's environment may set another (tests: 0.5)
MISSING_POLLS = 3  # a job no command knows this many polls in a row is lost
# Where a system engine keeps a user's Slurm jobs' scripts and output: in her home (as Slurm's
# nodes usually share it), made by a process run as her; never in root's state folder.
STATION_FOLDER = ".local/state/gpudesk/station-slurm"


def poll_s() -> float:
    """POLL_S, or the engine's GPUDESK_SLURM_POLL_S (0.1 to 60 s)."""
    return env_seconds(POLL_ENV, POLL_S, 0.1, 60.0)


class SubmitRefused(Exception):
    """Slurm (or the mapping onto it) refused a request's jobs; nothing of them is left."""


@dataclass(frozen=True)
class Watched:
    """A job the poller asks about (a copy of its row: the thread never reads the store)."""

    job_id: int
    conf: str
    owner: Identity  # whom its Slurm clients run as
    submission: str
    task: int | None
    own_id: str | None

    @property
    def slurm_id(self) -> str:
        return self.submission if self.task is None else f"{self.submission}_{self.task}"


@dataclass(frozen=True)
class Heard:
    """What the poller heard of one job: its squeue line, how it ended, or that no one knows
    it (`line` and `ended` None)."""

    job_id: int
    line: QueueLine | None
    ended: Ended | None = None


@dataclass
class _Shared:
    lock: threading.Lock = field(default_factory=threading.Lock)
    watched: list[Watched] = field(default_factory=list)
    cancels: list[tuple[str, Identity, list[str], list[int]]] = field(default_factory=list)


def _slurm_time(text: str | None) -> float | None:
    """Slurm's local timestamps ("2026-11-25T02:20:42")."""
    if not text:
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


class Poller:
    """The thread that runs squeue/scontrol/scancel, so the loop never waits on Slurm."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self.shared = _Shared()
        self.heard: queue.SimpleQueue[list[Heard] | str] = queue.SimpleQueue()
        self.wake = wake
        self.poke = threading.Event()
        self.stopping = False
        self.thread: threading.Thread | None = None
        self.clients: dict[tuple[str, Identity], SlurmCommands] = {}  # the thread's own

    def watch(self, watched: list[Watched]) -> None:
        with self.shared.lock:
            self.shared.watched = watched
        if watched:
            self._start()

    def cancel(self, conf: str, owner: Identity, slurm_ids: list[str], job_ids: list[int]) -> None:
        with self.shared.lock:
            self.shared.cancels.append((conf, owner, slurm_ids, job_ids))
        self._start()
        self.poke.set()

    def _start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="gpudesk-slurm", daemon=True)
            self.thread.start()

    def stop(self) -> None:
        self.stopping = True
        self.poke.set()

    def _run(self) -> None:
        while not self.stopping:
            with self.shared.lock:
                watched = list(self.shared.watched)
                cancels, self.shared.cancels = self.shared.cancels, []
            for conf, owner, slurm_ids, job_ids in cancels:
                try:
                    refused = self._clients(conf, owner).cancel(slurm_ids)
                except SlurmError as exc:
                    refused = str(exc)
                if refused:
                    self.heard.put(f"scancel of job(s) {', '.join(map(str, job_ids))}: {refused}")
            if watched:
                try:
                    self.heard.put(self._poll(watched))
                except Exception as exc:  # a failing Slurm must not end the thread
                    self.heard.put(f"could not ask Slurm about its jobs: {exc}")
                self.wake()
            self.poke.wait(poll_s())
            self.poke.clear()

    def _clients(self, conf: str, owner: Identity) -> SlurmCommands:
        """The clients for one owner's jobs on one cluster, kept across polls (each checks its
        slurm.conf once)."""
        key = (conf, owner)
        if key not in self.clients:
            self.clients[key] = SlurmCommands(conf, owner)
        return self.clients[key]

    def _poll(self, watched: list[Watched]) -> list[Heard]:
        heard: list[Heard] = []
        by_client: dict[tuple[str, Identity], list[Watched]] = {}
        for item in watched:
            by_client.setdefault((item.conf, item.owner), []).append(item)
        for (conf, owner), items in by_client.items():
            # one owner's failing cluster (her slurm.conf, her controller) is hers alone: the
            # other owners' jobs are still heard of
            try:
                heard += self._poll_one(self._clients(conf, owner), items)
            except SlurmError as exc:
                self.heard.put(f"could not ask Slurm about {owner.name}'s jobs: {exc}")
        return heard

    @staticmethod
    def _poll_one(commands: SlurmCommands, items: list[Watched]) -> list[Heard]:
        heard: list[Heard] = []
        lines = commands.queue(sorted({i.submission for i in items}))
        exact = {line.slurm_id: line for line in lines if not line.pending_tasks}
        pending = {line.own_id: line for line in lines if line.pending_tasks}
        for item in items:
            line = exact.get(item.slurm_id)
            if line is None and item.task is None:
                line = exact.get(item.submission)
            if line is not None:
                ended = None
                if line.state not in slurm.RUNNING_STATES | slurm.QUEUED_STATES:
                    ended = commands.ended(line.own_id)
                heard.append(Heard(item.job_id, line, ended))
            elif item.submission in pending:
                heard.append(Heard(item.job_id, pending[item.submission]))
            else:
                heard.append(Heard(item.job_id, None, commands.ended(item.own_id or item.slurm_id)))
        return heard


class SlurmBackend:
    def __init__(
        self,
        home: Home,
        store: Store,
        events: EventPublisher,
        due: PlacementDue,
        wake: Callable[[], None],
    ) -> None:
        self.home = home
        self.store = store
        self.events = events
        self.due = due
        self.poller = Poller(wake)
        self.missing: dict[int, int] = {}  # job id -> polls in a row no one knew it
        self.cluster_names: dict[tuple[str, int], str] = {}  # (slurm.conf, uid) -> ClusterName
        self.refresh()

    # ----------------------------------------------------------- submitting
    def check(
        self, specs: Sequence[JobSpec], base_env: Mapping[str, str] | None, owner: Identity
    ) -> None:
        """What `submit` checks before it stores anything; raises SubmitRefused."""
        self._prepare(specs, base_env, owner)

    def _prepare(
        self, specs: Sequence[JobSpec], base_env: Mapping[str, str] | None, owner: Identity
    ) -> tuple[ClusterSpec, SlurmCommands, GresOffer, str]:
        clusters = {spec.cluster for spec in specs}
        if len(clusters) != 1 or None in clusters:
            raise SubmitRefused(
                "one request goes to one place: these jobs name different clusters (or some "
                "the station); submit them separately. Nothing was submitted."
            )
        cluster = specs[0].cluster
        assert cluster is not None
        commands = SlurmCommands(_conf_for(cluster, base_env, owner), owner)
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
            name = cluster.name or self._cluster_name(commands)
        except (SlurmError, SlurmMappingError) as exc:
            raise SubmitRefused(f"{str(exc).rstrip('.')}. Nothing was submitted.") from None
        return cluster, commands, offer, name

    def slurm_folder(self, owner: Identity, job_id: int) -> Path:
        """Where a submission's script and output go: a personal engine's GPUDESK_HOME/slurm/ID;
        for another user (a system engine), a new folder under her home as the password
        database has it (never $HOME from her request), which her process makes."""
        if not acts_for_other(owner):
            return self.home.root / "slurm" / str(job_id)
        try:
            home = pwd.getpwuid(owner.uid).pw_dir
        except KeyError:
            home = ""
        if not home or not os.path.isabs(home) or home == "/":
            raise SlurmError(
                f"uid {owner.uid} has no home folder in the password database, and a Slurm "
                "job's script and output go there"
            )
        return Path(home) / STATION_FOLDER / f"{job_id}-{secrets.token_hex(4)}"

    def _cluster_name(self, commands: SlurmCommands) -> str:
        """A cluster's ClusterName, asked once per slurm.conf (`scontrol show config` prints
        hundreds of lines; a submit runs in the engine's loop)."""
        key = (commands.conf, commands.owner.uid)
        if key not in self.cluster_names:
            self.cluster_names[key] = commands.cluster_name()
        return self.cluster_names[key]

    def submit(
        self, specs: Sequence[JobSpec], base_env: Mapping[str, str] | None, owner: Identity
    ) -> list[JobRecord]:
        """Store the jobs and submit them to Slurm, all or none; raises SubmitRefused."""
        for index, spec in enumerate(specs):
            for ref in spec.after:
                if ref > 0 and self.store.slurm_job(ref) is None:
                    raise SubmitRefused(
                        f"jobs[{index}] ({spec.name}) runs after job {ref}, which runs on the "
                        "station: a Slurm job can run only after Slurm jobs (Slurm cannot see "
                        "the station's). Nothing was submitted."
                    )
        cluster, commands, offer, name = self._prepare(specs, base_env, owner)
        records = self.store.submit(specs, base_env, owner=owner)
        ids = [r.id for r in records]
        submissions = plan([r.spec for r in records], cluster, offer, ids)
        # the submitter's environment reaches the job through its script; sbatch runs in the
        # one the engine built (commands.env), whose variables hers has not are unset there
        if base_env is not None:
            environment, unset = job_environment(base_env, commands.conf), sorted(commands.env)
        else:  # a request without one: the engine's own, for a personal engine
            mine = {} if acts_for_other(owner) else os.environ
            environment, unset = job_environment(mine, commands.conf), []
        rows: list[SlurmRow] = []
        sent: list[str] = []
        folders: list[Path] = []
        never: list[tuple[int, str]] = []
        try:
            for submission in submissions:
                first = submission.tasks[0]
                assert first.job_id is not None
                dependency, why_not = self._dependency(first.spec.after, rows)
                if why_not:
                    never += [(t.job_id or 0, why_not) for t in submission.tasks]
                    continue
                folder = self.slurm_folder(owner, first.job_id)
                folders.append(folder)
                log_name = "task-{}.log" if submission.is_array else "output.log"
                script = folder / "job.sbatch"
                text = render(
                    submission,
                    output=literal(f"{folder}/") + log_name.format(ARRAY_TASK),
                    header=_header(submission, name, cluster),
                    dependency=dependency,
                    environment=environment,
                    unset=unset,
                )
                submitted = commands.sbatch(str(folder), str(script), text)
                sent.append(submitted)
                gres = next((o.value for o in submission.options if o.flag == "--gres"), None)
                for index, task in enumerate(submission.tasks):
                    assert task.job_id is not None
                    rows.append(
                        SlurmRow(
                            task.job_id,
                            name,
                            commands.conf,
                            submitted,
                            index if submission.is_array else None,
                            None,
                            str(folder / log_name.format(index)),
                            str(script),
                            gres,
                            "PENDING",
                        )
                    )
        except (SlurmError, OSError) as exc:
            refused = commands.cancel(sent) if sent else None
            self.store.discard_jobs(ids)
            for folder in folders:
                commands.remove_folder(str(folder))
            what = (
                exc if isinstance(exc, SlurmError) else f"could not write the sbatch script: {exc}"
            )
            undone = f" The {len(sent)} already submitted were cancelled (scancel)." if sent else ""
            if refused:
                undone = f" Cancelling the {len(sent)} already submitted failed: {refused}."
            raise SubmitRefused(f"{what}.{undone} Nothing was submitted.") from None
        self.store.add_slurm_jobs(rows)
        for job_id, reason in never:
            self.store.slurm_ended(
                job_id,
                JobState.CANCELLED,
                reason,
                exit_code=None,
                started_at=None,
                ended_at=time.time(),
            )
        for row in rows:
            log.info("job %d submitted to Slurm cluster %s as %s", row.job_id, name, row.slurm_id)
        self.refresh()
        return [self.store.job(i) for i in ids]

    def _dependency(
        self, after: tuple[int, ...], made: list[SlurmRow]
    ) -> tuple[SbatchOption | None, str]:
        """The --dependency for jobs that run after `after` (gpudesk ids), and why they can
        never run ("" while they can): a parent that already failed or was cancelled."""
        if not after:
            return None, ""
        rows = {r.job_id: r for r in made}
        rows.update(self.store.slurm_jobs([i for i in after if i not in rows]))
        parents = jobs_by_id(self.store, after)
        said = verdict(after, parents)
        if said.never:
            return None, said.never
        waiting = [
            rows[i].slurm_id
            for i in after
            if i in rows
            and parents.get(i) is not None
            and parents[i].state is not JobState.SUCCEEDED
        ]
        if not waiting:
            return None, ""
        return (
            SbatchOption(
                "--dependency",
                "afterok:" + ":".join(waiting),
                f"after = gpudesk job(s) {', '.join(map(str, after))}: start only once they "
                "succeeded",
            ),
            "",
        )

    # ----------------------------------------------------------- following
    def refresh(self) -> None:
        """Tell the poller which jobs to ask about (after a submit, an end, a restart)."""
        rows = self.store.active_slurm_jobs()
        jobs = jobs_by_id(self.store, [r.job_id for r in rows])
        self.poller.watch(
            [
                Watched(r.job_id, r.conf, jobs[r.job_id].owner, r.submission, r.task, r.own_id)
                for r in rows
                if r.job_id in jobs
            ]
        )

    def cancel(self, job: JobRecord) -> str:
        row = self.store.slurm_job(job.id)
        if row is None:
            return "not a Slurm job"
        self.store.slurm_cancel_sent([job.id])
        self.poller.cancel(row.conf, job.owner, [row.slurm_id], [job.id])
        return f"cancelling (scancel {row.slurm_id})"

    def step(self) -> None:
        """Apply what the poller heard."""
        changed = False
        while True:
            try:
                heard = self.poller.heard.get_nowait()
            except queue.Empty:
                break
            if isinstance(heard, str):
                log.warning("%s", heard)
                continue
            # two queries a poll, not two per job: an array's thousand tasks are heard at once
            ids = [h.job_id for h in heard]
            rows, jobs = self.store.slurm_jobs(ids), jobs_by_id(self.store, ids)
            for item in heard:
                row, job = rows.get(item.job_id), jobs.get(item.job_id)
                if row is not None and job is not None:
                    changed |= self._apply(row, job, item)
        if changed:
            self.refresh()
            self.due.mark()

    def _apply(self, row: SlurmRow, job: JobRecord, heard: Heard) -> bool:
        if job.state.terminal:
            return False
        line, ended = heard.line, heard.ended
        if line is None and ended is None:
            self.missing[row.job_id] = self.missing.get(row.job_id, 0) + 1
            if self.missing[row.job_id] < MISSING_POLLS:
                return False
            self.missing.pop(row.job_id, None)
            lost = (
                f"lost: Slurm no longer knows job {row.slurm_id} and its completion log has no "
                "record of it (an operator may have purged it)"
            )
            self._end(job, JobState.FAILED, lost, None, None)
            return True
        self.missing.pop(row.job_id, None)
        state = (ended.state if ended else None) or (line.state if line else "UNKNOWN")
        node = (ended.node if ended else None) or (line.node if line else None)
        reason = (ended.reason if ended else None) or (line.reason if line else None)
        own = line.own_id if line is not None and not line.pending_tasks else None
        if state != row.state or reason != row.reason or node != row.node:
            self.store.note_slurm(row.job_id, state, reason, node, own)
        if state in slurm.QUEUED_STATES:
            return False
        started = _slurm_time(ended.started) if ended else None
        ran = state in slurm.RUNNING_STATES or started is not None
        # A job cancelled while pending has a StartTime too (its end): it never ran.
        if job.state is JobState.QUEUED and ran and state not in slurm.CANCELLED_STATES:
            self.store.slurm_started(
                job.id,
                started or time.time(),
                f"started by Slurm on {node or '?'} (job {row.slurm_id})",
            )
            self.events.job(job.id, f"running on Slurm node {node or '?'}")
            job = self.store.job(job.id)
        if state in slurm.RUNNING_STATES:
            return True
        code = ended.exit_code if ended else None
        sig = ended.signal if ended else None
        if state in slurm.SUCCEEDED_STATES:
            self._end(
                job,
                JobState.SUCCEEDED,
                f"exit code 0 (Slurm job {row.slurm_id} on {node})",
                0,
                ended,
            )
        elif state in slurm.CANCELLED_STATES:
            self._end(
                job,
                JobState.CANCELLED,
                self._cancel_reason(job, row, reason),
                _code(code, sig) if job.started_at else None,
                ended,
            )
        else:
            self._end(
                job, JobState.FAILED, _failure(state, code, sig, row), _code(code, sig), ended
            )
        return True

    def _cancel_reason(self, job: JobRecord, row: SlurmRow, reason: str | None) -> str:
        if reason == "DependencyNeverSatisfied":
            said = verdict(job.spec.after, dependencies_of(self.store, [job])).never
            return (said or "a job it runs after did not succeed") + (
                " (Slurm: DependencyNeverSatisfied, --kill-on-invalid-dep)"
            )
        if row.cancel_sent:
            return f"cancelled by user (scancel {row.slurm_id})"
        return f"cancelled in Slurm (scancel of job {row.slurm_id} from outside gpudesk)"

    def _end(
        self, job: JobRecord, state: JobState, reason: str, code: int | None, ended: Ended | None
    ) -> None:
        started = job.started_at
        end = (_slurm_time(ended.ended) if ended else None) or time.time()
        if started is not None:
            end = max(end, started)
        self.store.slurm_ended(
            job.id, state, reason, exit_code=code, started_at=started, ended_at=end
        )
        self.events.job(job.id, reason)

    def close(self) -> None:
        self.poller.stop()


def _code(code: int | None, sig: int | None) -> int | None:
    """An exit code as gpudesk keeps them: 128 + N for a death by signal N."""
    if sig:
        return 128 + sig
    return code


def _failure(state: str, code: int | None, sig: int | None, row: SlurmRow) -> str:
    where = f"Slurm job {row.slurm_id}"
    if state == "TIMEOUT":
        return f"timed out: Slurm's time limit (--time) passed ({where})"
    if state == "OUT_OF_MEMORY":
        return f"out of memory: the job went past its host memory (--mem) ({where}, OUT_OF_MEMORY)"
    if state == "FAILED" and code is not None:
        return f"exit code {code}" + (f", signal {sig}" if sig else "") + f" ({where})"
    return f"Slurm ended it {state} ({where})"


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


def _conf_for(cluster: ClusterSpec, base_env: Mapping[str, str] | None, owner: Identity) -> str:
    """The slurm.conf a job's clients read: the one its [cluster] names, else the site's. A
    personal engine takes its submitter's SLURM_CONF over its own, as her shell would; a system
    engine never a variable of her request (her `conf` is hers to name, and read as her)."""
    if cluster.conf:
        return cluster.conf
    if base_env is not None and not acts_for_other(owner) and base_env.get("SLURM_CONF"):
        return base_env["SLURM_CONF"]
    return site_conf()
