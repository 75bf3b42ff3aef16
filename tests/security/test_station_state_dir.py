"""A station started with another `--state-dir` than /var/lib/gpudesk (make_station keeps its
state in a temporary folder): its clients find the station's files where its engine keeps them,
learned from the engine (its `ping` names its state folder), never in the default folder. Real
users, a real system engine and the real CLI, run as root (the station's selection cache is
root's) and as a member (root only)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from station_fixture import Station

from gpudesk.paths import SYSTEM_STATE_DIR
from gpudesk.selection.apply import select
from gpudesk.selection.cache import SelectionCache
from gpudesk.workloads.data import make_digits

# one station (and user Python) for the module (its module-scoped fixture is made once)
pytestmark = pytest.mark.xdist_group("test_station_state_dir")

DIGITS = "gpudesk.workloads.data:make_digits"
# a pre-pass of the digits' train split (what `gpudesk run` queues: api.prepass.prepass_job)
PREPASS = ("select", "run", DIGITS, "--preset", "random-25", "--arg", 'split="train"', "--json")


def _as_root(station: Station, *args: str) -> subprocess.CompletedProcess[str]:
    """`gpudesk ARGS` as root (an admin's `sudo gpudesk`) on the station's socket."""
    argv = station.gpudesk_argv(*args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd="/")


def _cached(station: Station) -> str:
    """The key of the digits' random-25, cached by root in the station's state folder (as an
    admin's `sudo gpudesk select run` does there)."""
    cache = SelectionCache(station.state_dir / "selection")
    identity = {"factory": DIGITS, "kwargs": {"split": "train"}}
    made = select(make_digits(split="train"), "random-25", cache, identity=identity)
    return str(made.describe()["key"])


def test_the_stations_selection_cache_is_in_the_state_folder_its_engine_names(
    user_station: Station,
) -> None:
    """A selection cached in the station's state folder is the one root's `select list`, `show`
    and pre-pass find (GPUDESK_SOCKET names only the socket): they looked in
    /var/lib/gpudesk/selection, found nothing, and the pre-pass cached one there, making the
    host look like a station at the default socket to every client on it."""
    station = user_station
    assert station.state_dir.parent != SYSTEM_STATE_DIR.parent
    default_there = os.path.lexists(SYSTEM_STATE_DIR)
    key = _cached(station)

    # read first: before the fix they fail here, with nothing written in the default folder
    listed = _as_root(station, "select", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [e["key"] for e in json.loads(listed.stdout)["entries"]] == [key], listed.stdout
    shown = _as_root(station, "select", "show", key, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["key"] == key

    ran = _as_root(station, *PREPASS, "--seed", "0", "--no-record-reuse")
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert (result["key"], result["reused"]) == (key, True), ran.stdout
    assert os.path.lexists(SYSTEM_STATE_DIR) == default_there


def test_an_output_file_is_refused_in_the_state_folder_its_engine_names(
    user_station: Station,
) -> None:
    """Root's `history --output` into the station's state folder (beside its database) is refused
    as in any gpudesk home: only the default folder was guarded, and the file was written."""
    station = user_station
    target = station.state_dir / "emissions.csv"
    done = _as_root(station, "history", "--format", "codecarbon", "--output", str(target))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"inside gpudesk's home {station.state_dir}" in done.stderr, done.stderr
    assert not target.exists()


def test_a_member_is_told_the_stations_selection_cache_is_roots(user_station: Station) -> None:
    """A member's pre-pass on the station cannot cache its selection in the station's folder
    (root's): one paragraph naming that folder, exit 1, where a PermissionError's traceback
    named /var/lib/gpudesk; `select list` skips root's entry without calling it damaged and
    moved aside, and `select clear` leaves it, in one paragraph too."""
    station = user_station
    key = _cached(station)
    folder = str(station.state_dir / "selection")
    for argv in ((*PREPASS, "--seed", "1"), ("select", "clear")):
        done = station.gpudesk_as("ada", *argv)
        said = done.stderr
        assert done.returncode == 1, done.stdout + said
        assert said.startswith(f"error: the selection cache {folder} could not be changed"), said
        assert "the shared station's" in said and "Traceback" not in said, said
        assert str(SYSTEM_STATE_DIR) not in said and len(said.strip().splitlines()) == 1, said
    listed = station.gpudesk_as("ada", "select", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["entries"] == []
    assert f"entry {key} cannot be read: Permission denied" in listed.stderr, listed.stderr
    assert "damaged" not in listed.stderr
    assert (station.state_dir / "selection" / key).is_dir()
