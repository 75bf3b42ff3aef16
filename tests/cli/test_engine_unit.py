"""`gpudesk engine print-unit`: the station engine's systemd unit comes with the package, its
ExecStart naming the Python that printed it, its cgroup delegated to the engine."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Run

from gpudesk.cli.engine_unit import systemd_word
from gpudesk.diskspace import EXIT_DISK_FULL
from gpudesk.engine.daemon import EXIT_BAD_HOME


def keys(unit: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in unit.splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def test_the_unit_runs_this_python_as_the_station_engine_in_its_delegated_cgroup(
    gpudesk: Run,
) -> None:
    code, out, err = gpudesk("engine", "print-unit", "--group", "lab", "--state-dir", "/srv/gd")
    assert code == 0, err
    unit = keys(out)
    (start,) = unit["ExecStart"]
    argv = shlex.split(start)
    assert argv[0] == sys.executable and argv[argv.index("-m") + 1] == "gpudesk.engine.daemon"
    assert argv[argv.index("--group") + 1] == "lab"
    assert argv[argv.index("--state-dir") + 1] == "/srv/gd"
    # no admin group named: the engine's own default (gpudesk-admin where it exists, else root
    # alone), as `engine start --system`; a unit naming a missing group exited 2 and stayed down
    assert "--admin-group" not in argv
    assert unit["Delegate"] == ["yes"] and unit["DelegateSubgroup"] == ["engine"]
    assert unit["Slice"] == ["gpudesk.slice"] and unit["KillMode"] == ["process"]
    assert all(doc.startswith("https://") for doc in unit["Documentation"])
    assert "@" not in start
    # every status the engine exits with when a restart cannot help (bad arguments, another
    # engine, an unusable home, a full disk at start) stops systemd restarting it
    (prevent,) = unit["RestartPreventExitStatus"]
    assert set(prevent.split()) == {"2", "3", str(EXIT_BAD_HOME), str(EXIT_DISK_FULL)}


def test_an_admin_group_named_is_passed_on(gpudesk: Run) -> None:
    code, out, err = gpudesk("engine", "print-unit", "--admin-group", "labadm")
    assert code == 0, err
    (start,) = keys(out)["ExecStart"]
    argv = shlex.split(start)
    assert argv[argv.index("--admin-group") + 1] == "labadm"


def test_systemd_reads_the_printed_unit(gpudesk: Run, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here")
    code, out, _ = gpudesk("engine", "print-unit")
    assert code == 0
    unit = tmp_path / "gpudesk.service"
    unit.write_text(out)
    done = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    # an older systemd warns about DelegateSubgroup= alone (the unit's comment says why)
    warnings = [line for line in done.stderr.splitlines() if line.strip()]
    assert all("DelegateSubgroup" in line for line in warnings), done.stderr


def test_a_word_systemd_would_split_or_expand_is_quoted() -> None:
    assert systemd_word("/opt/gpudesk/venv/bin/python") == "/opt/gpudesk/venv/bin/python"
    assert systemd_word("/opt/my envs/python") == '"/opt/my envs/python"'
    assert systemd_word("/srv/100%/$HOME") == "/srv/100%%/$$HOME"
    assert systemd_word('a"b\\c') == '"a\\"b\\\\c"'


def test_the_default_folders_are_made_by_systemd_only_for_the_default_paths(gpudesk: Run) -> None:
    """/var/lib/gpudesk or /run/gpudesk makes every client take the host for a station at the
    default socket: a unit for other paths must not make them (the engine makes its own)."""
    made = ("StateDirectory", "RuntimeDirectory", "RuntimeDirectoryPreserve")
    code, out, _ = gpudesk("engine", "print-unit")
    assert code == 0 and all(key in keys(out) for key in made)
    code, out, _ = gpudesk("engine", "print-unit", "--state-dir", "/srv/gd", "--socket", "/srv/r/s")
    assert code == 0 and not any(key in keys(out) for key in made)
    code, out, _ = gpudesk("engine", "print-unit", "--state-dir", "/srv/gd")
    assert code == 0 and "StateDirectory" not in keys(out)
    assert keys(out)["RuntimeDirectory"] == ["gpudesk"]
    code, out, _ = gpudesk("engine", "print-unit", "--socket", "/srv/r/s")
    assert code == 0 and "RuntimeDirectory" not in keys(out)
    assert keys(out)["StateDirectory"] == ["gpudesk"]
