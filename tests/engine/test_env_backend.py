"""GPUDESK_BACKEND is the engine's environment, not the home's setting: an engine started with it
runs on that backend and says so when it is SIMULATED, and the home keeps its own backend, so a
later start without it does not find a SIMULATED station (whose GPUs do not exist) it was never
set to. `engine set backend=` is what the home keeps."""

from __future__ import annotations

import os
import subprocess
import sys

from gpudesk.paths import Home

GPUDESK = [sys.executable, "-m", "gpudesk"]


def gpudesk(home: Home, *args: str, backend: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "GPUDESK_BACKEND"}
    env["GPUDESK_HOME"] = str(home.root)
    if backend is not None:
        env["GPUDESK_BACKEND"] = backend
    done = subprocess.run([*GPUDESK, *args], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def station_line(home: Home) -> str:
    (line,) = [
        s for s in gpudesk(home, "engine", "status").splitlines() if s.startswith("station:")
    ]
    return line


def test_an_engines_gpudesk_backend_is_not_kept_by_its_home(home: Home) -> None:
    try:
        started = gpudesk(home, "engine", "start", backend="sim:a100-40gb")
        assert "on a SIMULATED station (sim:a100-40gb: its GPUs are not real)" in started
        assert "backend sim:a100-40gb (SIMULATED)" in station_line(home)
        # a setting changed under it is kept; its backend is not
        gpudesk(home, "engine", "set", "policy=mps")
        gpudesk(home, "engine", "stop")
        started = gpudesk(home, "engine", "start")
        assert "SIMULATED" not in started
        line = station_line(home)
        assert "SIMULATED" not in line and "policy mps" in line, line
        # what `engine set` asks for is the home's
        gpudesk(home, "engine", "set", "backend=sim:h100")
        gpudesk(home, "engine", "stop")
        assert "on a SIMULATED station (sim:h100" in gpudesk(home, "engine", "start")
        assert "backend sim:h100 (SIMULATED)" in station_line(home)
    finally:
        gpudesk(home, "engine", "stop")
