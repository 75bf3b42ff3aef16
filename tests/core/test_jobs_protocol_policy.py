"""Job spec validation, the wire protocol and the first-come policy."""

from __future__ import annotations

import json

import pytest

from gpudesk.core import protocol
from gpudesk.core.jobs import JobSpec, JobState, SpecError, check_transition
from gpudesk.core.records import JobRecord
from gpudesk.core.station import StationConfig
from gpudesk.policy.policies import make_policy
from gpudesk.policy.policy import FifoPolicy, StationView


def record(
    job_id: int, priority: int = 0, gpus: int = 0, memory_gb: float | None = None
) -> JobRecord:
    spec = JobSpec(
        name=f"j{job_id}", command=("true",), priority=priority, gpus=gpus, memory_gb=memory_gb
    )
    return JobRecord(
        id=job_id,
        spec=spec,
        state=JobState.QUEUED,
        submitted_at=0.0,
        started_at=None,
        ended_at=None,
        attempts=0,
        exit_code=None,
        reason=None,
        cancel_requested=False,
    )


@pytest.mark.parametrize(
    "data, key, fragment",
    [
        ({"name": "x", "command": []}, "command", "empty"),
        ({"name": "x", "command": "python t.py"}, "command", "set shell = true"),
        ({"name": "x", "command": ["a", 1]}, "command", "argument 1 should be a string"),
        ({"name": "x", "command": ["a", "b"], "shell": True}, "command", "one string"),
        ({"name": "", "command": ["a"]}, "name", "non-empty"),
        ({"name": "x", "command": ["a"], "gpus": -1}, "gpus", "from 0 to 64"),
        ({"name": "x", "command": ["a"], "gpus": True}, "gpus", "found true (boolean)"),
        ({"name": "x", "command": ["a"], "memory_gb": 0}, "memory_gb", "above 0"),
        ({"name": "x", "command": ["a"], "sm_pct": 101}, "sm_pct", "to 100"),
        ({"name": "x", "command": ["a"], "env": {"1BAD": "x"}}, "env", "not a valid"),
        ({"name": "x", "command": ["a"], "max_attempts": 0}, "max_attempts", "from 1"),
        ({"name": "x", "command": ["a"], "dataset": "a b"}, "dataset", "dataset name"),
        ({"name": "x", "command": ["a\x00b"]}, "command", "NUL"),
        ({"name": "x", "command": ["a"], "colour": "red"}, "colour", "unknown"),
        ({"command": ["a"]}, "name", "missing"),
        ({"name": "x", "command": ["a"], "after": 3}, "after", "list of job ids"),
        ({"name": "x", "command": ["a"], "after": ["prep"]}, "after", "whole numbers from 1"),
        ({"name": "x", "command": ["a"], "after": [0]}, "after", "whole numbers from 1"),
        ({"name": "x", "command": ["a"], "after": [True]}, "after", "whole numbers from 1"),
        ({"name": "x", "command": ["a"], "after": [2**63]}, "after", "whole numbers from 1"),
        ({"name": "x", "command": ["a"], "after": list(range(1, 102))}, "after", "at most 100"),
        (
            {"name": "x", "command": ["a"], "dataset": "d", "selection": "el2n-25", "cluster": {}},
            "selection",
            "a job on Slurm reads a selection only where its environment tells it",
        ),
    ],
)
def test_spec_errors_name_the_field(data: dict, key: str, fragment: str) -> None:
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict(data)
    assert info.value.key == key
    assert fragment in info.value.message


def test_a_slurm_job_may_train_on_a_selection_its_environment_describes() -> None:
    """`gpudesk run --on slurm` tells a job its selection's dataset (GPUDESK_SELECTION): then
    the engine takes its `selection`; without it the job would read the whole dataset."""
    from gpudesk.core.datasets import DatasetSpec, selection_env
    from gpudesk.core.local_selection import ENV_SELECTION

    served = DatasetSpec("d.el2n-25", "m:f", selection="el2n-25")
    job = {"name": "x", "command": ["a"], "dataset": "d", "selection": "el2n-25", "cluster": {}}
    with pytest.raises(SpecError):
        JobSpec.from_dict(job)
    told = JobSpec.from_dict({**job, "env": {ENV_SELECTION: selection_env("d", served)}})
    assert told.selection == "el2n-25" and told.cluster is not None


@pytest.mark.parametrize(
    "name, spelled",
    [
        ("a\x1b[31mb", "\\x1b"),
        ("a\x9bb", "\\x9b"),  # C1: the 8-bit CSI
        ("a\x85b", "\\x85"),  # C1: next line
        ("evil\u202egnp.exe", "\\u202e"),  # bidi override
        ("a\u2066b", "\\u2066"),  # bidi isolate
        ("a\u200bb", "\\u200b"),  # zero-width space
        ("a\u2028b", "\\u2028"),  # line separator
        ("a\u2029b", "\\u2029"),  # paragraph separator
    ],
)
def test_a_name_refuses_what_reorders_breaks_or_hides_text(name: str, spelled: str) -> None:
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict({"name": name, "command": ["true"]})
    assert info.value.key == "name"
    assert f"(found {spelled})" in info.value.message
    assert JobSpec.from_dict({"name": "训练-模型 é", "command": ["true"]}).name == "训练-模型 é"


def test_spec_round_trips_through_a_dict() -> None:
    spec = JobSpec(
        name="train",
        command=("python", "t.py"),
        env={"A": "1"},
        gpus=1,
        memory_gb=8.0,
        sm_pct=40.0,
        dataset="digits",
        priority=2,
        max_attempts=3,
        group="run@1",
        after=(4, 2),
    )
    assert JobSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert JobSpec.from_stored(json.loads(json.dumps(spec.to_dict()))) == spec


def test_terminal_states_are_final() -> None:
    for final in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
        for target in JobState:
            with pytest.raises(Exception, match="cannot go"):
                check_transition(final, target)
    check_transition(JobState.RUNNING, JobState.QUEUED)  # a retry


def test_protocol_round_trip_and_errors() -> None:
    request = protocol.Request(op="jobs", args={"limit": 3}, id=7)
    assert protocol.decode_request(request.encode()) == request
    assert protocol.decode_reply(protocol.encode_result(7, {"a": 1})) == (7, {"a": 1})
    with pytest.raises(protocol.ProtocolError) as info:
        protocol.decode_reply(protocol.encode_error(7, "unknown_job", "no job 3"))
    assert (info.value.code, info.value.message) == ("unknown_job", "no job 3")
    with pytest.raises(protocol.ProtocolError) as info:
        protocol.decode_request(b'{"v": 1, "op": "x", "id": {"a": 1}, "args": 5}')
    assert info.value.code == "bad_request" and info.value.request_id is None


def test_fifo_fills_free_slots_in_queue_order() -> None:
    station = StationView(StationConfig(slots=3), cores=6, busy_slots=frozenset({"cpu:1"}))
    decision = FifoPolicy().place([record(5, priority=1), record(2), record(9)], station)
    assert [(p.job_id, p.slot) for p in decision.placements] == [(5, "cpu:0"), (2, "cpu:2")]
    assert decision.placements[0].env == {"CUDA_VISIBLE_DEVICES": ""}
    assert decision.placements[0].env_defaults == {"OMP_NUM_THREADS": "2"}
    assert decision.rejections == []


def test_fifo_rejects_gpu_jobs_on_a_cpu_station_even_when_full() -> None:
    station = StationView(StationConfig(slots=1), cores=2, busy_slots=frozenset({"cpu:0"}))
    decision = FifoPolicy().place([record(1), record(2, gpus=2)], station)
    assert decision.placements == []
    assert [r.job_id for r in decision.rejections] == [2]
    assert "asks for 2 GPUs but this station has none" in decision.rejections[0].reason


def test_unknown_policy() -> None:
    with pytest.raises(ValueError, match="unknown policy 'slurm'; known: fifo, auto"):
        make_policy("slurm")


@pytest.mark.parametrize("key", ["memory_gb", "gpus", "priority"])
def test_huge_numbers_are_spec_errors(key: str) -> None:
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict({"name": "x", "command": ["a"], key: 10**5000})
    assert info.value.key == key
    assert "expected" in info.value.message
