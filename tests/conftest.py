"""Shared fixtures: an isolated GPUDESK_HOME and a real engine daemon started in it."""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import psutil
import pytest

# the order the xdist workers take the tests in, and the rule for `serial` tests (hooks)
from xdist_order import pytest_collection_modifyitems, pytest_runtest_protocol  # noqa: F401

from gpudesk.api.client import Client
from gpudesk.api.connection import Connection, engine_pid, start_engine
from gpudesk.core.identity import Caller
from gpudesk.core.jobs import TERMINAL_STATE_NAMES, JobSpec
from gpudesk.core.station import StationConfig
from gpudesk.core.wire.jobs import JobDetail, JobView
from gpudesk.engine.daemon import Engine
from gpudesk.engine.offloop import Pending
from gpudesk.engine.store.database import Store
from gpudesk.home_lock import EngineLock
from gpudesk.hw import containment
from gpudesk.hw.runner import read_wrapper_pid
from gpudesk.paths import Home
from gpudesk.policy.access import Access

if TYPE_CHECKING:
    from station_fixture import Station  # tests/shared (on the path: below)

# The tests never read the user's own defaults (gpudesk.cli.config); test_config names its files.
os.environ["GPUDESK_CONFIG"] = ""
os.environ["GPUDESK_SITE_CONFIG"] = ""  # nor the machine's /etc/gpudesk/config.toml
# pytest-xdist's workers start with COLUMNS=80 and LINES=24, which commands take for a terminal
# (render.table_width) and fold to; without them every test reads what a pipe reads, under -n
# as without it, and one that wants a terminal sets $COLUMNS (tests/cli/test_tables_fit.py).
# unsetenv too: GNU readline (imported by pytest) exports them to the C environment alone,
# which os.environ does not show and a test's child inherits.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
    os.unsetenv(_name)

# A suite started as a background job of a non-interactive shell (`.ci/run &`, nohup, some CI
# runners) inherits SIGINT ignored, and so would every process a test starts: Python then never
# turns Ctrl-C into KeyboardInterrupt, and the tests that press Ctrl-C in `gpudesk top` wait for
# an exit that cannot come. Caught here, SIGINT is back to its default in what tests start.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The tests are in a folder per package (tests/core, tests/engine, tests/desk, …) with no
# __init__.py: pytest's default import mode puts a test's own folder on sys.path, so module
# basenames are unique across tests/. A test may import a helper or a test module of another
# folder by its name (tests/cli's views reuse tests/api's job views, tests/security the station
# fixture of tests/shared): every folder is on the path from the start, whichever runs first.
for _folder in sorted(Path(__file__).resolve().parent.iterdir()):
    if (
        _folder.is_dir()
        and not (_folder / "__init__.py").exists()
        and any(_folder.glob("*.py"))
        and str(_folder) not in sys.path
    ):
        sys.path.insert(0, str(_folder))


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, the torch of each worker uses its share of the cores: torch starts a
    thread per core, and workers training at once on a 2-core CI machine would each spin on
    both (an in-process selection test: 35 s so, 27 s on one thread, beside a busy core).
    Only this process's torch is set: what tests start keeps its own environment, so the
    OMP_NUM_THREADS the engine and Slurm give jobs is still what is tested."""
    import importlib.util

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers < 2 or importlib.util.find_spec("torch") is None:
        return
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


MODULES_MARK = "--- modules loaded ---"


def cli_in_fresh_python(*command_lines: list[str]) -> tuple[str, set[str]]:
    """Run `gpudesk` command lines in turn in a fresh interpreter (`main(argv)`, its exit
    caught): what they printed, and every module the interpreter holds after them (what the
    commands imported, apart from this process's imports)."""
    program = (
        "import json, sys\nfrom gpudesk.cli.main import main\n"
        f"for argv in {[list(line) for line in command_lines]!r}:\n"
        "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
        f"print({MODULES_MARK!r})\nprint(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    printed, _, modules = done.stdout.rpartition(MODULES_MARK + "\n")
    return printed, set(json.loads(modules))


# wait_for's pace when the caller names none: every 20 ms for the first second (most waits end
# within it: a job starting, a reply's effect), then 1.5 x longer each time up to 100 ms. A wait
# of seconds (a job's whole run, a Slurm sweep) asks its engine ~10 times a second, not ~50:
# each ask of a job's state costs ~1.3 ms of CPU (the engine's reply ~1.0, this side's ~0.3),
# which at 50 a second is 6 % of a core for as long as a test waits.
FAST_POLL_S, FAST_FOR_S, SLOWEST_POLL_S = 0.02, 1.0, 0.1


def wait_for(
    predicate: Callable[[], object],
    timeout: float = 15.0,
    interval: float | None = None,
    what: str = "condition",
) -> object:
    began = time.monotonic()
    deadline = began + timeout
    pause = interval if interval is not None else FAST_POLL_S
    while True:
        value = predicate()
        if value:
            return value
        now = time.monotonic()
        if now > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        if interval is None and now - began > FAST_FOR_S:
            pause = min(pause * 1.5, SLOWEST_POLL_S)
        time.sleep(pause)


def load_module(name: str, path: Path) -> ModuleType:
    """A script that is not a package's module (a bench/ program, another test file), loaded
    under `name`, for a test that uses its functions."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def can_cut_head(folder: Path) -> bool:
    """Whether `folder`'s file system can cut a file's head in place (gpudesk.joblog.collapse:
    ext4, XFS), so that a log rotation there loses nothing; else it copies and truncates."""
    from gpudesk.joblog import collapse

    with tempfile.TemporaryFile(dir=folder) as probe:
        probe.write(b"x" * 9000)
        probe.flush()
        end = collapse.collapsible_end(probe.fileno(), 9000)
        return end is not None and collapse.collapse_head(probe.fileno(), end)


def can_punch_head(folder: Path) -> bool:
    """Whether `folder`'s file system can punch a hole over a file's head (tmpfs, NFS 4.2,
    ext4 and XFS too), so that a rotation there loses nothing where it cannot cut. Asked of
    the kernel here, not through gpudesk.joblog.collapse: the oracle of the tests that check
    it."""
    libc = ctypes.CDLL(None, use_errno=True)
    fallocate = libc.fallocate64
    fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    punch_hole_keep_size = 0x02 | 0x01  # linux/falloc.h
    with tempfile.TemporaryFile(dir=folder) as probe:
        probe.write(b"x" * 9000)
        probe.flush()
        block = os.fstatvfs(probe.fileno()).f_bsize
        return fallocate(probe.fileno(), punch_hole_keep_size, 0, block) == 0


def rotates_losslessly(folder: Path) -> bool:
    """Whether a log rotation in `folder` loses nothing: it cuts the head off in place or
    punches a hole over it (gpudesk.joblog); else it copies and truncates."""
    return can_cut_head(folder) or can_punch_head(folder)


def refuses(result: subprocess.CompletedProcess[str], *phrases: str) -> str:
    """The command failed with one `error:` paragraph holding `phrases`, and no traceback or
    bare exception (`RecursionError: ...`) behind it; returns the paragraph."""
    assert result.returncode != 0, result.stdout
    for leak in ("Traceback", 'File "', "Error:"):
        assert leak not in result.stderr, result.stderr
    message = result.stderr.strip()
    assert message.startswith("error: ") and "\n" not in message, message
    for phrase in phrases:
        assert phrase in message, message
    return message


@pytest.fixture(scope="session", autouse=True)
def _no_cgroup_folder_left_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """An engine stops by removing its home's cgroup folder; one a test killed or ran in-process
    leaves it behind. After the session, the folders of this session's homes (every folder a
    few levels under its temporary root, by the digest containment names them with) are emptied
    and removed. Only those: another pytest session may be running engines right now."""
    yield
    mount = containment.v2_mount()
    if mount is None:
        return
    # tmp_path/home, tmp_path/state (a system engine's), …: a few levels are enough
    for home in _folders_under(tmp_path_factory.getbasetemp(), levels=3):
        folder = containment.home_folder(mount, home)
        if not folder.is_dir():
            continue
        for cgroup in folder.glob("job-*"):
            containment.kill_all(cgroup)
            containment.remove(cgroup, wait=2.0)
        with contextlib.suppress(OSError):
            folder.rmdir()


def _folders_under(root: Path, levels: int) -> list[Path]:
    found: list[Path] = []
    layer = [root]
    for _ in range(levels):
        layer = [child for parent in layer for child in _subfolders(parent)]
        found += layer
    return found


def _subfolders(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


@contextlib.contextmanager
def mounted_tmpfs(folder: Path, options: str) -> Iterator[Path]:
    """A tmpfs freshly mounted at `folder` (made here) with mount(8)'s `options`, unmounted after
    whatever happened; the test skips, saying why, where none can be (not root, no mount(8), a
    refusal)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    if shutil.which("mount") is None:
        pytest.skip("no mount(8) here")
    folder.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def processes_in_group(pgid: int) -> list[psutil.Process]:
    """Written apart from gpudesk.hw.hostmetrics.group_processes on purpose: the tests'
    oracle for "no process survives" must not share a bug with the code it checks."""
    found = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            pass
    return found


def kill_running(*processes: subprocess.Popen[str] | None) -> None:
    """Kill those of `processes` still running (None: one never started) and reap them."""
    for process in processes:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def user_station() -> Iterator[Station]:
    """A shared station whose engine and members' `gpudesk` run a Python the users may run
    (station_fixture.user_python_station; root only), one a module: a module whose tests share
    it keeps them on one worker (an xdist_group mark of its own), so it is made once."""
    from station_fixture import user_python_station

    yield from user_python_station()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    """An empty GPUDESK_HOME; whatever engine and jobs a test started in it are stopped after."""
    with home_at(tmp_path / "home", monkeypatch) as home:
        yield home


@contextlib.contextmanager
def short_home(prefix: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    """`home` under a fresh folder in the system's temporary directory: the shared loaders'
    sockets lie under the home (run/loaders/NAME.ctl), a Unix socket's path holds 107 bytes at
    most, and pytest-xdist's worker folder plus a long test name pass that (the loader then says
    so and exits)."""
    short = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        with home_at(short / "home", monkeypatch) as home:
            yield home
    finally:
        shutil.rmtree(short, ignore_errors=True)


@contextlib.contextmanager
def home_at(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    """`home` at a path of the test's choosing (a short one, for sockets under it)."""
    monkeypatch.setenv("GPUDESK_HOME", str(root))
    monkeypatch.delenv("GPUDESK_BACKEND", raising=False)
    home = Home(root)
    try:
        yield home
    finally:  # a failed test's engine too: left, it would run on past the suite
        handle = EngineHandle(home)
        try:
            handle.stop()
        finally:
            handle.client.close()
            handle.cleanup_jobs()


class EngineInProcess:
    """An engine's collaborators built in this process, without its loop or socket: requests go
    to its handlers in raw bytes with any caller, as the daemon hands them over (the caller's
    identity is what the kernel would have said), and `step()` runs the loop's periodic steps."""

    def __init__(self, home: Home, config: StationConfig, access: Access | None = None) -> None:
        home.ensure()
        self.store = Store.open(home.db)
        self.engine = Engine(home, self.store, config, access, lock=EngineLock.take(home.lock))

    def call(self, caller: Caller, op: str, **args: object) -> dict:
        """The reply, as the socket would send it: one a handler answers in later turns of the
        loop (`NextTurn`, a request acted on in slices) is driven here, turn by turn."""
        raw = json.dumps({"v": 1, "id": 1, "op": op, "args": args}).encode()
        answer = self.engine.handlers.handle(raw, caller)
        if isinstance(answer, Pending):
            posted: list[bytes] = []
            answer.start(posted.append)
            deadline = time.monotonic() + 30.0  # work off the loop (a submit's name) on a thread
            while not posted and time.monotonic() < deadline:
                self.engine.offloop.deliver()  # the loop's next turn
            answer = posted[0]
        return json.loads(answer)  # type: ignore[no-any-return]

    def ok(self, caller: Caller, op: str, **args: object) -> dict:
        reply = self.call(caller, op, **args)
        assert reply["ok"], reply
        return reply["result"]  # type: ignore[no-any-return]

    def step(self) -> None:
        self.engine._steps()  # start, reap, settle: what the loop does each turn
        self.engine.offloop.deliver()  # ... and the work done off it (a worker's owner asked)

    def close(self) -> None:
        self.engine.close()
        self.store.close()
        self.engine.keeper.lock.close()  # else `home`'s teardown takes this process for an engine


class EngineHandle:
    """A running daemon for one test, plus the helpers tests keep needing."""

    def __init__(self, home: Home) -> None:
        self.home = home
        # `client` speaks the wire's dicts (for tests of the wire itself); `api` is the typed
        # gpudesk.api.Client a user's program has, over the same connection.
        self.client = Connection(home, timeout=10.0)
        self.api = Client(self.client)

    def start(self, slots: int = 2, backend: str = "none", **station: object) -> int:
        return start_engine(self.home, StationConfig(backend=backend, slots=slots, **station))

    @property
    def pid(self) -> int | None:
        pid = engine_pid(self.home)
        # an EngineInProcess not closed holds the lock in this very process: never kill it
        assert pid != os.getpid(), f"an engine built in this process still holds {self.home.lock}"
        return pid

    def submit(self, *jobs: dict, env: dict | None = None) -> list[int]:
        """Submit jobs given by their fields, as a user's program does: each made a `JobSpec`
        (checked here), sent by the typed `Client`. A test of what the engine's door does with
        a raw frame sends it with `self.client.request("submit", ...)`."""
        specs = [JobSpec.from_dict({"workdir": str(self.home.root), **job}) for job in jobs]
        return self.api.submit(specs, env=env or dict(os.environ))

    def job(self, job_id: int) -> JobView:
        return self.api.show(job_id).job

    def show(self, job_id: int) -> JobDetail:
        return self.api.show(job_id)

    def wait_state(self, job_id: int, states: set[str] | str, timeout: float = 20.0) -> JobView:
        wanted = {states} if isinstance(states, str) else states
        return wait_for(
            lambda: (j := self.job(job_id)).state in wanted and j,
            timeout,
            what=f"job {job_id} to be {'/'.join(sorted(wanted))}",
        )

    def occupy_the_only_slot(self, gate: Path) -> int:
        """One CPU slot, taken by a job that runs until `gate` exists; the job's id."""
        self.client.request("configure", station={"backend": "none", "slots": 1})
        script = f"while [ ! -e {gate} ]; do sleep 0.02; done"
        (blocker,) = self.submit({"name": "blocker", "command": ["sh", "-c", script]})
        self.wait_state(blocker, "running")
        return blocker

    def wait_all_done(self, ids: list[int], timeout: float = 30.0) -> list[JobView]:
        def done() -> list[JobView] | None:
            jobs = self.api.jobs(ids=ids)
            return jobs if all(j.state in TERMINAL_STATE_NAMES for j in jobs) else None

        return wait_for(done, timeout, what=f"jobs {ids} to finish")

    def kill9(self) -> None:
        pid = self.pid
        assert pid and pid > 0
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: self.pid is None, 5.0, what="the engine to die")
        self.client.close()

    def stop(self) -> None:
        if self.pid is None:
            return
        try:
            self.client.request("shutdown")
        except Exception:
            os.kill(self.pid, signal.SIGKILL)
        wait_for(lambda: self.pid is None, 10.0, what="the engine to stop")

    def cleanup_jobs(self) -> None:
        """Kill every job process group this home started (tests must not leak processes)."""
        for attempt_dir in self.home.jobs_dir.glob("*/*"):
            pid = read_wrapper_pid(attempt_dir)
            if pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
        # ... and what is left of their cgroups (the engine removes them as attempts settle)
        mount = containment.v2_mount()
        folder = containment.home_folder(mount, self.home.root) if mount else None
        if folder is not None and folder.is_dir():
            for cgroup in folder.iterdir():
                if cgroup.is_dir():
                    containment.kill_all(cgroup)
                    containment.remove(cgroup, wait=2.0)
            with contextlib.suppress(OSError):
                folder.rmdir()
        # ... and every shared-loader producer it started (each leads its own session): those
        # that wrote an info file, and those that had not yet (the engine stopped 50 ms after
        # starting one, whose info file came 2 s later), found by the home their environment
        # names. The engine is gone by now, and its launch returned only once the producer
        # ran the command: nothing it started can appear after this look.
        pids = set(loader_producers(self.home))
        for info in self.home.loader_dir.glob("*.json"):
            with contextlib.suppress(ValueError, OSError, KeyError, TypeError):
                pids.add(int(json.loads(info.read_text())["pid"]))
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                # its session's group, workers included; never a group it does not lead (a
                # producer a test started by hand is in pytest's own)
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)


def loader_producers(home: Home) -> Iterator[int]:
    """The pids of the `gpudesk loader serve` processes whose environment names `home`
    (GPUDESK_HOME, as the engine starts them), whether or not they have written their info file.
    None where the home's engine never started one: it opens the producer's log before it
    launches it, and most homes' teardowns need not read every process on the machine."""
    if not any(home.loader_log("any").parent.glob("*.log")):
        return
    for proc in psutil.process_iter(["cmdline"]):
        words = [os.path.basename(word) for word in proc.info["cmdline"] or ()]
        if not any(words[i : i + 3] == ["gpudesk", "loader", "serve"] for i in range(len(words))):
            continue
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("GPUDESK_HOME") == str(home.root):
                yield proc.pid


@pytest.fixture
def engine(home: Home) -> Iterator[EngineHandle]:
    """A real daemon (CPU-only station, 2 slots) in `home`; stopped by `home`'s teardown."""
    handle = EngineHandle(home)
    handle.start()
    yield handle
    handle.client.close()


def inner_pytest(*args: str) -> list[str]:
    """The command of a pytest a test starts: quiet, no cache, and without the installed plugins
    its tests do not use (textual-snapshot, syrupy, hypothesis; importing them was half of each
    of its processes' start, ~0.5 of 1.0 CPU-s). A name not installed is blocked all the same."""
    unused = ("-p", "no:textual-snapshot", "-p", "no:syrupy", "-p", "no:hypothesispytest")
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *unused, *args]


@contextlib.contextmanager
def module_engine(
    tmp_path_factory: pytest.TempPathFactory, name: str, **start: object
) -> Iterator[EngineHandle]:
    """`engine` for a module-scoped fixture: one real daemon the module's tests share (put them
    in one xdist group, so one worker makes it once), in a home of its own, started with
    `start` (EngineHandle.start's arguments); stopped after."""
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        home_at(tmp_path_factory.mktemp(name) / "home", monkeypatch) as home,
    ):
        handle = EngineHandle(home)
        handle.start(**start)  # type: ignore[arg-type]
        yield handle
        handle.client.close()  # `home_at` stops the engine


@pytest.fixture
def sim_engine(home: Home) -> Iterator[EngineHandle]:
    """A real daemon watching a simulated DGX Station A100 (4 GPUs), sampling every 0.2 s."""
    handle = EngineHandle(home)
    handle.start(backend="sim:dgx-station-a100", sample_interval=0.2)
    yield handle
    handle.client.close()


@pytest.fixture
def fast_engine(home: Home, monkeypatch: pytest.MonkeyPatch) -> Iterator[EngineHandle]:
    """A simulated DGX Station A100 sampled every 0.2 s, whose family history records a peak
    that has not grown for 0.5 s (60 s on a station)."""
    monkeypatch.setenv("GPUDESK_HISTORY_SETTLED_S", "0.5")
    handle = EngineHandle(home)
    handle.start(backend="sim:dgx-station-a100", sample_interval=0.2)
    yield handle
    handle.client.close()


@pytest.fixture
def mig_engine(home: Home) -> Iterator[EngineHandle]:
    """A real daemon on a simulated DGX Station A100 whose GPU 1 is in MIG mode (3g.20gb,
    2g.10gb, 2g.10gb), placing with the mig policy, sampling every 0.2 s."""
    handle = EngineHandle(home)
    handle.start(
        backend="sim:dgx-station-a100",
        policy="mig",
        sample_interval=0.2,
        mig={"1": "3g.20gb,2g.10gb,2g.10gb"},
    )
    yield handle
    handle.client.close()


# A sweep's job names, which differ only in their middle and end: what a view at 80 columns
# must keep apart.
SWEEP_NAMES = (
    "light-lr0.01-h512-1",
    "light-lr0.01-h512-2",
    "light-lr0.001-h512-1",
    "heavy-lr0.01-h1024-1",
)


def lines_within(text: str, width: int = 80) -> list[str]:
    """`text`'s lines, asserting there is one and none is wider than `width`."""
    lines = text.splitlines()
    assert lines and all(len(line) <= width for line in lines), "\n" + text
    return lines


@pytest.fixture
def gpudesk_cmd() -> list[str]:
    return [sys.executable, "-m", "gpudesk"]


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def gpudesk(capsys: pytest.CaptureFixture[str]) -> Run:
    """`gpudesk ARGS...` in-process: (exit code, stdout, stderr)."""
    from gpudesk.cli import main as cli

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            cli.main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return code, out, err

    return run
