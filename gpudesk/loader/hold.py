"""When the stream waits for a consumer that lags, and when it lets it go.

A consumer that keeps pace, would not take the next batch now and has no look-back left for it
holds the stream: the producer waits before making that batch, so that consumers of about the
same pace go on sharing every batch. But only briefly: at most HOLD_PATIENCE_S at once and
HOLD_SHARE of the time over HOLD_WINDOW_S (decaying, `ConsumerState.debt`). A consumer that
needs more is let go: the stream no longer waits for it, and what it lacks is made again for it
at its own pace (`producer.py`), until it catches up.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from gpudesk.loader.consumer_state import HOLD_WINDOW_S, ConsumerState
from gpudesk.loader.fetch import Key

if TYPE_CHECKING:
    from gpudesk.loader.producer import Producer

log = logging.getLogger("gpudesk.loader")

HOLD_PATIENCE_S = 0.5  # the longest the stream waits at once for a consumer that lags
HOLD_SHARE = 0.1  # ... and over HOLD_WINDOW_S (decaying) at most this share of the time


def hold(producer: Producer, key: Key) -> bool:
    """Whether the stream waits before making `key` (the next batch out): for consumers
    that keep pace, would not take it now and have no look-back left for it. Each may hold
    it only so long (HOLD_PATIENCE_S at once, HOLD_SHARE of the time); then it is let go."""
    now = time.monotonic()
    holding = False
    for consumer in producer.consumers.values():
        blocks = (
            consumer.keeps_pace
            and key not in consumer.ordered
            and not consumer.accepts(key)
            and consumer.wants_later(key)
            and len(producer.table.pins.get(consumer.ident, ())) >= consumer.cap
        )
        if not blocks:
            if consumer.holding_since is not None:
                consumer.hold_debt = consumer.debt(now) + now - consumer.holding_since
                consumer.debt_at = now
                consumer.holding_since = None
            continue
        if consumer.holding_since is None:
            consumer.holding_since = now
        waited = now - consumer.holding_since
        if waited > HOLD_PATIENCE_S or consumer.debt(now) + waited > HOLD_SHARE * HOLD_WINDOW_S:
            let_go(producer.config.name, consumer, waited)
            continue
        holding = True
    return holding


def let_go(name: str, consumer: ConsumerState, waited: float) -> None:
    """The stream no longer waits for `consumer` (of the producer `name`): it was waited for
    `waited` s at once, or more than its share over time."""
    consumer.keeps_pace = False
    consumer.holding_since = None
    consumer.hold_debt = 0.0
    log.info(
        "loader %s: consumer pid %d is slower than the others (they waited %.2f s for it "
        "at once, more in all): the stream goes on without waiting for it",
        name,
        consumer.pid,
        waited,
    )
