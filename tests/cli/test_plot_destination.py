"""`--plot FILE` whose file cannot be written is refused before any work, in every command that
draws one (simulate, select compare, history, show): a folder that does not exist, a file where
the folder should be, a symbolic-link loop, a link whose file lies in no folder, a folder that
cannot be written in. It was said only when the plot was written, after the whole (for `select
compare`, hours-long) command had run, and with exit 1. Real processes, real files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACE = str(ROOT / "traces" / "carma-philly-t1.json")
PROFILE = str(ROOT / "profiles" / "quickstart.toml")
COMMANDS = {
    "simulate": ["simulate", TRACE, "--policy", "fifo"],
    "select-compare": ["select", "compare", PROFILE],
    "history": ["history"],
    "show": ["show", "1"],
}


def gpudesk(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUDESK_HOME": str(home), "GPUDESK_CONFIG": ""}
    command = [sys.executable, "-m", "gpudesk", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)


def destination(tmp_path: Path, kind: str) -> tuple[Path, str]:
    """A plot path that cannot be written, and what the refusal says of it."""
    if kind == "missing folder":
        return tmp_path / "nodir" / "x.svg", f"its folder {tmp_path / 'nodir'} does not exist"
    if kind == "file as folder":
        (tmp_path / "notes.txt").write_text("mine\n")
        return tmp_path / "notes.txt" / "x.svg", "is a regular file, not a folder"
    if kind == "folder loop":
        (tmp_path / "loop").symlink_to(tmp_path / "loop")
        return tmp_path / "loop" / "x.svg", "is a symbolic link that leads back to itself"
    if kind == "file loop":
        (tmp_path / "x.svg").symlink_to(tmp_path / "x.svg")
        return tmp_path / "x.svg", f"{tmp_path / 'x.svg'} is a symbolic link that leads back"
    if kind == "name too long":  # stat() raised ENAMETOOLONG as a traceback
        return tmp_path / f"{'x' * 300}.svg", "cannot be used: File name too long"
    assert kind == "link into no folder"
    (tmp_path / "x.svg").symlink_to(tmp_path / "gone" / "x.svg")
    return tmp_path / "x.svg", f"whose folder {tmp_path / 'gone'} does not exist"


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(
    "kind",
    [
        "missing folder",
        "file as folder",
        "folder loop",
        "file loop",
        "link into no folder",
        "name too long",
    ],
)
def test_a_plot_file_that_cannot_be_written_is_refused_before_any_work(
    tmp_path: Path, command: str, kind: str
) -> None:
    plot, said = destination(tmp_path, kind)
    home = tmp_path / "home"
    done = gpudesk(home, *COMMANDS[command], "--plot", str(plot))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "", done.stdout  # no table: nothing ran
    assert done.stderr.startswith(f"error: --plot: {plot}"), done.stderr
    assert said in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert not home.exists(), "a refused --plot must not even start an engine"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_folder_that_cannot_be_written_in_is_refused_before_the_simulation(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "read-only"
    folder.mkdir(mode=0o555)
    done = gpudesk(tmp_path / "home", *COMMANDS["simulate"], "--plot", str(folder / "x.svg"))
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert f"its folder {folder} cannot be written in" in done.stderr, done.stderr
