"""A value a user typed, shown back in a refusal: spelled out as gpudesk spells text
(`\\xff` for a byte that is not UTF-8, `\\x1b` for ESC), never Python's repr ('\\udcff') and
never sent raw to the terminal; and `select compare --metric ''` refused before any run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import EngineHandle

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


TRACE = str(Path(__file__).resolve().parents[2] / "traces" / "carma-philly-t1.json")
BAD_PATH = os.fsdecode(b"/nonexistent/a\xffb\x1b[2J/x.toml")  # in a folder that is not there


@pytest.mark.parametrize(
    "args",
    [
        ("run", BAD_PATH),
        ("simulate", BAD_PATH),
        ("simulate", TRACE, "--truth", BAD_PATH),
        ("simulate", TRACE, "--plot", BAD_PATH),
        ("cancel", "--state", BAD),
        ("submit", "--env", BAD, "--", "true"),
        ("simulate", "carma-philly-t1", "--policy", BAD),
        ("calibrate", "--mechanisms", BAD),
        ("submit", "--workdir", BAD, "--", "true"),
        ("submit", "--time", BAD, "--", "true"),
        ("simulate", "carma-philly-t1", "--estimator", BAD),
        ("simulate", "carma-philly-t1", "--mig", f"0={BAD}"),
        ("simulate", "carma-philly-t1", "--mig", f"{BAD}=1g.5gb"),
        ("simulate", "carma-philly-t1", "--station", BAD),
        ("export", "slurm", "quickstart", "out", "--partition", BAD, "--no-ask"),
    ],
    ids=[
        "run",
        "simulate",
        "simulate-truth",
        "simulate-plot",
        "cancel-state",
        "submit-env",
        "simulate-policy",
        "calibrate-mechanisms",
        "submit-workdir",
        "submit-time",
        "simulate-estimator",
        "simulate-mig-profile",
        "simulate-mig-gpu",
        "simulate-station",
        "export-partition",
    ],
)
def test_a_path_or_value_in_a_refusal_is_spelled_out(tmp_path: Path, args: tuple[str, ...]) -> None:
    """A path or value quoted in a refusal: spelled out (`\\xff`, `\\x1b`), never sent raw to
    the terminal (a profile or trace path was: the ESC of `\\x1b[2J` reached it) and never
    as Python's repr (`'\\udcff'`: the --plot and --state refusals said it so)."""
    done = gpudesk(tmp_path, *args)
    assert done.returncode != 0, done.stderr
    assert done.stderr.startswith("error: "), done.stderr
    assert "a\\xffb\\x1b[2J" in done.stderr, done.stderr  # spelled, quoted or not
    assert "\x1b" not in done.stderr and "\\udcff" not in done.stderr, done.stderr


def test_a_profile_guessed_for_a_missing_one_is_spelled_out(tmp_path: Path) -> None:
    folder = tmp_path / BAD
    folder.mkdir()
    (folder / "sweep.toml").write_text('name = "s"\n[[jobs]]\nname = "a"\ncommand = ["true"]\n')
    done = gpudesk(tmp_path, "run", str(folder / "sweep"))
    assert done.returncode == 2, done.stderr
    assert f"did you mean '{tmp_path}/a\\xffb\\x1b[2J/sweep.toml'?" in done.stderr, done.stderr
    assert "\x1b" not in done.stderr and "\\udcff" not in done.stderr, done.stderr


def test_select_compare_refuses_an_empty_metric_before_anything_runs(tmp_path: Path) -> None:
    profile = Path(__file__).resolve().parents[2] / "profiles" / "quickstart.toml"
    done = gpudesk(tmp_path, "select", "compare", str(profile), "--metric", "")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: --metric: '' names no key"), done.stderr
    assert not (tmp_path / "state" / "gpudesk").exists()  # no engine was started


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("history", "--limit", "1e23"), "'1e23' is not a whole number"),
        (("queue", "--limit", "1.5"), "'1.5' is not a whole number"),
        (("history", "--limit", "0"), "0 is not in the range x>=1"),
        (("queue", "--all", "--limit", "0"), "0 is not in the range x>=1"),
    ],
    ids=["history-float", "queue-float", "history-none", "queue-none"],
)
def test_a_limit_that_is_no_count_says_what_is_wrong_with_it(
    tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    """Before: `1e23` was "not a valid int range", and a number past SQLite's ids reached the
    engine, which answered "'limit' must be a positive integer" (its wire field's name)."""
    done = gpudesk(tmp_path, *args)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "'limit'" not in done.stderr, done.stderr


@pytest.mark.parametrize("command", [("history",), ("queue", "--all")])
def test_a_limit_past_any_stores_ids_is_every_job(
    engine: EngineHandle, tmp_path: Path, command: tuple[str, ...]
) -> None:
    """`--limit 10^29` was refused as "not in the range 1<=x<=9223372036854775807", SQLite's
    own bound said to a user who meant "all of them"; it lists every job (the engine in the
    fixture's GPUDESK_HOME, stopped after)."""
    assert gpudesk(tmp_path, "submit", "--hold", "--", "true").returncode == 0
    done = gpudesk(tmp_path, *command, "--limit", "1" + "0" * 29)
    assert done.returncode == 0, done.stderr
    assert gpudesk(tmp_path, *command, "--limit", "1000").stdout == done.stdout


@pytest.mark.parametrize("zone", ["UTC", "Asia/Tokyo", "America/Los_Angeles"])
@pytest.mark.parametrize("when", ["0001-01-01", "0001-01-01 00:00", "9999-12-31T23:59:59"])
def test_a_date_at_the_edge_of_the_calendar_is_a_time(zone: str, when: str) -> None:
    """`history --since 0001-01-01` means "everything" (the C library finds no local offset
    for year 1: it was refused as "not a time"); 9999-12-31 means nothing yet."""
    from gpudesk.cli.history import parse_since

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TZ", zone)
        time.tzset()
        try:
            start = parse_since(when)
        finally:
            patch.undo()
            time.tzset()
    assert (start < -6e10) if when.startswith("0001") else (start > 2.5e11)


def test_since_takes_the_time_words_begin_and_sacct_take() -> None:
    """`history --since` refused `5min`, `1w`, `20:08` and `now-5min`, which `--begin` (and
    sacct -S) take: the same units, a time of day (the last one past), and today."""
    import datetime as dt

    from gpudesk.cli.history import parse_since

    now = dt.datetime(2026, 12, 5, 21, 0, 30).timestamp()
    ago = {
        "5min": 300,
        "now-5min": 300,
        "1w": 7 * 86400,
        "2days": 2 * 86400,
        "1h30m": 5400,
        "20:08": 52 * 60 + 30,
        "today": 21 * 3600 + 30,
        "yesterday": 45 * 3600 + 30,  # its midnight, as GNU date reads it
    }
    for text, seconds in ago.items():
        assert now - parse_since(text, now) == pytest.approx(seconds), text
    # a time of day still ahead today is yesterday's
    assert now - parse_since("21:30", now) == pytest.approx(86400 - 29 * 60 - 30)
    for bad in ("5parsecs", "25:99", "now+5min"):
        with pytest.raises(ValueError, match="is not a time"):
            parse_since(bad, now)
