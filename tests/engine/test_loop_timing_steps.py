"""gpudesk_engine_request_seconds counts each hold of the loop as its own op's, on a real engine
scraped over HTTP: a request answered in later turns (a job-control request acted on a slice a
turn) is observed once a step, and a step's observation is its own time alone. Posting a
step's reply answers the requests its connection sent meanwhile; they were timed inside the
step too (before), so a quick request's last step was counted as long as a whole submit after
it, and the loop's time twice.

The engine is stopped (SIGSTOP) while the two clients send, so it reads everything in one turn,
in the order the connections were accepted (test_job_control_slices.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import EngineHandle, wait_for
from test_job_control_slices import SLICE, RawClient, engine_stopped
from test_metrics import Samples, scrape

from gpudesk.core import protocol
from gpudesk.paths import Home

FAMILY = "gpudesk_engine_request_seconds"
PINGS = 2000  # their frames and replies fit the socket's buffers: all read and answered at once


@pytest.fixture
def metrics_engine(home: Home) -> Iterator[tuple[EngineHandle, str]]:
    handle = EngineHandle(home)
    handle.start(metrics_listen="127.0.0.1:0")
    url = handle.client.request("status")["station"]["metrics_url"]
    yield handle, url
    handle.client.close()


def observed(samples: Samples, op: str) -> tuple[float, float]:
    """(count, sum) of `op`'s observations."""
    mine = {name: value for name, labels, value in samples.get(FAMILY, []) if labels["op"] == op}
    return mine.get(f"{FAMILY}_count", 0.0), mine.get(f"{FAMILY}_sum", 0.0)


def scraped_once(url: str, op: str, more_than: float) -> Samples:
    """A scrape counting more than `more_than` of `op` (the endpoint rebuilds its histograms
    at most once a second)."""

    def counted() -> Samples | None:
        got = scrape(url)
        return got if observed(got, op)[0] > more_than else None

    got = wait_for(counted, 10.0, 0.1, f"the endpoint to count {op}")
    assert isinstance(got, dict)
    return got


def since(after: Samples, before: Samples, op: str) -> tuple[float, float]:
    """(count, sum) of `op`'s observations between the two scrapes."""
    (count, total), (count_before, total_before) = observed(after, op), observed(before, op)
    return count - count_before, total - total_before


def test_a_step_is_observed_alone_not_with_the_requests_its_reply_lets_through(
    metrics_engine: tuple[EngineHandle, str],
) -> None:
    engine, url = metrics_engine
    jobs = [{"name": f"q{k}", "command": ["true"], "workdir": "/tmp"} for k in range(SLICE + 10)]
    canceller, holder = RawClient(engine.home), RawClient(engine.home)  # a ping each
    named = engine.client.request("submit", jobs=jobs, hold=True)["ids"]
    assert engine.pid is not None
    before = scraped_once(url, "submit", 0)  # the submit above counted (and the pings before it)
    with engine_stopped(engine.pid):
        canceller.send("cancel", jobs=named)  # two slices, its last job in the second
        # a hold of that last job waits a turn or two for the cancel, in a few quick steps;
        # the pings behind it on the same connection are answered once the hold is
        holder.send("hold", jobs=[named[-1]])
        ping = protocol.frame(protocol.Request(op="ping", args={}, id=1).encode())
        holder.sock.sendall(ping * PINGS)  # in one piece: each frame apart would fill the buffer
    assert len(canceller.reply()["results"]) == len(named)
    assert holder.reply()["results"][0]["id"] == named[-1]
    for _ in range(PINGS):
        holder.reply()

    after = scraped_once(url, "ping", observed(before, "ping")[0] + PINGS - 1)
    holds, held_s = since(after, before, "hold")
    pings, ping_s = since(after, before, "ping")
    assert pings == PINGS
    assert holds >= 2  # its first step, and each later one, observed apart
    # the hold's steps touch one job; 2,000 pings take far longer (before: the hold's last
    # step held every one of them, the loop's time counted twice)
    assert held_s < ping_s, (held_s, ping_s)
    canceller.close()
    holder.close()
