"""The package as a user gets it: the wheel is built, installed into a fresh virtual environment
WITHOUT torch (the base dependencies only), and run from a folder outside the checkout:
`--version`, `grid FR` (the bundled table), `top --once`, `simulate` on the bundled trace, the
desk under Textual's Pilot on a real engine, and that engine's Prometheus endpoint scraped. The
same again with every base dependency at its declared floor (`>=X` installed as `==X`), so the
floors in pyproject.toml are true.

pip fetches the dependencies from the configured index (cached after the first run); where no
index answers, the test skips and says so, rather than pretending.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudesk.paths import Home
from gpudesk.toml_lines import tomllib

ROOT = Path(__file__).resolve().parents[2]
PIP_TIMEOUT = 600
# its module-scoped fixture is made once: the module stays on one worker (--dist loadgroup)
pytestmark = [pytest.mark.timeout(1200), pytest.mark.xdist_group("test_wheel")]

# The desk on a real engine of GPUDESK_HOME (started by the client, as `gpudesk` does), driven by
# Pilot: it must draw the simulated H100's card, not a blank screen.
DESK_SCRIPT = """
import asyncio, sys
from gpudesk.api import Client
from gpudesk.paths import Home
from gpudesk.screens.app import DeskApp
from gpudesk.screens.feed import EngineFeed

home = Home.from_env()
Client.connect(home).close()
feed = EngineFeed(home, interval=0.2)
app = DeskApp(feed, refresh_s=0.2)

async def main() -> str:
    async with app.run_test(size=(100, 32)) as pilot:
        for _ in range(150):
            await pilot.pause(0.1)
            text = app.export_screenshot()
            if "H100" in text and "SIMULATED" in text:
                await pilot.press("q")
                return "drawn"
        return text

try:
    result = asyncio.run(main())
finally:
    feed.close()
print("DESK", result)
sys.exit(0 if result == "drawn" else 1)
"""

# The engine's Prometheus endpoint turned on at run time, scraped and parsed with the
# prometheus_client installed (its floor, in the floors run).
METRICS_SCRIPT = """
import sys, time, urllib.request
from prometheus_client.parser import text_string_to_metric_families
from gpudesk.api import Client
from gpudesk.core.station import StationConfig

with Client.connect() as client:
    client.configure(StationConfig(metrics_listen="127.0.0.1:0"), ["metrics_listen"])
    url = client.status().station.metrics_url
names = set()
for _ in range(100):
    with urllib.request.urlopen(url, timeout=5) as reply:
        names = {f.name for f in text_string_to_metric_families(reply.read().decode())}
    if {"DCGM_FI_DEV_GPU_UTIL", "gpudesk_placements"} <= names:
        print("METRICS served", url)
        sys.exit(0)
    time.sleep(0.1)
print("METRICS missing", sorted(names))
sys.exit(1)
"""

# What the environment holds, as `pip freeze` writes it (it has no pip of its own).
INSTALLED = """
from importlib.metadata import distributions
for d in distributions():
    print(f"{d.metadata['Name']}=={d.version}")
"""


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 120) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, (
        f"{' '.join(args)} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built by pip from a copy of the source tree (a build in the checkout would write
    build/ there, under other tests' feet)."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"
    shutil.copytree(
        ROOT,
        source,
        symlinks=True,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "tests", ".*_cache"
        ),
    )
    out = tmp / "dist"
    pip("wheel", "--no-deps", *build_isolation(), "-w", str(out), str(source))
    (built,) = out.glob("gpudesk-*.whl")
    return built


def build_isolation() -> list[str]:
    """`--no-build-isolation` where this interpreter has every package of pyproject.toml's
    [build-system] `requires` at a version it allows: the wheel is built by the same backend
    (the one the running tests have), without pip first installing it into an environment of
    its own (~3 of the fixture's 4.3 CPU-s). Else nothing: pip's isolated build."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        from packaging.requirements import Requirement
    except ImportError:
        return []
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    for text in requires:
        wanted = Requirement(text)
        try:
            if not wanted.specifier.contains(version(wanted.name), prereleases=True):
                return []
        except PackageNotFoundError:
            return []
    return ["--no-build-isolation"]


def pip(command: str, *args: str, into: Path | None = None) -> None:
    """This interpreter's `pip COMMAND ARGS`, acting on the environment of the `into` python
    when given (pip's --python); a skip when no index answers, a failure otherwise."""
    target = ["--python", str(into)] if into is not None else []
    done = subprocess.run(
        [sys.executable, "-m", "pip", *target, command, *args],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        skip_if_offline(done.stdout + done.stderr)
        pytest.fail(f"pip {command} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def skip_if_offline(output: str) -> None:
    """Skip when pip failed because no index could be reached (not for any other failure)."""
    offline = r"NewConnectionError|Name or service not known|Network is unreachable|ProxyError"
    if re.search(offline, output):
        pytest.skip("no package index answers here: pip cannot fetch the dependencies")


def floors(wheel: Path) -> list[str]:
    """The wheel's base requirements with each floor pinned: `textual>=0.86` -> `textual==0.86`."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(name).decode()
    pins = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:") or "extra ==" in line:
            continue
        requirement = line.removeprefix("Requires-Dist:").strip()
        if ";" in requirement:  # a marker: only for other Pythons (tomli)
            continue
        # a floor, and at most a cap (`typer<0.29,>=0.15`, as pip writes it)
        found = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(\S+)", requirement)
        assert found, f"a base requirement without a plain floor: {requirement}"
        specifiers = found[2].split(",")
        floor = [s.removeprefix(">=") for s in specifiers if s.startswith(">=")]
        others = [s for s in specifiers if not s.startswith((">=", "<"))]
        assert len(floor) == 1 and not others, f"not a floor and a cap: {requirement}"
        pins.append(f"{found[1]}=={floor[0]}")
    return pins


def install(wheel: Path, venv: Path, pins: list[str]) -> dict[str, str]:
    """The wheel and its dependencies into a fresh environment, by this interpreter's pip (the
    environment gets no pip of its own, nor bytecode compiled up front: Python compiles what the
    checks import as they import it: the module 58 -> 37 s of CPU, measured alone)."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    pip("install", "--no-compile", str(wheel), *pins, into=venv / "bin" / "python")
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "COV"))
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


@pytest.fixture
def outside(tmp_path: Path) -> Iterator[Path]:
    """A folder outside the checkout, with nothing in it."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    yield folder


@pytest.mark.slow(37)
@pytest.mark.parametrize("versions", ["newest", "floors"])
def test_the_wheel_runs_outside_the_checkout_without_torch(
    wheel: Path, versions: str, home: Home, outside: Path, tmp_path: Path
) -> None:
    pins = floors(wheel) if versions == "floors" else []
    venv = tmp_path / "venv"
    env = install(wheel, venv, pins)
    python = str(venv / "bin" / "python")
    gpudesk = str(venv / "bin" / "gpudesk")

    # the fresh environment really is without torch, and imports gpudesk from the wheel
    probe = run(
        [
            python,
            "-c",
            "import importlib.util as u, gpudesk; "
            "print(u.find_spec('torch') is None, gpudesk.__file__)",
        ],
        outside,
        env,
    )
    assert probe.split()[0] == "True", probe
    assert str(venv) in probe, probe
    if pins:
        listed = run([python, "-c", INSTALLED], outside, env).lower()
        assert all(pin.lower() in listed for pin in pins), (pins, listed)

    assert run([gpudesk, "--version"], outside, env).startswith("gpudesk ")
    # the station engine's systemd unit is package data, run by the environment's Python
    assert f"\nExecStart={python} " in run([gpudesk, "engine", "print-unit"], outside, env)
    # the man pages land in the environment's share/man, where man finds them through PATH
    assert (venv / "share" / "man" / "man1" / "gpudesk-submit.1").is_file()
    if shutil.which("man"):
        no_manpath = {k: v for k, v in env.items() if k != "MANPATH"}
        found = run(["man", "-w", "gpudesk-submit"], outside, no_manpath)
        assert found.strip() == str(venv / "share" / "man" / "man1" / "gpudesk-submit.1")
    # the grid table is package data: `[station] grid_intensity = "FR"` reads it
    assert "Our World in Data" in run([gpudesk, "grid", "FR"], outside, env)

    top = run([gpudesk, "top", "--once"], outside, {**env, "GPUDESK_BACKEND": "sim:h100"})
    assert "SIMULATED" in top and "H100" in top, top

    # the README's path and the bare name both find the bundled trace
    for trace in ("traces/carma-philly-t1.json", "carma-philly-t1"):
        report = run([gpudesk, "simulate", trace, "--policy", "fifo,auto"], outside, env)
        assert "SIMULATED" in report and "carma" in report.lower(), report

    desk = run([python, "-c", DESK_SCRIPT], outside, {**env, "GPUDESK_BACKEND": "sim:h100"})
    assert "DESK drawn" in desk, desk

    metrics = run([python, "-c", METRICS_SCRIPT], outside, {**env, "GPUDESK_BACKEND": "sim:h100"})
    assert "METRICS served http://127.0.0.1:" in metrics, metrics
