"""The engine runs shared loaders for the jobs that name a dataset: started with the first job,
restarted if they die (the jobs' consumers resume their epoch), stopped when no job needs them.
Real daemon, real producer processes, real consumer jobs."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineHandle, short_home, wait_for

from gpudesk.api.client import Client
from gpudesk.loader.protocol import process_alive, read_info, recorded_runs
from gpudesk.paths import Home

# A job: reads `epochs` epochs of the shared loader and writes each epoch's sample ids.
CONSUMER = textwrap.dedent("""
    import json, sys, time
    from gpudesk.loader import SharedLoader
    from gpudesk.quick_exit import leave
    name, epochs, out, delay = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    loader = SharedLoader(name, with_ids=True)
    with open(out, "w") as f:
        for epoch in range(epochs):
            ids = []
            for (x, y), i in loader:
                assert (y == i).all() and (x[:, 0].long() == i).all(), "corrupt batch"
                ids += i.tolist()
                time.sleep(delay)
            f.write(json.dumps({"epoch": epoch, "ids": ids, "mode": loader.mode}) + "\\n")
            f.flush()
    loader.close()  # what its teardown did, before an exit that skips torch's (quick_exit)
    leave(0)
""")

DATASET = {
    "name": "syn",
    "factory": "gpudesk.workloads.synthetic:make_dataset",
    "args": {"size": 120, "shape": [4]},
    "batch_size": 8,
    "workers": 0,
    "seed": 3,
    "slots": 8,
}


@pytest.fixture
def loader_engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[EngineHandle]:
    """An engine serving DATASET, its home at a short path (conftest.short_home): a loader's
    socket path holds 107 bytes at most, and under pytest's own folder a selection's loader
    (`syn.random-25.ctl`) passes that once pytest's run counter reaches four digits."""
    monkeypatch.setenv("GPUDESK_LOADER_GRACE_S", "1")
    with short_home("gd-loaders-", monkeypatch) as home:
        handle = EngineHandle(home)
        handle.start(slots=2)
        handle.client.request("datasets", datasets=[DATASET])
        yield handle


def consumer_job(tmp_path: Path, name: str, epochs: int, delay: float = 0.0) -> tuple[dict, Path]:
    script = tmp_path / "consumer.py"
    script.write_text(CONSUMER)
    out = tmp_path / f"{name}.jsonl"
    return (
        {
            "name": name,
            "command": [sys.executable, str(script), "syn", str(epochs), str(out), str(delay)],
            "dataset": "syn",
        },
        out,
    )


def epochs_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()]


def producer_pid(handle: EngineHandle) -> int | None:
    info = read_info(handle.home.loader_paths("syn")[2])
    if info and recorded_runs(info):
        return info.pid
    return None


@pytest.mark.slow(14)
def test_jobs_naming_a_dataset_share_one_producer_that_stops_when_unneeded(
    loader_engine: EngineHandle, tmp_path: Path
) -> None:
    (a, out_a), (b, out_b) = consumer_job(tmp_path, "a", 2), consumer_job(tmp_path, "b", 2)
    ids = loader_engine.submit(a, b)
    jobs = loader_engine.wait_all_done(ids)
    assert [j.state for j in jobs] == ["succeeded", "succeeded"], jobs
    for out in (out_a, out_b):
        for epoch in epochs_of(out):
            assert epoch["mode"] == "shared"
            assert sorted(epoch["ids"]) == list(range(120))  # exactly once per epoch
    status = loader_engine.client.request("status", fresh_loaders=True)
    (loader,) = status["loaders"]
    assert loader["name"] == "syn" and loader["spec"]["batch_size"] == 8
    # one producer made the batches both jobs read
    assert loader["status"]["consumers_total"] == 2
    assert loader["status"]["delivered_total"] >= 2 * 2 * 15
    # What sharing saved: its CPU per batch made, times the batches handed out, less its CPU.
    # It saves only as far as the two jobs read together, which a loaded machine decides: one
    # that joins late has the batches it missed made again, and the read-ahead at the end is
    # made for no one, so the figure may be below zero (-0.02 CPU-s in one CI run), and says so.
    made = loader["status"]
    handed_out_per_batch_made = made["delivered_total"] / made["produced"]
    assert loader["saved_cpu_s"] == pytest.approx(
        made["cpu_s"] * (handed_out_per_batch_made - 1), abs=0.02
    )
    # no job needs it any more: stopped after the (1 s) grace, and its files are gone
    wait_for(lambda: producer_pid(loader_engine) is None, 10.0, what="the producer to stop")
    events = loader_engine.client.request("show", job=ids[0])
    assert events["job"]["state"] == "succeeded"


@pytest.mark.slow(11)
def test_a_producer_that_dies_is_restarted_and_its_consumers_resume(
    loader_engine: EngineHandle, tmp_path: Path
) -> None:
    job, out = consumer_job(tmp_path, "slow", 3, delay=0.02)  # ~15 batches/epoch, ~1 s
    (job_id,) = loader_engine.submit(job)
    first = wait_for(lambda: producer_pid(loader_engine), 20.0, what="the producer to start")
    wait_for(lambda: out.exists() and out.read_text(), 20.0, what="a first epoch")
    os.kill(first, signal.SIGKILL)
    second = wait_for(
        lambda: (p := producer_pid(loader_engine)) and p != first and p,
        10.0,
        what="the engine to restart the producer",
    )
    assert second != first
    (done,) = loader_engine.wait_all_done([job_id], timeout=60.0)
    assert done.state == "succeeded", done
    epochs = epochs_of(out)
    assert len(epochs) == 3
    for epoch in epochs:
        assert sorted(epoch["ids"]) == list(range(120)), "a sample lost or repeated"


@pytest.mark.slow(8)
def test_stopping_the_engine_stops_producers_no_running_job_reads(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUDESK_LOADER_GRACE_S", "600")  # it would idle on for 10 minutes
    handle = EngineHandle(home)
    handle.start(slots=2)
    handle.client.request("datasets", datasets=[DATASET])
    job, _out = consumer_job(tmp_path, "quick", 1)
    (job_id,) = handle.submit(job)
    (done,) = handle.wait_all_done([job_id])
    assert done.state == "succeeded"
    pid = producer_pid(handle)
    assert pid is not None, "the producer should still idle within its grace period"
    handle.stop()
    wait_for(lambda: not process_alive(pid), 10.0, what="the idle producer to stop")


# A job that outlives its engine: reads an epoch, then holds its loader until `gate` exists.
HOLDING = textwrap.dedent("""
    import os, sys, time
    from gpudesk.loader import SharedLoader
    from gpudesk.quick_exit import leave
    name, read, gate = sys.argv[1:4]
    loader = SharedLoader(name, with_ids=True)
    batches = sum(1 for _ in loader)
    with open(read, "w") as f:
        f.write(f"{batches} {loader.mode}")
    while not os.path.exists(gate):
        time.sleep(0.02)
    loader.close()
    leave(0)
""")


@pytest.mark.slow(12)
def test_a_producer_left_to_a_job_by_a_stopped_engine_stops_once_the_job_ends(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gpudesk engine stop` leaves running jobs running, and their producer with them; once
    they end, the producer, orphaned, stops by itself after its grace (1 s here) instead of
    holding its shared memory for ever (gpudesk/loader/orphan.py)."""
    from gpudesk.loader.status import collect

    monkeypatch.setenv("GPUDESK_LOADER_ORPHAN_GRACE_S", "1")
    handle = EngineHandle(home)
    handle.start(slots=2)
    handle.client.request("datasets", datasets=[DATASET])
    script, read, gate = tmp_path / "holding.py", tmp_path / "read", tmp_path / "gate"
    script.write_text(HOLDING)
    command = [sys.executable, str(script), "syn", str(read), str(gate)]
    handle.submit({"name": "holding", "command": command, "dataset": "syn"})
    wait_for(lambda: read.exists() and read.read_text(), 30.0, what="the job to read an epoch")
    assert read.read_text() == "15 shared"
    pid = producer_pid(handle)
    assert pid is not None
    log = home.loader_log("syn")
    assert "is gone" not in log.read_text()  # it knows its engine: the engine's pid it was given
    handle.stop()  # "engine stopping; 1 attempt(s) keep running"
    # Its job still holds it: it serves on, orphaned, for 3 graces and more
    (status,) = collect("syn", home)
    until = status["uptime_s"] + 3
    wait_for(lambda: collect("syn", home)[0].get("uptime_s", 0) >= until, 30.0, what="uptime")
    assert [c["pid"] for c in collect("syn", home)[0]["consumers"]] != []
    gate.touch()  # the job ends, and lets the producer go
    wait_for(lambda: not process_alive(pid), 30.0, what="the orphaned producer to stop")
    assert not home.loader_paths("syn")[2].exists()
    said = log.read_text()
    assert "is gone and no consumer has read it for 1 s: stopping" in said, said


@pytest.mark.slow(15)
def test_a_job_with_its_own_selection_gets_a_loader_of_its_own_and_is_recorded_as_a_reuse(
    loader_engine: EngineHandle, tmp_path: Path
) -> None:
    """`selection` on a job: the engine serves it `syn.random-25`, a second producer of the
    same dataset; the job's consumer, asking for "syn", reads that one. The pre-pass ran once
    (in the first producer); a second job on it is recorded as a reuse by its job id."""
    from gpudesk.selection.cache import SelectionCache

    (a, out_a), (b, out_b) = consumer_job(tmp_path, "a", 1), consumer_job(tmp_path, "b", 1)
    a["selection"] = "random-25"
    whole = loader_engine.submit(b)
    (first,) = loader_engine.submit(a)
    jobs = loader_engine.wait_all_done([*whole, first])
    assert [j.state for j in jobs] == ["succeeded", "succeeded"], jobs
    (epoch_a,) = epochs_of(out_a)
    (epoch_b,) = epochs_of(out_b)
    assert sorted(epoch_b["ids"]) == list(range(120))
    assert len(epoch_a["ids"]) == 30 and len(set(epoch_a["ids"])) == 30
    assert loader_engine.job(first).spec.selection == "random-25"
    assert loader_engine.job(first).loader == "syn.random-25"  # the loader the engine ran
    assert loader_engine.job(whole[0]).loader == "syn"
    # the loader a job is served is the engine's answer for its spec, shown before it starts:
    # this one begins in an hour, so it starts neither a consumer nor a producer
    full = loader_engine.client.request(
        "submit",
        env=dict(os.environ),
        jobs=[
            {
                **consumer_job(tmp_path, "f", 0)[0],
                "selection": "full",
                "workdir": str(tmp_path),
                "begin_at": time.time() + 3600,
            }
        ],
    )
    assert loader_engine.job(full["ids"][0]).loader == "syn"  # syn has no selection
    # a later job with the same selection reuses the cached entry
    (c, out_c) = consumer_job(tmp_path, "c", 1)
    c["selection"] = "random-25"
    (second,) = loader_engine.submit(c)
    loader_engine.wait_all_done([second])
    assert sorted(epochs_of(out_c)[0]["ids"]) == sorted(epoch_a["ids"])
    (entry,) = SelectionCache(loader_engine.home.selection_dir).entries()
    assert entry.method == "random" and any(f"job {second} " in who for who in entry.reused_by)


@pytest.mark.slow(10)
def test_a_profile_run_queues_its_selections_prepass_first_and_records_its_cost(
    loader_engine: EngineHandle, tmp_path: Path
) -> None:
    """`gpudesk run` on a dataset with a selection: the pre-pass runs as a job of the run (the
    engine measures it, and its cost lands in the cache entry); the training job then finds
    the selection cached and trains on it."""
    import io

    from gpudesk.cli.run_report import run_profile
    from gpudesk.profile import load_profile
    from gpudesk.selection.cache import SelectionCache

    job, out = consumer_job(tmp_path, "train", 1)
    profile = tmp_path / "sel.toml"
    profile.write_text(
        textwrap.dedent(f"""
        name = "sel"
        [datasets.syn]
        factory = "gpudesk.workloads.synthetic:make_dataset"
        args = {{ size = 120, shape = [4] }}
        batch_size = 8
        workers = 0
        seed = 3
        slots = 8
        selection = "random-25"
        [[jobs]]
        name = "train"
        dataset = "syn"
        command = {json.dumps(job["command"])}
    """)
    )
    report = run_profile(
        load_profile(profile),
        Client(loader_engine.client),
        progress_stream=io.StringIO(),
        live=False,
    )
    assert [(j.name, j.state) for j in report.jobs] == [
        ("prepass-syn-random-25", "succeeded"),
        ("train", "succeeded"),
    ]
    assert any("computed in" in note and "30 of 120 samples" in note for note in report.notes)
    (entry,) = SelectionCache(loader_engine.home.selection_dir).entries()
    assert entry.cost.job == report.jobs[0].id and entry.cost.job_wall_s > 0
    assert any(f"job {report.jobs[1].id} " in who for who in entry.reused_by)
    (epoch,) = epochs_of(out)
    assert len(epoch["ids"]) == 30 and len(set(epoch["ids"])) == 30


def test_a_failed_prepass_keeps_the_runs_training_jobs_from_being_submitted(
    loader_engine: EngineHandle, tmp_path: Path
) -> None:
    import io

    from gpudesk.cli.run_report import run_profile
    from gpudesk.profile import load_profile

    job, _ = consumer_job(tmp_path, "train", 1)
    profile = tmp_path / "sel.toml"
    profile.write_text(
        textwrap.dedent(f"""
        name = "sel"
        [datasets.syn]
        factory = "gpudesk.workloads.synthetic:make_dataset"
        selection = "less-25"
        selection_target = "no_such_module:targets"
        [[jobs]]
        name = "train"
        dataset = "syn"
        command = {json.dumps(job["command"])}
    """)
    )
    report = run_profile(
        load_profile(profile),
        Client(loader_engine.client),
        progress_stream=io.StringIO(),
        live=False,
    )
    assert [(j.name, j.state) for j in report.jobs] == [("prepass-syn-less-25", "failed")]
    assert not report.succeeded
    assert any("were not submitted" in note for note in report.notes)
    assert "were not submitted" in " ".join(report.text().split())  # wrapped to the width
