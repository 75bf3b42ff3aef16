"""The engine's collaborator for jobs on a Slurm cluster (docs/slurm.md).

- `submit`: a request's jobs that name a cluster are checked (off the loop), stored with an
  intent row each, written as sbatch scripts (one per job, one per sweep's array) into the
  owner's Slurm folder (`slurm_folder`), and submitted with `sbatch --parsable` in dependency
  order (off the loop). All or nothing: when one sbatch fails, those already submitted are
  cancelled and the jobs forgotten, and the request is refused with what Slurm said; an engine
  killed meanwhile leaves intent rows that the next one adopts or fails (never runs here).
- Every Slurm client for a job runs as its owner with an environment the engine built
  (gpudesk.slurm.as_owner): a system engine (root) runs none for her, writes nothing in
  her folder, and believes a Slurm id only once Slurm lists it as hers.
- Following: a poller thread asks squeue (and, for ended jobs, scontrol or the completion log)
  about the jobs not ended yet (every POLL_S, faster just after a change); the loop applies
  what it heard (`step`): queued -> running when Slurm starts one, the end state, exit code
  and reason when it ends. Every change is a job event, so `wait`, `run`, the desk and local
  jobs that run `after` it hear of it.
- `cancel`: scancel, from the poller thread; the job ends cancelled when Slurm says so.

Slurm jobs never enter the station's queue: Slurm places them. Nothing here waits on Slurm
in the loop: `submit`'s Slurm work runs on the engine's worker threads (engine/offloop.py;
the work itself is gpudesk.slurm.send's), and the poller's questions on its own threads
(gpudesk.slurm.poller). This module keeps what the loop does: the store's rows, the jobs' states,
the events.
"""

from __future__ import annotations

import logging
import os
import queue
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gpudesk import diskspace
from gpudesk.core.identity import Identity
from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.records import JobRecord
from gpudesk.engine.dependencies import dependencies_of, jobs_by_id
from gpudesk.engine.events import EventPublisher
from gpudesk.engine.state import PlacementDue
from gpudesk.engine.store.database import Store
from gpudesk.env_seconds import env_seconds
from gpudesk.paths import Home
from gpudesk.policy.dependencies import verdict
from gpudesk.slurm import commands as slurm
from gpudesk.slurm import send as slurm_send
from gpudesk.slurm.as_owner import acts_for_other
from gpudesk.slurm.commands import Ended, SlurmError
from gpudesk.slurm.outcome import exit_code, failure, slurm_time, within
from gpudesk.slurm.poller import Heard, Poller, Watched
from gpudesk.slurm.records import SENDING, SENDING_STATE, SlurmRow
from gpudesk.slurm.request import SlurmMappingError
from gpudesk.slurm.script import (
    Submission,
    job_environment,
    plan,
)
from gpudesk.slurm.send import Prepared, SendPlan, Sent, SubmitRefused
from gpudesk.text import safe_text

log = logging.getLogger("gpudesk.engine")

MISSING_POLLS = 3  # a job no command knows this many polls in a row is lost (docs/slurm.md)
# Where a system engine keeps a user's Slurm jobs' scripts and output: in her home (as Slurm's
# nodes usually share it), made by a process run as her; never in root's state folder.
STATION_FOLDER = ".local/state/gpudesk/station-slurm"


# Assumption: an sbatch a stopped engine left running ends within two client timeouts (Slurm's
# own MessageTimeout is 10 s); an intent not found in Slurm after that never reached it.
INTENT_GRACE_S = 2 * slurm.TIMEOUT_S
INTENT_GRACE_ENV = "GPUDESK_SLURM_INTENT_GRACE_S"  # tests: a few seconds


def intent_grace_s() -> float:
    """INTENT_GRACE_S, or the engine's GPUDESK_SLURM_INTENT_GRACE_S (1 to 600 s)."""
    return env_seconds(INTENT_GRACE_ENV, INTENT_GRACE_S, 1.0, 600.0)


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
        # requests whose sbatches are under way (their job ids) -> when their work's bound
        # passes: their intent rows are theirs to settle until then, not the poller's
        self.sending: dict[tuple[int, ...], float] = {}
        # requests whose sbatches Slurm took but whose Slurm ids the store refused (a full
        # disk): their job ids -> what Slurm answered, saved by `step` once the store takes it
        self.unsaved: dict[tuple[int, ...], Sent] = {}
        self.started = time.time()  # a former engine's sbatch started before this
        self.fail_unrecorded()
        self.refresh()

    # ----------------------------------------------------------- submitting
    # A submit runs in three steps, so that the loop never waits on Slurm and an engine killed
    # at any moment leaves nothing that runs twice or in the wrong place:
    #   1. off the loop, `prepared`: the offer, the partition, the mapping, the cluster's name;
    #   2. on the loop, `record_intent`: the jobs and one intent row each (submission SENDING,
    #      its script's path: unique per job and store) before any sbatch;
    #   3. off the loop, `send`: each sbatch; on the loop, `record_sent`: the ids Slurm gave.
    # An engine stopped during 3 leaves intent rows; the poller finds their sbatch in squeue by
    # the script's path (%o) and adopts it, or fails the job "never reached Slurm" once no
    # sbatch of a former engine can still be under way (intent_grace_s).
    def prepared(
        self, specs: Sequence[JobSpec], base_env: Mapping[str, str] | None, owner: Identity
    ) -> Callable[[], Prepared]:
        """Step 1's work (for a worker thread: it reads no store and no state of the loop's);
        it raises SubmitRefused."""
        clusters = {spec.cluster for spec in specs}
        if len(clusters) != 1 or None in clusters:
            raise SubmitRefused(
                "one request goes to one place: these jobs name different clusters (or some "
                "the station); submit them separately. Nothing was submitted."
            )
        cluster = specs[0].cluster
        assert cluster is not None
        conf = slurm_send.conf_for(cluster, base_env, owner)
        known_name = cluster.name or self.cluster_names.get((conf, owner.uid))
        return lambda: slurm_send.prepare(list(specs), cluster, conf, owner, known_name)

    def slurm_folder(self, ready: Prepared, job_id: int) -> Path:
        """Where a submission's script and output go: a personal engine's GPUDESK_HOME/slurm/ID;
        for another user (a system engine), a new folder under her home as the password
        database has it (step 1 asked, off the loop; never $HOME from her request), which her
        process makes."""
        owner, home = ready.commands.owner, ready.home
        if not acts_for_other(owner):
            return self.home.root / "slurm" / str(job_id)
        if not home or not os.path.isabs(home) or home == "/":
            raise SlurmError(
                f"uid {owner.uid} has no home folder in the password database, and a Slurm "
                "job's script and output go there"
            )
        return Path(home) / STATION_FOLDER / f"{job_id}-{secrets.token_hex(4)}"

    def check_after(self, specs: Sequence[JobSpec]) -> None:
        """A Slurm job runs only after Slurm jobs that reached Slurm; raises SubmitRefused."""
        for index, spec in enumerate(specs):
            for ref in spec.after:
                if ref <= 0:
                    continue
                row = self.store.slurm_job(ref)
                # named as every refusal of one job of a request (gpudesk.api.errors): a
                # submit says its option (--after), a profile's run the table
                where = f"jobs[{index}] ({safe_text(spec.name)!r}).after"
                if row is None:
                    raise SubmitRefused(
                        f"{where}: job {ref} runs on the station: a Slurm job can run only "
                        "after Slurm jobs (Slurm cannot see the station's). Nothing was "
                        "submitted."
                    )
                if row.sending:
                    raise SubmitRefused(
                        f"{where}: job {ref}'s submission to Slurm is still under way; submit "
                        f"this again once job {ref} has a Slurm id (gpudesk show {ref}). "
                        "Nothing was submitted."
                    )

    def record_intent(
        self,
        specs: Sequence[JobSpec],
        base_env: Mapping[str, str] | None,
        owner: Identity,
        ready: Prepared,
    ) -> tuple[list[int], Callable[[], Sent], float]:
        """Step 2 (on the loop): store the jobs and their intent rows; step 3's work and its
        bound. Raises SubmitRefused (nothing is left then)."""
        self.check_after(specs)
        cluster, commands = ready.cluster, ready.commands
        if cluster.name is None:
            self.cluster_names[(commands.conf, owner.uid)] = ready.name
        records = self.store.submit(specs, base_env, owner=owner)
        ids = [r.id for r in records]
        try:
            submissions = plan([r.spec for r in records], cluster, ready.offer, ids)
            sends = [self._send_plan(sub, ready, ids) for sub in submissions]
        except (SlurmError, SlurmMappingError) as exc:
            self.store.discard_jobs(ids)
            raise SubmitRefused(f"{str(exc).rstrip('.')}. Nothing was submitted.") from None
        # the submitter's environment reaches the job through its script; sbatch runs in the
        # one the engine built (commands.env), whose variables hers has not are unset there
        if base_env is not None:
            environment, unset = job_environment(base_env, commands.conf), sorted(commands.env)
        else:  # a request without one: the engine's own, for a personal engine
            mine = {} if acts_for_other(owner) else os.environ
            environment, unset = job_environment(mine, commands.conf), []
        self.store.add_slurm_jobs(row for send in sends for row in send.rows)
        # Assumption: each sbatch costs at most two commands (sbatch, then squeue to confirm
        # it is hers), each bounded by commands.TIMEOUT_S; one more for undoing a failure.
        bound = slurm.TIMEOUT_S * (2 * len(sends) + 2)
        self.sending[tuple(ids)] = time.monotonic() + bound
        header_name = ready.name

        def work() -> Sent:
            return slurm_send.send(commands, cluster, header_name, sends, environment, unset)

        return ids, work, bound

    def _send_plan(self, submission: Submission, ready: Prepared, ids: list[int]) -> SendPlan:
        """One sbatch's plan: its folder, its intent rows, and its dependencies as the store
        has them now (parents in this request are resolved as they are sent)."""
        first = submission.tasks[0]
        assert first.job_id is not None
        folder = self.slurm_folder(ready, first.job_id)
        log_name = "task-{}.log" if submission.is_array else "output.log"
        script = folder / "job.sbatch"
        gres = next((o.value for o in submission.options if o.flag == "--gres"), None)
        rows = [
            SlurmRow(
                task.job_id or 0,
                ready.name,
                ready.commands.conf,
                SENDING,
                index if submission.is_array else None,
                None,
                str(folder / log_name.format(index)),
                str(script),
                gres,
                SENDING_STATE,
            )
            for index, task in enumerate(submission.tasks)
        ]
        after = first.spec.after
        inside = tuple(i for i in after if i in ids)
        outside = [i for i in after if i not in ids]
        parents = jobs_by_id(self.store, outside)
        never = verdict(tuple(outside), parents).never if outside else ""
        parent_rows = self.store.slurm_jobs(outside)
        waiting = tuple(
            parent_rows[i].slurm_id
            for i in outside
            if i in parent_rows
            and parents.get(i) is not None
            and parents[i].state is not JobState.SUCCEEDED
        )
        return SendPlan(submission, folder, log_name, rows, after, inside, waiting, never)

    def record_sent(self, ids: list[int], sent: Sent) -> list[JobRecord]:
        """Step 3's outcome, on the loop: the Slurm ids kept, or the jobs forgotten and the
        request refused (SubmitRefused) when one sbatch failed (the work cancelled the others)."""
        self.sending.pop(tuple(ids), None)
        if sent.refused is not None:
            self.store.discard_jobs(ids)
            raise SubmitRefused(sent.refused)
        try:
            self._save_sent(sent)
        except Exception as exc:
            if not diskspace.is_full(exc, self.home.root):
                raise
            # Slurm has them whatever the store says, and refusing the request would have
            # them sent twice: kept here (shown as sent, marked not yet saved) and saved by
            # `step`; an engine stopped meanwhile adopts them as it does any intent row
            self.unsaved[tuple(ids)] = sent
            log.warning("job(s) %s: sent to Slurm, their Slurm ids not yet saved: %s", ids, exc)
        for job_id, slurm_id in sent.ids:
            log.info("job %d submitted to Slurm as %s", job_id, slurm_id)
        self.refresh()
        return [self.store.job(i) for i in ids]

    def _save_sent(self, sent: Sent) -> None:
        """What Slurm answered a request's sbatches, stored: safe to try again after a part
        of it was refused (an intent row takes its id once; a job ends once)."""
        self.store.slurm_sent(sent.ids)
        self._cancel_asked([job_id for job_id, _ in sent.ids])
        for job_id, reason in sent.never:
            if self.store.job(job_id).state.terminal:
                continue
            self.store.slurm_ended(
                job_id,
                JobState.CANCELLED,
                reason,
                exit_code=None,
                started_at=None,
                ended_at=time.time(),
            )

    def _save_unsaved(self) -> None:
        """Save the Slurm ids the store refused at their submit; raises while it still does."""
        for key, sent in list(self.unsaved.items()):
            self._save_sent(sent)
            del self.unsaved[key]
            log.info("job(s) %s: their Slurm ids saved", list(key))

    def unsaved_ids(self) -> dict[int, str]:
        """Job id -> the Slurm id (its submission's) Slurm gave it that the store refused."""
        return {job_id: sid for sent in self.unsaved.values() for job_id, sid in sent.ids}

    def check(
        self, specs: Sequence[JobSpec], base_env: Mapping[str, str] | None, owner: Identity
    ) -> None:
        """What `submit` checks, run here and now (tests, tools; the engine's requests run
        `prepared` off the loop); raises SubmitRefused."""
        self.prepared(specs, base_env, owner)()

    def submit(
        self, specs: Sequence[JobSpec], base_env: Mapping[str, str] | None, owner: Identity
    ) -> list[JobRecord]:
        """All three steps here and now (tests, tools; the engine's requests run the Slurm
        steps off the loop); raises SubmitRefused."""
        self.check_after(specs)
        ready = self.prepared(specs, base_env, owner)()
        ids, work, _bound = self.record_intent(specs, base_env, owner, ready)
        return self.record_sent(ids, work())

    # ----------------------------------------------------------- following
    def refresh(self) -> None:
        """Tell the poller which jobs to ask about (after a submit, an end, a restart)."""
        rows = self.store.active_slurm_jobs()
        jobs = jobs_by_id(self.store, [r.job_id for r in rows])
        now = time.monotonic()
        busy = {i for ids, bound in self.sending.items() if now < bound for i in ids}
        busy.update(i for ids in self.unsaved for i in ids)  # followed once saved
        self.poller.watch(
            [
                Watched(
                    r.job_id,
                    r.conf,
                    jobs[r.job_id].owner,
                    r.submission,
                    r.task,
                    r.own_id,
                    r.script,
                )
                for r in rows
                if r.job_id in jobs and r.job_id not in busy
            ]
        )

    def cancel(self, job: JobRecord) -> str:
        row = self.store.slurm_job(job.id)
        if row is None:
            return "not a Slurm job"
        self.store.slurm_cancel_sent([job.id])
        if row.sending:  # no Slurm id stored yet: scancel once there is (`_cancel_asked`)
            return "cancelling (scancel once its submission to Slurm is recorded)"
        self.poller.cancel(row.conf, job.owner, [row.slurm_id], [job.id])
        return f"cancelling (scancel {row.slurm_id})"

    def _cancel_asked(self, job_ids: Sequence[int]) -> None:
        """scancel those of `job_ids` cancelled before their Slurm id was stored (while their
        sbatch ran, or the store refused the id), now that it is."""
        rows = [r for r in self.store.slurm_jobs(job_ids).values() if r.cancel_sent]
        jobs = jobs_by_id(self.store, [r.job_id for r in rows])
        for row in rows:
            if not row.sending and row.job_id in jobs:
                owner = jobs[row.job_id].owner
                self.poller.cancel(row.conf, owner, [row.slurm_id], [row.job_id])

    def signal(self, job: JobRecord, name: str, by: str) -> tuple[str, bool]:
        """`scancel --signal` as the job's owner, on the poller's thread (what Slurm answers
        is logged, as a cancel's): the outcome's text, and whether it was sent."""
        row = self.store.slurm_job(job.id)
        if row is None or row.sending:
            return "not on Slurm yet: nothing to signal", False
        self.poller.cancel(row.conf, job.owner, [row.slurm_id], [job.id], name)
        flag = name.removeprefix("SIG")
        said = f"sending {name} (scancel --signal={flag} --full {row.slurm_id})"
        try:
            self.store.add_event(
                "signal", f"{name} sent by {by} (scancel --signal={flag})", job_id=job.id
            )
        except Exception as exc:  # sent all the same, as the station's jobs are: said so
            if not diskspace.is_full(exc, self.home.root):
                raise
            said += diskspace.not_recorded_text(self.home.root)
        return said, True

    def step(self) -> None:
        """Apply what the poller heard."""
        now = time.monotonic()
        expired = [key for key, bound in self.sending.items() if now >= bound]
        for key in expired:  # their request gave up: the poller settles their intent rows
            del self.sending[key]
        changed = bool(expired)
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
        try:
            if self.unsaved:
                self._save_unsaved()
                changed = True
        finally:
            if changed:
                self.refresh()
                self.due.mark()

    def _apply(self, row: SlurmRow, job: JobRecord, heard: Heard) -> bool:
        if job.state.terminal:
            return False
        if row.sending:
            return self._settle_intent(row, job, heard)
        line, ended = heard.line, heard.ended
        if line is None and ended is None:
            return self._not_heard_of(row, job, heard)
        self.missing.pop(row.job_id, None)
        state = (ended.state if ended else None) or (line.state if line else "UNKNOWN")
        node = (ended.node if ended else None) or (line.node if line else None)
        reason = (ended.reason if ended else None) or (line.reason if line else None)
        own = line.own_id if line is not None and not line.pending_tasks else None
        if state != row.state or reason != row.reason or node != row.node:
            self.store.note_slurm(row.job_id, state, reason, node, own)
        if state in slurm.QUEUED_STATES:
            if job.state is not JobState.RUNNING:
                return False
            self._requeued(job, row, reason)
            return True
        # Slurm's own StartTime (scontrol or the completion log for an ended job, squeue's %S
        # for a running one): a job's wall time and GPU-seconds are Slurm's, as sacct's
        # Elapsed, not from when a poll first saw it running.
        started = within(
            slurm_time(ended.started if ended else line.started if line else None),
            job.submitted_at,
            time.time(),
        )
        ran = state in slurm.RUNNING_STATES or started is not None
        if _started_again(job, started):  # requeued and started again between two polls
            self._requeued(job, row, reason)
            job = self.store.job(job.id)
        # A job cancelled while pending has a StartTime too (its end): it never ran.
        if job.state is JobState.QUEUED and ran and state not in slurm.CANCELLED_STATES:
            self.store.slurm_started(
                job.id,
                started or time.time(),
                f"started by Slurm on {node or '?'} (job {row.slurm_id})",
                attempt=job.attempts + 1,
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
                exit_code(code, sig) if job.started_at else None,
                ended,
            )
        else:
            self._end(
                job, JobState.FAILED, failure(state, code, sig, row), exit_code(code, sig), ended
            )
        return True

    def _settle_intent(self, row: SlurmRow, job: JobRecord, heard: Heard) -> bool:
        """An intent row no live request is settling (its engine stopped during its sbatch):
        adopt the Slurm job its sbatch made, or, once no sbatch can still be under way, fail
        it as never sent. It is never run on the station."""
        if heard.sent is not None:
            self.store.slurm_sent([(row.job_id, heard.sent)])
            self._cancel_asked([row.job_id])
            message = f"adopted Slurm job {heard.sent}, submitted before the engine restarted"
            log.info("job %d: %s", job.id, message)
            self.events.job(job.id, message)
            return True
        if time.time() < max(job.submitted_at, self.started) + intent_grace_s():
            return False
        if heard.unreachable is not None:  # cannot tell: fail it, saying it may run there
            self.missing[row.job_id] = self.missing.get(row.job_id, 0) + 1
            if self.missing[row.job_id] < MISSING_POLLS:
                return False
            self.missing.pop(row.job_id, None)
            self._end(
                job,
                JobState.FAILED,
                "lost: the engine stopped while submitting it, and gpudesk could not ask Slurm "
                f"whether it got it for {MISSING_POLLS} polls in a row: "
                f"{heard.unreachable.rstrip('.')}. It may still run in Slurm (squeue -u "
                f"{job.user}, its script {row.script}); it will not run here.",
                None,
                None,
            )
            return True
        self._end(
            job,
            JobState.FAILED,
            "never reached Slurm: the engine stopped while submitting it and Slurm lists no "
            f"job of {job.user}'s with its script ({row.script}); it did not run, here or "
            "there. Submit it again.",
            None,
            None,
        )
        return True

    def fail_unrecorded(self) -> None:
        """At start: jobs that name a cluster but have no Slurm row (an engine from before
        intent rows stopped during their submission) fail; the station never runs them."""
        for job_id in self.store.cluster_jobs_without_row():
            job = self.store.job(job_id)
            self._end(
                job,
                JobState.FAILED,
                "never followed in Slurm: the engine stopped while submitting it, before it "
                "recorded where it went; it was not run on the station (squeue -u "
                f"{job.user} shows whether Slurm has it). Submit it again if not.",
                None,
                None,
            )

    def _cancel_reason(self, job: JobRecord, row: SlurmRow, reason: str | None) -> str:
        if reason == "DependencyNeverSatisfied":
            said = verdict(job.spec.after, dependencies_of(self.store, [job])).never
            return (said or "a job it runs after did not succeed") + (
                " (Slurm: DependencyNeverSatisfied, --kill-on-invalid-dep)"
            )
        if row.cancel_sent:
            return f"cancelled by user (scancel {row.slurm_id})"
        return f"cancelled in Slurm (scancel of job {row.slurm_id} from outside gpudesk)"

    def _not_heard_of(self, row: SlurmRow, job: JobRecord, heard: Heard) -> bool:
        """Slurm said nothing of the job: lost once MISSING_POLLS polls in a row say so."""
        self.missing[row.job_id] = self.missing.get(row.job_id, 0) + 1
        if self.missing[row.job_id] < MISSING_POLLS:
            return False
        self.missing.pop(row.job_id, None)
        lost = (
            f"lost: Slurm no longer knows job {row.slurm_id} and its completion log has no "
            "record of it (an operator may have purged it)"
        )
        if heard.unreachable is not None:
            lost = (
                f"lost: gpudesk could not ask Slurm about job {row.slurm_id} for "
                f"{MISSING_POLLS} polls in a row: {heard.unreachable.rstrip('.')}. It may "
                f"still run in Slurm (squeue -j {row.slurm_id})"
            )
        self._end(job, JobState.FAILED, lost, None, None)
        return True

    def _requeued(self, job: JobRecord, row: SlurmRow, reason: str | None) -> None:
        said = f"requeued by Slurm (job {row.slurm_id}" + (f": {reason})" if reason else ")")
        message = f"{said}; it runs its script again from the start once Slurm starts it"
        self.store.slurm_requeued(job.id, message)
        self.events.job(job.id, message)

    def _end(
        self, job: JobRecord, state: JobState, reason: str, code: int | None, ended: Ended | None
    ) -> None:
        # Slurm's StartTime where it says one (a job first seen already ended, or one whose
        # start a poll saw before squeue gave it), else what was recorded at its start
        now = time.time()
        started = job.started_at
        if ended is not None and started is not None:
            # never later than when the engine saw it run (nor before its submit)
            started = within(slurm_time(ended.started), job.submitted_at, started) or started
        end = within(slurm_time(ended.ended) if ended else None, started or 0.0, now) or now
        self.store.slurm_ended(
            job.id, state, reason, exit_code=code, started_at=started, ended_at=end
        )
        self.events.job(job.id, reason)

    def close(self) -> None:
        self.poller.stop()


# Slurm's StartTime has whole seconds; a requeue takes longer than this to start a job again.
RESTART_SLACK_S = 2.0


def _started_again(job: JobRecord, started: float | None) -> bool:
    """A job gpudesk saw running whose Slurm StartTime is now later than the one it recorded:
    Slurm requeued it and started it again between two polls (a preemption, `scontrol
    requeue`), so no poll saw it pending."""
    return (
        job.state is JobState.RUNNING
        and started is not None
        and job.started_at is not None
        and started > job.started_at + RESTART_SLACK_S
    )
