"""gpudesk.slurm.as_owner: a program run for an owner is bounded in time and output,
and gets exactly the environment it is given (run as the test's own user: no switch)."""

from __future__ import annotations

import time

import pytest

from gpudesk.core.identity import Identity
from gpudesk.slurm.as_owner import TimedOut, acts_for_other, run_as

SH = "/bin/sh"


def test_output_past_the_bound_is_dropped_and_the_program_still_ends() -> None:
    done = run_as(
        Identity.of_process(),
        [SH, "-c", "head -c 1000000 /dev/zero; echo said >&2"],
        {"PATH": "/usr/bin:/bin"},
        timeout=30,
        max_bytes=1000,
    )
    assert done.returncode == 0 and len(done.stdout) == 1000 and done.err == "said\n"


def test_a_program_that_does_not_end_is_killed_at_its_time_limit() -> None:
    started = time.monotonic()
    with pytest.raises(TimedOut):
        run_as(Identity.of_process(), [SH, "-c", "sleep 30"], {}, timeout=0.5)
    assert time.monotonic() - started < 10


def test_it_gets_its_stdin_and_exactly_its_environment() -> None:
    done = run_as(
        Identity.of_process(),
        ["/usr/bin/env"],
        {"ONLY": "this"},
        timeout=30,
        stdin=b"ignored",
    )
    assert done.out == "ONLY=this\n"
    assert not acts_for_other(Identity.of_process())
