"""Every command in a locale that is not UTF-8: a character the output's encoding lacks is an
ASCII stand-in (cli/output_encoding.py), never a UnicodeEncodeError traceback. `gpudesk top`'s
own frames: tests/cli/test_top_output.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import EngineHandle

NAME = "训练-模型-大型-实验-一号-长长的名字-再长一点点点点点点点点点点点点点"


def gpudesk(encoding: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONIOENCODING": encoding, "COLUMNS": "60"}
    return subprocess.run(
        [sys.executable, "-m", "gpudesk", *args], capture_output=True, env=env, timeout=60
    )


@pytest.mark.parametrize("encoding", ["latin-1", "ascii"])
def test_queue_show_and_errors_degrade_instead_of_failing(
    engine: EngineHandle, encoding: str
) -> None:
    job_id = int(
        gpudesk("utf-8", "submit", "--hold", "--parsable", "--name", NAME, "--", "true").stdout
    )
    for args in (("queue",), ("queue", "-l"), ("show", str(job_id))):
        done = gpudesk(encoding, *args)
        assert done.returncode == 0, done.stderr
        text = done.stdout.decode(encoding)  # what the terminal shows: every byte its own
        assert "????" in text and "Traceback" not in done.stderr.decode(encoding)
    assert "..." in gpudesk(encoding, "queue").stdout.decode(encoding)  # a cut, as `…` would
    # an error naming the job: said, in the same stand-ins
    refused = gpudesk(encoding, "suspend", str(job_id))
    assert refused.returncode == 1 and b"Traceback" not in refused.stderr, refused.stderr
    engine.api.cancel([job_id])
