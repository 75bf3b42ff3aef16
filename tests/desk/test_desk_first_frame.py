"""The desk's first frame is read while Textual loads (`EngineFeed.read_ahead`, which
`run_desk` calls before importing the app), on a real engine: the first `next_frame` hands over
the frame read ahead, frames after it are read as before, and an engine that cannot answer is
said by that first `next_frame` exactly as when it reads the frame itself."""

from __future__ import annotations

import pytest
from conftest import EngineHandle

from gpudesk.api import EngineError
from gpudesk.paths import Home
from gpudesk.screens.feed import EngineFeed


def test_the_first_frame_is_the_one_read_ahead(home: Home, engine: EngineHandle) -> None:
    (before,) = engine.submit({"name": "before", "command": ["true"]})
    engine.wait_state(before, "succeeded")
    feed = EngineFeed(home, interval=0.05)
    try:
        feed.read_ahead()
        assert feed._ahead is not None
        feed._ahead.join(10.0)
        (after,) = engine.submit({"name": "after", "command": ["true"]})
        first = feed.next_frame(1.0)
        assert first is not None
        assert [j.id for j in first.jobs] == [before], "read before `after` was submitted"
        engine.wait_state(after, "succeeded")
        ids: list[int] = []
        for _ in range(50):  # the next frames come from the engine as it is now
            frame = feed.next_frame(0.2)
            if frame is not None and (ids := [j.id for j in frame.jobs]) == [before, after]:
                break
        assert ids == [before, after]
    finally:
        feed.close()


def test_an_engine_gone_before_the_first_frame_is_said_by_next_frame(
    home: Home, engine: EngineHandle
) -> None:
    feed = EngineFeed(home, interval=0.05)
    try:
        engine.kill9()
        feed.read_ahead()
        with pytest.raises(EngineError):
            feed.next_frame(1.0)
        engine.start()  # the desk retries: the first frame is read then, as without read_ahead
        frame = None
        for _ in range(50):
            try:
                frame = feed.next_frame(0.2)
            except EngineError:
                continue
            if frame is not None:
                break
        assert frame is not None and frame.status.pid == engine.pid
    finally:
        feed.close()
