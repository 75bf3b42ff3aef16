"""A producer whose settings cannot work says why in its info file and exits EXIT_FINAL; a
consumer waiting for it, to come up or to come back, stops waiting and fails with that reason
(issue 40, item 5). Real producer processes (`gpudesk loader serve`), real consumers.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from conftest import short_home, wait_for

from gpudesk.loader import LoaderError, SharedLoader
from gpudesk.loader.consumer import START_WAIT_S
from gpudesk.loader.protocol import ENV_DATASET, EXIT_FINAL, final_failure, read_info
from gpudesk.loader.status import collect
from gpudesk.paths import Home

GPUDESK = [sys.executable, "-m", "gpudesk"]
FACTORY = "gpudesk.workloads.synthetic:make_dataset"
FAST_S = 10.0  # "at once": well under START_WAIT_S, with room for a loaded machine


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    with short_home("gd-final-", monkeypatch) as home:
        yield home


def serve(name: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*GPUDESK, "loader", "serve", name, "--workers", "0", "--batch-size", "8", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_waiting_consumer_fails_at_once_with_the_reason_a_producer_left(
    home: Home, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A job the engine started with its producer waits START_WAIT_S for it to come up.
    monkeypatch.setenv(ENV_DATASET, "x")
    producer = serve("x", "--dataset", "no.such.module:make")
    began = time.monotonic()
    with pytest.raises(LoaderError) as raised:
        SharedLoader("x")
    took = time.monotonic() - began
    _, error = producer.communicate(timeout=60)
    assert producer.returncode == EXIT_FINAL
    assert error.startswith("error:") and "Traceback" not in error, error
    assert took < FAST_S < START_WAIT_S, f"the consumer waited {took:.1f} s"
    message = str(raised.value)
    assert "'x'" in message and "failed for good" in message
    assert "cannot import the dataset module 'no.such.module'" in message
    reason = final_failure(read_info(home.loader_paths("x")[2]))
    assert reason is not None and "no.such.module" in reason
    assert collect("x", home) == [{"name": "x", "error": f"its producer failed: {reason}"}]

    # Asked for a local fallback, it reads locally, and says why it does not share.
    loader = SharedLoader("x", batch_size=8, factory=FACTORY, factory_kwargs={"size": 16})
    assert loader.mode == "local" and len(list(loader)) == 2
    assert "no.such.module" in capsys.readouterr().err


def test_a_factory_that_raises_is_final_and_a_fixed_one_serves(home: Home) -> None:
    bad = serve("x", "--dataset", FACTORY, "--arg", "no_such_arg=1")
    _, error = bad.communicate(timeout=60)
    assert bad.returncode == EXIT_FINAL, error
    assert "the dataset factory" in error and "TypeError" in error and "no_such_arg" in error
    with pytest.raises(LoaderError, match=r"failed for good.*no_such_arg"):
        SharedLoader("x")
    # Started again with settings that work, it serves: its info file says so no more.
    good = serve("x", "--dataset", FACTORY, "--arg", "size=32")
    try:
        wait_for(lambda: (i := read_info(home.loader_paths("x")[2])) and i.control, 60.0)
        with SharedLoader("x") as loader:
            assert sum(len(b[1]) for b in loader) == 32
    finally:
        good.send_signal(signal.SIGTERM)
        good.communicate(timeout=30)


def test_a_consumer_resuming_fails_at_once_when_the_restarted_producer_cannot_work(
    home: Home,
) -> None:
    first = serve("x", "--dataset", FACTORY, "--arg", "size=400")
    try:
        wait_for(lambda: (i := read_info(home.loader_paths("x")[2])) and i.control, 60.0)
        loader = SharedLoader("x", resume_s=START_WAIT_S)
        batches = iter(loader)
        next(batches)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        # Its successor is started with a factory it cannot import.
        second = serve("x", "--dataset", "no.such.module:make")
        began = time.monotonic()
        with pytest.raises(LoaderError) as raised:
            for _ in batches:
                pass
        took = time.monotonic() - began
        second.communicate(timeout=60)
        assert second.returncode == EXIT_FINAL
        assert took < FAST_S, f"the consumer waited {took:.1f} s"
        assert "died" in str(raised.value) and "no.such.module" in str(raised.value)
    finally:
        first.kill()
        first.communicate(timeout=30)


BAD_NAME = "a\udcffb\x1b[2J"  # a byte that is not UTF-8, then an escape sequence


@pytest.mark.parametrize(
    ("name", "args", "said"),
    [
        (BAD_NAME, (), "'a\\xffb\\x1b[2J' is not a loader name"),
        ("", (), "'' is not a loader name"),
        ("x", ("--device", "gpu"), "--device 'gpu': expected one of"),
        ("x", ("--share", "world"), "--share 'world': expected one of"),
    ],
    ids=["bad-name", "empty-name", "device", "share"],
)
def test_a_name_or_option_typed_wrong_is_a_usage_error(
    home: Home, name: str, args: tuple[str, ...], said: str
) -> None:
    """By a person, a bad name or option is exit 2 with the value spelled out; EXIT_FINAL
    ("do not start it again") is for the engine, which starts producers `--managed`."""
    producer = serve(name, "--dataset", FACTORY, *args)
    _, error = producer.communicate(timeout=60)
    assert producer.returncode == 2, error
    assert error.startswith(f"error: {said}") and "Traceback" not in error, error
    assert "\x1b" not in error
    assert not home.root.exists() or not any(home.root.rglob("*.info*"))


def test_a_bad_name_from_the_engine_is_still_final(home: Home) -> None:
    producer = serve(BAD_NAME, "--dataset", FACTORY, "--managed")
    _, error = producer.communicate(timeout=60)
    assert producer.returncode == EXIT_FINAL, error
    assert "is not a loader name" in error
