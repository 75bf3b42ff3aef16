"""The README's "From Python" example, run as written: it must stay true."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from gpudesk.paths import Home

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_example() -> str:
    text = README.read_text()
    section = text.split("## From Python", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "the README's From Python section has no python block"
    return found.group(1)


def test_the_readme_example_runs(home: Home, tmp_path: Path) -> None:
    # long enough for a sample or two, so the finished job has usage figures
    (tmp_path / "train.py").write_text(
        "import sys, time; time.sleep(2.5); print('trained', *sys.argv[1:])\n"
    )
    env = {**os.environ, "GPUDESK_HOME": str(home.root), "GPUDESK_BACKEND": "sim:h100"}
    done = subprocess.run(
        [sys.executable, "-c", readme_example()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    pattern = r"1 lr0\.1 (queued|running|succeeded) \[0?\] (mps|exclusive|None)"
    assert re.fullmatch(pattern, lines[0])
    assert "UsageSummary(" in lines[-1]
    assert (home.jobs_dir / "1" / "1" / "output.log").read_text().strip() == "trained --lr=0.1"
