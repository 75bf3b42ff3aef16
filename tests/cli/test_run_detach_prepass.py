"""`gpudesk run PROFILE --detach` of a profile whose jobs train on a selection with a pre-pass:
the pre-pass job and the training jobs are queued at once, each training job after (afterok)
the pre-pass of its selection alone, and the command returns; a pre-pass that fails has the
engine cancel the jobs after it, which never run; `--attach` reports the run and records what
the engine measured of the pre-pass into its selection cache entry. Real engine, real jobs."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineHandle, short_home, wait_for
from test_cli import gpudesk

from gpudesk.core.jobs import JobSpec
from gpudesk.selection.cache import SelectionCache


@pytest.fixture
def sel_engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[EngineHandle]:
    """A CPU station of 2 slots, its home at a short path: a selection's shared loader has its
    socket under it (`syn.random-25.ctl`), at most 107 bytes long (conftest.short_home)."""
    with short_home("gd-detach-", monkeypatch) as home:
        handle = EngineHandle(home)
        handle.start(slots=2)
        yield handle
        handle.client.close()


def selection_profile(tmp_path: Path, selection: str) -> Path:
    """`train` on a `selection` of a small synthetic dataset; `then` after it; `free`, on no
    dataset, after nothing."""
    python = json.dumps([sys.executable, "-c", "pass"])
    profile = tmp_path / "sel.toml"
    profile.write_text(
        textwrap.dedent(f"""
        name = "sel"
        [datasets.syn]
        factory = "gpudesk.workloads.synthetic:make_dataset"
        args = {{ size = 120, shape = [4] }}
        batch_size = 8
        workers = 0
        {selection}
        [[jobs]]
        name = "train"
        dataset = "syn"
        command = {python}
        [[jobs]]
        name = "then"
        after = ["train"]
        command = {python}
        [[jobs]]
        name = "free"
        command = {python}
    """)
    )
    return profile


def by_name(engine: EngineHandle) -> dict[str, dict]:
    return {j["name"]: j for j in engine.client.request("jobs", archived=True)["jobs"]}


def occupy_both_slots(engine: EngineHandle, gate: Path) -> list[int]:
    """Two jobs that hold the station's two slots until `gate` exists."""
    wait = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    specs = [JobSpec(name=f"hold{k}", command=("sh", "-c", wait)) for k in range(2)]
    ids = list(engine.api.submit(specs))
    wait_for(
        lambda: len(engine.client.request("jobs", states=["running"])["jobs"]) == 2,
        what="both slots held",
    )
    return ids


@pytest.mark.slow(5)
def test_a_detached_run_queues_its_prepass_and_the_jobs_after_it_and_attach_records_its_cost(
    sel_engine: EngineHandle, tmp_path: Path
) -> None:
    profile = selection_profile(tmp_path, 'selection = "random-25"')
    gate = tmp_path / "gate"
    holders = occupy_both_slots(sel_engine, gate)
    done = gpudesk("run", str(profile), "--detach")
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = by_name(sel_engine)
    prepass, train, then, free = (
        jobs[name] for name in ("prepass-syn-random-25", "train", "then", "free")
    )
    # it returned with the pre-pass still queued (both slots held): nothing waited for it
    assert prepass["state"] == "queued", prepass
    assert train["spec"]["after"] == [prepass["id"]]  # its selection's pre-pass alone
    assert then["spec"]["after"] == [train["id"]]  # the profile's own `after`, kept
    assert free["spec"].get("after", []) == []  # trains on no selection: after nothing
    group = prepass["group"]
    assert {j["group"] for j in (prepass, train, then, free)} == {group}
    text = " ".join(done.stdout.split())
    assert text.startswith("submitting 1 pre-pass job(s) and 3 job(s) from "), text
    assert (
        f"submitted run {group}, 1 pre-pass job(s): {prepass['id']}, then 3 job(s): "
        f"{train['id']}-{free['id']} (a job on a selection starts once its pre-pass has "
        "succeeded)"
    ) in text, text
    assert "a pre-pass that fails: the jobs after it are cancelled, never run" in text
    assert "pre-pass cost: recorded in the selection cache by its --attach, or by" in text

    gate.touch()
    waited = gpudesk("wait", "--group", group, timeout=120)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    jobs = by_name(sel_engine)
    assert all(j["state"] == "succeeded" for j in jobs.values()), jobs
    prepass, train = jobs["prepass-syn-random-25"], jobs["train"]
    assert train["started_at"] >= prepass["ended_at"]
    cache = SelectionCache(sel_engine.home.selection_dir)
    (entry,) = cache.entries()
    # no command waited for the pre-pass: its job is named, its measurement not recorded yet
    assert entry.cost.job == prepass["id"] and entry.cost.job_wall_s is None

    attached = gpudesk("run", str(profile), "--attach", "--json", timeout=120)
    assert attached.returncode == 0, attached.stdout + attached.stderr
    report = json.loads(attached.stdout)
    assert report["group"] == group and report["succeeded"] and report["unsubmitted"] == 0
    assert any("30 of 120 samples, computed in" in note for note in report["notes"]), report
    (entry,) = cache.entries()
    assert entry.cost.job == prepass["id"] and (entry.cost.job_wall_s or 0) > 0
    assert holders[0] not in [j["id"] for j in report["jobs"]]  # another run's


@pytest.mark.slow(3)
@pytest.mark.slow(5)
def test_a_detached_run_never_attached_has_its_prepass_cost_recorded_by_select_show(
    sel_engine: EngineHandle, tmp_path: Path
) -> None:
    """No `--attach` follows the run (its profile may be gone, or read from a pipe): the
    pre-pass job named itself in the entry it computed, and `gpudesk select show KEY` asks the
    engine for what it measured of that job once it ended, and records it, once."""
    profile = selection_profile(tmp_path, 'selection = "random-25"')
    done = gpudesk("run", str(profile), "--detach", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    detached = json.loads(done.stdout)
    (prepass_id,) = detached["prepass_ids"]
    waited = gpudesk("wait", "--group", detached["group"], timeout=120)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    cache = SelectionCache(sel_engine.home.selection_dir)
    (entry,) = cache.entries()
    assert entry.cost.job == prepass_id and entry.cost.job_wall_s is None

    def as_a_job() -> str:
        shown = gpudesk("select", "show", entry.key)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        return next(x for x in shown.stdout.splitlines() if x.startswith("as a job"))

    # its engine stopped: not started to be asked, and the line says why the figure is missing
    sel_engine.stop()
    line = " ".join(as_a_job().split())
    assert line.endswith(
        f"job {prepass_id}: not measured yet (its engine is not running to be asked)"
    ), line
    assert sel_engine.pid is None
    sel_engine.start(slots=2)
    line = as_a_job()
    assert f"job {prepass_id}: " in line and "wall" in line and "not measured" not in line, line
    (entry,) = cache.entries()  # recorded in the entry, not only shown
    assert entry.cost.job == prepass_id and (entry.cost.job_wall_s or 0) > 0
    assert entry.cost.job_cpu_s is not None
    cache.note_job(entry.key, prepass_id + 1)  # an entry that names its job keeps it
    (again,) = cache.entries()
    assert again.cost == entry.cost


def test_a_failed_prepass_of_a_detached_run_cancels_the_jobs_after_it(
    sel_engine: EngineHandle, tmp_path: Path
) -> None:
    """The pre-pass fails (its selection's target cannot be imported): the engine cancels the
    job that trains on its selection, and the job after that one, neither having run, each
    saying why in `gpudesk show`; the job after nothing runs. `--attach` says so."""
    selection = 'selection = "less-25"\nselection_target = "no_such_module:targets"'
    profile = selection_profile(tmp_path, selection)
    done = gpudesk("run", str(profile), "--detach", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    detached = json.loads(done.stdout)
    assert len(detached["prepass_ids"]) == 1 and len(detached["ids"]) == 3
    (prepass_id,) = detached["prepass_ids"]
    waited = gpudesk("wait", "--group", detached["group"], timeout=120)
    assert waited.returncode != 0, waited.stdout + waited.stderr
    jobs = by_name(sel_engine)
    states = {name: (j["state"], j["started_at"]) for name, j in jobs.items()}
    assert states["prepass-syn-less-25"][0] == "failed"
    assert states["train"] == ("cancelled", None) and states["then"] == ("cancelled", None)
    assert states["free"][0] == "succeeded"
    shown = gpudesk("show", str(jobs["train"]["id"]))
    said = " ".join(shown.stdout.split())
    assert (
        f"job {prepass_id} (prepass-syn-less-25), which it runs after, failed; this job "
        "never ran" in said
    ), said

    attached = gpudesk("run", str(profile), "--attach", "--json", timeout=120)
    assert attached.returncode == 1, attached.stdout + attached.stderr
    report = json.loads(attached.stdout)
    assert not report["succeeded"] and report["unsubmitted"] == 0, report
    assert (
        f"pre-pass job {prepass_id} (prepass-syn-less-25) failed: the jobs after it were "
        f"cancelled, never run (gpudesk logs {prepass_id})"
    ) in report["notes"], report["notes"]


def test_a_detached_profile_the_engine_refuses_queues_nothing(
    sel_engine: EngineHandle, tmp_path: Path
) -> None:
    """Its jobs are checked before its pre-pass is queued: a job the station cannot run (more
    GPUs than it has) and nothing is submitted, the pre-pass neither."""
    profile = selection_profile(tmp_path, 'selection = "random-25"')
    profile.write_text(profile.read_text().replace('name = "free"', 'name = "free"\ngpus = 8'))
    done = gpudesk("run", str(profile), "--detach")
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert "free" in done.stderr, done.stderr
    assert sel_engine.client.request("jobs", archived=True)["jobs"] == []
