"""A job runs with its submitter's umask, as under Slurm (sbatch's SLURM_UMASK): the client
sends the umask it runs under with `submit`, the engine keeps it in the job's spec and the
wrapper applies it to the command. A real user engine started under another umask (0002) than
the shells that submit, real `gpudesk submit` processes, real files."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineHandle, wait_for

from gpudesk.api.errors import EngineError
from gpudesk.paths import Home

ENGINE_UMASK = 0o002  # neither of the submitters': a job that got the engine's shows it


@pytest.fixture
def engine_under_002(home: Home) -> Iterator[EngineHandle]:
    """A real daemon started (and so daemonized) under umask 0002."""
    old = os.umask(ENGINE_UMASK)
    try:
        handle = EngineHandle(home)
        handle.start()
    finally:
        os.umask(old)
    yield handle
    handle.client.close()


def submit_under(umask: str, workdir: Path, *command: str, notify: str | None = None) -> int:
    """`gpudesk submit -- COMMAND` from a shell under `umask`; the job's id."""
    argv = ["sh", "-c", f'umask {umask} && exec "$@"', "sh", sys.executable, "-m", "gpudesk"]
    argv += ["submit", "--parsable", "-C", str(workdir)]
    argv += ["--notify", notify] if notify is not None else []
    argv += ["--", *command]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_job_writes_with_its_submitters_umask(
    engine_under_002: EngineHandle, tmp_path: Path
) -> None:
    engine = engine_under_002
    shared = submit_under("022", tmp_path, "touch", "a")
    # its --notify, run as its owner once it ends, writes with its umask too
    private = submit_under("077", tmp_path, "touch", "b", notify=f"touch {tmp_path}/notified")
    engine.wait_all_done([shared, private])
    assert engine.job(shared).state == "succeeded" and engine.job(private).state == "succeeded"
    assert oct(mode(tmp_path / "a")) == oct(0o644)
    assert oct(mode(tmp_path / "b")) == oct(0o600)
    wait_for(lambda: (tmp_path / "notified").exists(), what="the job's --notify")
    assert oct(mode(tmp_path / "notified")) == oct(0o600)
    # `show` says it beside the working directory, as `umask` prints it
    done = subprocess.run(
        [sys.executable, "-m", "gpudesk", "show", str(private)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.lstrip().startswith("workdir")]
    assert line.split() == ["workdir", str(tmp_path), "umask", "0077"], line
    assert engine.job(shared).spec.umask == 0o022
    # requeued, it runs again with the umask it was submitted with, not the requeuer's
    (tmp_path / "b").unlink()
    old = os.umask(0o000)
    try:
        [outcome] = engine.api.requeue([private])
    finally:
        os.umask(old)
    assert outcome.ok, outcome
    wait_for(lambda: engine.job(private).attempts == 2, what="the requeued job's second attempt")
    assert engine.wait_state(private, {"succeeded", "failed"}).state == "succeeded"
    assert oct(mode(tmp_path / "b")) == oct(0o600)


def test_a_job_from_a_client_that_sends_no_umask_gets_the_engines(
    engine_under_002: EngineHandle, tmp_path: Path
) -> None:
    """An older client sends none: its job runs as before, with the engine's umask."""
    job = {"name": "old", "command": ["touch", "c"], "workdir": str(tmp_path)}
    [job_id] = engine_under_002.client.request("submit", jobs=[job], env=dict(os.environ))["ids"]
    assert engine_under_002.wait_state(job_id, {"succeeded", "failed"}).state == "succeeded"
    assert engine_under_002.job(job_id).spec.umask is None
    assert oct(mode(tmp_path / "c")) == oct(0o664)


@pytest.mark.parametrize("umask", [0o1000, -1, "027", 2.5, True])
def test_a_umask_out_of_range_is_refused_in_one_sentence(
    engine: EngineHandle, umask: object
) -> None:
    job = {"name": "raw", "command": ["true"]}
    for where, args in (
        ("'umask' must be a umask: a number from 0 to 511", {"umask": umask}),
        ("jobs[0].umask: expected a umask, a number from 0 to 0o777", {}),
    ):
        jobs = [job if args else {**job, "umask": umask}]
        with pytest.raises(EngineError) as refused:
            engine.client.request("submit", jobs=jobs, env={}, **args)
        said = str(refused.value)
        assert refused.value.code == "invalid_args", said
        assert said.startswith(where), said
        assert "\n" not in said and "Traceback" not in said, said
    assert engine.client.request("jobs")["jobs"] == []  # nothing queued
