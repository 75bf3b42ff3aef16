"""The submit workflow: [station] and [datasets], the pre-pass jobs first, then the profile's
jobs only if every pre-pass succeeded; all in one group, with the submitter's environment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_api_prepass import PROFILE, job_wire  # same folder: on sys.path under pytest

from gpudesk.api.client import Client
from gpudesk.api.errors import EngineError
from gpudesk.api.submit import StationReport, Step, Submitted, submit_profile
from gpudesk.core import protocol
from gpudesk.core.station import StationConfig
from gpudesk.paths import Home
from gpudesk.profile import parse_profile
from gpudesk.selection.cache import SelectionCache


class FakeEngine:
    """Answers the workflow's requests as the engine would (on the wire, under a real
    `Client`), and records them."""

    def __init__(
        self, log: Path, prepass_state: str = "succeeded", refuse: str | None = None
    ) -> None:
        self.log, self.prepass_state, self.refuse = log, prepass_state, refuse
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.submitted: dict[int, dict[str, Any]] = {}
        self.home = Home(log.parent)
        self.configured: dict[str, Any] = {}  # the reply to `configure`

    @property
    def client(self) -> Client:
        return Client(self)  # type: ignore[arg-type]  # the transport's exchange(), faked

    def close(self) -> None:
        pass

    def exchange(self, op: str, args: dict[str, Any]) -> bytes:
        if op in ("submit", "check_submit") and self.refuse is not None:
            self.calls.append((op, args))
            return protocol.encode_error(1, protocol.INVALID_ARGS, self.refuse)
        return protocol.encode_result(1, self.answer(op, args))

    def answer(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((op, args))
        if op == "check_submit":
            return {"ids": []}
        if op == "submit":
            first = len(self.submitted) + 1
            ids = list(range(first, first + len(args["jobs"])))
            self.submitted.update(zip(ids, args["jobs"], strict=True))
            return {"ids": ids}
        if op == "jobs":
            return {
                "jobs": [
                    job_wire(
                        id=i,
                        name=self.submitted[i]["name"],
                        state=self.prepass_state,
                        log=str(self.log),
                        started_at=1.0,
                        ended_at=2.0,
                    )
                    for i in args["ids"]
                ]
            }
        if op in ("configure", "check_configure"):
            return self.configured
        if op == "datasets":
            return {"datasets": [d["name"] for d in args["datasets"]], "specs": args["datasets"]}
        return {}


def prepass_log(tmp_path: Path) -> Path:
    log = tmp_path / "output.log"
    output = {"key": "k", "reused": True, "preset": "el2n-25", "dataset": "m:f", "kept": 2}
    log.write_text(json.dumps({**output, "of": 10}) + "\n")
    return log


def test_a_profile_is_submitted_prepasses_first_then_its_jobs(tmp_path: Path) -> None:
    engine = FakeEngine(prepass_log(tmp_path))
    waited: list[list[int]] = []
    steps: list[Step] = []
    outcome = submit_profile(
        engine.client,
        parse_profile(PROFILE, "p.toml"),
        group="g",
        wait=lambda ids: waited.append(list(ids)),
        on_step=steps.append,
        cache=SelectionCache(tmp_path / "sel"),
        env={"PATH": "/bin"},
    )
    ops = [op for op, _ in engine.calls]
    assert ops == ["datasets", "check_submit", "submit", "jobs", "submit"]  # no [station] asked
    check, prepasses, training = engine.calls[1][1], engine.calls[2][1], engine.calls[4][1]
    assert [j["name"] for j in check["jobs"]] == [j["name"] for j in training["jobs"]]
    assert [j["name"] for j in prepasses["jobs"]] == [
        "prepass-d-el2n-25",
        "prepass-d.less-10-less-10",
    ]
    assert [j["name"] for j in training["jobs"]] == ["a", "b", "c", "e"]
    assert {j["group"] for j in prepasses["jobs"] + training["jobs"]} == {"g"}
    assert prepasses["env"] == training["env"] == {"PATH": "/bin"}
    assert waited == [[1, 2]]
    assert steps[0] == Submitted("prepass", (1, 2)) and steps[-1] == Submitted(
        "train", (3, 4, 5, 6)
    )
    assert [s.describe() for s in steps[1:3]] == [  # type: ignore[union-attr]
        "selection el2n-25 of m:f: 2 of 10 samples, reused from the cache (key k)"
    ] * 2
    assert outcome.job_ids == [3, 4, 5, 6] and not outcome.failed_prepasses


def test_a_failed_prepass_keeps_the_profiles_jobs_back(tmp_path: Path) -> None:
    engine = FakeEngine(prepass_log(tmp_path), prepass_state="failed")
    outcome = submit_profile(
        engine.client, parse_profile(PROFILE, "p.toml"), group="g", wait=lambda ids: None
    )
    assert [op for op, _ in engine.calls] == ["datasets", "check_submit", "submit", "jobs"]
    assert outcome.job_ids == [] and len(outcome.failed_prepasses) == 2
    assert outcome.failed_prepasses[0].describe() == (
        "pre-pass job 1 (prepass-d-el2n-25) failed: the profile's jobs were not submitted "
        "(gpudesk logs 1)"
    )


def test_jobs_the_engine_refuses_keep_the_prepasses_back(tmp_path: Path) -> None:
    engine = FakeEngine(prepass_log(tmp_path), refuse="job 'a' asks for 2 GPUs")
    with pytest.raises(EngineError, match="asks for 2 GPUs"):
        submit_profile(engine.client, parse_profile(PROFILE, "p.toml"), wait=lambda ids: None)
    assert [op for op, _ in engine.calls] == ["datasets", "check_submit"]
    assert engine.submitted == {}  # no pre-pass was queued


def test_an_engine_older_than_the_check_is_not_sent_the_jobs_twice(tmp_path: Path) -> None:
    """An engine from before `check_submit` answers unknown_op: the run goes on, and the
    training jobs are submitted once, after the pre-passes."""
    engine = FakeEngine(prepass_log(tmp_path))
    answer = engine.answer

    def older(op: str, args: dict[str, Any]) -> dict[str, Any]:
        if op == "check_submit":
            raise AssertionError("not reached")
        return answer(op, args)

    def exchange(op: str, args: dict[str, Any]) -> bytes:
        if op == "check_submit":
            engine.calls.append((op, args))
            return protocol.encode_error(1, protocol.UNKNOWN_OP, "unknown op 'check_submit'")
        return protocol.encode_result(1, older(op, args))

    engine.exchange = exchange  # type: ignore[method-assign]
    submit_profile(
        engine.client,
        parse_profile(PROFILE, "p.toml"),
        wait=lambda ids: None,
        cache=SelectionCache(tmp_path / "sel"),
        env={"PATH": "/bin"},
    )
    assert [op for op, _ in engine.calls] == [
        "datasets",
        "check_submit",
        "submit",
        "jobs",
        "submit",
    ]
    names = [job["name"] for job in engine.submitted.values()]
    assert sorted(n for n in names if not n.startswith("prepass-")) == ["a", "b", "c", "e"]


def test_a_profile_without_selections_has_no_prepass_step() -> None:
    engine = FakeEngine(Path("/nonexistent"))
    profile = parse_profile(b'name = "plain"\n[[jobs]]\nname = "x"\ncommand = ["true"]\n', "p.toml")
    outcome = submit_profile(engine.client, profile)
    assert [op for op, _ in engine.calls] == ["submit"]
    assert outcome.job_ids == [1] and outcome.group.startswith("plain@")


QUICKSTART = b"""name = "quickstart"
[station]
backend = "auto"
policy = "fifo"
[[jobs]]
name = "x"
command = ["true"]
"""


def station_reply(policy: str, **what: list[dict[str, Any]]) -> dict[str, Any]:
    # the engine's reply: its config in force, every key (a new key is in it too)
    station = StationConfig(policy=policy, grid_intensity=400.0).to_dict()
    changes, not_applied = what.get("changes", []), what.get("not_applied", [])
    return {
        "station": station,
        "changed": bool(changes),
        "changes": changes,
        "not_applied": not_applied,
    }


def test_a_profile_asks_only_for_the_station_keys_it_names_and_reports_each_change() -> None:
    """Asked to apply it (`gpudesk run --apply-station`), the engine applied the quickstart's
    policy; the run says so."""
    engine = FakeEngine(Path("/nonexistent"))
    change = {"key": "policy", "old": "auto", "new": "fifo", "message": "policy auto → fifo"}
    engine.configured = station_reply("fifo", changes=[change])
    steps: list[Step] = []
    outcome = submit_profile(
        engine.client,
        parse_profile(QUICKSTART, "profiles/quickstart.toml"),
        on_step=steps.append,
        apply_station=True,
    )
    assert engine.calls[0] == ("configure", {"station": {"backend": "auto", "policy": "fifo"}})
    assert isinstance(steps[0], StationReport) and steps[0] == outcome.station
    assert steps[0].lines() == [
        "station: policy auto → fifo (from profiles/quickstart.toml [station])"
    ]
    assert outcome.job_ids == [1]


def test_a_profile_leaves_the_station_as_it_is_unless_asked_and_says_what_differs() -> None:
    """By default the [station] is only weighed (`check_configure`, which changes nothing):
    each setting that differs is said, with how to apply it, and the jobs go on."""
    engine = FakeEngine(Path("/nonexistent"))
    change = {"key": "policy", "old": "auto", "new": "fifo", "message": "policy auto → fifo"}
    engine.configured = station_reply("auto", changes=[change])
    outcome = submit_profile(
        engine.client,
        parse_profile(QUICKSTART, "profiles/quickstart.toml"),
        how_to_apply="--apply-station applies it",
    )
    assert engine.calls[0] == (
        "check_configure",
        {"station": {"backend": "auto", "policy": "fifo"}},
    )
    assert not any(op == "configure" for op, _ in engine.calls)
    assert outcome.station is not None and outcome.station.lines() == [
        "station: not applied: policy auto → fifo (--apply-station applies it; "
        "from profiles/quickstart.toml [station])"
    ]
    assert outcome.job_ids == [1]


def test_a_station_setting_not_applied_is_reported_and_the_jobs_go_on() -> None:
    """System mode: a user's [station] is not applied; the run says what the station runs."""
    engine = FakeEngine(Path("/nonexistent"))
    reason = "the station runs auto; only an admin (gpudesk-admin) changes station settings"
    refused = {
        "key": "policy",
        "value": "fifo",
        "current": "auto",
        "reason": reason,
        "message": f"not applied: policy fifo ({reason})",
    }
    engine.configured = station_reply("auto", not_applied=[refused])
    outcome = submit_profile(
        engine.client, parse_profile(QUICKSTART, "quickstart.toml"), apply_station=True
    )
    assert outcome.station is not None and outcome.station.lines() == [
        "station: not applied: policy fifo (the station runs auto; only an admin "
        "(gpudesk-admin) changes station settings)"
    ]
    assert outcome.job_ids == [1]


def test_an_engine_older_than_the_station_check_says_so_in_a_line_and_the_run_goes_on() -> None:
    """An engine from before `check_configure` answers unknown_op: the station is left as it
    is (nothing is applied to weigh it), the run says in one line to restart the engine, and
    its jobs are submitted."""
    engine = FakeEngine(Path("/nonexistent"))
    answer = engine.exchange

    def older(op: str, args: dict[str, Any]) -> bytes:
        if op == "check_configure":
            engine.calls.append((op, args))
            return protocol.encode_error(1, protocol.UNKNOWN_OP, "unknown operation")
        return answer(op, args)

    engine.exchange = older  # type: ignore[method-assign]
    outcome = submit_profile(engine.client, parse_profile(QUICKSTART, "quickstart.toml"))
    assert [op for op, _ in engine.calls] == ["check_configure", "submit"]
    assert outcome.station is not None and outcome.station.lines() == [
        "station: not weighed: the running engine is older than this gpudesk and cannot compare "
        "a [station] without applying it; restart it to have it weighed (gpudesk engine stop: the "
        "next command starts the new one)"
    ]
    assert outcome.job_ids == [1]


SWEPT = b"""name = "swept"

[[jobs]]
name = "prep"
command = ["true"]

[[sweeps]]
name = "s{x}"
command = ["true"]
grid = { x = [1, 2, 3] }
priority = 5
"""


@pytest.mark.parametrize(
    ("refusal", "said"),
    [
        (
            "jobs[2] ('s2').priority: only an admin (gpudesk-admin) raises a priority. "
            "Nothing was submitted.",
            "p.toml:7: sweeps[0].priority ('s2', point 2 of 3): only an admin (gpudesk-admin) "
            "raises a priority. Nothing was submitted.",
        ),
        (
            "jobs[0]: array_task, after_any, after_notok and notify are for the station's jobs",
            "p.toml:3: jobs[0] ('prep'): array_task, after_any, after_notok and notify are "
            "for the station's jobs",
        ),
        (
            "jobs[3] ('s3').priority: only an admin (gpudesk-admin) raises a priority.",
            "p.toml:7: sweeps[0].priority ('s3', point 3 of 3): only an admin (gpudesk-admin) "
            "raises a priority.",
        ),
        (
            # the station's admission and a Slurm cluster's mapping name the job, not its place
            "job 's3' asks for 8 GPUs but this station has only 4: 4 GPUs (0-3); ask for at "
            "most 4. It could never run here, so nothing was submitted (nor the 3 other jobs).",
            "p.toml:7: sweeps[0] ('s3', point 3 of 3): asks for 8 GPUs but this station has only "
            "4: 4 GPUs (0-3); ask for at most 4. It could never run here, so nothing was "
            "submitted (nor the 3 other jobs).",
        ),
        (
            "job 'prep': the cluster offers no mps gres (it offers gpu:2). Nothing was submitted.",
            "p.toml:3: jobs[0] ('prep'): the cluster offers no mps gres (it offers gpu:2). "
            "Nothing was submitted.",
        ),
        ("jobs[9].gpus: not one of the profile's", "jobs[9].gpus: not one of the profile's"),
        ("job 's9' asks for 8 GPUs", "job 's9' asks for 8 GPUs"),
        ("the station is draining", "the station is draining"),
    ],
    ids=[
        "sweep-field",
        "table",
        "third-point",
        "named-sweep-point",
        "named-table",
        "index-past-the-profile",
        "name-not-the-profiles",
        "no-job",
    ],
)
def test_an_engine_refusal_of_a_profiles_job_is_said_at_its_table(refusal: str, said: str) -> None:
    """The engine names the k-th job of its request, after sweeps were expanded (`jobs[2]`),
    or the job by its name; the user wrote tables: the refusal is said at the table's line,
    with the job and which of the table's jobs it is. A refusal that names no job of the
    profile is left as it is."""
    engine = FakeEngine(Path("/nonexistent"), refuse=refusal)
    with pytest.raises(EngineError) as raised:
        submit_profile(engine.client, parse_profile(SWEPT, "p.toml"))
    assert str(raised.value) == said
    assert raised.value.code == protocol.INVALID_ARGS
