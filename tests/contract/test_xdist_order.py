"""The suite's own scheduling (tests/xdist_order.py), in a pytest run of its own on three xdist
workers: the `serial` tests run one after another on one worker with no other test running from
the first one's start to the last one's end (the other workers' tests are drained once, not
before each), and the longest work is taken first."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import inner_pytest

TESTS = Path(__file__).resolve().parents[1]

INI = """[pytest]
markers =
    serial: runs with no other test running
    slow(seconds): the test's time
"""

# Each test says when its body ran (CLOCK_MONOTONIC: one clock for every process) and where.
INNER = """
import json, os, time
import pytest

def ran(name, seconds=0.3):
    start = time.monotonic()
    time.sleep(seconds)
    with open(os.environ["XDIST_ORDER_LOG"], "a") as log:
        log.write(json.dumps({"name": name, "start": start, "end": time.monotonic(),
                              "worker": os.environ["PYTEST_XDIST_WORKER"]}) + "\\n")

@pytest.mark.parametrize("n", range(3))
def test_plain_first(n):
    ran(f"plain-{n}")

@pytest.mark.serial
def test_serial_a():
    ran("serial-a")

@pytest.mark.parametrize("n", range(3, 6))
def test_plain_middle(n):
    ran(f"plain-{n}")

@pytest.mark.serial
def test_serial_b():
    ran("serial-b")

@pytest.mark.slow(5)
def test_plain_long():
    ran("long", 0.6)

@pytest.mark.parametrize("n", range(6, 9))
def test_plain_last(n):
    ran(f"plain-{n}")

@pytest.mark.serial
def test_serial_c():
    ran("serial-c")
"""


def run_inner(folder: Path, source: str, *options: str) -> subprocess.CompletedProcess[str]:
    (folder / "pytest.ini").write_text(INI)
    (folder / "test_inner.py").write_text(source)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "XDIST_ORDER_LOG": str(folder / "ran.jsonl"),
    }
    return subprocess.run(
        inner_pytest(
            "-p",
            "xdist_order",
            "-c",
            str(folder / "pytest.ini"),
            "--rootdir",
            str(folder),
            *options,
            str(folder / "test_inner.py"),
        ),
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_serial_tests_run_as_one_block_that_no_other_test_overlaps(tmp_path: Path) -> None:
    done = run_inner(tmp_path, INNER, "-n", "3", "--dist", "loadgroup", "--no-loadscope-reorder")
    assert done.returncode == 0, done.stdout + done.stderr
    ran = [json.loads(line) for line in (tmp_path / "ran.jsonl").read_text().splitlines()]
    assert len(ran) == 13, ran
    serial = sorted((r for r in ran if r["name"].startswith("serial")), key=lambda r: r["start"])
    # one worker, in the order they were written
    assert [r["name"] for r in serial] == ["serial-a", "serial-b", "serial-c"]
    assert len({r["worker"] for r in serial}) == 1, serial
    # from the first's start to the last's end, no other test ran (before, each serial test
    # drained the room on its own, and the other workers' tests ran between them)
    block = (serial[0]["start"], serial[-1]["end"])
    overlapping = [
        r["name"]
        for r in ran
        if not r["name"].startswith("serial") and r["start"] < block[1] and r["end"] > block[0]
    ]
    assert not overlapping, (overlapping, ran)
    # the longest test (its `slow` mark) was among the first three, one a worker: its place in
    # the collection is seventh
    first = sorted(ran, key=lambda r: r["start"])[:3]
    assert "long" in [r["name"] for r in first], ran


def test_a_serial_test_in_another_group_is_refused(tmp_path: Path) -> None:
    source = (
        "import pytest\n\n@pytest.mark.xdist_group('mine')\n@pytest.mark.serial\n"
        "def test_both():\n    pass\n"
    )
    done = run_inner(tmp_path, source, "-n", "0")
    assert done.returncode != 0
    assert "is serial and in the xdist group 'mine'" in done.stdout + done.stderr
