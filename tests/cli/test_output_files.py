"""Files a command writes beside its output (`--plot FILE`, `history --output` appending to an
emissions.csv) are checked before any work: never inside gpudesk's home (an appended CSV would
corrupt the engine's database), never a named pipe (the command would block for ever on it)."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import Run

from gpudesk.paths import Home


def test_a_plot_or_emissions_file_inside_the_home_is_refused(home: Home, gpudesk: Run) -> None:
    home.root.mkdir(parents=True, exist_ok=True)
    database = home.root / "gpudesk.db"
    database.write_bytes(b"SQLite format 3\x00")
    code, out, err = gpudesk(
        "simulate", "carma-philly-t1", "-p", "fifo", "--plot", str(home.root / "t.svg")
    )
    assert code == 2 and out == "", (out, err)
    assert f"is inside gpudesk's home {home.root}" in err and not (home.root / "t.svg").exists()
    code, out, err = gpudesk("history", "--format", "codecarbon", "--output", str(database))
    assert code == 2 and "is inside gpudesk's home" in err, err
    assert database.read_bytes() == b"SQLite format 3\x00"


def test_a_named_pipe_is_refused_rather_than_blocked_on(
    home: Home, gpudesk: Run, tmp_path: Path
) -> None:
    pipe = tmp_path / "plot.svg"
    os.mkfifo(pipe)
    code, _, err = gpudesk("simulate", "carma-philly-t1", "-p", "fifo", "--plot", str(pipe))
    assert (
        code == 2
        and err.strip()
        == f"error: --plot: {pipe} is a named pipe; the output is written to a regular file"
    ), err
    code, _, err = gpudesk("history", "--format", "codecarbon", "--output", str(pipe))
    assert code == 2 and "is a named pipe" in err, err


def test_a_link_into_the_home_is_refused(home: Home, gpudesk: Run, tmp_path: Path) -> None:
    """A link outside the home that points into it (`ln -s ~/.local/state/gpudesk/engine.log
    h.svg`) would have the plot or the rows written over the engine's own files: refused as
    the home's file it is."""
    home.root.mkdir(parents=True, exist_ok=True)
    log = home.root / "engine.log"
    log.write_text("")  # empty: an emissions.csv would be started in it
    plot, rows = tmp_path / "plot.svg", tmp_path / "emissions.csv"
    plot.symlink_to(log)
    rows.symlink_to(log)
    code, out, err = gpudesk("simulate", "carma-philly-t1", "-p", "fifo", "--plot", str(plot))
    assert code == 2 and out == "" and "is inside gpudesk's home" in err, (out, err)
    code, out, err = gpudesk("history", "--format", "codecarbon", "--output", str(rows))
    assert code == 2 and "is inside gpudesk's home" in err, err
    assert log.read_text() == ""
