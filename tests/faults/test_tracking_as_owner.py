"""MLflow tracking on an engine run by root (docs/tracking.md, "A shared station"): whatever
talks to a user's tracking store runs as that user, never as root. Root only: makes a real user.

The engine's collaborators run in this (root) process, driven step by step. A tracked job of
another user gets a tracking worker of its own owner's (uid, groups): where that user may run
the engine's Python, the store's database is that user's file; where they may not (this
project's interpreter may sit in root's home), the worker does not start, `status` says why,
and nothing is written as root.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import EngineInProcess
from local_users import LocalUser, local_accounts

from gpudesk.core.identity import Caller, Identity
from gpudesk.core.jobs import JobSpec
from gpudesk.core.station import StationConfig
from gpudesk.paths import Home
from gpudesk.policy.access import Access

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: makes a real user and tracks a job as them"
)
# found, not imported: importing MLflow is ~3 s of CPU in every worker that collects this module
# (the tests' processes import it where they use it)
if importlib.util.find_spec("mlflow") is None:
    pytest.skip("MLflow is optional: gpudesk[mlflow]", allow_module_level=True)


@pytest.fixture
def ada() -> Iterator[LocalUser]:
    with local_accounts({"ada": []}) as made:
        yield made.users["ada"]


def test_a_users_tracking_worker_runs_as_that_user(ada: LocalUser) -> None:
    top = Path(tempfile.mkdtemp(prefix="gd-track-", dir="/tmp"))
    top.chmod(0o711)
    runs = top / "ada-runs"  # ada's folder: only she may write there
    runs.mkdir()
    os.chown(runs, ada.uid, ada.gid)
    runs.chmod(0o700)
    station = EngineInProcess(
        Home(top / "home"), StationConfig(backend="none", slots=1), Access(os.getuid(), None)
    )
    caller = Caller(Identity.of(ada.uid, ada.gid, ada.groups), None)
    uri = f"sqlite:///{runs}/mlflow.db"
    try:
        job = {
            "name": "tracked",
            "command": ["/bin/true"],
            "workdir": "/",
            "tracking": {"mlflow_uri": uri, "experiment": "ada"},
        }
        station.ok(caller, "submit", jobs=[job], env={"PATH": "/usr/bin:/bin"})
        deadline = time.monotonic() + 30.0
        seen_uids: set[int] = set()
        while True:
            station.step()
            worker = station.engine.tracking.workers.get(ada.uid)
            if worker is not None and worker.process is not None:
                with contextlib.suppress(psutil.Error):
                    seen_uids.add(psutil.Process(worker.process.pid).uids().real)
            status = station.ok(caller, "status")["tracking"]
            if (runs / "mlflow.db").exists() or any(s["error"] for s in status):
                break
            assert time.monotonic() < deadline, status
            time.sleep(0.1)
        assert seen_uids <= {ada.uid}, seen_uids  # never root's
        if (runs / "mlflow.db").exists():
            assert (runs / "mlflow.db").stat().st_uid == ada.uid
        else:  # ada may not run the engine's Python here: said, and nothing made as root
            (store,) = status
            assert store["user"] == ada.name and store["mlflow_uri"] == uri
            assert "tracking worker" in store["error"]
        assert not any(p.stat().st_uid == 0 for p in runs.iterdir())
    finally:
        station.close()
        shutil.rmtree(top, ignore_errors=True)


def test_a_worker_with_no_job_at_hand_runs_as_her_newest_job_was_stored(tmp_path: Path) -> None:
    """A worker started for a run that has no job at hand (a sweep's run after an engine
    restart) runs as its owner as stored with her newest job: the engine's loop asks the user
    database nothing (before: `login_identity`, her uid's groups asked there). The worker's
    start checks her against the database off the loop (`trust.known_environment`)."""
    ghost = Identity.of(61_013, 4_242, [77], "ghost")  # a uid no user has: nothing to look up
    station = EngineInProcess(
        Home(tmp_path / "home"), StationConfig(backend="none", slots=1), Access(os.getuid(), None)
    )
    try:
        spec = JobSpec.from_dict({"name": "j", "command": ["true"], "workdir": "/"})
        station.store.submit([spec], {}, owner=Identity.of(61_013, 61_013, [], "older"))
        station.store.submit([spec], {}, owner=ghost)
        owner = station.engine.tracking._owner(ghost.uid)
        assert owner == ghost and owner is not None and owner.login == "ghost"
    finally:
        station.close()
