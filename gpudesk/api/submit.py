"""Submitting work to the engine: the one workflow every front end uses (`gpudesk run`, the
desk's submit-by-profile, `gpudesk select compare`).

A profile is submitted in this order: its `[station]` is weighed by the engine (only the keys it
names; applied only when the front end asks, `gpudesk run --apply-station`: station settings are
everyone's and stay after the run; otherwise each difference is reported with how to apply it;
an applied table changes what an admin may change, and the rest is reported as not applied, and
the run goes on either way), its
`[datasets]` are registered (`datasets`), the pre-pass jobs its selections need are queued and
waited for, what the engine measured of each is written into the selection cache entry it
computed, and then, only if every pre-pass succeeded, the profile's training jobs are queued as
one group, with the submitter's environment. `submit_profile` runs that sequence and reports its
steps to a callback; the steps are also offered one by one (`prepare_station`,
`profile_prepasses`, `submit_specs`, `wait_for_jobs`, `record_prepasses`).

Pre-passes run as engine jobs (gpudesk.api.prepass), so the engine measures them. A pre-pass
job runs with the submitter's environment and so fills the selection cache of the submitter's
GPUDESK_HOME.

The engine is asked through a `gpudesk.api.Client` (the desk gives the workflow one of its own,
in its worker thread: a Client is not thread-safe).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import msgspec

from gpudesk.api.errors import EngineError, job_refusal
from gpudesk.core.field_checks import reads_as_job_id
from gpudesk.core.jobs import JobSpec
from gpudesk.core.protocol import MAX_ROW_ID, REFUSED, UNKNOWN_OP

if TYPE_CHECKING:
    from gpudesk.api.client import Client
    from gpudesk.api.models import ConfigureResult, JobView, SubmitResult
    from gpudesk.api.prepass import Prepass
    from gpudesk.core.cluster import ClusterSpec
    from gpudesk.core.datasets import DatasetSpec
    from gpudesk.profile import Profile
    from gpudesk.profile.model import JobOrigin
    from gpudesk.selection.cache import SelectionCache

# The profile parser, the selection cache and numpy are imported by the steps that need them:
# the desk's submit of one command (`submit_specs`) and `gpudesk wait` (`wait_for_jobs`) load
# none of them.

POLL_S = 0.25  # how often `wait_for_jobs` asks
# Said instead of a [station]'s differences by an engine from before `check_configure`, which
# could only apply the table to weigh it: the station is left as it is, and the run goes on.
OLDER_ENGINE = (
    "not weighed: the running engine is older than this gpudesk and cannot compare a [station] "
    "without applying it; restart it to have it weighed (gpudesk engine stop: the next command "
    "starts the new one)"
)


class WaitStopped(Exception):
    """`wait_for_jobs` was told to stop before the jobs ended (the desk closed)."""


class PrepassResult(msgspec.Struct, frozen=True):
    """How one pre-pass job ended; `output` is what it printed (None when it failed)."""

    job_id: int
    name: str
    state: str
    output: Mapping[str, Any] | None
    # the training jobs were queued with it, after it (a detached run: `queue_after_prepasses`)
    queued_after: bool = False

    @property
    def ok(self) -> bool:
        return self.output is not None

    def describe(self) -> str:
        """One line for a report or a notification."""
        if self.output is None:
            then = (
                "the jobs after it were cancelled, never run"
                if self.queued_after
                else "the profile's jobs were not submitted"
            )
            who = f"pre-pass job {self.job_id} ({self.name})"
            return f"{who} {self.state}: {then} (gpudesk logs {self.job_id})"
        out = self.output
        how = (
            "reused from the cache"
            if out["reused"]
            else f"computed in {out['prepass_wall_s']:.1f} s and cached"
        )
        return (
            f"selection {out['preset']} of {out['dataset']}: {out['kept']} of {out['of']} "
            f"samples, {how} (key {out['key']})"
        )


def record_prepasses(
    client: Client, ids: Sequence[int], cache: SelectionCache
) -> list[PrepassResult]:
    """Record each finished pre-pass job's measurement in the cache (see `record_prepass`)."""
    from gpudesk.api.prepass import record_prepass

    if not ids:
        return []
    jobs = client.jobs(ids=list(ids), usage=True)
    return [PrepassResult(job.id, job.name, job.state, record_prepass(cache, job)) for job in jobs]


# ------------------------------------------------------------------ the engine's side
class StationReport(msgspec.Struct, frozen=True):
    """What came of a profile's [station]: the settings the engine changed and those it did not
    apply, or (`applied` false: the station is left as it is unless the user asks) the settings
    that differ, each with how to apply it. A run says each in its output; nothing to say when
    the station already runs them."""

    source: str  # where the settings came from: "profiles/quickstart.toml [station]"
    result: ConfigureResult | None  # None: the engine could not weigh it (`notes` say why)
    applied: bool = True
    how_to_apply: str = ""  # said with each setting left as it is
    notes: tuple[str, ...] = ()  # what the engine was not asked, and why

    def lines(self) -> list[str]:
        """ "station: policy auto → fifo (from profiles/quickstart.toml [station])", then
        "station: not applied: policy fifo (the station runs auto; only an admin ...)"; or,
        left as it is: "station: not applied: policy auto → fifo (HOW; from ...)"."""
        notes = [f"station: {note}" for note in self.notes]
        if self.result is None:
            return notes
        if self.applied:
            changed = [f"station: {c.message} (from {self.source})" for c in self.result.changes]
        else:
            changed = [
                f"station: not applied: {c.message} ({self.how_to_apply}; from {self.source})"
                for c in self.result.changes
            ]
        return changed + [f"station: {n.message}" for n in self.result.not_applied] + notes


def configure_station(
    client: Client, profile: Profile, *, apply: bool = False, how_to_apply: str = ""
) -> StationReport | None:
    """What a profile's [station] would change on the engine (None: it names no setting):
    applied only with `apply` (the station is everyone's, and settings stay after the run);
    otherwise weighed and reported, `how_to_apply` said with each setting left as it is."""
    from gpudesk.api.own_station import simulated_backend

    if not profile.station_keys:
        return None
    shown = f"bundled {profile.path.name}" if profile.bundled else shown_path(profile.path)
    source = f"{shown} [station]"
    keys = profile.station_keys
    simulated = simulated_backend(profile)
    if simulated is not None:
        # never sent: the engine's next real job would be placed on GPUs that do not exist
        keys = tuple(key for key in keys if key != "backend")
    if apply:
        report = StationReport(source, client.configure(profile.station, keys))
    else:
        try:
            result = client.check_configure(profile.station, keys)
        except EngineError as exc:
            if exc.code != UNKNOWN_OP:
                raise
            return StationReport(source, None, applied=False, notes=(OLDER_ENGINE,))
        report = StationReport(source, result, applied=False, how_to_apply=how_to_apply)
    running = report.result.station.backend if report.result is not None else simulated
    if simulated is not None and running != simulated:
        note = (
            f"not applied: backend {simulated} (the engine runs {running}; a profile never "
            "sets a SIMULATED backend on it: gpudesk run runs such a profile on a station of "
            f"its own, and GPUDESK_BACKEND={simulated} makes the engine that station)"
        )
        report = msgspec.structs.replace(report, notes=(note,))
    return report


def shown_path(path: os.PathLike[str]) -> str:
    """A profile's path as its user would type it: relative to the current directory when
    inside it; spelled out (`\\x1b`, `\\xff`), as every line said to people is, so that an
    ESC in its name never reaches a terminal."""
    from gpudesk.text import printable_line

    shown = os.fspath(path)
    try:
        relative = os.path.relpath(shown)
    except ValueError:
        return printable_line(shown)
    return printable_line(shown if relative.startswith("..") else relative)


def register_datasets(
    client: Client, datasets: Sequence[DatasetSpec], profile: Profile | None = None
) -> None:
    """Register shared-loader datasets with the engine (nothing to do for none). A member
    refused on a station is told how an admin registers them (`profile`'s)."""
    if not datasets:
        return
    try:
        client.register_datasets(datasets)
    except EngineError as exc:
        if exc.code != REFUSED or profile is None:
            raise
        how = f"`sudo gpudesk loader register {shlex.quote(str(profile.path))}`"
        raise EngineError(f"{exc}; an admin registers them once ({how})", exc.code) from None


def registered_datasets(client: Client) -> list[DatasetSpec]:
    """The shared-loader datasets the engine knows (registered by a profile's run or `gpudesk
    loader register`)."""
    from gpudesk.api.models import to_builtins
    from gpudesk.core.datasets import DatasetSpec

    return [DatasetSpec.from_dict(to_builtins(s)) for s in client.register_datasets([]).specs]


def told_selection(client: Client, dataset: str, selection: str) -> dict[str, str] | None:
    """The environment that tells a job sent to Slurm alone (`gpudesk submit --on slurm
    --dataset D --selection P`) its selection, from the engine's registered `dataset` (its
    loader's fallback reads the selection, as a profile's job does: `on_cluster`); None where
    the engine knows no such dataset."""
    from gpudesk.core.datasets import selection_env
    from gpudesk.core.local_selection import ENV_SELECTION

    for spec in registered_datasets(client):
        if spec.name == dataset:
            return {ENV_SELECTION: selection_env(dataset, spec.variant(selection))}
    return None


def prepare_station(
    client: Client, profile: Profile, *, apply: bool = False, how_to_apply: str = ""
) -> StationReport | None:
    """Everything a profile asks of the engine before its jobs: [station] (applied only with
    `apply`: `configure_station`) and [datasets]. What came of [station] (None: the profile
    has none)."""
    report = configure_station(client, profile, apply=apply, how_to_apply=how_to_apply)
    loaders = [d.loader for d in profile.datasets.values() if d.loader is not None]
    register_datasets(client, loaders, profile)
    return report


def submit_specs(
    client: Client,
    specs: Sequence[JobSpec],
    *,
    group: str | None = None,
    env: Mapping[str, str] | None = None,
) -> list[int]:
    """Queue jobs in one request, each in `group` when given, starting from the submitter's
    environment (`submit_env`) unless `env` is given; their ids, in order. (`Client.submit`:
    a spec without a workdir runs in the current directory.)"""
    return list(_submit(client, specs, group, env).ids)


def _submit(
    client: Client, specs: Sequence[JobSpec], group: str | None, env: Mapping[str, str] | None
) -> SubmitResult:
    """`submit_specs` with all the engine said (the jobs waiting for a change to the station)."""
    return client.submit_jobs(
        [spec if group is None else msgspec.structs.replace(spec, group=group) for spec in specs],
        env=env,
    )


@contextlib.contextmanager
def said_at_their_tables(
    jobs: Sequence[JobSpec], origins: Sequence[JobOrigin | None]
) -> Iterator[None]:
    """The engine's refusal of one of a request's jobs made from a profile's tables, named by
    its place in the request (`jobs[3] ('s2').priority: …`, the index after sweeps were
    expanded) or by its name (`job 's2' asks for 8 GPUs …`), said where the user wrote it:
    `p.toml:4: sweeps[0].priority ('s2', point 2 of 3): …`. `origins[k]`: where `jobs[k]`
    comes from (None: from no table). The refusal is the engine's, whole: nothing of the
    request was queued."""
    try:
        yield
    except EngineError as exc:
        refused = job_refusal(exc)
        which = None if refused is None else refused.of([job.name for job in jobs])
        origin = origins[which] if which is not None and which < len(origins) else None
        if refused is None or which is None or origin is None:
            raise
        where = origin.said(jobs[which].name, refused.field)
        raise EngineError(f"{where}: {refused.rest}", exc.code) from None


def waited_ids(client: Client, refs: Sequence[str]) -> list[int]:
    """The jobs `refs` name, each once, in the order given; every one resolved before any is
    waited for: one unknown job, and none is. An array's id names every task of the array, as
    the engine reads it (`144`; `144_2`: task 2 alone). Ids are checked in one listing (a
    `show` each costs the engine a job's whole detail, why it waits included: 10 s for 3,000
    queued jobs); a name, a task, an array's id or an id the listing lacks is asked by `show`,
    whose refusal says why."""
    numbers = [int(ref) for ref in refs if reads_as_job_id(ref) and int(ref) <= MAX_ROW_ID]
    listed = {job.id: job for job in client.jobs(ids=numbers, usage=False)} if numbers else {}
    ids: dict[int, None] = {}
    for ref in refs:
        job = listed.get(int(ref)) if reads_as_job_id(ref) else None
        if job is not None and not job.array_head:
            ids[job.id] = None
            continue
        detail = client.show(ref)
        array = detail.array if reads_as_job_id(ref) else None  # `144`; not `144_0`, nor a name
        ids.update(dict.fromkeys(array.jobs if array else [detail.job.id]))
    return list(ids)


def wait_for_jobs(
    client: Client,
    ids: Sequence[int],
    *,
    poll_s: float = POLL_S,
    stop: Callable[[], bool] | None = None,
    on_end: Callable[[JobView], None] | None = None,
    usage: bool = True,
) -> list[JobView]:
    """Poll until every job has ended; the jobs (with their usage unless `usage` is False).
    `on_end` hears of each job once, when it is first seen ended. Raises WaitStopped when
    `stop()` says so first."""
    heard: set[int] = set()
    while True:
        jobs = client.jobs(ids=list(ids), usage=usage)
        if on_end is not None:
            for job in jobs:
                if job.terminal and job.id not in heard:
                    heard.add(job.id)
                    on_end(job)
        if all(job.terminal for job in jobs):
            return jobs
        if stop is not None and stop():
            raise WaitStopped
        time.sleep(poll_s)


# ------------------------------------------------------------------ the whole sequence
def run_group(profile: Profile, started: float | None = None) -> str:
    """A name for one submission of a profile, `NAME@DATE-TIME.PID.TAG`: unique even for two in
    one second, and ending in the `profile_tag` of its file."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(started))
    return f"{profile.name}@{stamp}.{os.getpid()}.{profile_tag(profile)}"


def profile_tag(profile: Profile) -> str:
    """What a run's name records of the file its profile was read from: 8 hex digits of the
    SHA-256 of the file's real path. Two files may say the same `name =` (a copy made to try a
    change); `gpudesk run PROFILE --attach` follows only a run of PROFILE's own file, by this tag
    (the engine keeps no other word of the file: a job's spec has only its `group`)."""
    real = os.path.realpath(profile.path)
    return hashlib.sha256(os.fsencode(real)).hexdigest()[:8]


def profile_of_group(group: str) -> str:
    """The profile name a `run_group` name begins with; a group named otherwise (a script's
    own, `gpudesk submit` with a group) is its own name."""
    return group.rsplit("@", 1)[0] if "@" in group else group


def tag_of_group(group: str) -> str | None:
    """The `profile_tag` a `run_group` name ends in; None for a group named otherwise, or by a
    gpudesk from before the tag (`NAME@DATE-TIME.PID`): whose file that was is not known."""
    if "@" not in group:
        return None
    parts = group.rsplit("@", 1)[1].split(".")
    return parts[2] if len(parts) == 3 else None


class Submitted(msgspec.Struct, frozen=True):
    """The engine queued jobs of the sequence: its pre-passes, or the profile's jobs."""

    stage: Literal["prepass", "train"]
    ids: tuple[int, ...]
    # job id -> why it waits, for the jobs that can start only once the station changes (an
    # admin leaving MIG mode, a lost GPU back): following the run would wait for that change
    waits_for_change: Mapping[int, str] = msgspec.field(default_factory=dict)

    def lines(self) -> list[str]:
        return change_lines(self.waits_for_change)


def change_lines(waits_for_change: Mapping[int, str]) -> list[str]:
    """What to tell the user at once of the jobs that wait for a change to the station (an
    engine's `waits_for_change`), one line each: "job 12 is waiting for ..."."""
    return [f"job {job_id} is {why}" for job_id, why in sorted(waits_for_change.items())]


Step: TypeAlias = StationReport | Submitted | PrepassResult  # what `submit_profile` tells `on_step`


class ProfileSubmission(msgspec.Struct):
    """What `submit_profile` did."""

    group: str
    station: StationReport | None = None  # what the engine did with [station]; None: none asked
    prepasses: list[PrepassResult] = msgspec.field(default_factory=list)
    # the training jobs; none if a pre-pass failed
    job_ids: list[int] = msgspec.field(default_factory=list)
    # the pre-pass jobs, in `prepasses`' order
    prepass_ids: list[int] = msgspec.field(default_factory=list)

    @property
    def failed_prepasses(self) -> list[PrepassResult]:
        return [p for p in self.prepasses if not p.ok]


def submit_profile(
    client: Client,
    profile: Profile,
    *,
    group: str | None = None,
    wait: Callable[[Sequence[int]], object] | None = None,
    on_step: Callable[[Step], None] | None = None,
    cache: SelectionCache | None = None,
    env: Mapping[str, str] | None = None,
    cluster: ClusterSpec | None = None,
    apply_station: bool = False,
    how_to_apply: str = "",
    detach: bool = False,
) -> ProfileSubmission:
    """Submit a profile: ask for [station] (see StationReport), register [datasets], queue the
    selections' pre-pass jobs, `wait` for them (default: `wait_for_jobs`), record their
    measurements in `cache` (default: the engine's home's; a station's, in the state folder its
    engine names), then queue the training jobs if every pre-pass succeeded. Every job goes in
    `group` (default: a new one for this submission). `on_step` hears of each step as it
    happens. `detach`: wait for nothing: the training jobs are queued with the pre-passes
    (`queue_after_prepasses`), and their measurements are recorded later, by `gpudesk run
    --attach` (`record_prepasses`)."""
    from gpudesk.api.prepass import prepass_workdir, profile_prepasses
    from gpudesk.api.state_home import state_home
    from gpudesk.selection.cache import SelectionCache

    outcome = ProfileSubmission(group or run_group(profile))
    if cluster is not None:
        profile = replace(profile, jobs=on_cluster(profile, cluster))
        register_datasets(
            client, [d.loader for d in profile.datasets.values() if d.loader is not None]
        )
    else:
        outcome.station = prepare_station(
            client, profile, apply=apply_station, how_to_apply=how_to_apply
        )
    if outcome.station is not None and on_step is not None:
        on_step(outcome.station)
    prepasses = profile_prepasses(profile)
    if prepasses:
        # the training jobs wait for the pre-passes: first ask whether the engine would take
        # them at all (GPUs the station has), so a profile it refuses runs nothing
        with said_at_their_tables(profile.jobs, profile.origins):
            client.check_submit(profile.jobs, env=env)
        workdir = prepass_workdir(profile)
        jobs = [msgspec.structs.replace(p.job(workdir), cluster=cluster) for p in prepasses]
        if detach:
            return queue_after_prepasses(client, profile, prepasses, jobs, outcome, env, on_step)
        queued = _submit(client, jobs, outcome.group, env)
        ids = outcome.prepass_ids = list(queued.ids)
        if on_step is not None:
            on_step(Submitted("prepass", tuple(ids), queued.waits_for_change))
        if wait is None:
            wait_for_jobs(client, ids)
        else:
            wait(ids)
        if cache is None:
            cache = SelectionCache.used_with(state_home(client.home, client))
        for result in record_prepasses(client, ids, cache):
            outcome.prepasses.append(result)
            if on_step is not None:
                on_step(result)
        if outcome.failed_prepasses:
            return outcome
    with said_at_their_tables(profile.jobs, profile.origins):
        queued = _submit(client, profile.jobs, outcome.group, env)
    outcome.job_ids = list(queued.ids)
    if on_step is not None:
        on_step(Submitted("train", tuple(outcome.job_ids), queued.waits_for_change))
    return outcome


def on_cluster(profile: Profile, cluster: ClusterSpec) -> list[JobSpec]:
    """The profile's jobs sent to `cluster`, each that trains on a data selection told which
    (`ENV_SELECTION`): a Slurm job has no producer to apply it, and its loader's local fallback
    reads that selection (the pre-pass job before it cached) instead of the whole dataset."""
    from gpudesk.api.prepass import selection_of
    from gpudesk.core.datasets import selection_env
    from gpudesk.core.local_selection import ENV_SELECTION

    jobs = []
    for spec in profile.jobs:
        selection = selection_of(profile, spec)
        env = spec.env
        if selection is not None and spec.dataset is not None:
            env = {**env, ENV_SELECTION: selection_env(spec.dataset, selection.dataset)}
        jobs.append(msgspec.structs.replace(spec, cluster=cluster, env=env))
    return jobs


def queue_after_prepasses(
    client: Client,
    profile: Profile,
    prepasses: Sequence[Prepass],
    prepass_jobs: Sequence[JobSpec],
    outcome: ProfileSubmission,
    env: Mapping[str, str] | None,
    on_step: Callable[[Step], None] | None,
) -> ProfileSubmission:
    """A detached run's jobs (`gpudesk run --detach`), queued at once in one request, all or
    none (a refusal queues nothing; a submission too large for one request goes in parts that
    start as one: gpudesk.api.submit_parts): the pre-pass jobs (`prepass_jobs[k]` runs
    `prepasses[k]`), then the profile's jobs, each also `after` (afterok) the pre-pass its
    selection needs, and that one alone. A pre-pass that fails has the engine cancel the jobs
    after it, which never run (gpudesk.policy.dependencies)."""
    from gpudesk.api.prepass import prepasses_first

    jobs = prepasses_first(profile, prepasses, prepass_jobs)
    moved = len(prepass_jobs)
    origins: list[JobOrigin | None] = [None] * moved + list(profile.origins)
    with said_at_their_tables(jobs, origins):
        queued = _submit(client, jobs, outcome.group, env)
    ids = list(queued.ids)
    outcome.prepass_ids, outcome.job_ids = ids[:moved], ids[moved:]
    if on_step is not None:
        waits = queued.waits_for_change
        on_step(Submitted("prepass", tuple(outcome.prepass_ids), _of(waits, outcome.prepass_ids)))
        on_step(Submitted("train", tuple(outcome.job_ids), _of(waits, outcome.job_ids)))
    return outcome


def _of(waits_for_change: Mapping[int, str], ids: Sequence[int]) -> dict[int, str]:
    """Those of the jobs that wait for a change to the station that are among `ids`."""
    return {i: why for i, why in waits_for_change.items() if i in set(ids)}
