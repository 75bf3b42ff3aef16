"""Admission on a simulated DGX Station A100 with GPU 3 in MIG mode: a job the station could
never run (more GPUs than it has) is refused at submit in one paragraph saying what the station
has, and nothing is stored (a memory hint never refuses a job); one that fits only after an
admin's change (leaving MIG mode) is accepted, its reason names the change, and no GPU is held
for it meanwhile."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineHandle, wait_for
from test_cli import gpudesk, start_interruptible_run, write_profile

from gpudesk.cli.job_detail import FIELD_INDENT
from gpudesk.paths import Home
from gpudesk.policy.admission import CHANGE_CHECKS

LAYOUT = "3g.20gb,2g.10gb,2g.10gb"
STATION_HAS = "3 whole GPUs (0-2) and GPU 3 in MIG mode (slices 3g.20gb, 2g.10gb, 2g.10gb)"


@pytest.fixture
def mig_station(home: Home) -> Iterator[EngineHandle]:
    """The simulated DGX Station (4 A100 40GB) with GPU 3 in MIG mode, read at least once."""
    handle = EngineHandle(home)
    handle.start(backend="sim:dgx-station-a100", sample_interval=0.2, mig={"3": LAYOUT})
    wait_for(
        lambda: (s := handle.api.telemetry().snapshot) and s.gpus[3].mig_devices,
        10.0,
        what="GPU 3's MIG devices to be read",
    )
    yield handle
    handle.client.close()


def stored(engine: EngineHandle) -> list[dict]:
    return engine.client.request("jobs")["jobs"]  # type: ignore[no-any-return]


def refused(*args: str) -> str:
    """`gpudesk submit ARGS` as a user runs it: refused with exit 2 and one paragraph."""
    result = gpudesk("submit", *args)
    assert result.returncode == 2, result.stdout + result.stderr
    message = result.stderr.strip()
    assert "Traceback" not in message and "\n\n" not in message, message
    assert "nothing was submitted" in message, message
    return message


def test_more_gpus_than_the_station_has_is_refused_at_submit_saying_what_it_has(
    mig_station: EngineHandle,
) -> None:
    message = refused("--gpus", "5", "--", "true")
    assert f"asks for 5 GPUs but this station has only 4: {STATION_HAS}" in message, message
    assert "ask for at most 4" in message
    assert stored(mig_station) == []


def test_a_memory_hint_above_every_gpu_is_accepted_and_taken_as_unknown(
    mig_station: EngineHandle,
) -> None:
    """A hint is a hint (issue 39): more than any GPU offers is no reason to refuse a job. It
    is taken as unknown and starts alone on an idle whole GPU (never a MIG slice first)."""
    accepted = gpudesk("submit", "--gpus", "1", "--mem", "41", "--", "true")
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    (job,) = [j["id"] for j in stored(mig_station)]
    (done,) = mig_station.wait_all_done([job])
    assert done.state == "succeeded"
    placement = mig_station.show(job).attempts[0].placement
    assert placement.gpus[0] in (0, 1, 2) and placement.mig_slice is None
    assert "memory taken as unknown: its hint of 41.0 GiB" in placement.reason


def submit_four(engine: EngineHandle) -> int:
    """`gpudesk submit --gpus 4`: four whole GPUs. GPU 3 is in MIG mode, but leaving MIG mode
    would give the station four: accepted."""
    accepted = gpudesk("submit", "--name", "four", "--gpus", "4", "--", "sleep", "60")
    assert accepted.returncode == 0, accepted.stderr
    (four,) = [j["id"] for j in stored(engine)]
    assert engine.job(four).state == "queued"
    return four


def test_no_gpu_is_held_for_a_job_that_waits_for_an_admins_change(
    mig_station: EngineHandle,
) -> None:
    four = submit_four(mig_station)
    # the next one-GPU job starts on an idle whole GPU, not squeezed onto a MIG slice: none is
    # held for the 4-GPU job, which could not use them before an admin acts
    (one,) = mig_station.submit({"name": "one", "command": ["sleep", "60"], "gpus": 1})
    mig_station.wait_state(one, "running")
    placement = mig_station.show(one).attempts[0].placement
    assert placement.gpus[0] in (0, 1, 2) and placement.mode != "mig", placement
    assert placement.mig_slice is None and "idle" in placement.reason, placement
    assert mig_station.job(four).state == "queued"


def test_show_says_which_change_the_waiting_job_needs(mig_station: EngineHandle) -> None:
    four = submit_four(mig_station)
    reason = wait_for(lambda: mig_station.show(four).waiting, 10.0, what="its reason")
    assert reason == (
        f"waiting for an admin: it needs 4 whole GPUs; this station has {STATION_HAS}, and a "
        "GPU in MIG mode runs jobs on its slices only. Leaving MIG mode on GPU 3 (on this "
        "simulated station: GPU 3 out of the [station] mig layout) would let it start"
    ), reason
    # `gpudesk show` says why once, wrapped to the terminal under its label: no doubled word,
    # no trailing separator
    shown = gpudesk("show", str(four))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    (start,) = [n for n, line in enumerate(lines) if line.startswith("  why ")]
    why = [lines[start]]
    for line in lines[start + 1 :]:
        if not (line.startswith(FIELD_INDENT) and line[len(FIELD_INDENT) :][:1].strip()):
            break
        why.append(line)  # the reason's next line, under its first word
    assert " ".join(part.strip() for part in why) == f"why        {reason}", why
    assert "waiting waiting" not in shown.stdout and not why[-1].rstrip().endswith(";")


def test_submit_says_at_once_that_a_job_waits_for_an_admins_change(
    mig_station: EngineHandle,
) -> None:
    """Queued, but no GPU will drain for it: `gpudesk submit` says so on the spot with the
    reason `show` gives later, in --json too; a job that runs as the station is set up gets no
    such note."""
    accepted = gpudesk("submit", "--name", "four", "--gpus", "4", "--", "sleep", "60")
    assert accepted.returncode == 0, accepted.stderr
    (four,) = [j["id"] for j in stored(mig_station)]
    assert accepted.stdout.startswith(f"submitted job {four} (four) on a SIMULATED station")
    (note,) = accepted.stderr.strip().splitlines()
    assert note.startswith(f"note: job {four} is waiting for an admin: it needs 4 whole GPUs;")
    assert "Leaving MIG mode on GPU 3" in note, note
    reason = wait_for(lambda: mig_station.show(four).waiting, 10.0, what="its reason")
    assert note == f"note: job {four} is {reason}"

    as_json = gpudesk("submit", "--json", "--name", "four-b", "--gpus", "4", "--", "sleep", "60")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["waits_for_change"] == reason

    fits = gpudesk("submit", "--name", "one", "--gpus", "1", "--", "sleep", "60")
    assert fits.returncode == 0 and fits.stderr.strip() == "", fits.stderr
    fits_json = gpudesk("submit", "--json", "--name", "two", "--gpus", "1", "--", "sleep", "60")
    assert json.loads(fits_json.stdout)["waits_for_change"] is None


def test_a_profile_run_says_at_once_that_a_job_waits_for_an_admins_change(
    mig_station: EngineHandle, tmp_path: Path
) -> None:
    """`gpudesk run` would follow such a job until an admin acts: it says so as soon as the jobs
    are queued, with the reason `show` gives; Ctrl-C then cancels the run as ever."""
    profile = write_profile(
        tmp_path,
        """
        name = "needs-four"
        [[jobs]]
        name = "four"
        command = ["sleep", "60"]
        gpus = 4
        """,
    )
    run = start_interruptible_run(profile)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(run.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        note = wait_for(
            lambda: next(
                (line for line in list(lines) if " is waiting for an admin" in line), None
            ),
            30.0,
            what="the run to say the job waits for an admin",
        )
        (four,) = [j["id"] for j in stored(mig_station)]
        reason = mig_station.show(four).waiting
        assert note.strip().endswith(f"job {four} is {reason}"), note
        run.send_signal(signal.SIGINT)
        run.wait(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    reader.join(10)
    assert run.returncode == 130, "".join(lines)
    assert mig_station.job(four).state == "cancelled"


@pytest.fixture
def mig_policy_without_mig(home: Home) -> Iterator[EngineHandle]:
    """One simulated A100 40GB, not in MIG mode, placing with policy mig (slices only)."""
    handle = EngineHandle(home)
    handle.start(backend="sim:a100-40gb", policy="mig", sample_interval=0.2)
    wait_for(lambda: handle.api.telemetry().snapshot, 10.0, what="the GPU to be read")
    yield handle
    handle.client.close()


def sleepers(count: int, **spec: object) -> list[dict]:
    return [{"name": f"s{i}", "command": ["sleep", f"{60 + i}"], **spec} for i in range(count)]


def test_under_policy_mig_a_station_without_a_mig_gpu_tells_the_submitter(
    mig_policy_without_mig: EngineHandle,
) -> None:
    """Under policy mig every one-GPU job runs on a slice: on a GPU not in MIG mode it waits for
    an admin, and its submitter hears so at once, with the reason `show` gives."""
    engine = mig_policy_without_mig
    reply = engine.client.request("submit", jobs=sleepers(1, gpus=1), env=dict(os.environ))
    (job,) = reply["ids"]
    reason = wait_for(lambda: engine.show(job).waiting, 10.0, what="its reason")
    assert reason.startswith("waiting for "), reason
    assert reply.get("waits_for_change") == {str(job): reason}


def test_every_job_of_a_judged_shape_is_told_however_many_commands_and_shapes(
    mig_policy_without_mig: EngineHandle,
) -> None:
    """A sweep's jobs differ in their command, not in what placement weighs: each of 150 is told.
    Past the shapes judged on the loop, a later job of a judged shape is still told."""
    engine = mig_policy_without_mig
    env = dict(os.environ)
    sweep = engine.client.request("submit", jobs=sleepers(150, gpus=1, memory_gb=4), env=env)
    assert sorted(map(int, sweep.get("waits_for_change", {}))) == sweep["ids"]
    # as many shapes as are judged, one more, then the first shape again
    shapes = [{"gpus": 1, "memory_gb": 1 + i / 10} for i in range(CHANGE_CHECKS + 1)]
    jobs = [{**job, **shape} for job, shape in zip(sleepers(len(shapes)), shapes, strict=True)]
    jobs.append({"name": "again", "command": ["sleep", "60"], **shapes[0]})
    mixed = engine.client.request("submit", jobs=jobs, env=env)
    told = set(map(int, mixed.get("waits_for_change", {})))
    ids = mixed["ids"]
    assert told == set(ids[:CHANGE_CHECKS]) | {ids[-1]}, sorted(set(ids) - told)


def test_weighing_a_new_backend_says_what_applying_it_does_to_the_queued_gpu_jobs(
    mig_policy_without_mig: EngineHandle,
) -> None:
    """`check_configure` (a profile's [station] left as it is) says what `configure` would:
    a new backend decides whether the queued GPU jobs ever run."""
    engine = mig_policy_without_mig
    engine.client.request("submit", jobs=sleepers(1, gpus=1), env=dict(os.environ))
    table = {"backend": "sim:h100"}
    weighed = engine.client.request("check_configure", station=table)
    assert engine.api.status().station.backend == "sim:a100-40gb"
    applied = engine.client.request("configure", station=table)
    assert weighed["changes"] == applied["changes"], weighed
    (change,) = weighed["changes"]
    assert "1 queued job(s) ask for GPUs" in change["message"], change
