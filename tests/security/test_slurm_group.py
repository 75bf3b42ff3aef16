"""Slurm on a shared station, part 2 (issue 36, findings 5 and 9): one member's broken cluster
stops no one else's jobs, a slow cluster keeps only its submitter waiting, and an engine killed
during a Slurm submission runs nothing twice nor on the station.

Real local users, a real system engine (tests/shared/station_fixture.py), the real single-node
test Slurm (tests/slurm_cluster.py). The site's PATH starts with shims: `sinfo` sleeps while a
file says so; `sbatch` stops before the real one once one sbatch went through while a file says
so, and says it is waiting (its pid in a file), so the test can kill the engine at that moment.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from shared.station_fixture import Station, make_station
from slurm_cluster import (
    PARTITION,
    SlurmCluster,
    missing_reason,
    running_cluster,
    slurm_program,
)

# its module-scoped fixture is made once: the module stays on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_slurm_group")

SLOW_SINFO_S = 6.0  # how long the shim sinfo sleeps: far above a ping's time
SINFO_SHIM = """#!/bin/sh
if [ -e {slow} ]; then sleep {sleep}; fi
exec "{real}" "$@"
"""
SBATCH_SHIM = """#!/bin/sh
if [ -e {block} ] && [ -n "$(ls {sent})" ]; then
    echo $$ > {ready}.tmp && mv {ready}.tmp {ready}
    while [ -e {block} ]; do sleep 0.05; done
fi
"{real}" "$@"; code=$?
[ $code -eq 0 ] && touch {sent}/$$
exit $code
"""


@dataclass
class Site:
    cluster: SlurmCluster
    station: Station
    top: Path

    @property
    def slow(self) -> Path:
        return self.top / "slow"

    @property
    def block(self) -> Path:
        return self.top / "block"

    @property
    def ready(self) -> Path:
        return self.top / "ready"

    @property
    def sent(self) -> Path:
        return self.top / "sent"

    @property
    def runs(self) -> Path:
        return self.top / "runs"  # each job appends a line here: where it ran

    def engine_log(self) -> str:
        """What the engine logged (a system engine: to its stderr, as a service's journal)."""
        return "".join(
            p.read_text(errors="replace")
            for p in (self.station.log, self.station.state_dir / "engine.log")
            if p.exists()
        )


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    if missing_reason() is not None:
        pytest.skip(missing_reason() or "")
    top = Path(tempfile.mkdtemp(prefix="gdgroup-", dir="/tmp"))
    os.chmod(top, 0o777)  # the users' shims leave their files here
    try:
        shims = top / "site-bin"
        shims.mkdir()
        os.chmod(shims, 0o755)
        for folder in (top / "sent", top / "runs"):
            folder.mkdir()
            os.chmod(folder, 0o1777)
        (shims / "sinfo").write_text(
            SINFO_SHIM.format(slow=top / "slow", sleep=SLOW_SINFO_S, real=slurm_program("sinfo"))
        )
        (shims / "sbatch").write_text(
            SBATCH_SHIM.format(
                block=top / "block",
                sent=top / "sent",
                ready=top / "ready",
                real=slurm_program("sbatch"),
            )
        )
        for shim in shims.iterdir():
            shim.chmod(0o755)
        with running_cluster(top / "cluster") as cluster:
            engine_env = {
                "PATH": f"{shims}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                "SLURM_CONF": str(cluster.conf),
                "GPUDESK_SLURM_POLL_S": "0.3",
                "GPUDESK_SLURM_INTENT_GRACE_S": "3",
            }
            for station in make_station(engine_env=engine_env):
                yield Site(cluster, station, top)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _job(site: Site, name: str, command: str, **cluster: object) -> dict:
    return {
        "name": name,
        "command": ["sh", "-c", command],
        # a small --mem, as docs/slurm.md advises: on a cluster without DefMemPerCPU a job
        # without one is given the node's whole memory, and the others wait for it
        "cluster": {"kind": "slurm", "partition": PARTITION, "mem_gb": 0.1, **cluster},
    }


def _counting(site: Site, name: str) -> dict:
    """A job that appends where it ran (its Slurm job id, empty on the station) to runs/NAME."""
    return _job(site, name, f'echo "slurm=$SLURM_JOB_ID" >> {site.runs}/{name}')


def _wait(what: str, check, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


# ------------------------------------------------------------------------ finding 5
@pytest.mark.slow(15)
def test_a_broken_cluster_of_hers_stops_no_one_elses_jobs(site: Site) -> None:
    """Ada's jobs use her own slurm.conf; she deletes it. Bob's jobs are still followed to
    their end, hers fail "lost" after 3 polls no one answered, and the engine's log says so
    once, not once a poll."""
    home = Path(os.path.expanduser(f"~{site.station.users['ada'].name}"))
    conf = home / "cluster" / "slurm.conf"
    site.station.ok("ada", "ping")
    os.makedirs(conf.parent, exist_ok=True)
    shutil.copy(site.cluster.conf, conf)
    os.chown(conf.parent, site.station.users["ada"].uid, -1)
    os.chown(conf, site.station.users["ada"].uid, -1)
    hers = site.station.submit("ada", _job(site, "hers", "sleep 300", conf=str(conf)))
    running = site.station.wait_state(hers, "running", timeout=60)
    slurm_id = running["slurm"]["job_id"]
    try:
        said_of_hers = f"(slurm.conf {conf})"
        before = site.engine_log().count(said_of_hers)
        conf.unlink()  # she deletes her conf: her cluster can no longer be asked
        his = site.station.submit("bob", _job(site, "his", "true"))
        try:
            ended = site.station.wait_state(his, "succeeded", "failed", timeout=60)
        except AssertionError:
            raise AssertionError(
                f"{site.station.job(his)}\n{site.cluster.run('squeue', '-t', 'all')}\n"
                f"{site.engine_log()[-3000:]}"
            ) from None
        assert ended["state"] == "succeeded", ended
        lost = site.station.wait_state(hers, "failed", timeout=30)
        assert "lost" in lost["reason"] and "3 polls in a row" in lost["reason"], lost
        # past the polls that failed her job, the log said so once (not once each 0.3 s)
        # some more polls of hers would have said more: the log line is not per poll
        _wait("another ping", lambda: site.station.ok("bob", "ping"))
        said = site.engine_log().count(said_of_hers) - before
        assert said == 1, site.engine_log()[-3000:]
    finally:
        site.cluster.run("scancel", slurm_id, check=False)


def test_a_slow_sinfo_does_not_stall_another_members_ping(site: Site) -> None:
    """While bob's submit waits on a sinfo that takes SLOW_SINFO_S, ada's pings are answered
    at once; bob's submit then succeeds."""
    site.slow.touch()
    answer: dict = {}

    def submit() -> None:
        answer.update(site.station.call("bob", "submit", jobs=[_job(site, "slow", "true")]))

    worker = threading.Thread(target=submit)
    try:
        worker.start()
        # the submit is in flight once the engine stored nothing yet and sinfo sleeps: ping
        # for most of the sleep
        slowest = 0.0
        end = time.monotonic() + SLOW_SINFO_S - 1.0
        while time.monotonic() < end:
            start = time.monotonic()
            site.station.ok("ada", "ping")
            slowest = max(slowest, time.monotonic() - start)
        worker.join(60)
        assert answer.get("ok"), answer
        # a ping is a client process start (~0.1-0.5 s on a loaded 2-core VM), never the sleep
        assert slowest < SLOW_SINFO_S / 2, slowest
    finally:
        site.slow.unlink(missing_ok=True)
        worker.join(60)


# ------------------------------------------------------------------------ finding 9
def test_an_engine_killed_between_sbatches_runs_nothing_twice_nor_here(site: Site) -> None:
    """Three Slurm jobs in one request (three sbatches). The engine is killed (SIGKILL) while
    the second sbatch waits; it restarts; the waiting sbatch then goes through. The first two
    are adopted and run once, in Slurm; the third never reached Slurm and fails saying so;
    none runs on the station."""
    for stale in site.sent.iterdir():
        stale.unlink()
    site.block.touch()
    names = [f"kill-{n}-{time.monotonic_ns()}" for n in range(3)]

    def submit() -> None:
        with contextlib.suppress(AssertionError):  # the engine is killed under it
            site.station.call("ada", "submit", jobs=[_counting(site, n) for n in names])

    worker = threading.Thread(target=submit, daemon=True)
    try:
        worker.start()
        _wait("the second sbatch", site.ready.exists)
        assert site.station.process is not None
        site.station.process.send_signal(signal.SIGKILL)
        site.station.process.wait(30)
        site.station.process = None
        site.station.start()
    finally:
        site.block.unlink(missing_ok=True)  # the waiting sbatch goes on to the real one
        site.ready.unlink(missing_ok=True)
    jobs = {j["name"]: j for j in site.station.ok("ada", "jobs")["jobs"] if j["name"] in names}
    assert sorted(jobs) == sorted(names), jobs
    ended = {
        n: site.station.wait_state(jobs[n]["id"], "succeeded", "failed", "cancelled", timeout=90)
        for n in names
    }
    assert [ended[n]["state"] for n in names] == ["succeeded", "succeeded", "failed"], ended
    assert "never reached Slurm" in ended[names[2]]["reason"], ended[names[2]]
    for name in names[:2]:
        lines = (site.runs / name).read_text().splitlines()
        assert len(lines) == 1 and lines[0] != "slurm=", (name, lines)  # once, in Slurm
    assert not (site.runs / names[2]).exists()  # never ran, here or there
