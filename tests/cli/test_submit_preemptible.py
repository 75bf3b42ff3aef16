"""`gpudesk submit --preemptible [--preempt-signal SIG] [--preempt-grace S]`: bad values are one
clear usage error naming the option (exit 2), before any engine is asked."""

from __future__ import annotations

import pytest
from test_cli import gpudesk


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["--preempt-grace", "30"],
            "--preempt-signal and --preempt-grace apply to a --preemptible",
        ),
        (
            ["--preemptible", "--preempt-signal", "KILL"],
            "--preempt-signal: expected one of SIGUSR1, SIGUSR2, SIGINT, SIGTERM, SIGHUP (signals "
            "the job's wrapper outlives; SIG may be left out), found 'KILL'\n",
        ),
        (["--preemptible", "--preempt-grace", "0.5"], "--preempt-grace: expected a number from 1"),
    ],
)
def test_bad_preemption_options_are_usage_errors(
    home: object, options: list[str], message: str
) -> None:
    result = gpudesk("submit", *options, "--", "true")
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
