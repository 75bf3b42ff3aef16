"""`reported_failures` (gpudesk/cli/failures.py) turns a Ctrl-C into exit 130 wherever it lands,
even inside a class body being made as a module is first imported: Python 3.11 wraps what a
`__set_name__` raises in a RuntimeError, and `gpudesk run` printed that traceback when its
lazy import of gpudesk.profile was interrupted (tests/cli/test_cli.py's Ctrl-C test, on a loaded
machine)."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from gpudesk.cli.exit_codes import EXIT_INTERRUPTED
from gpudesk.cli.failures import reported_failures


class _InterruptedWhileNamed:
    """A field whose `__set_name__` is where the interrupt lands (as SIGINT's handler raises)."""

    def __set_name__(self, owner: type, name: str) -> None:
        signal.raise_signal(signal.SIGINT)


def test_a_ctrl_c_in_a_class_body_being_made_exits_130() -> None:
    with pytest.raises(SystemExit) as done, reported_failures():

        class _Entry:  # made only for the interrupt its field meets
            grid: Any = _InterruptedWhileNamed()

    assert done.value.code == EXIT_INTERRUPTED


def test_any_other_runtime_error_is_not_taken_for_one() -> None:
    with pytest.raises(RuntimeError, match="something else"), reported_failures():
        raise RuntimeError("something else")
