"""A station started with another `--state-dir` than /var/lib/gpudesk (make_station keeps its
state in a temporary folder): its clients find the station's files where its engine keeps them,
learned from the engine (its `ping` names its state folder), never in the default folder; a
member's selection cache is her own, in her gpudesk home (SelectionCache.used_with). Real users,
a real system engine and the real CLI, run as root (the station's selection cache is root's) and
as a member (root only)."""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
from pathlib import Path

import pytest
from station_fixture import Station

from gpudesk.paths import SYSTEM_STATE_DIR
from gpudesk.profile import load_profile
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


def test_the_stations_selection_cache_is_roots_alone(user_station: Station) -> None:
    """An admin's `sudo gpudesk select run` (umask 022) makes the station's cache 0700: it was
    0755 in the 0711 state folder, and every member listed root's selections and datasets."""
    station = user_station
    roots = station.state_dir / "selection"
    subprocess.run(["rm", "-rf", "--", str(roots)], check=True)
    umask = ["sh", "-c", 'umask 022 && exec "$@"', "sh"]
    ran = subprocess.run(
        [*umask, *station.gpudesk_argv(*PREPASS, "--seed", "5")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    st = os.lstat(roots)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700), oct(st.st_mode)
    listed = station.run_as("ada", "ls", str(roots))
    assert listed.returncode != 0 and "Permission denied" in listed.stderr, listed
    subprocess.run(["rm", "-rf", "--", str(roots)], check=True)  # the others' tests cache in it


def test_roots_selection_run_with_the_station_down_makes_no_default_state_folder(
    user_station: Station,
) -> None:
    """An admin's `select run` while the station's engine (another --state-dir and socket) is
    down: one paragraph saying the engine names the folder and to start it, exit 1. It cached
    the selection in /var/lib/gpudesk, made for it, and every client on the host then took the
    host for a station at the default socket (a member's `gpudesk queue` without GPUDESK_SOCKET
    said that station's engine was not running)."""
    if os.path.lexists(SYSTEM_STATE_DIR):
        pytest.skip(f"{SYSTEM_STATE_DIR} is there: root's cache there is the station's own")
    station = user_station
    station.stop()
    try:
        done = _as_root(station, *PREPASS, "--seed", "6")
    finally:
        station.start()
    said = done.stderr
    assert done.returncode == 1 and "Traceback" not in said, done.stdout + said
    assert "no engine answers at its socket to name it: start it first" in said, said
    assert len(said.strip().splitlines()) == 1, said
    made = os.path.lexists(SYSTEM_STATE_DIR)
    if made:  # by this test: the host must not stay a station at the default socket
        subprocess.run(["rm", "-rf", "--", str(SYSTEM_STATE_DIR)], check=True)
    assert not made


def test_engine_status_json_names_the_stations_folder_only_while_its_engine_says_it(
    user_station: Station,
) -> None:
    """Running, `engine status --json`'s `home` is the folder its engine names (`home_source`
    "engine"); stopped, it is null, `home_unknown` saying why, for root and for a member: it was
    /var/lib/gpudesk, the default, stated as the station's own (this station's is elsewhere)."""
    station = user_station
    station.stop()
    try:
        for done in (
            _as_root(station, "engine", "status", "--json"),
            station.gpudesk_as("ada", "engine", "status", "--json"),
        ):
            assert done.returncode == 3, done.stdout + done.stderr  # not running
            said = json.loads(done.stdout)
            assert (said["running"], said["kind"], said["socket"]) == (
                False,
                "system",
                str(station.socket),
            )
            assert said["home"] is None, said  # not /var/lib/gpudesk
            assert said["home_source"] is None and "--state-dir" in said["home_unknown"], said
    finally:
        station.start()
    said = json.loads(_as_root(station, "engine", "status", "--json").stdout)
    assert (said["running"], said["home"], said["home_source"], said["home_unknown"]) == (
        True,
        str(station.state_dir),
        "engine",
        None,
    ), said
    assert said["station"]["admins"] == f"a member of {station.admin_group}", said
    # whom it serves, as the text says it (its socket folder's group), by name for a script
    assert said["served_group"] == station.group, said
    said = json.loads(station.gpudesk_as("ada", "engine", "status", "--json").stdout)
    assert said["served_group"] == station.group, said
    # the text says whom it serves (its socket folder's group) and who its admins are
    serves = f"serves:  the members of {station.group}; admins: a member of {station.admin_group}"
    for done in (
        _as_root(station, "engine", "status"),
        station.gpudesk_as("ada", "engine", "status"),
    ):
        assert done.returncode == 0 and serves in done.stdout.splitlines(), done.stdout


def test_a_served_group_with_no_name_is_said_as_its_number(user_station: Station) -> None:
    """A socket folder whose group has no name (deleted from /etc/group after the engine
    started): the text and `--json` say its gid, the JSON as a number."""
    station = user_station
    nameless = next(gid for gid in range(54_321, 60_000) if not _group_named(gid))
    given = os.stat(station.socket.parent).st_gid
    os.chown(station.socket.parent, -1, nameless)
    try:
        said = json.loads(_as_root(station, "engine", "status", "--json").stdout)
        text = _as_root(station, "engine", "status").stdout
    finally:
        os.chown(station.socket.parent, -1, given)
    assert said["served_group"] == nameless, said
    assert f"serves:  the members of group {nameless} (a group with no name)" in text, text


def _group_named(gid: int) -> bool:
    import grp

    try:
        grp.getgrgid(gid)
    except KeyError:
        return False
    return True


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (root's cache), by its path there, with its bytes."""
    return {str(f.relative_to(folder)): f.read_bytes() for f in folder.rglob("*") if f.is_file()}


def _member_cache(station: Station, role: str) -> Path:
    """A member's own selection cache on the station: in her personal gpudesk home, the XDG
    default under the HOME her login gets (runuser gives the password database's)."""
    home = Path(pwd.getpwnam(station.users[role].name).pw_dir)
    return home / ".local" / "state" / "gpudesk" / "selection"


def test_a_members_selections_are_cached_in_her_own_home(user_station: Station) -> None:
    """A member's `select run` on the station caches in her own gpudesk home (hers, each entry
    0700), a second run reuses it, `select list` and `clear` see hers alone; root's cache is
    neither read nor changed. Before, her run failed: it wrote root's, in the state folder."""
    station = user_station
    key = _cached(station)
    roots = station.state_dir / "selection"
    before = _files(roots)
    mine, ada = _member_cache(station, "ada"), station.users["ada"]
    for reused in (False, True):
        done = station.gpudesk_as("ada", *PREPASS, "--seed", "0")
        assert done.returncode == 0, done.stdout + done.stderr
        result = json.loads(done.stdout)
        # the key root's entry has: the same selection, computed again rather than read there
        assert (result["key"], result["reused"]) == (key, reused), done.stdout
    st = os.lstat(mine / key)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (ada.uid, 0o700), oct(st.st_mode)
    listed = station.gpudesk_as("ada", "select", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert key in [e["key"] for e in json.loads(listed.stdout)["entries"]], listed.stdout
    assert "cannot be read" not in listed.stderr, listed.stderr
    cleared = station.gpudesk_as("ada", "select", "clear")
    assert cleared.returncode == 0, cleared.stdout + cleared.stderr
    assert not (mine / key).exists()
    assert _files(roots) == before and (roots / key).is_dir()
    # root's commands keep the station's: they never look in a member's folder
    listed = _as_root(station, "select", "list", "--json")
    assert [e["key"] for e in json.loads(listed.stdout)["entries"]] == [key], listed.stdout


def test_a_members_gpudesk_home_made_by_her_selection_cache_is_private(
    user_station: Station,
) -> None:
    """Her first `select run` makes her gpudesk home (under her shell's umask 022) 0700, as a
    personal engine makes its home, and sets an existing 0755 one so: it was 0755, and every
    user of the host listed her selections' keys and her datasets' index."""
    station = user_station
    home = _member_cache(station, "ada").parent
    subprocess.run(["rm", "-rf", "--", str(home)], check=True)
    umask = ("sh", "-c", 'umask 022 && exec "$@"', "sh")
    for seed in ("3", "4"):
        done = station.run_as("ada", *umask, *station.gpudesk_argv(*PREPASS, "--seed", seed))
        assert done.returncode == 0, done.stdout + done.stderr
        st = os.lstat(home)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (station.users["ada"].uid, 0o700)
        home.chmod(0o755)  # as a gpudesk before this left it: the next run sets it back


def test_a_member_whose_own_cache_cannot_be_written_is_told_how_to_move_it(
    user_station: Station,
) -> None:
    """Her cache in a folder she cannot write (XDG_STATE_HOME=/): one paragraph naming it and
    XDG_STATE_HOME, exit 1, no traceback; nothing is written in root's cache instead."""
    station = user_station
    roots = station.state_dir / "selection"
    before = _files(roots) if roots.exists() else {}
    done = station.gpudesk_as("ada", *PREPASS, "--seed", "2", env=["XDG_STATE_HOME=/"])
    said = done.stderr
    assert done.returncode == 1, done.stdout + said
    assert said.startswith("error: the selection cache /gpudesk/selection could not be"), said
    assert "set XDG_STATE_HOME to a folder of yours" in said and "Traceback" not in said, said
    assert len(said.strip().splitlines()) == 1, said
    assert (_files(roots) if roots.exists() else {}) == before


# A profile whose training job reads its dataset's 25 % random selection through the station's
# shared loader (no fallback: the producer must serve it) and prints the ids it read.
PROFILE = """
name = "member-selection"
[datasets.syn]
factory = "gpudesk.workloads.synthetic:make_dataset"
args = {{ size = 48, shape = [4] }}
batch_size = 8
workers = 0
selection = "random-25"
[[jobs]]
name = "train"
dataset = "syn"
max_attempts = 1
command = [{python}, "-c", {script}]
"""
READER = (
    "import json; from gpudesk.loader import SharedLoader; "
    "ids = [i for (x, y), ii in SharedLoader('syn', with_ids=True, fallback=False) "
    "for i in ii.tolist()]; print(json.dumps({'ids': sorted(ids)}))"
)


def test_a_members_run_of_a_profile_with_a_selection_caches_it_in_her_home(
    user_station: Station,
) -> None:
    """A member's `gpudesk run` of a profile with a `selection`: its pre-pass job runs as her
    and caches in her own home, her client records the job's cost there, the training job is
    submitted and reads the selection from her producer (which runs as her, its HOME from the
    password database, and reuses her entry); root's cache is untouched. Before, the pre-pass
    failed on root's folder and no training job was submitted."""
    station = user_station
    ada = station.users["ada"]
    folder = station.state_dir.parent / "ada-profile"  # her jobs run here: 0755, as its parent
    folder.mkdir(mode=0o755, exist_ok=True)
    profile = folder / "sel.toml"
    profile.write_text(PROFILE.format(python=json.dumps(station.python), script=json.dumps(READER)))
    profile.chmod(0o644)
    # an admin registers a station's datasets (its producer runs code); a member repeats them
    specs = [d.loader.to_dict() for d in load_profile(profile).datasets.values() if d.loader]
    station.ok(None, "datasets", datasets=specs)
    roots = station.state_dir / "selection"
    before = _files(roots) if roots.exists() else {}

    done = station.gpudesk_as("ada", "run", str(profile))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    jobs = {j["name"]: j for j in station.ok(None, "jobs")["jobs"]}
    prepass, train = jobs["prepass-syn-random-25"], jobs["train"]
    assert prepass["user"] == train["user"] == ada.name, (prepass, train)
    assert (prepass["state"], train["state"]) == ("succeeded", "succeeded"), (prepass, train)
    read = Path(train["log"]).read_text()
    assert len(json.loads(read.splitlines()[-1])["ids"]) == 12, read  # 25 % of 48
    [entry] = [
        e
        for e in SelectionCache(_member_cache(station, "ada")).entries()
        if e.method == "random" and len(e.order) == 48
    ]
    assert entry.cost.job == prepass["id"]  # recorded by her client, in her cache
    assert entry.training_uses == 1, entry.reused_by  # her producer served it from there
    assert (_files(roots) if roots.exists() else {}) == before


def test_a_members_detached_run_records_its_prepass_in_her_home_when_she_attaches(
    user_station: Station,
) -> None:
    """A member's `gpudesk run --detach` of a profile with a `selection`: its pre-pass job and
    its training job, after it, are queued at once and run as her; the pre-pass caches in her
    own home; her `--attach` then records the job's cost there, in her process (no new path
    for root: the engine never writes a member's cache); root's cache is untouched."""
    station = user_station
    folder = station.state_dir.parent / "ada-detached"  # her jobs run here: 0755, as its parent
    folder.mkdir(mode=0o755, exist_ok=True)
    profile = folder / "sel.toml"
    text = PROFILE.format(python=json.dumps(station.python), script=json.dumps(READER))
    # not the entry nor the loader of the test above (its producer may still serve it)
    for was, now in (("size = 48", "size = 40"), ("syn", "syd"), ("sydthetic", "synthetic")):
        text = text.replace(was, now)
    profile.write_text(text)
    profile.chmod(0o644)
    specs = [d.loader.to_dict() for d in load_profile(profile).datasets.values() if d.loader]
    station.ok(None, "datasets", datasets=specs)
    roots = station.state_dir / "selection"
    before = _files(roots) if roots.exists() else {}

    done = station.gpudesk_as("ada", "run", str(profile), "--detach", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    detached = json.loads(done.stdout)
    waited = station.gpudesk_as("ada", "wait", "--group", detached["group"])
    assert waited.returncode == 0, waited.stdout + waited.stderr
    jobs = {j["id"]: j for j in station.ok(None, "jobs", group=detached["group"])["jobs"]}
    (prepass_id,), (train_id,) = detached["prepass_ids"], detached["ids"]
    assert jobs[train_id]["spec"]["after"] == [prepass_id]
    assert {j["user"] for j in jobs.values()} == {station.users["ada"].name}

    def entry() -> tuple[int | None, float | None]:
        [found] = [
            e
            for e in SelectionCache(_member_cache(station, "ada")).entries()
            if e.method == "random" and len(e.order) == 40
        ]
        return found.cost.job, found.cost.job_wall_s

    # nothing waited for the pre-pass: it named itself (as her), its measurement not recorded
    assert entry() == (prepass_id, None)
    attached = station.gpudesk_as("ada", "run", str(profile), "--attach")
    assert attached.returncode == 0, attached.stdout + attached.stderr
    job, wall = entry()  # recorded by her client, in her cache
    assert job == prepass_id and wall is not None and wall > 0
    assert (_files(roots) if roots.exists() else {}) == before


# A member's script asking for a loader no producer serves; `waited`: as a job the engine started
# a producer for does (GPUDESK_DATASET), its wait for it cut short
NO_LOADER = (
    "import gpudesk.loader.consumer as c; from gpudesk.loader.protocol import LoaderError\n"
    "c.START_WAIT_S = 0.2\n"
    "try: c.SharedLoader('nosuch', fallback=False)\n"
    "except LoaderError as exc: print(exc)\n"
)


@pytest.mark.parametrize("waited", [False, True])
def test_a_members_missing_loader_names_the_station_not_the_default_folder(
    user_station: Station, waited: bool
) -> None:
    """SharedLoader's error on a station started with another --state-dir: it said "for
    GPUDESK_HOME /var/lib/gpudesk", a folder and a variable the member has nothing to do with,
    told her to `gpudesk loader serve` (refused on a station), and sent her to
    /var/lib/gpudesk/loaders/NAME.log for the producer's log."""
    station = user_station
    env = [f"GPUDESK_SOCKET={station.socket}", *(["GPUDESK_DATASET=nosuch"] if waited else [])]
    done = station.run_as("ada", "env", *env, station.python, "-P", "-c", NO_LOADER)
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in said, said
    assert f"is running for the station's engine at {station.socket}" in said, said
    assert str(SYSTEM_STATE_DIR) not in said and "GPUDESK_HOME" not in said, said
    if waited:
        assert "see loaders/nosuch.log in the station's state folder (root's" in said, said
    else:
        assert "loader serve" not in said and "an admin registered" in said, said


REGISTERED = """
[datasets.reg]
factory = "gpudesk.workloads.synthetic:make_dataset"
args = {{ size = 8, shape = [2] }}
[[jobs]]
name = "train"
dataset = "reg"
command = [{python}, "-c", "pass"]
"""


def test_an_admin_registers_a_profiles_datasets_for_the_members_runs(
    user_station: Station,
) -> None:
    """A member's `gpudesk run` of a profile whose dataset no admin registered is refused, and
    told how an admin registers it: `sudo gpudesk loader register PROFILE`, which registers its
    [datasets] and submits nothing. Before, the refusal said only that root may, and no command
    registered datasets but an admin's `gpudesk run`, which ran the profile's jobs as root."""
    station = user_station
    folder = station.state_dir.parent / "ada-register"
    folder.mkdir(mode=0o755, exist_ok=True)
    profile = folder / "reg.toml"
    profile.write_text(REGISTERED.format(python=json.dumps(station.python)))
    profile.chmod(0o644)
    refused = station.gpudesk_as("ada", "run", str(profile))
    said = refused.stderr
    assert refused.returncode == 1 and "Traceback" not in said, refused.stdout + said
    assert f"(`sudo gpudesk loader register {profile}`)" in said, said
    assert "reg" not in station.ok(None, "datasets", datasets=[])["datasets"]
    done = _as_root(station, "loader", "register", str(profile))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == f"registered with the station's engine at {station.socket}: reg\n"
    assert "reg" in station.ok(None, "datasets", datasets=[])["datasets"]
    assert not [j for j in station.ok(None, "jobs")["jobs"] if j["user"] == "root"]


def test_a_members_engine_start_on_a_stopped_station_says_how_to_start_that_one(
    user_station: Station,
) -> None:
    """A member's `gpudesk engine start` where the station's engine (at another socket than the
    default) is down: exit 3, as every command of hers then, and the admin's command names the
    station's socket. It said `sudo gpudesk engine start --system`, exit 1: run so, that started
    an engine at the default socket, another station, and left this one down."""
    station = user_station
    station.stop()
    try:
        done = station.gpudesk_as("ada", "engine", "start")
    finally:
        station.start()
    said = done.stderr
    assert done.returncode == 3, done.stdout + said
    assert f"`sudo gpudesk engine start --system --socket {station.socket}` with its" in said, said
