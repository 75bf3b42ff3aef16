"""The engine and the shared loaders' producers never import from the caller's directory
(finding 5).

The directory a command is run from holds `psutil.py`, `queue.py`, `zmq.py` and `msgspec.py`.
Each, when imported, writes a marker file and then hands over to the real module, so nothing
else shows that foreign code ran: only the marker tells. The engine started by a command run
there, and a producer started by the engine's loader supervisor from there, must leave no marker.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineHandle, wait_for

from gpudesk.core.datasets import DatasetSpec
from gpudesk.engine.services.loaders import LoaderSupervisor
from gpudesk.loader.protocol import read_info, recorded_runs
from gpudesk.paths import Home

SHADOWED = ("psutil", "queue", "zmq", "msgspec")
# The console script a user runs: its own folder (the venv's bin/), not the current directory,
# starts its import path, so any marker comes from a process gpudesk started.
GPUDESK = [str(Path(sys.executable).with_name("gpudesk"))]

SHADOW = """\
import importlib, os, sys
with open({marker!r}, "a") as out:
    out.write(f"{{os.getpid()}} {{' '.join(sys.argv)}}\\n")
# hand over to the real module, as an attacker's file would, to stay unnoticed
here = os.path.dirname(os.path.abspath(__file__))
del sys.modules[__name__]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
sys.modules[__name__] = importlib.import_module(__name__)
"""


@pytest.fixture
def hostile_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """A directory full of shadowing modules, made the current one; and the marker file."""
    folder = tmp_path / "project"
    folder.mkdir()
    marker = tmp_path / "imported-from-cwd.txt"
    for name in SHADOWED:
        (folder / f"{name}.py").write_text(SHADOW.format(marker=str(marker)))
    monkeypatch.chdir(folder)
    yield folder, marker


def markers(marker: Path) -> str:
    return marker.read_text() if marker.exists() else ""


def test_the_shadowing_modules_do_run_when_imported_from_there(
    hostile_cwd: tuple[Path, Path],
) -> None:
    """The oracle works: the engine's module run with a plain `python -m` from that directory
    (as the engine used to be started) does import them."""
    folder, marker = hostile_cwd
    subprocess.run(
        [sys.executable, "-m", "gpudesk.engine.daemon", "--help"],
        cwd=folder,
        capture_output=True,
        check=False,
    )
    assert "engine/daemon.py" in markers(marker)


def test_an_engine_started_from_a_hostile_directory_imports_nothing_from_it(
    home: Home, hostile_cwd: tuple[Path, Path]
) -> None:
    folder, marker = hostile_cwd
    assert Path(GPUDESK[0]).exists(), "the gpudesk console script is not installed"
    submit = subprocess.run(  # no engine runs: `gpudesk submit` starts it from here
        [*GPUDESK, "submit", "--json", "--", "echo", "hello"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert submit.returncode == 0, submit.stderr
    handle = EngineHandle(home)
    assert handle.pid, "`gpudesk submit` did not start the engine"
    (job,) = handle.client.request("jobs")["jobs"]
    handle.wait_state(job["id"], "succeeded")
    assert markers(marker) == "", (
        f"the engine imported from the caller's directory:\n{markers(marker)}"
    )


def test_a_producer_started_from_a_hostile_directory_imports_nothing_from_it(
    home: Home, hostile_cwd: tuple[Path, Path]
) -> None:
    _folder, marker = hostile_cwd
    home.ensure()
    supervisor = LoaderSupervisor(home)
    supervisor.register(
        [
            DatasetSpec.from_dict(
                {
                    "name": "syn",
                    "factory": "gpudesk.workloads.synthetic:make_dataset",
                    "args": {"size": 64, "shape": [4]},
                    "batch_size": 8,
                    "workers": 0,
                }
            )
        ]
    )
    supervisor.ensure("syn")
    try:

        def serving() -> bool:
            info = read_info(home.loader_paths("syn")[2])
            return info is not None and recorded_runs(info)

        wait_for(serving, 60.0, what="the producer to serve")
        assert markers(marker) == "", (
            f"the producer imported from the caller's directory:\n{markers(marker)}"
        )
    finally:
        supervisor.stop_all_but(set(), "the test ended")
