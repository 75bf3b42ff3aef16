"""A value a user typed, shown back in a refusal: spelled out as gpudesk spells text
(`\\xff` for a byte that is not UTF-8, `\\x1b` for ESC), never Python's repr ('\\udcff') and
never sent raw to the terminal; and `select compare --metric ''` refused before any run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BAD = os.fsdecode(b"a\xffb\x1b[2J")  # a byte that is not UTF-8, then an escape sequence
SHOWN = "'a\\xffb\\x1b[2J'"


def gpudesk(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(home / "state")}
    env["XDG_RUNTIME_DIR"] = str(home / "run")
    command = [sys.executable, "-m", "gpudesk", *args]
    return subprocess.run(
        command, capture_output=True, text=True, errors="surrogateescape", env=env, timeout=60
    )


@pytest.mark.parametrize(
    "args",
    [("grid", BAD), ("history", "--since", BAD), ("history", "--format", BAD)],
    ids=["grid", "history-since", "history-format"],
)
def test_a_typed_value_is_spelled_out_in_its_refusal(tmp_path: Path, args: tuple[str, ...]) -> None:
    done = gpudesk(tmp_path, *args)
    assert done.returncode == 2, done.stderr
    assert SHOWN in done.stderr, done.stderr
    assert "\x1b" not in done.stderr and "\\udcff" not in done.stderr


def test_select_compare_refuses_an_empty_metric_before_anything_runs(tmp_path: Path) -> None:
    profile = Path(__file__).resolve().parents[2] / "profiles" / "quickstart.toml"
    done = gpudesk(tmp_path, "select", "compare", str(profile), "--metric", "")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: --metric: '' names no key"), done.stderr
    assert not (tmp_path / "state" / "gpudesk").exists()  # no engine was started
