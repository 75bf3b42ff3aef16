"""A submit too large for one request, sent in parts that start as one.

The engine parses at most `MAX_REQUEST_VALUES` JSON values and `MAX_MESSAGE_BYTES` in one
request, about 2,000 plain jobs, and queues at most `MAX_STATION_SUBMIT_JOBS` (500) on the
station in one (core/protocol.py: the loop that does it serves every user). A larger submission
(a profile's 5,000-point sweep, `gpudesk submit --array 1-5000`) goes in parts of at most
`PART_JOBS` jobs, each queued held so that none starts before all are in, then released, in
order. Each part's submit and the release say so (`in_parts`), so that the jobs' events read
"held until all N jobs of its submission are queued", not "held by user" (an engine from
before it ignores the field, as any it does not know, and says "by user", as it did). It is
all or none, as one request is: a part the engine refuses, or an interrupt, cancels the parts
already queued (held, so none of their jobs started) and the refusal is raised as the engine
said it, its `jobs[k]` counted over the whole submission.

References between the parts become ids: a job's dependency on the k-th job of the submission
(-k, as `check_after` takes it) names that job's id once its part is queued, and an array's
tasks in later parts name its first job's id (the engine takes an array so continued by its
owner: engine/requests/submission.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from gpudesk.api.errors import TOO_LARGE, EngineError
from gpudesk.api.models import ActionOutcome, ActionResult, SubmitResult
from gpudesk.core import protocol
from gpudesk.core.protocol import MAX_ROW_ID, Request, json_values
from gpudesk.core.umask import MAX_UMASK
from gpudesk.core.wire.requests import InParts, PartOf, ReleaseArgs, SubmitArgs
from gpudesk.render import id_ranges

if TYPE_CHECKING:
    from gpudesk.api.client import Client

# At most this many jobs a part: what the engine queues on the station in one request (core/
# protocol.py: ~35 ms of its loop, under issue 36's 50 ms a request), which refuses more as too
# large; a whole within it is sent as one request.
PART_JOBS = protocol.MAX_STATION_SUBMIT_JOBS
# Job ids named in one cancel or release request: a list of ids is one value each.
IDS_PER_REQUEST = 1_000
# Parts are for many ordinary jobs. A job that alone takes more than this share of a request's
# bounds (~84 KiB, or 1,000 JSON values: a large env given to every job of a sweep) is itself
# what to change, so such a submission is refused as one request is, saying to keep large
# values out of every job (a design choice: a plain job is ~360 bytes and ~45 values).
JOB_SHARE_OF_REQUEST = 1 / 100
_DEPENDENCY_KEYS = ("after", "after_any", "after_notok")
_REQUEST_INDEX = re.compile(r"^jobs\[(\d+)\]")

Job = dict[str, Any]  # a JobSpec as the request carries it (JobSpec.to_dict)


def _cost(job: Job) -> tuple[int, int]:
    """What a job adds to a request: bytes and JSON values, its ", " in the list counted."""
    raw = json.dumps(job).encode()
    return len(raw) + 2, json_values(raw) + 1


def parts_for(jobs: Sequence[Job], env: dict[str, str] | None) -> list[range] | None:
    """The parts a submission the engine refused as too large for one request goes in; None
    where it does not go in parts: one job, a job large enough to be the problem itself
    (`JOB_SHARE_OF_REQUEST`), or a whole that fits one request after all. Each job is encoded
    once, here."""
    if len(jobs) < 2:
        return None
    costs = [_cost(job) for job in jobs]
    most_bytes = protocol.MAX_MESSAGE_BYTES * JOB_SHARE_OF_REQUEST
    most_values = protocol.MAX_REQUEST_VALUES * JOB_SHARE_OF_REQUEST
    if any(b > most_bytes or v > most_values for b, v in costs):
        return None
    parts = _plan(costs, env)
    return parts if len(parts) > 1 else None


def plan_parts(
    jobs: Sequence[Job], env: dict[str, str] | None, most: int = PART_JOBS
) -> list[range]:
    """The submission cut into runs of at most `most` jobs, each of whose request is within
    the engine's limits (a job too large alone is a part of its own, which the engine refuses
    as before)."""
    return _plan([_cost(job) for job in jobs], env, most)


def _plan(
    costs: Sequence[tuple[int, int]], env: dict[str, str] | None, most: int = PART_JOBS
) -> list[range]:
    """`plan_parts` of the jobs' costs (`_cost`)."""
    most_parts = {"jobs": MAX_ROW_ID, "parts": MAX_ROW_ID}  # its largest
    whole = {"jobs": MAX_ROW_ID, "sent": MAX_ROW_ID}
    args: dict[str, Any] = {"jobs": [], "env": env, "hold": True, "in_parts": most_parts}
    args["part_of"], args["umask"] = whole, MAX_UMASK  # its longest
    envelope = Request(op="submit", args=args, id=2**31).encode()
    base_bytes, base_values = len(envelope), json_values(envelope)
    parts: list[range] = []
    start, size, values = 0, base_bytes, base_values
    for index, (job_bytes, job_values) in enumerate(costs):
        full = (
            size + job_bytes > protocol.MAX_MESSAGE_BYTES
            or values + job_values > protocol.MAX_REQUEST_VALUES
            or index - start >= most
        )
        if full and index > start:
            parts.append(range(start, index))
            start, size, values = index, base_bytes, base_values
        size, values = size + job_bytes, values + job_values
    parts.append(range(start, len(costs)))
    return parts


def _refers(ref: int, part: range, ids: Sequence[int] | None) -> int | None:
    """`ref` as the job of `part` must name it: a job id as is; -k (the k-th job of the whole
    submission) counted within the part, or, before the part, that job's id (None where the
    earlier parts have no ids: a check, which leaves the reference out)."""
    if ref > 0:
        return ref
    target = -ref - 1
    if target >= part.start:
        return -(target - part.start + 1)
    return ids[target] if ids is not None else None


def part_jobs(jobs: Sequence[Job], part: range, ids: Sequence[int] | None) -> list[Job]:
    """The jobs of `part`, their references made to fit it (`_refers`)."""
    out = []
    for job in jobs[part.start : part.stop]:
        changed = dict(job)
        for key in (k for k in _DEPENDENCY_KEYS if job.get(k)):
            refs = [_refers(ref, part, ids) for ref in job[key]]
            changed[key] = [ref for ref in refs if ref is not None]
        if job.get("array_job") is not None:
            changed["array_job"] = _refers(job["array_job"], part, ids)
        out.append(changed)
    return out


def _counted_over_all(exc: EngineError, part: range) -> EngineError:
    """The engine's refusal of the `k`-th job of a part, said of the `part.start + k`-th of
    the whole submission, as one request would have said it."""
    message = _REQUEST_INDEX.sub(lambda m: f"jobs[{int(m[1]) + part.start}]", str(exc), count=1)
    return EngineError(message, exc.code)


def _in_batches(
    act: Callable[[list[int]], list[ActionOutcome]], ids: Sequence[int]
) -> list[ActionOutcome]:
    outcomes: list[ActionOutcome] = []
    for start in range(0, len(ids), IDS_PER_REQUEST):
        outcomes.extend(act(list(ids[start : start + IDS_PER_REQUEST])))
    return outcomes


def _withdrawn(client: Client, ids: Sequence[int], by_user: bool) -> str:
    """Cancel the jobs of the parts already queued (held: none started); what to add to the
    error that ended the submission, so that its cancelled jobs in the history are explained.
    `by_user`: the parts are held as the user asked (`submit --hold`), not by this client."""
    if not ids:
        return ""
    try:
        left = [o.id for o in _in_batches(client.cancel, ids) if not o.ok]
    except EngineError as exc:
        return (
            f" Its first {len(ids):,} job(s), queued held in parts before, could not all be "
            f"cancelled ({exc}): jobs {id_ranges(ids)}, and any of a part the engine took "
            + (
                "unanswered. They stay held, as asked: `gpudesk cancel` them."
                if by_user
                else "unanswered. None of them starts: they stay held until `gpudesk cancel` "
                "cancels them, or an engine starts, which cancels every job of a submission "
                "cut short."
            )
        )
    if left:
        return (
            f" Its first {len(ids):,} job(s), queued held in parts before, were cancelled "
            f"but for jobs {id_ranges(left)}; `gpudesk cancel` them."
        )
    return f" Its first {len(ids):,} job(s), queued held in parts before, were cancelled."


def submit_in_parts(
    client: Client,
    jobs: Sequence[Job],
    env: dict[str, str] | None,
    *,
    hold: bool,
    parts: Sequence[range] | None = None,
    alone: Sequence[int] = (),
    umask: int | None = None,
) -> SubmitResult:
    """Queue `jobs` in `parts` (default: `plan_parts`), all or none; released once all are in,
    unless `hold` (the submitter asked for them held: held by the user, as their events say).
    `alone`: the dependencies' ids that name an array's first task alone (`first_tasks_alone`);
    `umask`: the submitter's, sent with each part."""
    parts = plan_parts(jobs, env) if parts is None else parts
    cluster = next((job["cluster"] for job in jobs if job.get("cluster")), None)
    if cluster is not None:
        fits = len(plan_parts(jobs, env, most=len(jobs))[0])  # a request's bounds alone
        raise EngineError(
            f"these {len(jobs):,} jobs for a Slurm cluster do not fit in one request (about "
            f"{fits:,} of them do), and a submission to Slurm is sent whole: submit fewer "
            "at once, or write the sweep out as a Slurm job array (`gpudesk export slurm`)",
            TOO_LARGE,
        )
    ids: list[int] = []
    waits: dict[int, str] = {}
    simulated: str | None = None
    in_parts = None if hold else InParts(jobs=len(jobs), parts=len(parts))
    try:
        for part in parts:
            args = SubmitArgs(
                jobs=part_jobs(jobs, part, ids),
                env=env,
                hold=True,
                in_parts=in_parts,
                part_of=PartOf(jobs=len(jobs), sent=len(ids)),
                first_tasks_alone=list(alone),
                umask=umask,
            )
            try:
                result = client.ask(SubmitResult, "submit", args)
            except EngineError as exc:
                raise _counted_over_all(exc, part) from None
            ids.extend(result.ids)
            waits.update(result.waits_for_change)
            simulated = result.simulated
    except EngineError as exc:
        raise EngineError(f"{exc}{_withdrawn(client, ids, hold)}", exc.code) from None
    except BaseException:  # an interrupt between the parts: none of them runs
        _withdrawn(client, ids, hold)
        raise
    if in_parts is not None:
        _release(client, ids, in_parts)
    return SubmitResult(ids=ids, simulated=simulated, waits_for_change=waits)


def _release(client: Client, ids: Sequence[int], in_parts: InParts) -> None:
    def release(batch: list[int]) -> list[ActionOutcome]:
        refs: list[int | str] = [*batch]
        args = ReleaseArgs(jobs=refs, in_parts=in_parts)
        return client.ask(ActionResult, "release", args).results

    try:
        held = [o.id for o in _in_batches(release, ids) if not o.ok]
    except EngineError as exc:
        raise EngineError(
            f"all {len(ids):,} jobs were queued (in parts, held until all were in), but "
            f"releasing them failed ({exc}): jobs {id_ranges(ids)} may still be held; "
            "`gpudesk release` them (where an engine started since, it has cancelled them, "
            "as every job of a submission cut short: submit again)",
            exc.code,
        ) from None
    if held:
        raise EngineError(
            f"all {len(ids):,} jobs were queued (in parts, held until all were in), but jobs "
            f"{id_ranges(held)} could not be released; `gpudesk release` them"
        )


def check_in_parts(
    client: Client,
    jobs: Sequence[Job],
    env: dict[str, str] | None,
    parts: Sequence[range],
    *,
    umask: int | None = None,
) -> None:
    """`check_submit` of a submission too large for one request, part by part. A part's check
    cannot name the jobs of the parts before it (none is queued): those references, which the
    profile's reading already checked, are left out of it."""
    whole = PartOf(jobs=len(jobs))  # none of it queued: the queue limit counted over all
    for part in parts:
        try:
            args = SubmitArgs(jobs=part_jobs(jobs, part, None), env=env, part_of=whole, umask=umask)
            client.ask(SubmitResult, "check_submit", args)
        except EngineError as exc:
            raise _counted_over_all(exc, part) from None
