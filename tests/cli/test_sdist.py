"""The sdist holds what a packager needs to run the tests from it: every file under tests/ (the
conftest, fixtures, fakes), what the tests read (profiles, traces, bench, tools, man pages,
pyproject.toml), the docs with the docs site's config, the systemd unit (package data), the
init script and the CHANGELOG. It is built as a packager builds it (`python -m build --sdist`,
from a copy of the tree) and listed, then unpacked and a part of the suite run from it against
its own `gpudesk` (the shared vocabulary's tests and the edit tests, which start real engines):
the whole suite is what CI runs from the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import inner_pytest
from test_wheel import skip_if_offline  # same folder: on sys.path under pytest

ROOT = Path(__file__).resolve().parents[2]
# What runs from the unpacked sdist: the vocabulary's tests and real engines being edited.
RUN_FROM_IT = ("tests/core", "tests/engine/test_edit_live.py")
IGNORED = ("__pycache__", "*.pyc", ".*_cache", ".hypothesis")


def source_files(folder: str) -> set[str]:
    """The files under `folder` of the checkout, as the sdist names them (no caches)."""
    found = set()
    for path in (ROOT / folder).rglob("*"):
        parts = path.relative_to(ROOT).parts
        cache = any(p == "__pycache__" or p.startswith(".") for p in parts)
        if path.is_file() and not cache and path.suffix != ".pyc":
            found.add("/".join(parts))
    return found


@pytest.mark.slow(20)
@pytest.mark.timeout(900)  # its own steps' limits: the build 600 s, the tests it runs 300 s
def test_the_sdist_holds_the_tests_and_what_they_read_and_runs_them(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        symlinks=True,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "site", "*.egg-info", *IGNORED
        ),
    )
    out = tmp_path / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        skip_if_offline(done.stdout + done.stderr)
        pytest.fail(f"the sdist did not build:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    (sdist,) = out.glob("gpudesk-*.tar.gz")
    with tarfile.open(sdist) as archive:
        prefix = archive.getnames()[0].split("/")[0]
        members = {name.removeprefix(prefix + "/") for name in archive.getnames()}
        fake_smi = archive.getmember(f"{prefix}/tests/fakes/nvidia-smi")

    missing = source_files("tests") - members
    assert not missing, f"tests/ files not in the sdist: {sorted(missing)[:20]}"
    assert fake_smi.mode & 0o111, "the fake nvidia-smi lost its executable bit"
    for folder in ("docs", "profiles", "traces", "man"):
        assert not source_files(folder) - members, folder
    for name in (
        "tests/conftest.py",
        "CHANGELOG.md",
        "mkdocs.yml",
        "pyproject.toml",
        "LICENSE",
        "gpudesk/data/systemd/gpudesk.service",
        "packaging/sysvinit/gpudesk",
        "tools/build_manpages.py",
        "man/man1/gpudesk.1",
    ):
        assert name in members, name
    assert not [m for m in members if "__pycache__" in m or m.endswith(".pyc")]

    with tarfile.open(sdist) as archive:
        # PEP 706's `filter` came with Python 3.10.12 and 3.11.4 (Debian 12's 3.11.2 lacks it,
        # and requires-python is >= 3.10); the archive is the one just built here.
        if hasattr(tarfile, "data_filter"):
            archive.extractall(tmp_path / "unpacked", filter="data")
        else:
            archive.extractall(tmp_path / "unpacked")
    unpacked = tmp_path / "unpacked" / prefix
    # a pytest of its own, not a worker of this run (conftest's serial locks are per run)
    outer = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env = {**outer, "PYTHONPATH": str(unpacked)}
    which = subprocess.run(
        [sys.executable, "-c", "import gpudesk; print(gpudesk.__file__)"],
        cwd=unpacked,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert which.stdout.strip() == str(unpacked / "gpudesk" / "__init__.py")
    ran = subprocess.run(
        inner_pytest("-n", "0", *RUN_FROM_IT),
        cwd=unpacked,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    # the summary line, not the whole output: the slowest tests' ids (CI's --durations) may
    # hold " failed" in a parameter ("already failed (exit unknown)")
    summary = ran.stdout.strip().splitlines()[-1]
    assert " passed" in summary and " failed" not in summary, ran.stdout
