"""A station of its own for a profile that asks for a SIMULATED one.

A profile's `[station]` describes the station it was written for. On the user's own engine it
is applied only when she asks (`gpudesk run --apply-station`): station settings stay after the
run, and a station is everyone who uses it. A simulated backend is never put on her engine by a
profile at all: the GPUs her next real job is placed on would not exist. Such a profile (the
bundled DGX Station sweep) runs instead on a personal engine of its own, in a home beside hers
(`HOME/simulated/MODEL`), started with the profile's settings and stopped when the last run
using it ends; its jobs stay in that home's store (`GPUDESK_HOME=that gpudesk history`).
Two profiles that ask for the same simulated station share it: a run that finds it idle sets
it as its profile says, one that finds another run's jobs there leaves its settings as they
are (those jobs were placed under them; a MIG layout is never changed under a running job) and
says what it did not apply.
`GPUDESK_BACKEND` set to the same simulated backend says the user wants her own engine to be
that station: the profile then runs there, as any other. Set to anything else, it is not passed
on to the station of its own: an engine's GPUDESK_BACKEND wins over its settings, and a station
said to be SIMULATED would then place its jobs on the real GPUs (or none).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from gpudesk.core.backend_names import SIM_PREFIX, is_simulated
from gpudesk.paths import Home, resolve_home

if TYPE_CHECKING:
    from gpudesk.api.client import Client
    from gpudesk.profile import Profile


def simulated_backend(profile: Profile) -> str | None:
    """The simulated backend (`sim:MODEL`) a profile's [station] asks for, unless the user's
    own engine is set to be that station (GPUDESK_BACKEND); None for any other profile."""
    if "backend" not in profile.station_keys:
        return None
    backend = profile.station.backend
    if not is_simulated(backend):
        return None
    return None if os.environ.get("GPUDESK_BACKEND") == backend else backend


def own_station_home(backend: str) -> Home:
    """Where the station of its own for `backend` lives: beside the user's personal home."""
    return Home(resolve_home() / "simulated" / backend.removeprefix(SIM_PREFIX))


def others_live_jobs(client: Client) -> int:
    """How many queued or running jobs a station of its own has before this run submits: those
    of another run of a profile that asks for the same station (its settings are not changed
    under them: `gpudesk run` then leaves them as they are, and says so)."""
    return len(client.job_listing(states=["queued", "running"]).jobs)


# Beside the station's home: every run holds it shared while it uses the station; the run
# that finds no other holder on its way out may stop it (`own_station`).
RUNS_LOCK = "runs.lock"
# Written by the run that starts the station, removed when a run stops it: a station started
# by hand (`GPUDESK_HOME=... gpudesk engine start`) is never stopped by a run.
STARTED_BY_RUN = "started-by-run"
STOP_WAIT_S = 10.0


@contextlib.contextmanager
def own_station(profile: Profile, backend: str) -> Iterator[Client]:
    """A client of the profile's own simulated station, its engine started with the profile's
    settings when none runs there. The last run out stops a station a run started, once it has
    no live job (a run left with a second Ctrl-C leaves it finishing the cancels); while
    another run still follows its jobs there, it is left running for that one
    (`others_live_jobs` says whether its settings may change)."""
    from gpudesk.api.client import Client
    from gpudesk.api.connection import engine_pid, start_engine
    from gpudesk.paths import open_private_file, private_dir

    home = own_station_home(backend)
    remedy = f"move {home.root} aside; a run makes it again"
    private_dir(home.root, remedy)
    lock = open_private_file(home.root / RUNS_LOCK, os.O_RDWR | os.O_CREAT, remedy)
    try:
        # shared: blocks only while the last run out is stopping the station
        fcntl.flock(lock, fcntl.LOCK_SH)
        marker = home.root / STARTED_BY_RUN
        if engine_pid(home) is None:
            # the simulated backend whatever the user's GPUDESK_BACKEND says (module's doc)
            env = {**os.environ, "GPUDESK_BACKEND": backend}
            start_engine(home, profile.station, keys=profile.station_keys, env=env)
            marker.touch()
        client = Client.connect(home)
        try:
            yield client
        finally:
            if marker.exists() and _last_out(lock):
                with contextlib.suppress(Exception):  # stopped already, or gone
                    if not client.job_listing(states=["queued", "running"]).jobs:
                        client.shutdown()
                        deadline = time.monotonic() + STOP_WAIT_S
                        while engine_pid(home) is not None and time.monotonic() < deadline:
                            time.sleep(0.05)  # a run that comes next starts a new one
                        marker.unlink(missing_ok=True)
            client.close()
    finally:
        os.close(lock)  # releases the lock


def _last_out(lock: int) -> bool:
    """Whether no other run holds the station's lock (this one's becomes exclusive)."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
