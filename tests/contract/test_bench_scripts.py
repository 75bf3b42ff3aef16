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


# writes its one file and prints nothing a reader could leave early
PRINTS_NOTHING = ("mig_heavy_trace.py",)


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s not in PRINTS_NOTHING])
def test_it_runs_through_quiet_pipe(script: str) -> None:
    """Each script's `__main__` runs `main` through bench/quiet_pipe.py, so its output piped
    into `head` ends quietly rather than in a BrokenPipeError traceback."""
    main_block = (BENCH / script).read_text().split('if __name__ == "__main__":', 1)[1]
    assert "run_main(" in main_block


@pytest.mark.parametrize("args", [["--help"], []])
def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path: Path, args: list[str]) -> None:
    bench = subprocess.Popen(
        [sys.executable, str(BENCH / "simulator_judge.py"), *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert bench.stdout is not None and bench.stderr is not None
    bench.stdout.close()  # the reader gone before the first write: that write must fail
    errors = bench.stderr.read().decode()
    # 141 where a write failed. argparse's --help output: newer Pythons (3.11.7 here) swallow
    # the failure and exit 0; older ones (Debian 12's 3.11.2) let it reach quiet_pipe: 141.
    assert bench.wait(timeout=300) in ((141,) if not args else (0, 141)), errors[-2000:]
    assert "Traceback" not in errors and "BrokenPipeError" not in errors, errors[-2000:]
