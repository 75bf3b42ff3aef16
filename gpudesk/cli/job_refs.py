"""Jobs named on a command line, some of which name no job (`gpudesk cancel 1 99`): the others
are acted on, and the unknown ones reported, as `scancel 1 99` and `pueue kill 1 99` do.

The engine resolves a request's jobs first, and one that names no job fails the request with
none touched (engine/requests/job_actions.py): the CLI said only "no job with id 99", exit 1,
and left job 1 as it was, which a user of Slurm or pueue takes for done. Here a request the
engine refuses for an unknown job is sent again without the refs that name none, found with the
engine's own lookups (by id: one listing of those ids; by name: `show`, the engine's newest job
of that name, the caller's own where she has one), so no job is acted on that was not named.
Nothing is sent again when every ref names a job (the engine's answer changed in between: its
refusal stands, nothing done).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from gpudesk.core.field_checks import reads_as_job_id

if TYPE_CHECKING:
    from gpudesk.api.client import Client
    from gpudesk.api.models import ActionOutcome

Act = Callable[[list[str]], list["ActionOutcome"]]
# The jobs a failed write of the output names one by one (the rest are counted)
SAID_DONE = 5


def spelled_refs(refs: Sequence[str]) -> list[str]:
    """The refs with each range of an array's tasks spelled out (`144_[0-2]`: 144_0 144_1
    144_2, as scancel takes it), or one paragraph (exit 2) for a range that is none."""
    from gpudesk.cli.common import fail
    from gpudesk.cli.exit_codes import EXIT_USAGE
    from gpudesk.core.field_checks import task_range_refs

    try:
        return task_range_refs(list(refs))
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)


def act_on_known(
    client: Client, refs: Sequence[str], act: Act
) -> tuple[list[ActionOutcome], list[str]]:
    """What `act` did to the jobs `refs` name (a range of an array's tasks: each task), and the
    refs that name no job (each once, in the order given); `act` is asked once, or twice where
    some name none."""
    from gpudesk.api.errors import EngineError
    from gpudesk.core.protocol import UNKNOWN_JOB

    refs = spelled_refs(refs)
    try:
        results, unknown = act(list(refs)), []
    except EngineError as exc:
        if exc.code != UNKNOWN_JOB:
            raise
        unknown = unknown_refs(client, refs)
        if not unknown:
            raise
        known = [ref for ref in refs if ref not in unknown]
        results = act(known) if known else []
    _done_all_the_same(results)
    return results, unknown


def _done_all_the_same(results: list[ActionOutcome]) -> None:
    """What the engine did, for the line that says the output could not be written (a full
    disk: gpudesk.cli.std_streams): a cancel that is done must not read as one that failed."""
    from gpudesk.cli.std_streams import already_done
    from gpudesk.text import printable_line

    done = [f"job {r.id}: {printable_line(r.outcome)}" for r in results if r.ok]
    if not done:
        return
    more = f"; and {len(done) - SAID_DONE} more" if len(done) > SAID_DONE else ""
    already_done(
        f"the engine did this all the same ({'; '.join(done[:SAID_DONE])}{more}): "
        "gpudesk show JOB says where a job stands"
    )


def unknown_refs(client: Client, refs: Sequence[str]) -> list[str]:
    """The refs that name no job, as the engine looks them up."""
    from gpudesk.core.protocol import MAX_ROW_ID

    ids = {int(ref) for ref in refs if reads_as_job_id(ref)}
    ids = {i for i in ids if 0 < i <= MAX_ROW_ID}  # past it, no job has that id
    listing = client.job_listing(ids=sorted(ids), archived=True) if ids else None
    # a row the store cannot read is a job all the same (the engine acts on it, or says why)
    known = {j.id for j in listing.jobs} | {d.id for d in listing.damaged} if listing else set()
    unknown: dict[str, None] = {}
    for ref in refs:
        if reads_as_job_id(ref):
            if int(ref) not in known:
                unknown.setdefault(ref)
        elif ref not in unknown and not _named(client, ref):
            unknown.setdefault(ref)
    return list(unknown)


def _named(client: Client, name: str) -> bool:
    from gpudesk.api.errors import EngineError
    from gpudesk.core.protocol import UNKNOWN_JOB

    try:
        client.show(name)
    except EngineError as exc:
        if exc.code != UNKNOWN_JOB:
            raise
        return False
    return True
