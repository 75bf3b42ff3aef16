"""A submission too large for one request goes in parts that start as one (api/submit_parts.py):
a real engine, its real limits on one request (core/protocol.py)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from conftest import EngineHandle

from gpudesk.api.errors import TOO_LARGE, EngineError
from gpudesk.api.submit_parts import IDS_PER_REQUEST, PART_JOBS, plan_parts, submit_in_parts
from gpudesk.core.jobs import JobSpec
from gpudesk.core.protocol import (
    MAX_MESSAGE_BYTES,
    MAX_REQUEST_VALUES,
    MAX_ROW_ID,
    MAX_STATION_SUBMIT_JOBS,
    Request,
    json_values,
)
from gpudesk.core.wire.requests import JobRefsArgs, OpArgs, decode_args

# More than one request holds: ~50 values a plain job, 100,000 a request
MANY = 2_500


def specs(count: int, **fields: object) -> list[JobSpec]:
    return [JobSpec(name=f"j{k}", command=("true",), **fields) for k in range(count)]  # type: ignore[arg-type]


def holds(engine: EngineHandle, job_id: int) -> list[tuple[str, str]]:
    """A job's hold and release events, as `gpudesk show` lists them."""
    events = engine.show(job_id).events
    return [(e.kind, e.message) for e in events if e.kind in ("hold", "release")]


def test_the_parts_each_fit_one_request_and_cover_the_submission_in_order() -> None:
    jobs = [
        {"name": f"j{k}", "command": ["true", "x" * (k % 300)], "workdir": "/"}
        for k in range(7_000)
    ]
    env = {"PATH": "/usr/bin", "BIG": "y" * 100_000}
    parts = plan_parts(jobs, env)
    assert [k for part in parts for k in part] == list(range(len(jobs)))
    assert len(parts) > 3 and all(0 < len(part) <= PART_JOBS for part in parts)
    in_parts = {"jobs": MAX_ROW_ID, "parts": MAX_ROW_ID}  # the largest it can say
    for part in parts:
        args = {"jobs": jobs[part.start : part.stop], "env": env, "hold": True}
        body = Request(op="submit", args=args | {"in_parts": in_parts}, id=7).encode()
        assert len(body) <= MAX_MESSAGE_BYTES and json_values(body) <= MAX_REQUEST_VALUES
    # one that fits whole is one part; a job too large alone is a part of its own
    assert plan_parts(jobs[:10], env) == [range(0, 10)]
    huge = [
        {"name": "a"},
        {"name": "b", "env": {"X": "z" * (MAX_MESSAGE_BYTES + 1)}},
        {"name": "c"},
    ]
    assert plan_parts(huge, None) == [range(0, 1), range(1, 2), range(2, 3)]


def test_a_submission_larger_than_one_request_is_queued_whole_in_order_and_runs(
    engine: EngineHandle,
) -> None:
    with pytest.raises(EngineError) as refused:  # what one request of it would be told
        engine.client.request("submit", jobs=[s.to_dict() for s in specs(MANY)])
    assert refused.value.code == TOO_LARGE
    jobs = specs(MANY)
    # each job after the first and the one before it: references across the parts
    jobs = [jobs[0]] + [
        JobSpec(name=s.name, command=s.command, after=(-1, -k)) for k, s in enumerate(jobs[1:], 1)
    ]
    submitted = engine.api.submit_jobs(jobs, hold=True)
    ids = submitted.ids
    assert len(ids) == MANY and ids == list(range(ids[0], ids[0] + MANY))
    assert holds(engine, ids[-1]) == [("hold", "held by user")]  # the user asked: held by them
    listed = {j.id: j for j in engine.api.jobs(ids=ids)}
    assert all(j.state == "queued" and j.held and j.attempts == 0 for j in listed.values())
    for k in (1, PART_JOBS - 1, PART_JOBS, PART_JOBS + 1, MANY - 1):
        assert sorted(engine.show(ids[k]).job.spec.after) == sorted({ids[0], ids[k - 1]}), k
    # not held: released once all are in (here they wait for a held job, so none starts)
    released = engine.api.submit_jobs(specs(MANY, after=(ids[0],))).ids
    assert not any(j.held for j in engine.api.jobs(ids=released))
    engine.api.cancel(released[1:])
    engine.api.release([ids[0]])
    assert engine.wait_state(released[0], "succeeded")


def test_the_events_of_a_submission_in_parts_say_why_it_was_held_not_by_user(
    engine: EngineHandle,
) -> None:
    """Its parts are held by the client until all are queued, then released: the history of a
    job of the first part and of the last says so. A user's own hold and release (as an older
    client's parts, which say nothing of parts) stay "by user"."""
    (gate,) = engine.api.submit_jobs(specs(1), hold=True).ids  # none of the others may start
    ids = engine.api.submit_jobs(specs(PART_JOBS + 1, after=(gate,))).ids
    whole = f"all {PART_JOBS + 1:,} jobs of its submission"
    for job_id in (ids[0], ids[-1]):
        assert holds(engine, job_id) == [
            ("hold", f"held until {whole} are queued (sent in 2 parts)"),
            ("release", f"released: {whole} are queued"),
        ], job_id
    engine.api.cancel(ids)
    assert engine.api.release([gate])[0].outcome == "released"
    assert holds(engine, gate) == [("hold", "held by user"), ("release", "released by user")]


def test_in_parts_goes_only_with_a_held_submit_and_counts_its_part(engine: EngineHandle) -> None:
    """`in_parts` says the client holds a part until all of its submission is queued: on a
    submit that is not held (or a check of one) it would mean nothing, and counts that cannot
    hold this part would be said in its jobs' events. Each is refused, naming the argument, and
    nothing is queued (before: accepted, the jobs queued unheld, `in_parts` dropped)."""
    jobs, unheld = [s.to_dict() for s in specs(3)], "only a held submit is one of a submission's"
    for op, extra, said in (
        ("submit", {}, unheld),
        ("check_submit", {}, unheld),
        ("submit", {"hold": True, "in_parts": {"jobs": 2, "parts": 1}}, "3 jobs, more than the 2"),
        ("submit", {"hold": True, "in_parts": {"jobs": 3, "parts": 4}}, "cannot be sent in 4"),
    ):
        args = {"in_parts": {"jobs": 6, "parts": 2}} | extra
        with pytest.raises(EngineError) as refused:
            engine.client.request(op, jobs=jobs, **args)
        assert refused.value.code == "invalid_args", (op, args)
        assert str(refused.value).startswith("in_parts: "), refused.value
        assert said in str(refused.value), refused.value
    assert not engine.api.jobs(archived=True)
    taken = engine.client.request("submit", jobs=jobs, hold=True, in_parts={"jobs": 3, "parts": 1})
    assert len(taken["ids"]) == 3


def test_show_of_a_part_still_held_says_its_submission_is_arriving_not_to_release_it(
    engine: EngineHandle, gpudesk
) -> None:
    """While a submission's parts go in, its jobs are held by the client, which releases them
    once the last part is in: `show` says so, and that `gpudesk release` is needed only where
    the client stopped before (before: "held: it will not start until released (gpudesk
    release N)", as if the user had to). A job its user held again after says the user's."""
    (gate,) = engine.api.submit_jobs(specs(1), hold=True).ids  # none of the others may start
    part = [s.to_dict() for s in specs(3, after=(gate,))]  # the first of 2, as the client sends
    ids = engine.client.request("submit", jobs=part, hold=True, in_parts={"jobs": 6, "parts": 2})
    job_id = ids["ids"][0]
    assert engine.show(job_id).waiting == (
        "held: part of a submission of 6 jobs still arriving in 2 parts; it starts once the "
        "last part is in (its client then releases them all). Only if the client stopped "
        f"before that do its parts stay held: then `gpudesk release {job_id}` and the rest of "
        "them"
    )
    code, out, _ = gpudesk("show", str(job_id))
    assert code == 0 and "still arriving in 2 parts" in " ".join(out.split()), out
    # `queue` tells the client's hold from the user's (before: JobHeldUser for both)
    code, out, _ = gpudesk("queue")
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert rows[str(job_id)].endswith("(JobHeldClient)"), out
    assert rows[str(gate)].endswith("(JobHeldUser)"), out
    assert engine.api.release([job_id])[0].outcome == "released"
    assert engine.api.hold([job_id])[0].outcome == "held"
    plain = f"held: it will not start until released (gpudesk release {job_id})"
    assert engine.show(job_id).waiting == plain


# An engine from before `in_parts` and `part_of`: its submit's arguments (release's: JobRefsArgs)
class SubmitArgsBefore(OpArgs, frozen=True):
    jobs: list[dict[str, Any]]
    env: dict[str, str] | None = None
    hold: bool = False


def test_an_engine_from_before_in_parts_takes_each_request_of_the_parts_as_it_did(
    engine: EngineHandle,
) -> None:
    """An engine's door ignores the arguments it does not know (core/wire/requests.py, as it
    always did): each request a client sends a submission in parts with, decoded by the door
    with the types an engine from before `in_parts` had, is what such a client sent (its jobs
    then say "held by user", "released by user", as before). The requests are the client's
    own, sent to a real engine; the parts are small, as `submit_in_parts` is given them."""
    client, sent = engine.api, []
    real_call = client.call

    def call(model: type, op: str, **args: object) -> object:
        sent.append((op, args))
        return real_call(model, op, **args)

    client.call = call  # type: ignore[method-assign]
    try:
        jobs = [s.to_dict() for s in specs(5)]
        submit_in_parts(client, jobs, None, hold=False, parts=[range(0, 3), range(3, 5)])
    finally:
        client.call = real_call  # type: ignore[method-assign]
    assert [op for op, _ in sent] == ["submit", "submit", "release"]
    before = {"submit": SubmitArgsBefore, "release": JobRefsArgs}
    for op, args in sent:
        assert args["in_parts"] == {"jobs": 5, "parts": 2}
        taken = msgspec.to_builtins(decode_args(before[op], args))
        assert taken == {k: v for k, v in args.items() if k not in ("in_parts", "part_of")}, op


def test_an_array_larger_than_one_request_is_one_array(engine: EngineHandle, gpudesk) -> None:
    code, out, err = gpudesk("submit", "--hold", "--array", f"0-{MANY - 1}%2", "--", "true")
    assert code == 0, err
    head = int(out.split("array job ")[1].split()[0])
    assert f"held: `gpudesk release {head}` lets them start" in out  # the array's id: all
    last = engine.show(head + MANY - 1).job.spec
    assert (last.array_job, last.array_task, last.array_limit) == (head, MANY - 1, 2)
    assert engine.show(head).job.spec.array_job is None


def test_a_part_the_engine_refuses_leaves_nothing_queued_and_counts_its_job_over_the_whole(
    engine: EngineHandle,
) -> None:
    jobs = specs(MANY)
    jobs[1_700] = JobSpec(name="late", command=("true",), after=(999_999,))
    with pytest.raises(EngineError) as refused:
        engine.api.submit_jobs(jobs)
    message = str(refused.value)
    assert message.startswith("jobs[1700].after: there is no job 999999"), message
    before = 1_700 // PART_JOBS * PART_JOBS  # the parts before the one refused
    assert f"Its first {before:,} job(s), queued held in parts before, were cancelled." in message
    every = engine.api.jobs(archived=True)
    assert len(every) == before
    assert all(j.state == "cancelled" and j.attempts == 0 for j in every)


def test_a_queue_limit_counts_the_whole_submission_and_refuses_it_at_once(
    engine: EngineHandle,
) -> None:
    """The limit is counted over every part: the first is refused, saying what was asked for
    in all (not the part's 500), and nothing is queued to be withdrawn."""
    engine.client.request("configure", station={"max_queued_per_user": MANY - 1})
    (one,) = engine.api.submit_jobs(specs(1), hold=True).ids
    with pytest.raises(EngineError) as refused:
        engine.api.submit_jobs(specs(MANY))
    said = str(refused.value)
    assert (
        f"has 1 job queued (held and waiting ones count) and the station allows {MANY - 1} " in said
    )
    assert f"; submitting {MANY} more would make {MANY + 1}. Nothing was submitted" in said, said
    assert said.endswith("then submit again.") and "cancelled" not in said, said
    assert [j.id for j in engine.api.jobs(archived=True)] == [one]
    with pytest.raises(EngineError) as checked:  # a profile's check counts it so too
        engine.api.check_submit(specs(MANY))
    assert f"submitting {MANY} more would make {MANY + 1}" in str(checked.value)


def test_a_queue_limit_reached_in_a_later_part_refuses_the_whole(engine: EngineHandle) -> None:
    """Another submit of hers between two parts leaves no room for the rest: the parts
    queued before are withdrawn, nothing of the submission queued."""
    engine.client.request("configure", station={"max_queued_per_user": MANY})
    client, real_call = engine.api, engine.api.call
    sent: list[str] = []

    def call(model: type, op: str, **args: object) -> object:
        sent.append(op)
        if op == "submit" and sent.count("submit") == 3:  # the whole, refused; the first part
            real_call(model, op, jobs=[specs(1)[0].to_dict()], hold=True)
        return real_call(model, op, **args)

    client.call = call  # type: ignore[method-assign]
    with pytest.raises(EngineError) as refused:
        client.submit_jobs(specs(MANY))
    assert "Nothing was submitted" in str(refused.value), refused.value
    every = engine.api.jobs(archived=True)  # the first part's, cancelled; the one between
    assert len(every) == PART_JOBS + 1
    assert sum(j.state == "cancelled" and j.attempts == 0 for j in every) == PART_JOBS


def test_an_array_continued_by_id_must_be_its_owners_first_job(engine: EngineHandle) -> None:
    (plain,) = engine.submit({"name": "plain", "command": ["true"]})
    with pytest.raises(EngineError, match="is not the first job of an array"):
        engine.submit({"name": "t", "command": ["true"], "array_job": plain, "array_task": 1})
    with pytest.raises(EngineError, match="there is no job 999999 whose array"):
        engine.submit({"name": "t", "command": ["true"], "array_job": 999_999, "array_task": 1})


def test_a_slurm_submission_too_large_is_refused_before_anything_is_sent() -> None:
    class Unreachable:
        def call(self, *args: object, **kwargs: object) -> None:
            raise AssertionError("nothing may be sent")

    jobs = [{"name": f"j{k}", "cluster": {"name": "c"}, "command": ["true"]} for k in range(3_000)]
    with pytest.raises(EngineError, match="a submission to Slurm is sent whole"):
        submit_in_parts(Unreachable(), jobs, None, hold=False)  # type: ignore[arg-type]


def test_an_interrupt_between_the_parts_cancels_the_parts_queued(engine: EngineHandle) -> None:
    """Ctrl-C while the third part is on its way: the first two, held, are cancelled."""
    client = engine.api
    sent: list[str] = []
    real_call = client.call

    def call(model: type, op: str, **args: object) -> object:
        sent.append(op)
        if op == "submit" and sent.count("submit") == 3:
            raise KeyboardInterrupt
        return real_call(model, op, **args)

    client.call = call  # type: ignore[method-assign]
    try:
        with pytest.raises(KeyboardInterrupt):
            submit_in_parts(client, [s.to_dict() for s in specs(MANY)], None, hold=False)
    finally:
        client.call = real_call  # type: ignore[method-assign]
    every = engine.api.jobs(archived=True)
    cancels = -(-2 * PART_JOBS // IDS_PER_REQUEST)  # the two parts' ids, in requests of 1,000
    assert len(every) == 2 * PART_JOBS and sent.count("cancel") == cancels
    assert all(j.state == "cancelled" and j.attempts == 0 for j in every)


def test_the_engine_queues_at_most_its_part_size_on_the_station_in_one_request(
    engine: EngineHandle,
) -> None:
    """A submit is one transaction on the engine's loop: more than MAX_STATION_SUBMIT_JOBS (500:
    ~35 ms) are refused whole, as too large, naming the bound (the client then sends parts; a
    client from before parts is told to upgrade); that many are queued in one request."""
    most = MAX_STATION_SUBMIT_JOBS
    assert most == PART_JOBS
    with pytest.raises(EngineError) as refused:
        engine.client.request("submit", jobs=[s.to_dict() for s in specs(most + 1)])
    assert refused.value.code == TOO_LARGE
    assert f"one request queues at most {most} jobs on the station" in str(refused.value)
    assert f"this one has {most + 1}" in str(refused.value)
    # only a client from before parts (or a request of one's own) sends more: it is told to
    # upgrade, not that `gpudesk submit` sends parts, which that user had just run
    assert "older than this engine; upgrade gpudesk where you submit from" in str(refused.value)
    assert not engine.api.jobs(archived=True)
    held = engine.client.request("submit", jobs=[s.to_dict() for s in specs(most)], hold=True)
    assert len(held["ids"]) == most
    # jobs for a Slurm cluster are sent whole (refused here for want of the cluster, not size)
    cluster = [s.to_dict() | {"cluster": {"name": "nowhere"}} for s in specs(most + 1)]
    with pytest.raises(EngineError) as refused:
        engine.client.request("check_submit", jobs=cluster)
    assert refused.value.code != TOO_LARGE, refused.value


def test_an_engine_starting_cancels_the_parts_of_a_submission_cut_short(
    engine: EngineHandle,
) -> None:
    """The engine killed while a client sent a submission in parts: the client cannot release
    them, and could name only the parts it heard answered (a part the engine took as it died
    was left held by no one, for good). An engine that starts cancels every job still held by
    its submission's client, saying why; none of them ran. A job its user held stays held."""
    part = [s.to_dict() for s in specs(3)]
    cut = engine.client.request("submit", jobs=part, hold=True, in_parts={"jobs": 6, "parts": 2})
    kept = engine.api.submit_jobs(specs(1), hold=True).ids
    engine.kill9()
    engine.start()
    for job_id in cut["ids"]:
        job = engine.job(job_id)
        assert job.state == "cancelled" and job.attempts == 0, job
        assert "submission in parts" in engine.show(job_id).job.reason, job
    assert engine.job(kept[0]).state == "queued" and engine.job(kept[0]).held
