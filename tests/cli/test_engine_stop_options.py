"""`gpudesk engine stop --timeout`: a value no wait can use is a usage error (a negative one
reached the socket as a traceback, a huge one the clock's)."""

from __future__ import annotations

import pytest
from conftest import Run

from gpudesk.paths import Home


@pytest.mark.parametrize("value", ["-1", "0", "1e300", "nan"])
def test_a_timeout_no_wait_can_use_is_refused(home: Home, gpudesk: Run, value: str) -> None:
    code, out, err = gpudesk("engine", "stop", "--timeout", value)
    assert code == 2 and not out, (out, err)
    assert "--timeout" in err and "Traceback" not in err
