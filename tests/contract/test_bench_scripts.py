"""Every script in bench/ answers `--help` (exit 0, writing nothing where it runs), and the
simulator's quick benches run to the end: a rename inside gpudesk that a bench still uses (as
the simulator's split once left `bench/mig_queue_time.py` patching a name that had moved) fails
here rather than when someone next measures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
# the scripts (a module the others import, such as fake_h200.py, has no `__main__`)
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if '__name__ == "__main__"' in p.read_text())
# the simulator's benches that finish in a few seconds (docs/benchmarks.md)
QUICK = ("mig_queue_time.py", "queue_order.py", "robust_rule.py", "simulator_judge.py")


@pytest.mark.parametrize("script", SCRIPTS)
def test_it_answers_help_and_writes_nothing(script: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("script", QUICK)
def test_the_quick_simulator_benches_run(script: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "SIMULATED" in done.stdout
