"""`gpudesk wait`: block until jobs end, for a script, with their status as its own — the jobs
named, or every job of one run (`--group`, as `pueue wait --group` does for a group): a run
left to the engine with `gpudesk run --detach` is waited for by its name."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import typer

from gpudesk.cli.common import JOB_REFS_HELP, complete_job, fail
from gpudesk.cli.exit_codes import EXIT_TIMED_OUT, EXIT_USAGE
from gpudesk.cli.job_refs import spelled_refs
from gpudesk.cli.no_engine import engine_kept_waiting, reading_client
from gpudesk.text import quoted

if TYPE_CHECKING:
    from gpudesk.api.client import Client
    from gpudesk.api.models import JobView

wait_app = typer.Typer()


@wait_app.command()
def wait(
    jobs: list[str] = typer.Argument(
        None, help=JOB_REFS_HELP[:-1] + " (or --group RUN).", autocompletion=complete_job
    ),
    group: str | None = typer.Option(
        None,
        "--group",
        "-g",
        metavar="RUN",
        help="Every job of this run, as queue --all --group lists them (those ended too), in "
        "the order they were submitted, and those it gains while waited for (a run still "
        "submitting).",
    ),
    timeout: float | None = typer.Option(
        None, "--timeout", min=0, help="Give up after this many seconds (exit 124)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing; only exit."),
) -> None:
    """Wait until jobs end; exit 0 if all succeeded, else with the status of the first one
    (in the order given) that did not: its exit code, 128+N if signal N killed it, or 1.
    Exit 3 where no engine runs; one that stops while this waits (restarted: an upgrade) is
    waited for (the jobs go on)."""
    from gpudesk.api.submit import WaitStopped, wait_for_jobs, waited_ids
    from gpudesk.cli.std_streams import follow_to_the_end

    follow_to_the_end()  # its exit status is the jobs': a reader that leaves does not end it
    if bool(jobs) == (group is not None):
        fail("which jobs? name them, or give one run's with --group RUN (not both)", EXIT_USAGE)
    deadline = None if timeout is None else time.monotonic() + timeout
    with reading_client(jobs[0] if jobs else None) as client:
        ids = waited_ids(client, spelled_refs(jobs)) if jobs else _run_ids(client, str(group))
        what = f"the run {group}" if group is not None else f"job(s) {' '.join(jobs)}"

        def wait_until_ended(these: list[int]) -> list[JobView]:
            return wait_for_jobs(
                client,
                these,
                stop=None if deadline is None else lambda: time.monotonic() >= deadline,
                on_end=None if quiet else lambda job: print(job.outcome, flush=True),
                usage=False,
            )

        def give_up() -> None:  # --timeout, while the engine is away too
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitStopped

        try:
            with engine_kept_waiting(client, what, give_up):
                ended = wait_until_ended(ids)
                while group is not None and (later := _run_ids(client, group, after=ids)):
                    ids += later  # parts the run gained meanwhile
                    ended += wait_until_ended(later)
        except WaitStopped:
            if not quiet:
                print(f"gave up after {timeout:g} s; some jobs have not ended", file=sys.stderr)
            raise typer.Exit(EXIT_TIMED_OUT) from None
    by_id = {job.id: job for job in ended}
    failed = [by_id[job_id] for job_id in ids if by_id[job_id].exit_status != 0]
    raise typer.Exit(failed[0].exit_status if failed else 0)


def _run_ids(client: Client, group: str, after: list[int] | None = None) -> list[int]:
    """The ids of `group`'s jobs, oldest first, or one paragraph (exit 2) where it has none.
    `after`: only those not among these ids, waited for already. A run may gain jobs while it
    is waited for (one still submitting its parts), and `--group` waits for those too, as
    `pueue wait --group` does."""
    ids = sorted(job.id for job in client.job_listing(group=group, archived=True).jobs)
    if after is not None:
        waited = set(after)
        return [job_id for job_id in ids if job_id not in waited]
    if not ids:
        fail(
            f"--group: no job is in the run {quoted(group)}: a run's name is what `gpudesk run` "
            "printed, and `gpudesk show ID` gives a job's (its `run` line)",
            EXIT_USAGE,
        )
    return ids
