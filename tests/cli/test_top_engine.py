"""A `gpudesk top` left open follows the engine: started before it, through a restart and a
pause (SIGSTOP), it shows the engine's view again once the engine answers; meanwhile it says
the engine is stopped or not answering, and does not claim that no job runs. Real processes:
an engine daemon, top writing frames into a pipe."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from conftest import EngineHandle, wait_for

from gpudesk.paths import Home

TOP = [sys.executable, "-m", "gpudesk", "top", "--interval", "0.2"]


class Frames:
    """The frames a top writes into a pipe (each begins with `gpudesk top  `), read as they
    come: a frame is complete once the next one begins."""

    def __init__(self) -> None:
        self.top = subprocess.Popen(
            TOP, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        self.frames: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.top.stdout is not None
        frame: list[str] = []
        for raw in self.top.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            if line.startswith("gpudesk top  ") and frame:
                self.frames.append("\n".join(frame))
                frame = []
            frame.append(line)

    def next_with(self, text: str, timeout: float = 20.0) -> str:
        """The first frame from now on that holds `text`."""
        seen = len(self.frames)

        def found() -> str | None:
            assert self.top.poll() is None, "\n\n".join(self.frames[-3:])
            return next((f for f in self.frames[seen:] if text in f), None)

        return str(wait_for(found, timeout, what=f"a frame with {text!r}"))


@pytest.fixture
def frames(home: Home) -> Iterator[Frames]:
    watching = Frames()
    yield watching
    watching.top.send_signal(signal.SIGINT)
    watching.top.wait(10)


def start(handle: EngineHandle) -> int:
    handle.start(sample_interval=0.2)
    handle.client.close()  # a new engine: the next request connects anew
    assert handle.pid is not None
    return handle.pid


def test_top_comes_back_to_an_engine_started_restarted_or_resumed(
    home: Home, frames: Frames
) -> None:
    frames.next_with("engine not running")  # top started first
    handle = EngineHandle(home)
    first = start(handle)
    frames.next_with(f"engine pid {first}, ")  # ... and finds the engine once it runs
    (job_id,) = handle.submit({"name": "sleeper", "command": ["sleep", "60"]})
    handle.wait_state(job_id, "running")
    row = frames.next_with(" sleeper ")

    handle.stop()  # `gpudesk engine stop`: its job runs on
    stopped = frames.next_with("the engine stopped")
    assert "engine not running" in stopped and "no running jobs" not in stopped
    assert "running jobs: unknown without the engine" in stopped
    second = start(handle)
    back = frames.next_with(f"engine pid {second}, ")
    if " sleeper " not in back:
        back = frames.next_with(" sleeper ")
    assert "the engine stopped" not in back and row

    os.kill(second, signal.SIGSTOP)  # alive, holding its lock, answering nothing
    try:
        paused = frames.next_with(f"engine pid {second} not answering")
        assert "the engine stopped" not in paused and "no running jobs" not in paused
        # still drawing, while it asks the engine again (on a thread of its own)
        count = len(frames.frames)
        wait_for(lambda: len(frames.frames) >= count + 5, 15.0, what="frames while paused")
    finally:
        os.kill(second, signal.SIGCONT)
    frames.next_with(f"engine pid {second}, ")
    handle.client.request("cancel", jobs=[job_id])
    handle.client.close()
