"""The import contracts (pyproject.toml, `lint-imports` in CI) have teeth: each is broken by a
planted import in a copy of the package, and the client library and the shared vocabulary load
no module of the daemon when a script imports them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# its module-scoped fixture is made once: the module stays on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_layers")

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


# `lint-imports --no-cache` in a tree, run once for each plant in one Python (a process each
# cost 15 interpreters and imports): the CLI's own function, importlinter.cli.lint_imports,
# whose every call builds the graph from the files anew. A plant's line is written at the end
# of its module before the run and taken out after it; ("", "") plants nothing.
PLANTED_RUNS = """
import json, sys
from pathlib import Path
from importlinter.cli import lint_imports

for module, line in json.loads(sys.argv[1]):
    path = Path("gpudesk", module)
    original = path.read_text() if module else ""
    if module:
        path.write_text(original + "\\n" + line + "  # planted\\n")
    try:
        code = lint_imports(no_cache=True)
    finally:
        if module:
            path.write_text(original)
    print(f"\\n@@ lint-imports exited {code}", flush=True)
"""


def lint_imports(tree: Path, plants: list[tuple[str, str]]) -> list[tuple[int, str]]:
    """Each plant's run in `tree`: (its exit status, its output)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", PLANTED_RUNS, json.dumps(plants)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    *parts, rest = re.split(r"^@@ lint-imports exited (\d+)$", done.stdout, flags=re.MULTILINE)
    runs = [(int(code), output) for output, code in zip(parts[::2], parts[1::2], strict=True)]
    assert len(runs) == len(plants) and not rest.strip(), done.stdout[-3000:]
    return runs


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
@pytest.mark.slow(5)
def test_the_tree_keeps_every_contract_and_each_planted_import_breaks_its_own(
    package_copy: Path,
) -> None:
    (kept_code, kept), *broken_runs = lint_imports(
        package_copy, [("", "")] + [(module, line) for module, line, _ in PLANTS]
    )
    assert kept_code == 0, kept[-3000:]
    for (module, line, contract), (code, broken) in zip(PLANTS, broken_runs, strict=True):
        assert code != 0, f"{module}: {line} broke nothing"
        # the broken contracts are listed again under "Broken contracts" (a name may wrap onto
        # a second line: its start is what is matched); the rows above name the kept ones too
        _, listed, broken_ones = broken.partition("\nBroken contracts\n")
        assert listed and contract[:40] in broken_ones, (
            f"{module}: {line} did not break {contract!r}:\n{broken[-2000:]}"
        )


def modules_after(imports: str) -> list[str]:
    """The modules (the project's, the standard library's, ...) a fresh Python holds after
    running `imports`."""
    program = "import json, sys\n" + imports + "print(json.dumps(sorted(sys.modules)))\n"
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def gpudesk_modules_after(imports: str) -> list[str]:
    """The project's modules a fresh Python holds after running `imports`."""
    return [m for m in modules_after(imports) if m.startswith("gpudesk.")]


def test_importing_the_client_library_and_the_vocabulary_loads_no_daemon_module() -> None:
    loaded = gpudesk_modules_after(
        "import importlib, pkgutil\n"
        "import gpudesk.api, gpudesk.core\n"
        "for package in (gpudesk.api, gpudesk.core):\n"
        "    for info in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "import gpudesk.profile\n"
    )
    assert "gpudesk.api.client" in loaded and "gpudesk.core.jobs" in loaded
    assert [m for m in loaded if m.startswith("gpudesk.engine")] == []


def test_an_engine_starts_without_the_simulator() -> None:
    """The engine imports the simulator (`gpudesk.policy.mig_replay`: the replays behind `mig
    plan`'s predictions and `auto`'s repartitioning) only when one is asked for: it and what it
    brings were about a tenth of an engine start's import CPU (docs/benchmarks.md, session 55),
    paid by every engine a user's `gpudesk submit` starts."""
    loaded = gpudesk_modules_after("import gpudesk.engine.daemon\n")
    assert "gpudesk.engine.station.repartition.control" in loaded  # the MIG control is there
    replay = ("gpudesk.policy.mig_replay", "gpudesk.policy.simulator", "gpudesk.policy.trace")
    assert [m for m in replay if m in loaded] == []


def test_an_engine_starts_without_what_only_some_engines_use() -> None:
    """Every test's engine and every user's pays for its imports (an engine start's CPU is
    three quarters import: docs/benchmarks.md, session 59): what only a metrics endpoint (the
    snapshot), a staging producer (the loader's staging), a job log's cut (ctypes) or a grid
    code's lookup (the table's readers) uses is imported when one is asked for."""
    loaded = modules_after("import gpudesk.engine.daemon\n")
    users = ("gpudesk.engine.services.metrics.exporter", "gpudesk.loader.station_access")
    users += ("gpudesk.joblog.collapse", "gpudesk.grid")
    assert [m for m in users if m not in loaded] == []  # the modules that defer them are there
    deferred = ("gpudesk.metrics.snapshot", "gpudesk.loader.staging", "ctypes", "csv")
    deferred += ("importlib.resources",)
    assert [m for m in deferred if m in loaded] == []


def test_a_submit_checks_its_options_without_the_placement_policy() -> None:
    """`gpudesk submit` asks gpudesk.policy.job_gates what the engine would refuse of its
    options; the gates import the placement policy (and its learner, the station's config)
    only to trim a placement pass, the engine's: a fifth of a submit's CPU (session 59)."""
    loaded = gpudesk_modules_after(
        "import gpudesk.cli.submit_job, gpudesk.cli.submit_extras, gpudesk.api.submit\n"
        "import gpudesk.policy.job_gates\n"
    )
    assert "gpudesk.policy.job_gates" in loaded
    assert [m for m in loaded if m in ("gpudesk.policy.policy", "gpudesk.core.records")] == []
