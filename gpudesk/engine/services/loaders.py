"""The engine's shared loaders: one producer per dataset that a queued or running job names.

A profile's `[datasets.NAME]` table (factory, its args, batch size, workers, seed) is registered
with the engine; the first job naming the dataset starts its producer (`gpudesk loader serve
NAME ... --managed`, in its own session, logging to `$GPUDESK_HOME/loaders/NAME.log`). A producer
that dies while jobs need it is restarted, and its consumers resume their epoch; one that failed
for good (its settings cannot work: it exits EXIT_FINAL and says why in its info file) is not,
until its dataset is registered again; one that no job needs any more is stopped after a grace
period. The engine talks to producers only through the loader package's public pieces (their
info files and status requests).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import msgspec

from gpudesk.core.datasets import VARIANT_SEPARATOR, DatasetSpec
from gpudesk.core.identity import Identity
from gpudesk.core.wire.station import LoaderSpec, LoaderStatus, LoaderView
from gpudesk.engine.offloop import Offload
from gpudesk.env_seconds import env_seconds
from gpudesk.loader.protocol import (
    ENV_DATASET,
    ENV_RESUME_S,
    EXIT_FINAL,
    ProducerInfo,
    clear_failure,
    final_failure,
    process_alive,
    read_info,
    recorded_pid,
    recorded_runs,
    recorded_start,
)
from gpudesk.loader.restarts import RESTART_LIMIT, Restarts
from gpudesk.loader.station_access import (
    OWNER_BOUND_S,
    Launch,
    RunsAs,
    believed_pid,
    folder_owner,
    forget_not_started,
    launch_as,
    popen_as,
    producer_variables,
    say_not_started,
    say_restarting,
)
from gpudesk.loader.status import STATUS_TIMEOUT_MS, collect, cpu_saving
from gpudesk.paths import Home, UnsafePath, open_state_file
from gpudesk.spawn import SAFE_CWD

log = logging.getLogger("gpudesk.engine")

Statuses = list[dict[str, Any]]

STOP_GRACE_S = 10.0  # an unneeded producer is stopped after this long (a sweep's next job)
ENV_GRACE_S = "GPUDESK_LOADER_GRACE_S"  # overrides it (tests; stations with slow sweeps)
STATUS_EVERY_S = 2.0
STATUS_WORK = "asking the shared loaders for their status"
RESUME_S = 30  # how long a managed job's consumer waits for its producer to come back
CHECK_EVERY_S = 0.5  # how often the engine has producers checked (restarted, stopped)
# A producer told to stop (SIGTERM) that is still there after this long is killed. Assumption:
# a producer closes its socket and shared memory in well under a second.
STOP_WAIT_S = 5.0


@dataclass
class _Producer:
    spec: DatasetSpec
    process: subprocess.Popen[bytes] | None = None
    pid: int | None = None
    # when the process with `pid` started (its info file says; gpudesk.hw.process_start): a pid
    # is signalled only while it is still that process, never one that took the number after it
    started: object = None
    unneeded_since: float | None = None
    restarts: Restarts = field(default_factory=Restarts)
    last_status: LoaderStatus | None = None  # its last report that was a LoaderStatus
    # The GPU of the job that needed it when it started (its CUDA_VISIBLE_DEVICES entry): a
    # dataset served with device = "cuda" or "auto" stages its batches there (loader/staging.py)
    gpu: str | None = None
    kill_at: float | None = None  # stopping: told to (SIGTERM); killed if still there then
    # whom it runs as on a system engine (station_access.producer_identity); None: the engine
    owner: Identity | None = None
    starting: bool = False  # a station's: whom it runs as is being asked, off the loop


class LoaderSupervisor:
    def __init__(self, home: Home) -> None:
        self.home = home
        self.specs: dict[str, DatasetSpec] = {}
        self._variants: dict[tuple[str, str], str] = {}  # (dataset, selection) -> loader name
        self.producers: dict[str, _Producer] = {}
        self.stopped: dict[str, _Producer] = {}  # the last producer of each stopped dataset
        # Loaders whose producer failed for good, and why: not started again until their
        # dataset is registered again (a profile's run does that: the user's retry).
        self.failed: dict[str, str] = {}
        # Producers being stopped off the loop (`stop_soon`): asked for their final figures,
        # then told to stop, then killed after STOP_WAIT_S; a new one of the same name starts
        # only once the old one is gone (it holds the socket and the info file).
        self.stopping: dict[str, _Producer] = {}
        self.events: list[str] = []  # for the engine to record
        self.status_at = 0.0
        self.checked_at = 0.0
        self.grace_s = env_seconds(ENV_GRACE_S, STOP_GRACE_S, 0.0, 86400.0)
        # Asking the producers waits up to STATUS_TIMEOUT_MS on each that does not answer: the
        # engine gives `offload` so the loop never waits on it (issue 36); without one (a
        # supervisor built alone) the periodic refresh asks in place.
        self.offload: Offload | None = None
        self._asking = False  # a periodic refresh is in flight off the loop

    # --------------------------------------------------------------- datasets
    def register(self, specs: list[DatasetSpec]) -> None:
        for spec in specs:
            running = self.producers.get(spec.name)
            if running is not None and running.spec != spec and self._alive(running):
                raise ValueError(
                    f"dataset {spec.name!r} is already served with other settings "
                    f"({json.dumps(running.spec.to_dict())}); let its jobs finish "
                    "or rename the dataset"
                )
            self.specs[spec.name] = spec
            variant = f"{spec.name}{VARIANT_SEPARATOR}"  # its loaders under other selections
            for name in [n for n in self.failed if n == spec.name or n.startswith(variant)]:
                del self.failed[name]  # the user's retry: started afresh when a job needs it
                if (dead := self.producers.get(name)) is not None and not self._alive(dead):
                    del self.producers[name]
        self._variants.clear()

    def loader_for(self, dataset: str | None, selection: str | None) -> str | None:
        """The loader a job reading `dataset` under `selection` uses (None: the dataset has
        no registered loader). A job's own selection, other than its dataset's, gets a loader
        of its own, `NAME.PRESET`."""
        spec = self.specs.get(dataset) if dataset else None
        if spec is None:
            return None
        if selection is None:
            return spec.name
        # asked for every job of every listing: remembered until the datasets change
        known = self._variants.get((spec.name, selection))
        if known is not None:
            return known
        variant = spec.variant(selection)
        if variant.name != spec.name:
            self.specs[variant.name] = variant
        self._variants[(spec.name, selection)] = variant.name
        return variant.name

    def job_env(
        self, dataset: str | None, owner: Identity | None = None, gpu: str | None = None
    ) -> dict[str, str]:
        """The environment a job of `owner` naming `dataset` gets, its producer started if need
        be (on a system engine, as its dataset's owner: `owner` when none is declared; on the
        job's `gpu`, where the dataset stages batches on a GPU)."""
        if not dataset or dataset not in self.specs:
            return {}
        self.ensure(dataset, owner, gpu)
        producer = self.producers.get(dataset)
        started = producer is not None and self._alive(producer)
        if self.home.is_system and dataset not in self.failed and not started:
            return {}  # not started (no owner but root): its job loads the data itself
        # (a station's job finds the station's loaders by the GPUDESK_SOCKET every job of it
        # gets: core.job_variables)
        return {ENV_RESUME_S: str(RESUME_S), ENV_DATASET: dataset}

    # -------------------------------------------------------------- producers
    def _info(self, name: str) -> ProducerInfo | None:
        path = self.home.loader_paths(name)[2]
        if not self.home.is_system:
            return read_info(path)
        # A member's file, read by root: a plain file of the folder's owner, its pid believed
        # only while that process is the owner's (else root would signal whatever it names)
        owner = folder_owner(self.home, name)
        info = read_info(path, owner) if owner else None
        return info if owner and believed_pid(info, owner) else None

    def _alive(self, producer: _Producer) -> bool:
        if producer.process is not None and producer.process.poll() is not None:
            return False
        if producer.spec.name in self.stopping:
            return False  # the info file is the old producer's, which is on its way out
        if producer.starting:
            return True  # its jobs wait for it (consumer.START_WAIT_S), as for one starting
        info = self._info(producer.spec.name)
        if info is not None and recorded_runs(info):
            producer.pid = recorded_pid(info)
            producer.started = recorded_start(info)
            return True
        # Starting: the process runs but has not written its info yet.
        return producer.process is not None and producer.process.poll() is None

    def ensure(self, name: str, owner: Identity | None = None, gpu: str | None = None) -> None:
        if name in self.failed:
            return  # it would fail again: the job's consumer reads why in its info file
        producer = self.producers.setdefault(name, _Producer(self.specs[name]))
        self.stopped.pop(name, None)
        producer.spec = self.specs[name]
        producer.unneeded_since = None
        if self._alive(producer):
            return
        if owner is not None:
            producer.owner = owner  # the user who needs it now (unless one is declared)
        producer.gpu = gpu or producer.gpu
        self._start(producer)

    def _start(self, producer: _Producer) -> None:
        if producer.spec.name in self.stopping or producer.starting:
            return  # its predecessor holds the socket (`_reap_stopping` starts it after)
        if self._failed_for_good(producer):
            return  # it would fail again: its consumers read why in its info file
        home, spec = self.home, producer.spec
        # staging on a GPU: where its dataset stages there (not "cpu"), and a job's GPU is known
        ours = producer_variables(home, (spec.device != "cpu" and producer.gpu) or None)
        forget_not_started(home, spec.name)  # its jobs' consumers wait for this start
        if home.system_socket is None:
            return self._spawn(producer, {**os.environ, "GPUDESK_HOME": str(home.root), **ours})
        ask = partial(launch_as, spec.owner, producer.owner, folder_owner(home, spec.name), ours)
        if self.offload is None:  # a supervisor built alone: in place
            return self._spawn(producer, ask())
        # A station's: whom it runs as, and her HOME, are asked of the user database (LDAP may
        # hang) on a worker thread, the loop going on meanwhile; it starts once they are known.
        producer.starting = True
        done = partial(self._asked_owner, producer)
        self.offload(f"asking whom {spec.name!r} runs as", ask, done, OWNER_BOUND_S)

    def _asked_owner(self, producer: _Producer, who: Launch | None) -> None:
        """On the loop: start the producer as `launch_as` said, unless it was stopped meanwhile."""
        producer.starting = False
        late = f"asking the user database whom it runs as took longer than {OWNER_BOUND_S:g} s"
        if self.producers.get(producer.spec.name) is producer:
            self._spawn(producer, who or late)

    def _spawn(self, producer: _Producer, who: Launch | dict[str, str]) -> None:
        """Start the producer's process: a personal engine's as itself (`who`: its environment);
        a station's as `who` says (`launch_as`: whom, with what environment; or why not)."""
        name, why = producer.spec.name, who if isinstance(who, str) else None
        if not isinstance(who, str):
            # Its consumers stop waiting when they find a failure there: not a predecessor's.
            clear_failure(self.home.loader_paths(name)[2])
            path = self.home.loader_log(name)
            try:
                self.home.private_subdir(path.parent)
                out = open_state_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            except UnsafePath as exc:
                why = str(exc)
            else:
                try:  # its lines from here on are this start's (`Restarts.down`)
                    producer.restarts.log_from = os.fstat(out).st_size
                    why = self._launch(producer, out, who)
                finally:
                    os.close(out)
        producer.restarts.launch_failed = why
        if why is not None:
            producer.process, producer.pid = None, None
            self.events.append(f"shared loader {name!r} not started: {why}")
            if not producer.restarts.failing:  # a restart's is tried again (`_restart`)
                say_not_started(self.home, name, why)  # its jobs' consumers stop waiting
            return
        assert producer.process is not None
        producer.pid, producer.started = producer.process.pid, None
        spec = producer.spec
        self.events.append(
            f"shared loader {name!r} started (pid {producer.pid}): {spec.factory}, batches of "
            f"{spec.batch_size}, {spec.workers} workers"
        )

    def _launch(self, producer: _Producer, out: int, who: RunsAs | dict[str, str]) -> str | None:
        """Start the producer's process, logging to `out`; None, or why it was not started."""
        try:
            producer.process = subprocess.Popen(
                producer.spec.argv(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                cwd=SAFE_CWD,
                start_new_session=True,
                **self._as_owner(producer, who),
            )
        except (OSError, UnsafePath) as exc:
            if producer.owner is None or not self.home.is_system:
                return str(exc)
            return (  # named as declared or stored, never asked of the user database here
                f"{exc} (it runs as {producer.spec.owner or producer.owner.stored_name}, its "
                f"dataset's owner: the engine's Python, {sys.executable}, must be one the "
                "station's users may run, e.g. a system-wide install)"
            )
        return None

    def _as_owner(self, producer: _Producer, who: RunsAs | dict[str, str]) -> dict[str, Any]:
        """How to start the producer: a personal engine's as itself (`who`: its environment); a
        station's as `who[0]`, its dataset's owner (`launch_as`), in a folder of hers."""
        if isinstance(who, dict):
            return {"env": who}
        producer.owner = who[0]
        return popen_as(self.home, producer.spec.name, producer.spec.share, who)

    def supervise(
        self, running: set[str], queued: Callable[[], Iterable[tuple[str | None, str | None]]]
    ) -> list[str]:
        """Every CHECK_EVERY_S: start, restart and stop producers as the jobs need them.
        `running`: the loaders running jobs read; `queued`: (dataset, selection) of each
        placeable queued job, asked only when a dataset is registered. Returns what happened,
        for the engine's events."""
        now = time.monotonic()
        if now - self.checked_at < CHECK_EVERY_S:
            return []
        self.checked_at = now
        if not self.specs and not self.producers and not self.stopping:
            return []  # no [datasets] registered: nothing to start, and no queue scan every 0.5 s
        needed = running | {
            served
            for dataset, selection in queued()
            if (served := self.loader_for(dataset, selection))
        }
        if not needed and not self.producers and not self.stopping:
            return []
        self.tick(needed, running)
        happened, self.events = self.events, []
        return happened

    def tick(self, needed: set[str], running: set[str] | frozenset[str] = frozenset()) -> None:
        """Restart needed producers that died; stop the ones no job needs; refresh status.
        `running`: datasets of running jobs (after an engine restart their producers are
        adopted, or started again for their consumers to resume)."""
        now = time.monotonic()
        for name in running - set(self.producers):
            if name in self.specs and name not in self.failed:
                producer = self.producers.setdefault(name, _Producer(self.specs[name]))
                if not self._alive(producer):
                    self._start(producer)
        for name, producer in list(self.producers.items()):
            alive = self._alive(producer)
            if not alive and name not in self.stopping and self._failed_for_good(producer):
                self.stopped[name] = self.producers.pop(name)  # reported, not running
                continue
            if name in needed:
                producer.unneeded_since = None
                if not alive and name not in self.stopping:  # not dead: waiting its turn
                    self._restart(producer, now)
                continue
            if not alive:
                self.producers.pop(name)
                continue
            if producer.unneeded_since is None:
                producer.unneeded_since = now
            elif now - producer.unneeded_since >= self.grace_s:
                self.stop_soon(name, "no queued or running job needs it")
        self._reap_stopping(now)
        if now - self.status_at >= STATUS_EVERY_S and self.producers:
            self.status_at = now
            if self.offload is None:
                self.refresh_status()
            elif not self._asking:
                self._asking = True
                self.offload(STATUS_WORK, self.ask_status(), self._asked, self.status_bound_s())

    def _restart(self, producer: _Producer, now: float) -> None:
        """A needed producer is down: started again after its death, or after a restart that
        could not be launched (`loader.restarts`: backing off, a bounded number of times);
        given up after that, its consumers told why, as of one that failed for good."""
        restarts, name = producer.restarts, producer.spec.name
        if producer.pid is None and not restarts.failing:
            return  # never started (`_spawn` said why): a job needing it tries again
        log = self.home.loader_log(name)
        # what its consumers are told is in a file any member of a station may read
        why, told = restarts.down_told(producer.pid, producer.process, log, self.home.is_system)
        if restarts.exhausted:
            self.failed[name] = reason = restarts.given_up(why, log)
            # reported as not running from now on, not from the next tick: a status between
            # them said "running" beside "not restarted"
            self.stopped[name] = self.producers.pop(name)
            self.events.append(f"shared loader {name!r} given up: {reason}")
            say_not_started(self.home, name, restarts.given_up(told, log), given_up=True)
        elif said := restarts.take(now, why, told):
            self.events.append(f"shared loader {name!r} {said} — its consumers resume")
            self._start(producer)  # which clears the engine's word first: then the note
            say_restarting(self.home, name, restarts.note)  # waiting consumers say it

    def _failed_for_good(self, producer: _Producer) -> bool:
        """Whether this dataset's producer, not running now, failed for good (noting it, with
        an event, the first time): its info file says so, or it exited with EXIT_FINAL."""
        name = producer.spec.name
        if name in self.failed:
            return True
        if producer.pid is None:
            return False  # not started by this engine: registering or starting is the retry
        info = self._info(name)
        reason = final_failure(info) if info and info.pid == producer.pid else None
        code = producer.process.returncode if producer.process else None
        if reason is None and code == EXIT_FINAL:
            reason = f"it exited with status {EXIT_FINAL}: its settings cannot work"
        if reason is None:
            return False
        self.failed[name] = reason
        self.events.append(
            f"shared loader {name!r} (pid {producer.pid}) failed for good and is not "
            f"restarted until its dataset is registered again: {reason} (its log: "
            f"{self.home.loader_log(name)})"
        )
        return True

    def _asked(self, statuses: Statuses | None) -> None:
        self._asking = False
        if statuses is not None:
            self.apply_status(statuses)

    def ask_status(self) -> Callable[[], Statuses]:
        """The work of asking every producer of the home for its status: it touches nothing of
        the supervisor's, so it may run on a worker thread (`apply_status` takes its result)."""
        return partial(collect, home=self.home)

    def status_bound_s(self) -> float:
        """How long asking may take: each producer is given STATUS_TIMEOUT_MS, one after the
        other, plus a margin (assumption: 5 s covers reading the info files and connecting)."""
        return len(self.producers) * STATUS_TIMEOUT_MS / 1000 + 5.0

    def refresh_status(self) -> None:
        """Ask the producers now, in place (waits up to STATUS_TIMEOUT_MS on each)."""
        self.apply_status(self.ask_status()())

    def apply_status(self, statuses: Statuses) -> None:
        """On the loop: take what the producers answered (`ask_status`)."""
        by_name = {s.get("name"): s for s in statuses}
        for name, producer in self.producers.items():
            self._take_status(producer, by_name.get(name))

    def _take_status(self, producer: _Producer, status: dict[str, Any] | None) -> None:
        # A producer's report is its own JSON (on a station, a member's process, or whatever
        # she bound at her socket's path): kept only where it is a LoaderStatus, so the views
        # built from it never fail for every member because of one producer's answer
        if status and not status.keys() & {"error", "preparing", "stopping"}:
            try:
                report = msgspec.convert(status, LoaderStatus)
            except msgspec.ValidationError:
                return  # the last good report stands
            producer.last_status, producer.restarts.problem = report, None  # it serves
            if report.consumers and producer.restarts.served():  # a fresh count from now
                forget_not_started(self.home, producer.spec.name)  # its restart note is done

    def stop(self, name: str, why: str) -> None:
        """Stop a producer now, waiting for it (up to STOP_WAIT_S, then a kill): for the
        engine's shutdown, after its loop has ended. The loop uses `stop_soon`."""
        if name in self.producers:
            self.refresh_status()  # its final figures, kept for the report after it is gone
        producer = self.producers.pop(name, None) or self.stopping.pop(name, None)
        if producer is None:
            return
        self.stopped[name] = producer
        self._signal(producer, signal.SIGTERM)
        if producer.process is not None:
            try:
                producer.process.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                producer.process.kill()
                producer.process.wait()
        self.events.append(f"shared loader {name!r} stopped: {why}")

    def stop_soon(self, name: str, why: str) -> None:
        """Stop a producer without the loop waiting on it: its final figures are asked off the
        loop (a producer that does not answer held the loop STATUS_TIMEOUT_MS), then it is told
        to stop, and killed by `_reap_stopping` if it is still there STOP_WAIT_S later (the
        loop waited those seconds for it, and a second's ask, before)."""
        if self.offload is None:  # a supervisor built alone: in place, as before
            self.stop(name, why)
            return
        producer = self.producers.pop(name, None)
        if producer is None:
            return
        self.stopped[name] = producer
        self.stopping[name] = producer
        ask = self.ask_status()

        def asked(statuses: Statuses | None) -> None:  # on the loop
            if statuses is not None:
                by_name = {s.get("name"): s for s in statuses}
                self._take_status(producer, by_name.get(name))
            self._signal(producer, signal.SIGTERM)
            producer.kill_at = time.monotonic() + STOP_WAIT_S
            self.events.append(f"shared loader {name!r} stopped: {why}")

        self.offload(STATUS_WORK, ask, asked, self.status_bound_s() + 1.0)

    def _reap_stopping(self, now: float) -> None:
        """Forget the stopping producers that are gone (starting a successor a job needs by
        now), and kill those still there at their `kill_at`."""
        for name, producer in list(self.stopping.items()):
            if producer.kill_at is None:
                continue  # its final figures are still being asked for
            if self._gone(producer):
                del self.stopping[name]
                if (successor := self.producers.get(name)) and not self._alive(successor):
                    self._start(successor)
            elif now >= producer.kill_at:
                self._signal(producer, signal.SIGKILL)
                producer.kill_at = now + STOP_WAIT_S  # and again, should that not take

    @staticmethod
    def _gone(producer: _Producer) -> bool:
        if producer.process is not None and producer.process.poll() is not None:
            return True  # reaped: its pid may be another process's by now
        return not (producer.pid and process_alive(producer.pid, producer.started))

    def _signal(self, producer: _Producer, sig: signal.Signals) -> None:
        if self._gone(producer) or not producer.pid:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(producer.pid, sig)

    def stop_all_but(self, keep: set[str], why: str) -> None:
        for name in [n for n in [*self.producers, *self.stopping] if n not in keep]:
            self.stop(name, why)

    def summary(self, sees_why: Callable[[int], bool] | None = None) -> list[LoaderView]:
        """Per dataset: the producer's latest status and the CPU sharing saved, for views, the
        metrics and the run report. `sees_why(uid)`: whether the viewer sees why the producer
        of a member (by uid) is down (None: every viewer does)."""
        out = []
        for name, producer in sorted({**self.stopped, **self.producers}.items()):
            cpu_s, unshared_cpu_s, saved_cpu_s = cpu_saving(producer.last_status)
            problem = self.failed.get(name) or producer.restarts.problem
            owner = producer.owner if self.home.is_system else None
            if problem and owner is not None and sees_why and not sees_why(owner.uid):
                problem = self._problem_for_others(name, producer)
            out.append(
                LoaderView(
                    name=name,
                    pid=producer.pid,
                    spec=LoaderSpec(**producer.spec.to_dict()),
                    running=name in self.producers,
                    starting=producer.starting,
                    restarts=producer.restarts.total,
                    problem=problem,
                    status=producer.last_status,
                    cpu_s=cpu_s,
                    unshared_cpu_s=unshared_cpu_s,
                    saved_cpu_s=saved_cpu_s,
                )
            )
        return out

    def _problem_for_others(self, name: str, producer: _Producer) -> str:
        """Why a member's producer is down, as the other members see it: the engine's facts
        only. The reason quotes her producer's log or info file, hers as her jobs' logs are
        (docs/shared-station.md, "What is private to each user")."""
        hidden = "why is shown to its owner and the admins"
        if name in self.failed:
            return f"its producer is not restarted until its dataset is registered again ({hidden})"
        tries = f"{producer.restarts.failing} of {RESTART_LIMIT} at most"
        return f"its producer is down; restarting it ({tries}; {hidden})"
