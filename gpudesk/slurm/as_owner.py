"""Running a program for a job's owner: as her, with an environment the engine built, bounded.

Everything the engine does with Slurm for a job (its clients, its folder, its log) runs in a
process that is the job's owner from its first instruction (uid, primary group, supplementary
groups, set before exec), found on the site's PATH, with `trust.engine_environment(owner, …)`:
nothing of her request's environment, so her PATH, LD_PRELOAD or slurm.conf never reach a root
process (docs/slurm.md, "On a shared station"). Slurm then acts with her rights and no more:
it refuses her a cancel of another user's job as it would on a login node.

What such a process answers is hers to shape (she may trace her own processes): its output is
read up to a bound, within a time limit, and parsed as untrusted text by the callers.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Sequence

import msgspec

from gpudesk.core.identity import Identity
from gpudesk.spawn import SAFE_CWD

MAX_OUTPUT_BYTES = 8 << 20  # squeue of a 10,000-task array is about 0.6 MB


class Answer(msgspec.Struct, frozen=True):
    """How a program run for an owner ended, and what it wrote (each stream cut at the bound)."""

    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace")


class TimedOut(Exception):
    """The program did not end within its time limit (it was killed)."""


def acts_for_other(owner: Identity) -> bool:
    """Does the engine act for another user than itself (a system engine, a job of hers)?"""
    return owner.uid != os.geteuid()


def run_as(
    owner: Identity,
    argv: Sequence[str],
    env: dict[str, str],
    *,
    timeout: float,
    stdin: bytes = b"",
    max_bytes: int = MAX_OUTPUT_BYTES,
) -> Answer:
    """Run `argv` (argv[0] an absolute path) as `owner` (as the engine itself when that is the
    engine's own user) with exactly `env`, `stdin` fed to it. Raises TimedOut after `timeout`
    seconds, OSError when it cannot be started. Output past `max_bytes` a stream is dropped."""
    switch = acts_for_other(owner)
    process = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=SAFE_CWD,
        env=env,
        start_new_session=True,  # a Ctrl-C meant for the engine is not its
        user=owner.uid if switch else None,
        group=owner.gid if switch else None,
        extra_groups=list(owner.groups) if switch else None,
    )
    try:
        stdout, stderr = _collect(process, stdin, timeout, max_bytes)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # its session's group: a shell's children too
        process.wait()
        raise
    finally:
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    return Answer(process.wait(), stdout, stderr)


def _collect(
    process: subprocess.Popen[bytes], stdin: bytes, timeout: float, max_bytes: int
) -> tuple[bytes, bytes]:
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    deadline = time.monotonic() + timeout
    chunks: dict[int, list[bytes]] = {process.stdout.fileno(): [], process.stderr.fileno(): []}
    sizes = dict.fromkeys(chunks, 0)
    pending = memoryview(stdin)
    with selectors.DefaultSelector() as selector:
        for stream in (process.stdout, process.stderr):
            selector.register(stream, selectors.EVENT_READ)
        if pending:
            os.set_blocking(process.stdin.fileno(), False)
            selector.register(process.stdin, selectors.EVENT_WRITE)
        else:
            process.stdin.close()
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimedOut
            for key, _ in selector.select(left):
                if key.fileobj is process.stdin:
                    try:
                        pending = pending[os.write(key.fd, pending[:65536]) :]
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(process.stdin)
                        process.stdin.close()
                    continue
                data = os.read(key.fd, 65536)
                if not data:
                    selector.unregister(key.fileobj)
                    continue
                room = max_bytes - sizes[key.fd]
                if room > 0:
                    chunks[key.fd].append(data[:room])
                sizes[key.fd] += len(data)
    left = deadline - time.monotonic()
    try:
        process.wait(max(left, 0.01))
    except subprocess.TimeoutExpired:
        raise TimedOut from None
    return (
        b"".join(chunks[process.stdout.fileno()]),
        b"".join(chunks[process.stderr.fileno()]),
    )
