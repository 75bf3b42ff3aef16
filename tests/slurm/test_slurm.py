"""The Slurm backend against a real single-node Slurm (tests/slurm_cluster.py): jobs submitted
with sbatch, followed through squeue/scontrol, cancelled with scancel, shown by the CLI.

One cluster and one engine serve the whole module (starting them costs about a second each);
each test submits its own jobs. The time-limit job is submitted first and checked last, so its
minute overlaps the other tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineHandle, wait_for
from slurm_cluster import SlurmCluster, engine_on, missing_reason, running_cluster
from store_refusal import store_refusing

from gpudesk.api.errors import EngineError

# its module-scoped fixture is made once: the module stays on one worker (--dist loadgroup)
pytestmark = [
    pytest.mark.skipif(missing_reason() is not None, reason=missing_reason() or ""),
    pytest.mark.xdist_group("test_slurm"),
]

PARTITION = "gpu"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    with running_cluster(tmp_path_factory.mktemp("slurm")) as running:
        yield running


@pytest.fixture(scope="module")
def slurm_engine(
    cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EngineHandle]:
    """An engine whose submitters' environment names the test cluster (SLURM_CONF)."""
    with engine_on(cluster, tmp_path_factory.mktemp("home")) as handle:
        yield handle


def _cli(*args: str, timeout: float = 240.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpudesk", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
        check=False,
    )


def _cluster(**keys: object) -> dict[str, object]:
    return {"kind": "slurm", "partition": PARTITION, **keys}


def _submit(engine: EngineHandle, *jobs: dict, cluster: dict | None = None) -> list[int]:
    placed = [{"cluster": cluster or _cluster(), **job} for job in jobs]
    return engine.submit(*placed)


def _log(engine: EngineHandle, job_id: int) -> str:
    """The job's output so far: "" until Slurm has started it and made the file."""
    path = engine.job(job_id).log
    assert path, engine.job(job_id)
    return Path(path).read_text() if Path(path).exists() else ""


SHOW_GPU = "echo CVD=${CUDA_VISIBLE_DEVICES:-unset} MPS=${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE:-unset}"


def test_time_limit_submitted_first(slurm_engine: EngineHandle) -> None:
    """Submitted now, checked by the last test: Slurm acts on whole minutes."""
    (job,) = _submit(
        slurm_engine,
        {"name": "overtime", "command": ["sleep", "300"], "time_limit_s": 30},
    )
    assert slurm_engine.job(job).slurm.job_id


QUICKSTART_GRID = "grid = { lr = [0.003, 0.01, 0.03, 0.1], hidden = [128, 512] }"
SMALLER_GRID = "grid = { lr = [0.03, 0.1], hidden = [128, 512] }"
TASKS = 4


def quickstart_in_few_epochs(folder: Path, epochs: int = 3) -> Path:
    """The shipped quickstart with its seed and widths as they are, its two larger learning
    rates of four, and `epochs` epochs a job instead of its 40: what the test checks is the
    array and each task's result. A task's CPU is mostly its start (torch and scikit-learn
    imported: ~2 CPU-s), so the grid is what costs; four tasks are still one array of a
    two-way grid, more tasks than the test node has CPUs on a 2-core machine (three: one
    waits its turn). At epoch 3 the best of the four is already past 0.9 (0.97 at lr 0.1,
    width 512)."""
    text = (Path(__file__).parents[2] / "profiles" / "quickstart.toml").read_text()
    shortened, count = re.subn(r'"--epochs", "\d+"', f'"--epochs", "{epochs}"', text)
    assert count == 1, "the quickstart's sweep should name its epochs once"
    assert shortened.count(QUICKSTART_GRID) == 1, "the quickstart's grid has changed"
    profile = folder / "quickstart.toml"
    profile.write_text(shortened.replace(QUICKSTART_GRID, SMALLER_GRID))
    return profile


@pytest.mark.slow(25)
@pytest.mark.timeout(300)  # four real trainings on a 2-core machine
def test_quickstart_runs_on_slurm_as_one_array(slurm_engine: EngineHandle, tmp_path: Path) -> None:
    profile = quickstart_in_few_epochs(tmp_path)
    done = _cli("run", str(profile), "--on", "slurm", "--json", timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    report = json.loads(done.stdout)
    assert report["succeeded"] and report["counts"] == {"succeeded": TASKS}
    assert report["backend"] == "slurm:gpudesk-test"
    assert report["best"]["metric"] == "val_acc" and report["best"]["value"] > 0.9
    assert all(j["metrics"] and "val_acc" in j["metrics"] for j in report["jobs"])
    views = [slurm_engine.job(j["id"]).slurm for j in report["jobs"]]
    arrays = {v.job_id.split("_")[0] for v in views}
    assert len(arrays) == 1, views  # one sbatch: the sweep is one array
    assert sorted(int(v.job_id.split("_")[1]) for v in views) == list(range(TASKS))
    assert all(v.state == "COMPLETED" and v.cluster == "gpudesk-test" for v in views)


@pytest.mark.parametrize(
    ("job", "target", "gres", "shown"),
    [
        ({"gpus": 1}, _cluster(gpu_type="a100"), "gpu:a100:1", "CVD=0 MPS=unset"),
        ({"gpus": 1, "memory_gb": 8}, _cluster(), "gpu:1g.10gb:1", "CVD=2 MPS=unset"),
        ({"gpus": 1, "sm_pct": 50}, _cluster(), "mps:50", "MPS=50"),
        ({"gpus": 1}, _cluster(share="timeslice"), "shard:1", "CVD=1 MPS=unset"),
        ({"gpus": 2}, _cluster(gpu_type="a100"), "gpu:a100:2", "CVD=0,1 MPS=unset"),
    ],
    ids=["whole", "mig", "mps", "shard", "two-gpus"],
)
def test_placement_vocabulary_becomes_gres(
    slurm_engine: EngineHandle, job: dict, target: dict, gres: str, shown: str
) -> None:
    (job_id,) = _submit(
        slurm_engine,
        {"name": "gres", "command": [SHOW_GPU], "shell": True, **job},
        cluster=target,
    )
    (done,) = slurm_engine.wait_all_done([job_id], timeout=60)
    assert done.state == "succeeded", (done.reason, _log(slurm_engine, job_id))
    assert done.slurm.gres == gres
    assert shown in _log(slurm_engine, job_id)


def test_a_task_gets_one_thread_per_cpu_unless_the_job_says(slurm_engine: EngineHandle) -> None:
    show = {"command": ["echo threads=$OMP_NUM_THREADS"], "shell": True}
    default, own = _submit(
        slurm_engine,
        {"name": "threads", **show},
        {"name": "own-threads", **show, "env": {"OMP_NUM_THREADS": "3"}},
    )
    ended = slurm_engine.wait_all_done([default, own], timeout=60)
    assert all(job.state == "succeeded" for job in ended), ended
    assert "threads=1" in _log(slurm_engine, default)  # --cpus-per-task 1
    assert "threads=3" in _log(slurm_engine, own)


def test_a_slurm_job_writes_with_its_submitters_umask(
    slurm_engine: EngineHandle, tmp_path: Path
) -> None:
    """As sbatch from her shell would (SLURM_UMASK), not the 077 the engine's sbatch runs
    under (gpudesk.slurm.commands.SUBMIT_SCRIPT)."""
    old = os.umask(0o027)
    try:
        [job_id] = _submit(
            slurm_engine, {"name": "umask", "command": ["touch", str(tmp_path / "f")]}
        )
    finally:
        os.umask(old)
    [ended] = slurm_engine.wait_all_done([job_id], timeout=60)
    assert ended.state == "succeeded", ended
    assert oct((tmp_path / "f").stat().st_mode & 0o777) == oct(0o640)


def test_exit_code_and_cancel_come_back(slurm_engine: EngineHandle) -> None:
    failing, sleeper = _submit(
        slurm_engine,
        {"name": "fails", "command": ["sh", "-c", "echo about to fail; exit 3"]},
        {"name": "sleeps", "command": ["sleep", "120"]},
    )
    slurm_engine.wait_state(sleeper, "running", timeout=30)
    cancel = _cli("cancel", str(sleeper))
    assert cancel.returncode == 0, cancel.stderr
    assert "scancel" in cancel.stdout
    ended = {j.id: j for j in slurm_engine.wait_all_done([failing, sleeper], timeout=60)}
    assert ended[failing].state == "failed" and ended[failing].exit_code == 3
    assert ended[sleeper].state == "cancelled"
    assert "cancelled by user" in ended[sleeper].reason
    assert ended[sleeper].slurm.state == "CANCELLED"
    waited = _cli("wait", str(failing))
    assert waited.returncode == 3, waited.stdout + waited.stderr
    logs = _cli("logs", str(failing))
    assert "about to fail" in logs.stdout
    shown = _cli("queue", "--all")
    assert "slurm" in shown.stdout or "fails" in shown.stdout


def test_after_chain_with_failing_parent_cancels_the_child(slurm_engine: EngineHandle) -> None:
    parent, child = _submit(
        slurm_engine,
        {"name": "parent", "command": ["sh", "-c", "sleep 1; exit 1"]},
        {"name": "child", "command": ["echo", "never"], "after": [-1]},
    )
    ended = {j.id: j for j in slurm_engine.wait_all_done([parent, child], timeout=60)}
    assert ended[parent].state == "failed"
    assert ended[child].state == "cancelled"
    assert f"job {parent} (parent)" in ended[child].reason
    assert "DependencyNeverSatisfied" in ended[child].reason
    assert ended[child].started_at is None


READ_AN_EPOCH = (
    "import json\n"
    "from gpudesk.loader import SharedLoader\n"
    "with SharedLoader('syn', 8, seed=3, with_ids=True, factory=FACTORY,\n"
    "                  factory_kwargs={'size': 120, 'shape': [4]}) as loader:\n"
    "    print(json.dumps({'mode': loader.mode, 'ids': [i for _, ids in loader\n"
    "                                                   for i in ids.tolist()]}))\n"
)


def test_a_run_on_slurm_of_a_profile_with_a_selection_trains_on_the_selection(
    slurm_engine: EngineHandle, tmp_path: Path
) -> None:
    """`gpudesk run --on slurm` of a profile whose job trains on a data selection, followed and
    `--detach`: the pre-pass runs as a Slurm job first and caches the selection; the job, with
    no producer on the cluster, reads that selection locally (GPUDESK_SELECTION) instead of the
    whole dataset. (Before, the run was refused; before that, the job read all 120 samples.)"""
    from gpudesk.paths import Home
    from gpudesk.selection.apply import select
    from gpudesk.selection.cache import SelectionCache
    from gpudesk.workloads.synthetic import make_dataset

    factory = "gpudesk.workloads.synthetic:make_dataset"
    script = tmp_path / "read_epoch.py"
    script.write_text(f"FACTORY = {factory!r}\n" + READ_AN_EPOCH)
    profile = tmp_path / "sel.toml"
    profile.write_text(
        f'name = "sel"\n[datasets.syn]\nfactory = "{factory}"\n'
        "args = { size = 120, shape = [4] }\nseed = 3\nbatch_size = 8\n"
        'selection = "random-25"\n\n'
        f'[[jobs]]\nname = "train"\ndataset = "syn"\ncommand = ["{sys.executable}", '
        f'"{script}"]\n'
    )
    done = _cli("run", str(profile), "--on", "slurm", "--partition", PARTITION, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    (prepass, trained) = sorted(report["jobs"], key=lambda j: j["id"])
    assert prepass["name"] == "prepass-syn-random-25" and trained["name"] == "train", report
    assert prepass["state"] == trained["state"] == "succeeded", report
    log = _log(slurm_engine, trained["id"])
    read = json.loads(next(line for line in log.splitlines() if line.startswith("{")))
    assert read["mode"] == "local"
    assert (
        "reading its data selection random-25 locally, 30 of 120 samples (from the selection cache)"
    ) in log, log
    # the 30 samples the pre-pass job cached, each once
    cache = SelectionCache(Home.from_env(None).selection_dir)
    kept = select(make_dataset(120, (4,)), "random-25", cache, seed=3).indices
    assert kept is not None and sorted(read["ids"]) == kept.tolist()
    # left to the engine: the job is queued after the pre-pass at once, told its selection too
    on_slurm = ("--on", "slurm", "--partition", PARTITION)
    done = _cli("run", str(profile), *on_slurm, "--detach", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    detached = json.loads(done.stdout)
    assert len(detached["prepass_ids"]) == len(detached["ids"]) == 1, detached
    ended = slurm_engine.wait_all_done(detached["prepass_ids"] + detached["ids"], timeout=120)
    assert {j.state for j in ended} == {"succeeded"}, ended
    log = _log(slurm_engine, detached["ids"][0])
    read = json.loads(next(line for line in log.splitlines() if line.startswith("{")))
    assert sorted(read["ids"]) == kept.tolist(), log


def test_a_job_sent_to_slurm_alone_with_a_selection_reads_it(
    slurm_engine: EngineHandle, tmp_path: Path
) -> None:
    """`gpudesk submit --on slurm --dataset D --selection P`: the job is told the selection of
    the dataset the engine registered, and its loader's fallback reads it (chosen on the node,
    no pre-pass cached it); a dataset the engine does not know is refused, nothing sent."""
    factory = "gpudesk.workloads.synthetic:make_dataset"
    script = tmp_path / "read_epoch.py"
    script.write_text(f"FACTORY = {factory!r}\n" + READ_AN_EPOCH.replace("syn", "alone"))
    profile = tmp_path / "alone.toml"
    profile.write_text(
        f'name = "alone"\n[datasets.alone]\nfactory = "{factory}"\n'
        # seed 4: not the other tests' entry (one random ordering serves every random-P)
        "args = { size = 120, shape = [4] }\nseed = 4\n\n"
        '[[jobs]]\nname = "unused"\ncommand = ["true"]\n'
    )
    registered = _cli("loader", "register", str(profile))
    assert registered.returncode == 0, registered.stdout + registered.stderr
    on_slurm = ("--on", "slurm", "--partition", PARTITION)
    done = _cli(
        "submit",
        *on_slurm,
        "--dataset",
        "alone",
        "--selection",
        "random-50",
        "--parsable",
        "--",
        sys.executable,
        str(script),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (job,) = slurm_engine.wait_all_done([int(done.stdout.split(";")[0])], timeout=60)
    assert job.state == "succeeded", job
    log = _log(slurm_engine, job.id)
    assert "reading its data selection random-50 locally, 60 of 120 samples (chosen here)" in log
    read = json.loads(next(line for line in log.splitlines() if line.startswith("{")))
    assert len(read["ids"]) == len(set(read["ids"])) == 60
    before = slurm_engine.client.request("jobs", archived=True)["jobs"]
    refused = _cli(
        "submit", *on_slurm, "--dataset", "nobody", "--selection", "random-50", "--", "true"
    )
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 2, said
    assert said.startswith("error: --selection on Slurm: the engine knows no dataset 'nobody'")
    assert said.endswith("Nothing was submitted") and "Traceback" not in said
    assert slurm_engine.client.request("jobs", archived=True)["jobs"] == before


def test_slurm_refusals_leave_nothing(slurm_engine: EngineHandle, cluster: SlurmCluster) -> None:
    before = slurm_engine.client.request("jobs")["jobs"]
    queued_before = cluster.run("squeue", "-h", "-o", "%i")
    # an unknown partition: one paragraph, exit 2... refused before any sbatch
    done = _cli("submit", "--on", "slurm", "--partition", "nope", "--", "true")
    assert done.returncode != 0
    assert "no partition 'nope'" in done.stderr and "Nothing was submitted" in done.stderr
    assert "Traceback" not in done.stderr
    # a gres the cluster lacks
    with pytest.raises(EngineError, match="offers no such gres"):
        _submit(
            slurm_engine,
            {"name": "x", "command": ["true"], "gpus": 1},
            cluster=_cluster(mig_profile="7g.80gb"),
        )
    # the second job's sbatch fails (more GPUs than the node has): the first is cancelled too
    with pytest.raises(EngineError, match="Nothing was submitted") as refused:
        _submit(
            slurm_engine,
            {"name": "fine", "command": ["sleep", "30"], "gpus": 1},
            {"name": "too-big", "command": ["true"], "gpus": 9},
        )
    assert "already submitted were cancelled" in str(refused.value)
    # which job sbatch refused, named as every per-job refusal is (`gpudesk run` then says it
    # at the profile's table)
    assert str(refused.value).startswith("job 'too-big': sbatch refused the job: "), refused.value
    assert slurm_engine.client.request("jobs")["jobs"] == before
    wait_for(
        lambda: cluster.run("squeue", "-h", "-o", "%i") == queued_before,
        10,
        what="the half-submitted job to be cancelled",
    )


def test_a_profiles_job_sbatch_refuses_is_said_at_its_table(
    slurm_engine: EngineHandle, cluster: SlurmCluster, tmp_path: Path
) -> None:
    """sbatch refuses the second table's sweep (more GPUs than the node has) after the first
    table's job was sent: `gpudesk run --on slurm` says it at that table, the first job is
    cancelled, nothing is queued."""
    queued_before = cluster.run("squeue", "-h", "-o", "%i")
    profile = tmp_path / "p.toml"
    profile.write_text(
        'name = "p"\n\n[[jobs]]\nname = "fine"\ncommand = ["sleep", "30"]\ngpus = 1\n\n'
        '[[sweeps]]\nname = "big{x}"\ncommand = ["true"]\ngpus = 9\ngrid = { x = [1, 2] }\n'
    )
    done = _cli("run", str(profile), "--on", "slurm", "--partition", PARTITION)
    said = " ".join(done.stderr.split())
    assert done.returncode != 0, said
    assert f"{profile}:8: sweeps[0] ('big1', point 1 of 2): sbatch refused the job: " in said
    assert "(one array with the 1 other job(s) of its sweep)" in said, said
    assert "already submitted were cancelled" in said and "Traceback" not in said
    wait_for(
        lambda: cluster.run("squeue", "-h", "-o", "%i") == queued_before,
        10,
        what="the half-submitted job to be cancelled",
    )


def test_a_slurm_job_after_a_station_job_is_refused_at_its_option(
    slurm_engine: EngineHandle,
) -> None:
    """Slurm cannot see the station's jobs: `submit --on slurm --after` one is refused, said
    at the option that asked it (`--after: job N runs on the station`), not as the request's
    `jobs[0] (true)`; exit 1 as before (a refusal, not a typo), nothing submitted."""
    (here,) = slurm_engine.submit({"name": "here", "command": ["sleep", "30"]})
    try:
        before = [j["id"] for j in slurm_engine.client.request("jobs")["jobs"]]
        done = _cli("submit", "--on", "slurm", "--after", str(here), "--", "true")
        said = " ".join(done.stderr.split())
        assert done.returncode == 1, said
        assert said.startswith(
            f"error: --after: job {here} runs on the station: a Slurm job can run only after "
            "Slurm jobs (Slurm cannot see the station's). Nothing was submitted."
        ), said
        assert [j["id"] for j in slurm_engine.client.request("jobs")["jobs"]] == before
    finally:
        slurm_engine.api.cancel([here])


# 66 s in CI: the job's minute (its 30 s rounded up) runs out between two of slurmctld's
# time-limit sweeps, every 30 s from its start (PERIODIC_TIMEOUT, not configurable): killed ~90 s
# after the module's cluster started, whatever the tests between do
@pytest.mark.slow(66)
@pytest.mark.timeout(200)
def test_time_limit_fails_the_job_timed_out(slurm_engine: EngineHandle) -> None:
    (job,) = [
        j["id"] for j in slurm_engine.client.request("jobs")["jobs"] if j["name"] == "overtime"
    ]
    (done,) = slurm_engine.wait_all_done([job], timeout=150)
    assert done.state == "failed"
    assert "timed out" in done.reason
    assert done.slurm.state == "TIMEOUT"


def _elapsed_s(text: str) -> int:
    """sacct's Elapsed ([D-]HH:MM:SS) in seconds."""
    days, _, clock = text.rpartition("-")
    hours, minutes, seconds = (int(p) for p in clock.split(":"))
    return int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds


def test_history_wall_time_is_slurms_own_as_sacct_records_it(
    slurm_engine: EngineHandle, cluster: SlurmCluster
) -> None:
    """The job's start and end are Slurm's timestamps (squeue %S, scontrol or the completion
    log), not when a poll first saw it running: `history`'s wall time and GPU-seconds equal
    what sacct records, to the second (before, the start was the poll's moment: 0.6 s for a
    job sacct gave 3 s under a 2-s poll)."""
    (job_id,) = _submit(slurm_engine, {"name": "three", "command": ["sleep", "3"], "gpus": 1})
    done = slurm_engine.wait_state(job_id, "succeeded", timeout=60)
    slurm_id = done.slurm.job_id
    rows = wait_for(
        lambda: cluster.run(
            "sacct", "-c", "-n", "-P", "-j", slurm_id, "-o", "JobID,Elapsed", check=False
        ).split(),
        30.0,
        0.3,
        "sacct -c to list the job",
    )
    elapsed = _elapsed_s(next(r for r in rows if r.split("|")[0] == slurm_id).split("|")[1])
    assert elapsed >= 3
    history = _cli("history", "--format", "json")
    assert history.returncode == 0, history.stderr
    (mine,) = [j for j in json.loads(history.stdout)["jobs"] if j["id"] == job_id]
    assert mine["wall_s"] == elapsed, (mine, rows)
    assert mine["gpu_s"] == elapsed  # one GPU asked for, for its wall time


def test_a_signal_reaches_a_slurm_job_and_suspend_is_refused(slurm_engine: EngineHandle) -> None:
    script = "trap 'echo got-usr1' USR1; echo ready; while true; do sleep 0.1; done"
    (job_id,) = _submit(slurm_engine, {"name": "trapper", "command": ["sh", "-c", script]})
    slurm_engine.wait_state(job_id, "running", timeout=30)
    wait_for(lambda: "ready" in _log(slurm_engine, job_id), 30, what="the job's trap")
    [suspended] = slurm_engine.api.suspend([job_id])
    assert not suspended.ok and "scontrol suspend" in suspended.outcome
    # the store refuses the event saying so, as a full disk would: sent all the same (as the
    # station's jobs are), and the reply says it is not in the job's events
    with store_refusing(slurm_engine.home.db, "BEFORE INSERT ON events WHEN NEW.kind = 'signal'"):
        sent = _cli("cancel", "--signal", "USR1", str(job_id))
    assert sent.returncode == 0, sent.stderr
    assert "scancel --signal=USR1" in sent.stdout
    assert "(not in its events: the disk holding gpudesk's state folder" in sent.stdout
    wait_for(lambda: "got-usr1" in _log(slurm_engine, job_id), 30, what="USR1 in its log")
    assert "signal" not in [e.kind for e in slurm_engine.show(job_id).events]
    assert slurm_engine.job(job_id).state == "running"
    slurm_engine.api.cancel([job_id])
    slurm_engine.wait_all_done([job_id], timeout=60)


# the store refusing the Slurm id sbatch gave a job (its intent row's first submission)
REFUSE_SLURM_ID = "BEFORE UPDATE OF submission ON slurm_jobs WHEN OLD.submission = ''"


def test_a_submit_whose_slurm_id_the_store_refuses_is_sent_once_and_followed(
    slurm_engine: EngineHandle, tmp_path: Path
) -> None:
    """sbatch took the job, then the store refused its Slurm id (a real SQLite trigger saying
    what a disk that fills between the two writes says). The job is in Slurm whatever the
    store says, so the submit is not refused (a retry would send it twice): it says the job's
    Slurm id, not yet saved, as `show` does; once the store takes it the job is followed to its
    end, having run once. (Before, the submit said "nothing was queued" while Slurm ran the
    job, and gpudesk showed it being submitted for ever.)"""
    marker, gate = tmp_path / "runs", tmp_path / "gate"
    script = f"echo run >> {marker}; while [ ! -e {gate} ]; do sleep 0.1; done"
    with store_refusing(slurm_engine.home.db, REFUSE_SLURM_ID):
        done = _cli("submit", "--on", "slurm", "--name", "unsaved-id", "--", "sh", "-c", script)
        assert done.returncode == 0, done.stdout + done.stderr
        said = re.search(r"submitted job (\d+) \(unsaved-id\) as Slurm job (\d+) on ", done.stdout)
        assert said, done.stdout
        job_id, slurm_id = int(said[1]), said[2]
        assert "note: sent to Slurm, not yet saved: the disk holding" in done.stderr
        shown = slurm_engine.job(job_id)
        assert (shown.state, shown.slurm.job_id) == ("queued", slurm_id), shown
        assert shown.unsaved and "not yet saved" in shown.unsaved, shown
        wait_for(lambda: runs_of(marker) == 1, 30, what="the job to run in Slurm")
    running = slurm_engine.wait_state(job_id, "running", timeout=30)
    assert (running.slurm.job_id, running.unsaved) == (slurm_id, None), running
    gate.touch()
    (ended,) = slurm_engine.wait_all_done([job_id], timeout=60)
    assert ended.state == "succeeded", ended
    assert runs_of(marker) == 1


def test_a_cancel_before_the_slurm_id_is_stored_reaches_slurm_once_it_is(
    slurm_engine: EngineHandle, tmp_path: Path
) -> None:
    """A job cancelled before its Slurm id is stored (while its sbatch runs; here while the
    store refuses the id, as a full disk would) is cancelled in Slurm once the id is stored.
    (Before, scancel was run with no id, and the job ran on while its cancel said
    "cancelling".)"""
    marker = tmp_path / "runs"
    with store_refusing(slurm_engine.home.db, REFUSE_SLURM_ID):
        command = ["sh", "-c", f"echo run >> {marker}; sleep 300"]
        (job_id,) = _submit(slurm_engine, {"name": "cancelled-early", "command": command})
        [cancel] = slurm_engine.api.cancel([job_id])
        assert cancel.ok and "scancel once its submission to Slurm is recorded" in cancel.outcome
    (ended,) = slurm_engine.wait_all_done([job_id], timeout=60)
    assert ended.state == "cancelled" and "cancelled by user" in ended.reason, ended
    assert ended.slurm.state == "CANCELLED", ended


def runs_of(marker: Path) -> int:
    return len(marker.read_text().split()) if marker.exists() else 0


REQUEUED_SCRIPT = (
    'echo "run restarts=${SLURM_RESTART_COUNT:-0} preempted=${GPUDESK_PREEMPTED:-0} '
    'signal=${GPUDESK_PREEMPT_SIGNAL:-none} attempt=$GPUDESK_ATTEMPT"; '
    'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then echo resumed; exit 0; fi; '
    "while true; do sleep 0.2; done"
)


@pytest.mark.slow(20)
@pytest.mark.timeout(200)
def test_a_preemptible_job_slurm_requeues_is_followed_to_its_end(
    slurm_engine: EngineHandle, cluster: SlurmCluster
) -> None:
    """`preemptible` reaches Slurm (--requeue, --signal) for the engine's own submissions, and
    a job Slurm puts back in its queue is shown queued again, then runs from the start and
    ends as its second run does."""
    (job_id,) = _submit(
        slurm_engine,
        {"name": "requeued", "preemptible": True, "command": ["sh", "-c", REQUEUED_SCRIPT]},
    )
    slurm_engine.wait_state(job_id, "running", timeout=30)
    wait_for(lambda: "restarts=0" in _log(slurm_engine, job_id), 30, what="its first run")
    assert "preempted=0 signal=SIGUSR1" in _log(slurm_engine, job_id)
    script = Path(slurm_engine.job(job_id).slurm.script).read_text()
    assert "#SBATCH --requeue" in script and "#SBATCH --signal=B:USR1@120" in script
    slurm_id = slurm_engine.job(job_id).slurm.job_id
    cluster.run("scontrol", "requeue", slurm_id)
    queued = slurm_engine.wait_state(job_id, "queued", timeout=30)
    assert "requeued by Slurm" in queued.reason, queued
    # Slurm holds a requeued batch job for its credential's lifetime (squeue's reason
    # BeginTime): the test cluster's AuthInfo=cred_expire=5, 120 s by default
    (done,) = slurm_engine.wait_all_done([job_id], timeout=120)
    assert done.state == "succeeded", (done.reason, _log(slurm_engine, job_id))
    log = _log(slurm_engine, job_id)
    assert "restarts=0 preempted=0 signal=SIGUSR1 attempt=1" in log, log
    assert "restarts=1 preempted=1 signal=SIGUSR1 attempt=2" in log and "resumed" in log, log
    assert done.attempts == 2 and done.preemptions == 1, done
    shown = _cli("show", str(job_id))
    assert "requeued by Slurm" in shown.stdout, shown.stdout
