"""gpudesk.quick_exit: a process that imported torch ends as the interpreter would have ended it
(threading's exit hooks and its non-daemon threads first, then its atexit handlers, its
buffered output written, the same exit status), only without the teardown after that; one
that did not import torch is torn down as before."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A process with what an exit must not lose or hang on: an idle ThreadPoolExecutor (its worker
# waits until threading's exit hook stops it), a non-daemon thread still working, an atexit
# handler, output still in its buffer (stdout is a pipe). Its main returns CODE, or raises
# SystemExit(CODE) as a signal handler does. A module global's finalizer says on stderr when
# the interpreter tears its modules down.
PROCESS = """
import atexit, os, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
from gpudesk.quick_exit import run_and_leave

code, how, with_torch = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "torch"
if with_torch:
    import torch

class Probe:
    def __del__(self):
        os.write(2, b"torn down\\n")

probe = Probe()
assert not sys.stdout.line_buffering
pool = ThreadPoolExecutor(max_workers=1)
pool.submit(time.sleep, 0)
atexit.register(lambda: print("atexit ran", flush=False))
threading.Thread(target=lambda: (time.sleep(0.3), print("thread done"))).start()
print("buffered")

def main():
    if how == "raise":
        raise SystemExit(code)
    return code

run_and_leave(main)
"""


@pytest.mark.parametrize(
    ("code", "how", "torch"),
    [(0, "return", "torch"), (3, "return", "torch"), (143, "raise", "torch"), (3, "return", "")],
)
def test_a_torch_process_leaves_with_its_status_after_its_threads_and_atexit_handlers(
    code: int, how: str, torch: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROCESS, str(code), how, torch],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == code, done.stderr
    assert done.stdout.splitlines() == ["buffered", "thread done", "atexit ran"], done.stdout
    # torch's teardown skipped, with the rest of the interpreter's; without torch, as before
    assert done.stderr == ("" if torch else "torn down\n"), done.stderr
