"""`log`'s attempt, checked against the job's (LogArgs.attempt_of, which the engine's `log`
asks): the latest by default; one the job has not had, or any of a job not started yet, is
invalid_args naming it."""

from __future__ import annotations

import pytest

from gpudesk.core.protocol import INVALID_ARGS, ProtocolError
from gpudesk.core.wire.requests import LogArgs


def test_the_attempt_to_read_is_one_the_job_had() -> None:
    assert LogArgs(job=7).attempt_of(7, 3) == 3
    assert LogArgs(job=7, attempt=2).attempt_of(7, 3) == 2
    for args, attempts, says in (
        (LogArgs(job=7, attempt=4), 3, "'attempt': job 7 has attempts 1 to 3"),
        (LogArgs(job=7), 0, "job 7 has not started yet"),
        (LogArgs(job=7, attempt=1), 0, "job 7 has not started yet"),
    ):
        with pytest.raises(ProtocolError) as raised:
            args.attempt_of(7, attempts)
        assert raised.value.code == INVALID_ARGS and str(raised.value) == says
