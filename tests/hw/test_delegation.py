"""A system engine under systemd keeps its jobs' cgroups in its unit's delegated subtree
(gpudesk.hw.delegation): the path logic against a fake cgroup v2 tree (the kernel's cgroup file
system is the hardware boundary here), then for real where this host's v2 hierarchy is writable:
a process placed as systemd places the engine (`DelegateSubgroup=engine`) makes, fills, kills
and removes a job's cgroup beside its leaf."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudesk.hw import containment, delegation
from gpudesk.hw.containment import Containment

UNIT = "gpudesk.slice/gpudesk.service"


def fake_cgroup(folder: Path, *, procs: bool = True) -> Path:
    """A cgroup of the fake tree: the folder and the files the engine writes."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("cgroup.subtree_control", "cgroup.procs") if procs else ():
        (folder / name).write_text("")
    return folder


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A v2 hierarchy in tmp: a unit's cgroup with the engine's leaf; started by systemd."""
    mount = tmp_path / "cgroup"
    fake_cgroup(mount / UNIT)
    fake_cgroup(mount / UNIT / "engine")
    fake_cgroup(mount / UNIT / "jobs")
    monkeypatch.setenv("INVOCATION_ID", "0123456789abcdef0123456789abcdef")
    monkeypatch.delenv(containment.SWITCH_ENV, raising=False)
    return mount


def delegate(cgroup: Path) -> None:
    """Mark `cgroup` as systemd marks a delegated one (user.delegate: no root needed)."""
    try:
        os.setxattr(cgroup, "user.delegate", b"1")
    except OSError as exc:
        pytest.skip(f"the temporary folder's file system keeps no user xattrs: {exc}")


def placed(tmp_path: Path, cgroup: str) -> str:
    """A /proc/self/cgroup of a hybrid host (as this CI's) whose v2 line names `cgroup`."""
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(f"9:name=systemd:/\n4:memory:/{cgroup}\n0::/{cgroup}\n")
    return str(proc)


def test_in_its_units_leaf_the_engine_keeps_jobs_beside_it(tree: Path, tmp_path: Path) -> None:
    unit = tree / UNIT
    delegate(unit)
    home = tmp_path / "state"
    found = Containment.probe(home, mount=str(tree), proc_cgroup=placed(tmp_path, f"{UNIT}/engine"))

    assert found.base == unit / "jobs", found.describe()
    assert found.path(7, 2) == unit / "jobs" / "job-7-2"
    assert found.prepare(7, 2) == str(unit / "jobs" / "job-7-2")
    assert (unit / "jobs" / "job-7-2").is_dir()
    # the controllers are offered from the unit's cgroup down (it holds no process)
    assert (unit / "cgroup.subtree_control").read_text() == "+memory"
    assert (unit / "jobs" / "cgroup.subtree_control").read_text() == "+memory"
    assert not (tree / containment.home_folder(str(tree), home).name).exists()
    assert "not in the unit" not in found.describe()


def test_at_the_top_of_its_delegated_cgroup_it_keeps_the_raw_path_and_says_why(
    tree: Path, tmp_path: Path
) -> None:
    """systemd before 254 starts it in the unit's cgroup itself: turning controllers on there
    would stop the next start of the unit, so the jobs' cgroups go where they go without
    systemd."""
    delegate(tree / UNIT)
    home = tmp_path / "state"
    fake_cgroup(containment.home_folder(str(tree), home))
    found = Containment.probe(home, mount=str(tree), proc_cgroup=placed(tmp_path, UNIT))

    assert found.base == containment.home_folder(str(tree), home)
    assert "DelegateSubgroup=engine" in found.describe()
    assert (tree / UNIT / "cgroup.subtree_control").read_text() == ""


@pytest.mark.parametrize("case", ["not delegated", "not started by systemd"])
def test_without_a_delegated_subtree_the_raw_path_is_kept(
    case: str, tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if case == "not started by systemd":
        delegate(tree / UNIT)
        monkeypatch.delenv("INVOCATION_ID")
    home = tmp_path / "state"
    fake_cgroup(containment.home_folder(str(tree), home))
    found = Containment.probe(home, mount=str(tree), proc_cgroup=placed(tmp_path, f"{UNIT}/engine"))

    assert found.base == containment.home_folder(str(tree), home)
    if case == "not delegated":
        assert "does not delegate" in found.describe() and "Delegate=yes" in found.describe()
    else:
        assert found.note == ""


def test_the_v2_line_of_proc_self_cgroup() -> None:
    assert delegation.unified_path("1:cpu:/\n0::/system.slice/x.service\n") == (
        "/system.slice/x.service"
    )
    assert delegation.unified_path("4:memory:/a\n") is None  # v1 only


# --------------------------------------------------------------- for real, on this host's tree
ENGINE = """
import json, os, subprocess, sys
from pathlib import Path
from gpudesk.hw.containment import Containment, members
found = Containment.probe(Path(sys.argv[1]))
cgroup = found.prepare(1, 1)
child = subprocess.Popen(["sleep", "60"])
(Path(cgroup) / "cgroup.procs").write_text(str(child.pid))
inside = members(Path(cgroup))
left = found.release(1, 1)
child.wait()
found.close()
print(json.dumps({"base": str(found.base), "cgroup": cgroup, "inside": inside,
                  "child": child.pid, "left": left, "gone": not Path(cgroup).exists(),
                  "own": open("/proc/self/cgroup").read()}))
"""


@pytest.fixture
def unit_cgroup() -> Iterator[Path]:
    """A unit's cgroup in this host's real v2 hierarchy, delegated as systemd does it (root's
    trusted.delegate), with the engine's leaf; removed afterwards."""
    mount = containment.v2_mount()
    if mount is None:
        pytest.skip("no cgroup v2 hierarchy is mounted here")
    top = Path(mount) / f"gpudesk-test-{uuid.uuid4().hex[:8]}.slice"
    unit = top / "gpudesk.service"
    try:
        (unit / "engine").mkdir(parents=True)
    except OSError as exc:
        pytest.skip(f"this host's cgroup v2 hierarchy ({mount}) is not writable: {exc}")
    try:
        os.setxattr(unit, "trusted.delegate", b"1")
    except OSError as exc:
        pytest.skip(f"cannot mark a cgroup delegated as systemd does (trusted.delegate): {exc}")
    yield unit
    for folder in (unit / "jobs", unit / "engine", unit, top):
        with contextlib.suppress(OSError):
            folder.rmdir()


def test_a_real_job_cgroup_is_made_filled_and_removed_in_the_delegated_subtree(
    unit_cgroup: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "INVOCATION_ID": "0123456789abcdef0123456789abcdef"}
    env.pop(containment.SWITCH_ENV, None)
    # systemd's DelegateSubgroup=engine: the process starts in the leaf
    leaf = unit_cgroup / "engine" / "cgroup.procs"
    placing = f'echo $$ > "{leaf}" && exec "$0" -c "$1" "$2"'
    done = subprocess.run(
        ["sh", "-c", placing, sys.executable, ENGINE, str(tmp_path / "state")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["base"] == str(unit_cgroup / "jobs"), seen
    assert seen["cgroup"] == str(unit_cgroup / "jobs" / "job-1-1")
    assert seen["inside"] == [seen["child"]] and seen["left"] == 1
    assert seen["gone"] and not (unit_cgroup / "jobs").exists()  # close() removed the folder
    mount = containment.v2_mount()
    assert f"0::/{unit_cgroup.relative_to(mount)}/engine" in seen["own"]


def test_jobs_started_before_the_upgrade_are_found_in_their_old_cgroups(
    tree: Path, tmp_path: Path
) -> None:
    """An engine of the raw path upgraded to the delegated unit while jobs run: their cgroups
    stay where they were made, and the new engine signals, sweeps and removes them there."""
    unit = tree / UNIT
    delegate(unit)
    home = tmp_path / "state"
    raw = containment.home_folder(str(tree), home)
    (raw / "job-5-1").mkdir(parents=True)  # still running
    (raw / "job-4-1").mkdir()  # ended while no engine ran
    found = Containment.probe(home, mount=str(tree), proc_cgroup=placed(tmp_path, f"{UNIT}/engine"))

    assert found.base == unit / "jobs"
    assert found.path(5, 1) == raw / "job-5-1"
    assert found.path(6, 1) == unit / "jobs" / "job-6-1"
    found.sweep({(5, 1)})
    assert (raw / "job-5-1").is_dir() and not (raw / "job-4-1").exists()
    (raw / "job-5-1").rmdir()  # it settled
    found.close()
    assert not raw.exists()
