"""Slurm from a system engine (root), tried as a hostile member of the group would (issue 35,
findings 2, 3, 4, 5 and 8): real local users, a real system engine (tests/shared/
station_fixture.py) and the real single-node test Slurm (tests/slurm_cluster.py).

The site's PATH (the engine's own) starts with a folder of shims for every Slurm client: each
records who ran it (the record file's owner, which the kernel sets) and the environment it
started with (/proc/PID/environ), then runs the real one. Every Slurm client the engine runs for
ada's jobs must be hers (uid), found there, with an environment the engine built.

One cluster and one station serve the module (each costs seconds); each test uses its own jobs.
"""

from __future__ import annotations

import base64
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from local_users import LocalUser
from shared.station_fixture import Station, make_station
from slurm_cluster import (
    PARTITION,
    SlurmCluster,
    missing_reason,
    running_cluster,
    slurm_program,
)
from store_refusal import store_refusing

# its module-scoped fixture is made once: the module stays on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_slurm_trust")

CLIENTS = ("sbatch", "squeue", "scancel", "scontrol", "sinfo", "sacct")
SENT = "GPUDESK_SENT_BY_ADA"  # a variable only her request carries

SHIM = """#!/bin/sh
# a site shim: who ran {name}, with what environment; then the real one
record=$(mktemp {records}/{name}.XXXXXX) && cat /proc/$$/environ > "$record"
if [ "{name}" = sbatch ] && [ -s {forge} ]; then
    "{real}" "$@" > /dev/null || exit 1
    cat {forge}
    exit 0
fi
exec "{real}" "$@"
"""


@dataclass
class Site:
    """The cluster, the station, and the site's shim folder."""

    cluster: SlurmCluster
    station: Station
    records: Path  # one file per client run: owned by whoever ran it, its environ inside
    forge: Path  # an id written here is what the site's sbatch prints (a lying sbatch)
    markers: Path  # world-writable: what a user's own programs leave when they run
    shims: Path

    def user(self, role: str) -> LocalUser:
        return self.station.users[role]

    def home(self, role: str) -> Path:
        return Path(os.path.expanduser(f"~{self.user(role).name}"))

    def as_user(self, role: str, *argv: str, env: dict[str, str] | None = None) -> str:
        """Run `argv` as `role`'s user with the cluster's SLURM_CONF."""
        environment = {"PATH": "/usr/bin:/bin", "SLURM_CONF": str(self.cluster.conf)}
        environment.update(env or {})
        done = subprocess.run(
            ["runuser", "-u", self.user(role).name, "--", "env", "-i"]
            + [f"{k}={v}" for k, v in environment.items()]
            + list(argv),
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
            check=False,
        )
        assert done.returncode == 0, f"{argv} as {role}: {done.stderr}"
        return done.stdout

    def write_as(self, role: str, path: Path, text: str, mode: int = 0o644) -> None:
        """A file of `role`'s (and its folder), made by `role`."""
        name = self.user(role).name
        script = 'mkdir -p "$(dirname "$1")" && cat > "$1" && chmod "$2" "$1"'
        subprocess.run(
            ["runuser", "-u", name, "--", "sh", "-c", script, "w", str(path), oct(mode)[2:]],
            input=text,
            text=True,
            check=True,
            cwd="/",
            timeout=30,
        )

    def runs(self) -> list[tuple[str, int, dict[str, str]]]:
        """Every recorded client run: (program, uid, environment)."""
        found = []
        for record in sorted(self.records.iterdir()):
            raw = record.read_bytes().split(b"\0")
            env = dict(
                item.decode(errors="replace").partition("=")[::2] for item in raw if b"=" in item
            )
            found.append((record.name.split(".")[0], record.stat().st_uid, env))
        return found

    def clear_records(self) -> None:
        for record in self.records.iterdir():
            record.unlink()

    def submit(self, role: str, job: dict, env: dict[str, str] | None = None, **cluster) -> int:
        placed = {"cluster": {"kind": "slurm", "partition": PARTITION, **cluster}, **job}
        return self.station.submit(role, placed, env=env)

    def show(self, role: str | None, job_id: int) -> dict:
        return self.station.ok(role, "show", job=job_id)["job"]

    def wait_state(self, job_id: int, *states: str, timeout: float = 60.0) -> dict:
        return self.station.wait_state(job_id, *states, timeout=timeout)


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    if missing_reason() is not None:
        pytest.skip(missing_reason() or "")
    top = Path(tempfile.mkdtemp(prefix="gdslurm-", dir="/tmp"))
    os.chmod(top, 0o755)  # the users read the cluster's slurm.conf below
    try:
        shims, records, markers = top / "site-bin", top / "records", top / "markers"
        forge = top / "forge"
        for folder in (shims, records, markers):
            folder.mkdir()
        os.chmod(shims, 0o755)  # root's alone to write
        os.chmod(records, 0o1777)  # anyone adds a record; its owner says who
        os.chmod(markers, 0o1777)
        forge.write_text("")
        forge.chmod(0o644)
        path = os.environ.get("PATH", "/usr/bin:/bin")
        for name in CLIENTS:
            shim = shims / name
            shim.write_text(
                SHIM.format(name=name, records=records, forge=forge, real=slurm_program(name, path))
            )
            shim.chmod(0o755)
        cluster_root = top / "cluster"
        with running_cluster(cluster_root) as cluster:
            engine_env = {
                "PATH": f"{shims}:{path}",
                "SLURM_CONF": str(cluster.conf),
                "GPUDESK_SLURM_POLL_S": "0.3",
            }
            for station in make_station(engine_env=engine_env):
                yield Site(cluster, station, records, forge, markers, shims)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _ended(site: Site, job_id: int, timeout: float = 60.0) -> dict:
    return site.wait_state(job_id, "succeeded", "failed", "cancelled", timeout=timeout)


def _markers(site: Site) -> list[tuple[str, int]]:
    return [(m.name, m.stat().st_uid) for m in site.markers.iterdir()]


# ------------------------------------------------------------------------ finding 2
def test_her_own_slurm_clients_on_her_path_never_run(site: Site) -> None:
    """Her `sinfo`, `scontrol`, `sbatch` … first on her PATH: the engine runs the site's."""
    mine = site.home("ada") / "bin"
    for name in CLIENTS:
        site.write_as(
            "ada",
            mine / name,
            f'#!/bin/sh\ntouch {site.markers}/{name}-ran-as-$(id -u)\nexec /usr/bin/{name} "$@"\n',
            0o755,
        )
    submitted = site.station.call(
        "ada",
        "submit",
        jobs=[
            {
                "name": "path",
                "command": ["true"],
                "cluster": {"kind": "slurm", "partition": PARTITION},
            }
        ],
        env={"PATH": f"{mine}:/usr/bin:/bin", "SLURM_CONF": str(site.cluster.conf)},
    )
    ran = _markers(site)
    assert not [m for m in ran if "-ran-as-" in m[0]], f"her own programs ran: {ran}"
    assert submitted.get("ok"), submitted
    assert _ended(site, submitted["result"]["ids"][0])["state"] == "succeeded"


# ------------------------------------------------------------------------ finding 3
def test_a_slurm_conf_she_writes_is_read_by_none_of_roots_processes(site: Site) -> None:
    """Her slurm.conf names a PluginDir of hers whose auth plugin leaves a marker saying who
    loaded it: only her own processes may (it is her conf), never root."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: the test builds her plugin")
    plugins = site.home("ada") / "plugins"
    source = Path(tempfile.mkdtemp(prefix="gdplug-", dir="/tmp"))
    try:
        (source / "evil.c").write_text(
            "#include <stdio.h>\n#include <unistd.h>\n#include <fcntl.h>\n"
            "__attribute__((constructor)) static void mark(void) {\n"
            "  char path[512];\n"
            f'  snprintf(path, sizeof path, "{site.markers}/plugin-loaded-by-%d", (int)getuid());\n'
            "  int fd = open(path, O_CREAT | O_WRONLY, 0644); if (fd >= 0) close(fd);\n}\n"
        )
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-o", str(source / "auth_none.so"), str(source / "evil.c")],
            check=True,
        )
        os.chmod(source, 0o755)
        site.as_user("ada", "mkdir", "-p", str(plugins))
        site.as_user("ada", "cp", str(source / "auth_none.so"), str(plugins / "auth_none.so"))
    finally:
        shutil.rmtree(source, ignore_errors=True)
    conf = site.home("ada") / "my-slurm.conf"
    site.write_as("ada", conf, site.cluster.conf.read_text() + f"PluginDir={plugins}\n")
    site.clear_records()
    refused = site.station.call(
        "ada",
        "submit",
        jobs=[
            {
                "name": "conf",
                "command": ["true"],
                "cluster": {"kind": "slurm", "partition": PARTITION, "conf": str(conf)},
            }
        ],
        env={"PATH": f"{site.shims}:/usr/bin:/bin"},
    )
    loaded = [m for m in _markers(site) if m[0].startswith("plugin-loaded-by-")]
    assert ("plugin-loaded-by-0", 0) not in loaded, f"root loaded her plugin: {loaded}"
    assert loaded, "her plugin was never loaded at all: the test proves nothing"
    assert refused.get("ok") is False, refused  # her conf's clients cannot talk to a cluster
    with_her_conf = [r for r in site.runs() if r[2].get("SLURM_CONF") == str(conf)]
    assert with_her_conf and all(uid == site.user("ada").uid for _, uid, _ in with_her_conf)


# ------------------------------------------------------------------------ finding 4
def _bobs_sleeper(site: Site) -> str:
    """A Slurm job of bob's, submitted by bob himself."""
    out = site.as_user(
        "bob", "sbatch", "--parsable", "-p", PARTITION, "-o", "/dev/null", "--wrap", "sleep 300"
    )
    bobs = out.strip().split(";")[0]
    assert bobs.isdigit(), out
    return bobs


def _slurm_state(site: Site, slurm_id: str) -> str:
    return site.cluster.run("squeue", "-h", "-t", "all", "-j", slurm_id, "-o", "%T").strip()


def test_a_fake_sbatch_cannot_make_her_job_stand_for_anothers(site: Site) -> None:
    """Her `sbatch` prints bob's Slurm id: it never runs; her cancel never cancels his job, and
    her job never shows his state or node."""
    bobs = _bobs_sleeper(site)
    fake = site.home("ada") / "fake"
    site.write_as("ada", fake / "sbatch", f"#!/bin/sh\necho {bobs}\n", 0o755)
    job_id = site.submit(
        "ada",
        {"name": "forged", "command": ["sleep", "120"]},
        env={"PATH": f"{fake}:/usr/bin:/bin"},
    )
    shown = site.show("ada", job_id)
    assert shown["slurm"]["job_id"] != bobs
    cancelled = site.station.ok("ada", "cancel", jobs=[job_id])["results"][0]
    assert cancelled["ok"], cancelled
    assert _ended(site, job_id)["state"] == "cancelled"
    assert _slurm_state(site, bobs) in ("RUNNING", "PENDING"), "ada's cancel reached bob's job"
    site.cluster.run("scancel", bobs, check=False)


def test_an_id_slurm_does_not_list_as_hers_is_refused(site: Site) -> None:
    """Even the site's sbatch is not believed blindly: an id Slurm lists as bob's is refused."""
    bobs = _bobs_sleeper(site)
    site.forge.write_text(f"{bobs}\n")
    try:
        refused = site.station.call(
            "ada",
            "submit",
            jobs=[
                {
                    "name": "lied",
                    "command": ["true"],
                    "cluster": {"kind": "slurm", "partition": PARTITION},
                }
            ],
            env={"PATH": "/usr/bin:/bin"},
        )
    finally:
        site.forge.write_text("")
    assert refused.get("ok") is False, refused
    assert "does not list it as a job of" in refused["error"]["message"]
    assert _slurm_state(site, bobs) in ("RUNNING", "PENDING")
    site.cluster.run("scancel", bobs, check=False)


# ------------------------------------------------------------------------ finding 5
@pytest.mark.timeout(240)
def test_a_cluster_profile_runs_end_to_end_as_its_owner(site: Site) -> None:
    """Submitted, followed to the end, its log read (by her and an admin, through the
    engine), another one cancelled: each Slurm client hers, her files hers."""
    ada = site.user("ada")
    site.clear_records()
    env = {
        "PATH": f"{site.home('ada')}/bin-none:/usr/bin:/bin",
        "LD_PRELOAD": f"{site.home('ada')}/evil.so",
        SENT: "yes",
    }
    job_id = site.submit(
        "ada",
        {"name": "hello", "command": [f'echo "hello from $(id -u) sent=${SENT}"'], "shell": True},
        env=env,
    )
    sleeper = site.submit("ada", {"name": "sleeper", "command": ["sleep", "120"]}, env=env)
    done = _ended(site, job_id)
    assert done["state"] == "succeeded", done
    assert site.wait_state(sleeper, "running")["slurm"]["node"] == "localhost"
    for reader in ("ada", "admin"):
        piece = site.station.ok(reader, "log", job=job_id)
        text = base64.b64decode(piece["data"]).decode()
        assert f"hello from {ada.uid} sent=yes" in text, piece
    cancelled = site.station.ok("ada", "cancel", jobs=[sleeper])["results"][0]
    assert cancelled["ok"], cancelled
    ended = _ended(site, sleeper)
    assert ended["state"] == "cancelled" and "cancelled by user" in ended["reason"], ended
    # her folder and everything in it are hers, outside root's state
    output = Path(done["log"])
    assert site.home("ada") in output.parents and site.station.state_dir not in output.parents
    folder = output.parent
    for path in (folder, *folder.iterdir()):
        assert path.stat().st_uid == ada.uid, path
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    # every Slurm client for her jobs: hers, the site's, with the engine's environment
    runs = site.runs()
    assert {name for name, _, _ in runs} >= {"sinfo", "sbatch", "squeue", "scancel"}, runs
    for name, uid, environ in runs:
        assert uid == ada.uid, f"{name} ran as uid {uid}"
        assert SENT not in environ and "LD_PRELOAD" not in environ, (name, environ)
        assert environ["PATH"].startswith(str(site.shims)), (name, environ["PATH"])
        assert environ["HOME"] == str(site.home("ada")), (name, environ)


def test_her_cancel_before_her_slurm_id_is_stored_reaches_slurm_as_hers(site: Site) -> None:
    """A cancel of her Slurm job while the engine's store refuses the Slurm id sbatch gave it
    (a real SQLite trigger on the system engine's store, as a disk that fills between the two
    writes): once the id is stored, the engine's scancel for it runs as her, with the site's
    clients and the engine's environment, never as root (and never without an id)."""
    ada = site.user("ada")
    refused = "BEFORE UPDATE OF submission ON slurm_jobs WHEN OLD.submission = ''"
    with store_refusing(site.station.state_dir / "gpudesk.db", refused):
        site.clear_records()
        job_id = site.submit("ada", {"name": "early", "command": ["sleep", "300"]})
        cancel = site.station.ok("ada", "cancel", jobs=[job_id])["results"][0]
        assert cancel["ok"], cancel
        assert "scancel once its submission to Slurm is recorded" in cancel["outcome"], cancel
    ended = _ended(site, job_id)
    assert ended["state"] == "cancelled" and "cancelled by user" in ended["reason"], ended
    scancels = [(uid, env) for name, uid, env in site.runs() if name == "scancel"]
    assert scancels, site.runs()
    for uid, environ in scancels:
        assert uid == ada.uid, f"scancel ran as uid {uid}"
        assert environ["PATH"].startswith(str(site.shims)), environ["PATH"]


def test_a_fifo_for_her_log_costs_a_bounded_wait(site: Site) -> None:
    """Her log made a FIFO: the engine's read (as her) does not wait on it, and the engine
    goes on answering."""
    job_id = site.submit("ada", {"name": "fifo", "command": ["true"]})
    done = _ended(site, job_id)
    output = Path(done["log"])
    site.as_user("ada", "rm", "-f", str(output))
    site.as_user("ada", "mkfifo", str(output))
    started = time.monotonic()
    reply = site.station.call("ada", "log", job=job_id)
    assert time.monotonic() - started < 10
    # dd (as her, O_NONBLOCK) reads a FIFO without a writer as empty: nothing, and at once
    assert reply.get("ok") is False or reply["result"]["data"] == "", reply
    assert site.station.call("bob", "ping")["ok"]


# ------------------------------------------------------------------------ finding 8
def test_a_newline_in_the_cluster_name_is_refused(site: Site) -> None:
    refused = site.station.call(
        "ada",
        "submit",
        jobs=[
            {
                "name": "named",
                "command": ["true"],
                "cluster": {"kind": "slurm", "partition": PARTITION, "name": "x\ntouch /tmp/x"},
            }
        ],
        env={"PATH": "/usr/bin:/bin"},
    )
    assert refused.get("ok") is False
    assert "control character" in refused["error"]["message"], refused


def test_the_script_renderer_puts_no_line_break_from_a_name() -> None:
    """Defence in depth: a name that reached the renderer unchecked stays in its comment."""
    from gpudesk.core.cluster import ClusterSpec
    from gpudesk.core.jobs import JobSpec
    from gpudesk.slurm.request import GresOffer
    from gpudesk.slurm.script import plan, render

    spec = JobSpec(name="job", command=("true",))
    cluster = ClusterSpec(name="x\ntouch /tmp/pwned")
    (submission,) = plan([spec], cluster, GresOffer(), [1])
    text = render(submission, output="/tmp/out.log", header=[f"for cluster {cluster.name}"])
    assert "\ntouch /tmp/pwned" not in text
    assert [line for line in text.splitlines() if "pwned" in line] == [
        "# for cluster x\\x0atouch /tmp/pwned"
    ]


def test_export_refuses_a_control_character_in_the_cluster_name(tmp_path: Path) -> None:
    """`gpudesk export slurm` of a profile whose [cluster] name holds a newline: one paragraph,
    a non-zero exit, nothing written."""
    import sys

    profile = tmp_path / "p.toml"
    profile.write_text(
        '[cluster]\nkind = "slurm"\nname = "x\\necho pwned"\n\n'
        '[[jobs]]\nname = "a"\ncommand = ["true"]\n'
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpudesk",
            "export",
            "slurm",
            str(profile),
            str(tmp_path / "out"),
            "--no-ask",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0, done.stdout
    assert "control character" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.sbatch"))


def test_her_clients_ignore_a_line_of_another_users_job(site: Site) -> None:
    """Were a Slurm id of bob's ever kept for her job (a record damaged, a client of hers
    traced), what her clients report of it is nothing: no state, no node, no end."""
    from gpudesk.core.identity import Identity
    from gpudesk.slurm.commands import SlurmCommands

    bobs = _bobs_sleeper(site)
    ada = site.user("ada")
    hers = SlurmCommands(str(site.cluster.conf), Identity.of(ada.uid, ada.gid, ada.groups))
    bob = site.user("bob")
    his = SlurmCommands(str(site.cluster.conf), Identity.of(bob.uid, bob.gid, bob.groups))
    assert [line.slurm_id for line in his.queue([bobs])] == [bobs]  # the query works
    assert hers.queue([bobs]) == [] and hers.ended(bobs) is None and not hers.owns(bobs)
    assert hers.cancel([bobs]) is not None  # Slurm refuses her his job
    assert _slurm_state(site, bobs) in ("RUNNING", "PENDING")
    site.cluster.run("scancel", bobs, check=False)


def test_a_sweep_is_one_array_of_hers(site: Site) -> None:
    """An array's id (squeue lists its pending tasks as `ID_[0-1]`) is recognised as hers."""
    cluster = {"kind": "slurm", "partition": PARTITION}
    jobs = [
        {"name": f"task{i}", "command": ["echo", f"task {i}"], "sweep": "s", "cluster": cluster}
        for i in range(2)
    ]
    ids = site.station.ok("ada", "submit", jobs=jobs, env={"PATH": "/usr/bin:/bin"})["ids"]
    ended = [_ended(site, job_id) for job_id in ids]
    assert [j["state"] for j in ended] == ["succeeded", "succeeded"], ended
    assert len({j["slurm"]["job_id"].split("_")[0] for j in ended}) == 1
