"""A station of its own for a profile that asks for a SIMULATED one.

A profile's `[station]` describes the station it was written for. On the user's own engine it
is applied only when she asks (`gpudesk run --apply-station`): station settings stay after the
run, and a station is everyone who uses it. A simulated backend is never put on her engine by a
profile at all: the GPUs her next real job is placed on would not exist. Such a profile (the
bundled DGX Station sweep) runs instead on a personal engine of its own, in a home beside hers
(`HOME/simulated/MODEL`), started with the profile's settings and stopped when the run that
started it ends; its jobs stay in that home's store (`GPUDESK_HOME=that gpudesk history`).
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
import os
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


@contextlib.contextmanager
def own_station(profile: Profile, backend: str) -> Iterator[Client]:
    """A client of the profile's own simulated station, its engine started with the profile's
    settings when none runs there, and stopped on the way out once it has no live job (a run
    left with a second Ctrl-C leaves it finishing the cancels); one already running is used
    (`others_live_jobs` says whether its settings may change)."""
    from gpudesk.api.client import Client
    from gpudesk.api.connection import engine_pid, start_engine

    home = own_station_home(backend)
    started_here = engine_pid(home) is None
    if started_here:
        # the simulated backend whatever the user's GPUDESK_BACKEND says (see the module's doc)
        env = {**os.environ, "GPUDESK_BACKEND": backend}
        start_engine(home, profile.station, keys=profile.station_keys, env=env)
    client = Client.connect(home)
    try:
        yield client
    finally:
        if started_here:
            with contextlib.suppress(Exception):  # stopped already, or gone: nothing to stop
                if not client.job_listing(states=["queued", "running"]).jobs:
                    client.shutdown()
        client.close()
