"""`cancel --signal`'s signal, by name or number: the five a job's wrapper outlives, and one
sentence for anything else (naming the command that does it where there is one)."""

from __future__ import annotations

import pytest

from gpudesk.core.job_signals import JOB_SIGNALS, job_signal


@pytest.mark.parametrize(
    ("given", "name"),
    [
        ("USR1", "SIGUSR1"),
        ("sigusr2", "SIGUSR2"),
        (" hup ", "SIGHUP"),
        (10, "SIGUSR1"),
        ("15", "SIGTERM"),
    ],
)
def test_a_signal_by_name_or_number(given: str | int, name: str) -> None:
    assert job_signal(given) == name


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("KILL", "SIGKILL is not sent with --signal: gpudesk cancel ends a job"),
        ("9", "SIGKILL is not sent with --signal"),
        ("STOP", "gpudesk suspend stops a job"),
        ("SIGCONT", "gpudesk resume continues a suspended job"),
        ("QUIT", "SIGQUIT cannot be sent to a job: use one of SIGUSR1"),
        ("FOO", "'FOO' cannot be sent to a job"),
        ("99", "99 is no signal number"),
        ("", "'' cannot be sent to a job"),
    ],
)
def test_anything_else_is_one_sentence_naming_what_is_sent(given: str, said: str) -> None:
    with pytest.raises(ValueError) as raised:
        job_signal(given)
    assert said in str(raised.value) and "\n" not in str(raised.value)


def test_the_signals_sent_are_those_the_wrapper_outlives() -> None:
    from gpudesk.hw.wrapper import _OUTLIVED

    assert {job_signal(name) for name in JOB_SIGNALS} == {s.name for s in _OUTLIVED}
