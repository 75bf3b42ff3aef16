"""`bench/policy_ab.py` times the two trees it is given, each with its own `gpudesk`, and answers
a path that is not a gpudesk tree with one paragraph and a non-zero exit."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "policy_ab.py"


def _run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_each_tree_is_timed_with_its_own_gpudesk(tmp_path: Path) -> None:
    # a second tree whose pass is the same code but for one added line: its time is counted
    # as the new tree's only if its own collocation.py is the one imported
    other = tmp_path / "other"
    shutil.copytree(ROOT / "gpudesk", other / "gpudesk", ignore=shutil.ignore_patterns("*.pyc"))
    collocation = other / "gpudesk" / "policy" / "collocation.py"
    text = collocation.read_text()
    marker = "    def place(self, queue: Sequence[JobRecord], station: StationView) -> Decision:\n"
    assert marker in text
    slowed = marker + "        __import__('time').sleep(0.005)  # 5 ms more a pass\n"
    collocation.write_text(text.replace(marker, slowed))
    done = _run(ROOT, other, "--jobs", 20, "--inputs", 3, "--calls", 1, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["old"] == str(ROOT) and result["new"] == str(other.resolve())
    # sleeping costs the thread no CPU time: the same code's cost either way
    assert 0.5 < result["new_over_old"] < 2.0
    slowed_cpu = "        end = __import__('time').thread_time() + 0.005\n"
    spin = slowed_cpu + "        while __import__('time').thread_time() < end:\n            pass\n"
    collocation.write_text(text.replace(marker, marker + spin))
    done = _run(ROOT, other, "--jobs", 20, "--inputs", 3, "--calls", 1, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    # 5 ms of CPU more a pass, on a pass of well under 5 ms at 20 jobs
    assert json.loads(done.stdout)["new_over_old"] > 2.0


def test_a_path_that_is_no_tree_gets_one_paragraph(tmp_path: Path) -> None:
    done = _run(tmp_path / "nowhere", ROOT, cwd=tmp_path)
    assert done.returncode != 0
    assert "is not a gpudesk tree" in done.stderr
    assert "Traceback" not in done.stderr
