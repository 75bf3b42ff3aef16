"""A job's state and its reason said together (`JobView.state_detail`, used by `show`, `run`'s
progress and `logs` of a job that never ran): the state's word is not said twice."""

from __future__ import annotations

import pytest
from test_api_prepass import job_view


@pytest.mark.parametrize(
    ("state", "reason", "said"),
    [
        ("cancelled", "cancelled (killed by SIGTERM (exit 143))", "killed by SIGTERM (exit 143)"),
        ("cancelled", "cancelled while queued", "while queued"),
        # two parentheses, not one around the rest: only the state's word goes
        ("cancelled", "cancelled (a) and (b)", "(a) and (b)"),
        ("failed", "exit code 3", "exit code 3"),
        ("succeeded", None, None),
        # a reason that only starts with the same letters keeps them
        ("failed", "failedover to another node", "failedover to another node"),
    ],
)
def test_the_state_is_not_said_twice(state: str, reason: str | None, said: str | None) -> None:
    assert job_view(state=state, reason=reason).state_detail == said
