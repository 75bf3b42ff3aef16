"""The import contracts (pyproject.toml, `lint-imports` in CI) have teeth: each is broken by a
planted import in a copy of the package, and the client library and the shared vocabulary load
no module of the daemon when a script imports them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

# (the module a line is planted in, the line, the contract it breaks)
PLANTS = [
    (
        "core/jobs.py",
        "import gpudesk.engine.daemon",
        "cli -> desk | plots -> api -> engine -> policy | slurm | hw",
    ),
    (
        "api/models.py",
        "import gpudesk.engine.store",
        "The client library, the profile parser and the libraries",
    ),
    (
        "profile/__init__.py",
        "import gpudesk.engine.scheduler",
        "The client library, the profile parser and the libraries",
    ),
    (
        "slurm/script.py",
        "import gpudesk.engine.store",
        "The client library, the profile parser and the libraries",
    ),
    (
        "hw/mps.py",
        "import gpudesk.engine.store",
        "The client library, the profile parser and the libraries",
    ),
    (
        "hw/containment.py",
        "import gpudesk.slurm.commands",  # two libraries side by side import neither
        "cli -> desk | plots -> api -> engine -> policy | slurm | hw",
    ),
    (
        "policy/fairshare.py",
        "import gpudesk.engine.scheduler",
        "The client library, the profile parser and the libraries",
    ),
    (
        "policy/interference.py",
        "import gpudesk.hw.mps",  # the brain needs no hardware driver
        "cli -> desk | plots -> api -> engine -> policy | slurm | hw",
    ),
    (
        "policy/queue.py",
        "import torch",
        "The scheduling brain (policy) imports no UI, CLI, torch",
    ),
    (
        "core/protocol.py",
        "import gpudesk.slurm.request",
        "cli -> desk | plots -> api -> engine -> policy | slurm | hw",
    ),
    (
        "core/cluster.py",
        "import textual",
        "The shared vocabulary (core) imports no third-party package but msgspec",
    ),
    (
        "screens/queue.py",
        "import gpudesk.engine.daemon",
        "The desk talks to the engine only through gpudesk.api",
    ),
    (
        "loader/batch.py",
        "import gpudesk.api.client",
        "The shared loader and data selection import none of engine, api, cli or screens",
    ),
    (
        "core/mig_profiles.py",
        "import gpudesk.core.station",  # station imports mig_profiles: a cycle
        "No import cycles between sibling modules or packages",
    ),
]


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("layers")
    shutil.copytree(
        ROOT / "gpudesk", tree / "gpudesk", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


@pytest.mark.skipif(
    not LINT_IMPORTS.exists(), reason="import-linter is not installed (the dev extra)"
)
def test_the_tree_keeps_every_contract_and_each_planted_import_breaks_its_own(
    package_copy: Path,
) -> None:
    kept = lint_imports(package_copy)
    assert kept.returncode == 0, kept.stdout[-3000:]
    for module, line, contract in PLANTS:
        path = package_copy / "gpudesk" / module
        original = path.read_text()
        path.write_text(original + f"\n{line}  # planted\n")
        try:
            broken = lint_imports(package_copy)
        finally:
            path.write_text(original)
        assert broken.returncode != 0, f"{module}: {line} broke nothing"
        found = [row for row in broken.stdout.splitlines() if row.endswith("BROKEN")]
        # a contract's name may wrap onto a second line; its start is what is matched
        assert any(contract[:40] in row for row in found) or contract[:40] in broken.stdout, (
            f"{module}: {line} did not break {contract!r}:\n{broken.stdout[-2000:]}"
        )


def test_importing_the_client_library_and_the_vocabulary_loads_no_daemon_module() -> None:
    program = (
        "import importlib, json, pkgutil, sys\n"
        "import gpudesk.api, gpudesk.core\n"
        "for package in (gpudesk.api, gpudesk.core):\n"
        "    for info in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "import gpudesk.profile\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('gpudesk.'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert "gpudesk.api.client" in loaded and "gpudesk.core.jobs" in loaded
    assert [m for m in loaded if m.startswith("gpudesk.engine")] == []
