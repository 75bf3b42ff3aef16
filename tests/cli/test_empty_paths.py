"""An empty path (`"$DIR"` with DIR unset) is a usage error, never the current folder: Python
reads `Path("")` as `.`, so `simulate --truth ''` said "cannot read .: Is a directory",
`export slurm P ''` wrote into the current folder (or refused it as "not empty"), `engine
print-unit --state-dir ''` printed a unit whose state folder was `.` (gpudesk.cli.param_rules).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main

from gpudesk.cli.main import _click_error, build_app
from gpudesk.cli.param_rules import PATH_TYPE_NAME, apply_rules
from gpudesk.paths import Home

ROOT = Path(__file__).resolve().parents[2]
PROFILE = str(ROOT / "profiles" / "quickstart.toml")
TRACE = str(ROOT / "traces" / "carma-philly-t1.json")


def path_params(command: Any, path: str = "gpudesk") -> list[tuple[str, Any]]:
    found = [
        (f"{path} {param.name}", param)
        for param in command.params
        if getattr(param.type, "name", None) == PATH_TYPE_NAME
    ]
    for name, sub in getattr(command, "commands", {}).items():
        found += path_params(sub, f"{path} {name}")
    return found


def test_every_path_parameter_of_the_tree_refuses_an_empty_value() -> None:
    """Walked over the whole tree, so that a path option added later is held to it too."""
    command = typer.main.get_command(build_app())
    apply_rules(command)
    params = path_params(command)
    assert len(params) >= 14, params  # --truth, --report, --out, DIR, --workdir, ...
    bad_parameter = _click_error("BadParameter")
    for where, param in params:
        with pytest.raises(bad_parameter, match="the path is empty"):
            param.type.convert("", param, None)
        assert str(param.type.convert(".", param, None)) == ".", where  # `.` still names it


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("simulate", TRACE, "--policy", "fifo", "--truth", ""), "'--truth'"),
        (("calibrate", "--truth", "", "--dry-run"), "'--truth'"),
        (("export", "slurm", PROFILE, ""), "'DIR'"),
        (("engine", "print-unit", "--state-dir", ""), "'--state-dir'"),
        (("engine", "print-unit", "--socket", ""), "'--socket'"),
        (("run", PROFILE, "--report", ""), "'--report'"),
        (("select", "compare", PROFILE, "--out", ""), "'--out'"),
        (("select", "compare", ""), "'profile'"),
        (("history", "--format", "codecarbon", "--output", ""), "'--output'"),
        (("desk", "--replay", ""), "'--replay'"),
        (("submit", "--workdir", "", "--", "true"), "'--workdir'"),
    ],
    ids=lambda value: value if isinstance(value, str) else "-".join(w for w in value[:2] if w),
)
def test_an_empty_path_is_one_usage_paragraph_and_nothing_is_done(
    tmp_path: Path, home: Home, args: tuple[str, ...], option: str
) -> None:
    """Run where the current folder is an empty one: nothing is written there, no engine is
    started (`home` stops one a regression would start), and the refusal names the option."""
    here = tmp_path / "here"
    here.mkdir()
    env = {**os.environ, "GPUDESK_HOME": str(home.root), "GPUDESK_CONFIG": ""}
    done = subprocess.run(
        [sys.executable, "-m", "gpudesk", *args],
        capture_output=True,
        text=True,
        cwd=here,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"error: Invalid value for {option}"), done.stderr
    assert "the path is empty (an unset variable?)" in done.stderr
    assert done.stderr.count("\n") == 1 and done.stdout == "", done.stdout + done.stderr
    assert list(here.iterdir()) == [] and not home.root.exists()
