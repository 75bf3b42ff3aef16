"""A Ctrl-C that Python swallows — raised inside a callback Python calls for itself, such as
importlib's weakref callback that drops a module lock — still ends `gpudesk run`
(gpudesk.cli.interrupts). Once in CI the interrupt landed there and the run went on following
its jobs until the test's timeout."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import EngineHandle, wait_for

# Raises SIGINT where Python can only print "Exception ignored in: …": in a weakref callback.
SWALLOW = """
import signal, weakref

class _Thing:
    pass

def swallowed_interrupt():
    thing = _Thing()
    ref = weakref.ref(thing, lambda _ref: signal.raise_signal(signal.SIGINT))
    del thing  # the callback runs here; its KeyboardInterrupt goes nowhere
    return ref
"""


def run_python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`code` in a fresh Python with SIGINT as a terminal leaves it (Python's own handler)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SWALLOW) + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def test_python_swallows_the_interrupt_and_the_ledger_sees_it() -> None:
    """The control first: without the ledger the interrupt is lost (Python prints "Exception
    ignored in"); with it, check() raises, and Python's report of it is not printed."""
    done = run_python(
        """
        from gpudesk.cli.interrupts import InterruptLedger

        swallowed_interrupt()
        print("lost: Python went on")
        ledger = InterruptLedger()
        ledger.install()
        swallowed_interrupt()
        try:
            ledger.check()
        except KeyboardInterrupt:
            print("seen by check")
        ledger.check()  # once only
        try:
            signal.raise_signal(signal.SIGINT)  # an ordinary Ctrl-C is still KeyboardInterrupt
        except KeyboardInterrupt:
            ledger.seen()
        ledger.check()  # handled where it landed: nothing left to raise
        print("ordinary one handled")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "lost: Python went on",
        "seen by check",
        "ordinary one handled",
    ]
    assert done.stderr.count("Exception ignored in") == 1, done.stderr  # the first, lost one
    assert done.stderr.count("Traceback") == 1 and "interrupts.py" not in done.stderr


def test_the_ledger_leaves_a_handler_it_did_not_expect_alone() -> None:
    """SIGINT ignored (a shell's background job) stays ignored."""
    done = run_python(
        """
        from gpudesk.cli.interrupts import InterruptLedger

        signal.signal(signal.SIGINT, signal.SIG_IGN)
        InterruptLedger().install()
        print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
        """
    )
    assert done.stdout.strip() == "True", done.stderr


# Records which modules were imported, beyond those loaded as Python started and these lines'
# own, when SIGINT's handler is first set (the ledger going in), then runs the command `ENTRY`.
ORDER = """
import _signal, json, runpy, sys

started_with = set(sys.modules)
imported = []
set_handler = _signal.signal

def recording(signum, handler):
    if signum == _signal.SIGINT and not imported:
        imported.append(sorted(set(sys.modules) - started_with))
    return set_handler(signum, handler)

_signal.signal = recording
sys.argv = ["gpudesk", "--version"]
try:
    ENTRY
finally:
    print(json.dumps(imported[0] if imported else None), file=sys.stderr)
"""


def imported_before_the_ledger(entry: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", ORDER.replace("ENTRY", entry)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stderr.splitlines()[-1])


def test_the_ledger_is_in_before_the_command_imports_more_than_it() -> None:
    """An import's module lock is dropped by a weakref callback, where Python swallows a
    Ctrl-C: before the ledger counts them, the command imports nothing but the ledger's
    module and the packages above it, by either door (`python -m gpudesk`, the console
    script's `gpudesk.cli.entry:main`)."""
    ledger = ["gpudesk", "gpudesk.cli", "gpudesk.cli.interrupts"]
    as_module = "runpy.run_module('gpudesk', run_name='__main__')"
    assert imported_before_the_ledger(as_module) == ledger
    as_script = "from gpudesk.cli.entry import main; main()"
    assert imported_before_the_ledger(as_script) == sorted([*ledger, "gpudesk.cli.entry"])
    # and the ledger's module loads nothing Python had not loaded as it started
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; before = set(sys.modules); import gpudesk.cli.interrupts; "
            "print(sorted(set(sys.modules) - before))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == str(ledger), done.stderr


def test_a_run_whose_ctrl_c_was_swallowed_still_cancels_its_jobs(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """The interrupt is swallowed while the run follows its jobs: the run still says it is
    interrupted, cancels every job and exits 130."""
    profile = tmp_path / "p.toml"
    profile.write_text(
        textwrap.dedent(
            """
            [station]
            backend = "none"
            slots = 2
            [[jobs]]
            name = "long"
            command = ["sleep", "60"]
            repeat = 3
            """
        )
    )
    done = run_python(
        """
        import sys
        from gpudesk.cli import run_progress
        from gpudesk.cli.entry import main

        update = run_progress.Progress.update
        fired = []

        def update_then_swallow(self, jobs):
            update(self, jobs)
            if not fired and any(job.state == "running" for job in jobs):
                fired.append(True)
                swallowed_interrupt()
                print("swallowed: the run went on past it", flush=True)

        run_progress.Progress.update = update_then_swallow
        sys.argv = ["gpudesk", "run", sys.argv[1]]
        main()
        """,
        str(profile),
    )
    assert "swallowed: the run went on past it" in done.stdout, done.stdout + done.stderr
    # Python's report of the swallowed interrupt, a traceback through the ledger, is not shown
    assert "Exception ignored in" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 130, done.stdout + done.stderr
    assert "interrupted: cancelling" in done.stdout + done.stderr, done.stdout

    def cancelled() -> bool:
        jobs = engine.client.request("jobs")["jobs"]
        return len(jobs) == 3 and all(j["state"] == "cancelled" for j in jobs)

    wait_for(cancelled, 10.0, what="every job of the run to be cancelled")
