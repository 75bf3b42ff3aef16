"""How the suite's tests are spread over pytest-xdist's workers (pyproject's addopts: `-n 6
--dist loadgroup --no-loadscope-reorder`): the order the workers take them in, and the rule that
a `serial` test runs with no other test running.

conftest.py registers these hooks; tests/contract/test_xdist_order.py loads this module as a
plugin (`-p xdist_order`) in a pytest run of its own and watches what the workers did.
"""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

# Every `serial` test is put in this xdist group: one worker runs them one after another, and it
# holds the room from the first to the last (`pytest_runtest_protocol`), so the other workers'
# tests are drained once, not before each serial test.
SERIAL_GROUP = "serial"


def is_serial(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker("serial") is not None


def _own_seconds(item: pytest.Item) -> float:
    mark = item.get_closest_marker("slow")
    return float(mark.args[0]) if mark is not None else 0.0


def _group(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    return str(mark.args[0]) if mark is not None and mark.args else None


# tryfirst: before xdist's own hook of the same name, which names each test's group from its
# marks (`NODEID@GROUP`, what `--dist loadgroup` schedules by): the serial group's mark is added
# here.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest work starts first. With `--no-loadscope-reorder` the workers take the units
    of work (a test, or the tests of one `xdist_group`, which move as one) in this order as each
    becomes free, so starting the longest ones first keeps one of them from landing last and
    running alone while the other workers idle: the longest-processing-time-first rule, from the
    `slow(seconds)` marks (a test's time on the 2-core CI machine, measured). A group is as long
    as its tests together, and keeps its own order (some of its tests read what an earlier one
    left on a module-scoped fixture). The order of the rest is left alone; every worker sorts the
    same collection the same way, as xdist requires.

    The `serial` tests come last, in one group: each of them needs every other test gone
    before it starts, which costs least at the end of the run, where the tests left are the
    shortest (and once, for all of them)."""
    for item in items:
        if not is_serial(item):
            continue
        if _group(item) is not None:
            raise pytest.UsageError(
                f"{item.nodeid} is serial and in the xdist group {_group(item)!r}: a serial "
                f"test runs in the {SERIAL_GROUP!r} group, one after another"
            )
        item.add_marker(pytest.mark.xdist_group(SERIAL_GROUP))

    total: dict[str, float] = {}
    for item in items:
        name = _group(item)
        if name is not None:
            total[name] = total.get(name, 0.0) + _own_seconds(item)

    def seconds(item: pytest.Item) -> float:
        if is_serial(item):
            return -1.0
        name = _group(item)
        return _own_seconds(item) if name is None else total[name]

    items.sort(key=seconds, reverse=True)  # stable: unmarked tests keep their order


# The gate and the room (below) of a run of serial tests, held from its first test to its last.
_held: list[IO[str]] = []


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under pytest-xdist (the suite runs on 6 workers, pyproject's addopts), a test marked
    `serial` runs with no other test running: those measure CPU time or throughput (the
    calibration probe's busy share, the collocation measurements), which a test on the other core
    would distort. Two locks in a folder all workers of the run share: every test passes the
    gate (shared) and holds the room (shared); a serial test closes the gate first (so tests
    starting meanwhile wait at it rather than keep the room busy forever), then takes the room
    alone once the running ones have left. Taken around the whole test, outside pytest-timeout's
    clock (this wrapper is the outermost): waiting for a turn is not the test's time. A serial
    test followed by another on its worker (they are one group) keeps both locks for it: the
    others wait once for the whole run of serial tests, and the room is emptied once.

    The run is told by xdist's own input to this worker, not by PYTEST_XDIST_TESTRUNUID: a
    pytest a test starts (tests/cli/test_sdist.py runs the sdist's tests) inherits that
    variable, and once took the outer run's locks: its first test waited at the gate a serial
    test had closed, the serial test for the room the test waiting on it held, for 300 s."""
    workerinput = getattr(item.config, "workerinput", None)
    if workerinput is None:
        yield
        return
    shared = Path(tempfile.gettempdir()) / f"gpudesk-tests-{workerinput['testrunuid']}"
    shared.mkdir(exist_ok=True)
    if is_serial(item):
        if not _held:
            gate = open(shared / "serial-gate.lock", "a")  # noqa: SIM115 (held past this test)
            room = open(shared / "serial-room.lock", "a")  # noqa: SIM115
            _held[:] = [gate, room]
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(room, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if not is_serial(nextitem):
                for lock in reversed(_held):  # the room, then the gate
                    lock.close()  # which lets go of its lock
                _held.clear()
        return
    with (
        open(shared / "serial-gate.lock", "a") as gate,
        open(shared / "serial-room.lock", "a") as room,
    ):
        fcntl.flock(gate, fcntl.LOCK_SH)
        fcntl.flock(room, fcntl.LOCK_SH)
        fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(room, fcntl.LOCK_UN)
