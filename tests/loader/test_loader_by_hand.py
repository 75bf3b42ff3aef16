"""`gpudesk loader serve` run by hand says, on stdout, one line once jobs can read it (what it
serves, its socket, what stops it) and one line as it stops (why: idle for the `--idle-exit`
given, the signal; and what it served). It printed nothing at all, and an `--idle-exit` under a
second was said as "0 s". Its stderr stays for errors and warnings: quiet here. A producer the
engine starts (`--managed`) says nothing: the engine logs its start and end itself.
Real producer processes, a real consumer."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import short_home, wait_for

from gpudesk.loader import SharedLoader
from gpudesk.loader.orphan import IdleExit
from gpudesk.loader.protocol import read_info
from gpudesk.paths import Home
from gpudesk.units import seconds

GPUDESK = [sys.executable, "-m", "gpudesk"]
FACTORY = "gpudesk.workloads.synthetic:make_dataset"
SIGNALS = {signal.SIGINT: "SIGINT (Ctrl-C)", signal.SIGTERM: "SIGTERM"}


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    with short_home("gd-hand-", monkeypatch) as home:
        yield home


def serve(*args: str) -> subprocess.Popen[str]:
    """`gpudesk loader serve syn` of 32 samples in batches of 8, as a person runs it."""
    settings = ["--arg", "size=32", "--workers", "0", "--batch-size", "8"]
    return subprocess.Popen(
        [*GPUDESK, "loader", "serve", "syn", "--dataset", FACTORY, *settings, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_seconds_given_are_said_back_as_given() -> None:
    assert [seconds(s) for s in (0.5, 0.25, 3.0, 2.5, 60.0, 86400.0)] == [
        "0.5 s",
        "0.25 s",
        "3 s",
        "2.5 s",
        "60 s",
        "86400 s",
    ]


def test_the_idle_reason_says_the_seconds_given() -> None:
    idle = IdleExit("syn", 0.4, managed=False, now=0.0)
    assert not idle.stops(serving=False, now=0.3)
    assert idle.stops(serving=False, now=0.5)
    assert idle.why == "no consumer has read it for 0.4 s (--idle-exit)"  # was "0 s"


def test_it_says_what_it_serves_and_that_it_stopped_for_want_of_consumers(home: Home) -> None:
    producer = serve("--idle-exit", "0.5")
    out, error = producer.communicate(timeout=60)
    assert producer.returncode == 0, error
    assert error == ""  # quiet: stdout says it
    serving, stopped = out.splitlines()
    control = home.loader_paths("syn")[0]
    assert serving == (
        f"loader syn: serving {FACTORY}, 32 samples in batches of 8, on {control} (pid "
        f"{producer.pid}); jobs read it as SharedLoader('syn'); Ctrl-C or SIGTERM stops it, as "
        "does 0.5 s without a consumer"
    )
    assert stopped.startswith(
        "loader syn: stopped: no consumer has read it for 0.5 s (--idle-exit); it served 0 "
        "batch(es) to 0 consumer(s) in "
    ), stopped


@pytest.mark.parametrize("signum", list(SIGNALS))
def test_told_to_stop_it_names_the_signal_and_what_it_served(home: Home, signum: int) -> None:
    producer = serve()
    try:
        wait_for(lambda: (i := read_info(home.loader_paths("syn")[2])) and i.control, 60.0)
        with SharedLoader("syn") as loader:
            assert sum(1 for _ in loader) == 4  # one epoch, each batch let go
        producer.send_signal(signum)
        out, error = producer.communicate(timeout=60)
    finally:
        producer.kill()
    assert producer.returncode == 0 and error == "", error
    assert out.startswith("loader syn: serving "), out
    # handed out: the epoch read, and what was sent ahead of the consumer
    said = re.search(
        rf"\nloader syn: stopped: {re.escape(SIGNALS[signum])}; it served (\d+) batch\(es\) "
        r"to 1 consumer\(s\) in \d+\.\ds\n\Z",
        out,
    )
    assert said is not None and int(said.group(1)) >= 4, out


def test_one_the_engine_starts_says_nothing(home: Home) -> None:
    producer = serve("--managed", "--idle-exit", "0.3")
    out, error = producer.communicate(timeout=60)
    assert (producer.returncode, out, error) == (0, "", "")


def test_a_negative_idle_exit_is_a_usage_error(home: Home) -> None:
    producer = serve("--idle-exit", "-1")  # it stopped at once, saying nothing
    out, error = producer.communicate(timeout=60)
    assert (producer.returncode, out) == (2, "")
    assert error.startswith("error: ") and "--idle-exit" in error and "Traceback" not in error


@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_status_of_a_name_no_loader_can_have_is_a_usage_error(home: Home, as_json: list) -> None:
    """`loader status 'x\\x1b'` said "no shared loaders are running named …" (`{"loaders": []}`
    with --json) and exited 0, as for a name that is merely not running: it is refused as
    `serve` refuses it. A good name not running is still an empty answer, exit 0."""
    bad = subprocess.run(
        [*GPUDESK, "loader", "status", "x\x1b", *as_json], capture_output=True, text=True
    )
    assert bad.returncode == 2, bad
    assert bad.stderr == (
        "error: 'x\\x1b' is not a loader name: use 1 to 40 letters, digits, '_', '.' or '-', "
        "starting with a letter or digit\n"
    )
    good = subprocess.run(
        [*GPUDESK, "loader", "status", "nosuch", *as_json], capture_output=True, text=True
    )
    assert good.returncode == 0, good


# The synthetic dataset, built only once the test opens its gate (a file)
GATED = (
    "import os, time\n"
    "from gpudesk.workloads.synthetic import make_dataset\n"
    "def make(gate, **kwargs):\n"
    "    while not os.path.exists(gate):\n"
    "        time.sleep(0.05)\n"
    "    return make_dataset(**kwargs)\n"
)


def test_a_consumer_finding_a_producer_that_does_not_serve_yet_says_so(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer started by hand that holds its name but builds its dataset (no info file
    yet): a consumer outside the engine (it waits for none) says that one does not serve yet,
    not that no loader is running and to start one."""
    from gpudesk.loader.protocol import LoaderError
    from gpudesk.loader.station_access import name_holder

    (tmp_path / "gd_gated_hand.py").write_text(GATED)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    gate = tmp_path / "gate"
    producer = serve("--dataset", "gd_gated_hand:make", "--arg", f'gate="{gate}"')
    try:
        pid = wait_for(lambda: name_holder(home, "syn"), 60.0, what="the producer's claim")
        with pytest.raises(LoaderError) as refused:
            SharedLoader("syn", fallback=False)
        said = str(refused.value)
        assert said.startswith(
            f"the producer of the shared loader 'syn' (pid {pid}) holds its name but does not "
            "serve yet"
        ), said
        assert "no shared loader" not in said and "waited" not in said, said
        gate.touch()
        wait_for(lambda: read_info(home.loader_paths("syn")[2]), 60.0, what="it to serve")
        assert sum(1 for _batch in SharedLoader("syn", fallback=False)) == 4  # 32 in 8s
    finally:
        gate.touch()  # a producer building its dataset stops only once it has built it
        producer.terminate()
        producer.communicate(timeout=60)


def test_a_peers_messages_of_another_shape_are_refused_and_it_serves_on(home: Home) -> None:
    """On a station any member the loader is shared with may reach its control socket: a hello
    or a release of another shape than a consumer's is refused or passed over, and the producer
    serves on (a hello resuming from epoch "x" ended it with a traceback, and every member's
    job reading it lost it)."""
    import json
    import os

    import zmq

    producer = serve()
    try:
        info = wait_for(lambda: (i := read_info(home.loader_paths("syn")[2])) and i.control and i)
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(info.control)

        def ask(kind: str, **fields: object) -> dict:
            sock.send(json.dumps({"type": kind, **fields}).encode())
            assert sock.poll(10_000), f"no answer to {kind} {fields}"
            answer: dict = json.loads(sock.recv())
            return answer

        me = os.getpid()
        for fields in (
            {"pid": me, "resume": {"epoch": "x"}},
            {"pid": me, "resume": [1]},
            {"pid": me, "resume": {"epoch": 0, "received": {"x": [1]}}},
            {"pid": "abc"},
            {"pid": me, "batch_size": -8},
        ):
            answer = ask("hello", **fields)
            assert answer["type"] == "refused", answer
            assert "a hello this producer cannot read" in answer["message"], answer
        assert ask("hello", pid=me)["type"] == "welcome"  # a consumer now
        for slots in (5, [[1]], ["a"], {"1": 2}):
            sock.send(json.dumps({"type": "release", "slots": slots}).encode())
        sock.send(json.dumps({"type": "bye"}).encode())
        # its status, answered after the releases and the bye (in order, past the batches it
        # sent before): they are taken in before the socket closes (LINGER 0 drops the unsent)
        answer = {"type": "batch"}
        sock.send(json.dumps({"type": "status"}).encode())
        while answer["type"] != "status":
            assert sock.poll(10_000), "no status after the bye"
            answer = json.loads(sock.recv())
        assert answer["consumers"] == [], answer
        sock.close()
        with SharedLoader("syn") as loader:
            assert sum(1 for _ in loader) == 4  # one epoch: it serves on
        producer.send_signal(signal.SIGTERM)
        _, error = producer.communicate(timeout=60)
    finally:
        producer.kill()
    assert producer.returncode == 0 and "Traceback" not in error, error
    assert error.count("a release of slots that are not a list of numbers") == 4, error
