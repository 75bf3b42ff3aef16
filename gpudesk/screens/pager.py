"""The desk's "open its log in $PAGER": the job's whole log piped into the pager, as
`gpudesk logs JOB | $PAGER` (git's way with its pager), never output.log by its path.

The engine caps a log by rotating it (gpudesk.joblog): what the job printed first is in the
numbered parts beside output.log, and on tmpfs or NFS output.log begins with a punched hole that
reads as NUL bytes. `gpudesk logs` reads the stream whole (the parts, then output.log past any
hole) and through the engine where the log is another user's; a pager given the path would show
neither the parts nor anything but NULs at its top. A child `gpudesk logs` process rather than
an import: the desk runs it as the CLI would, with the same checks."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence


def page_job_log(job_id: int, pager: Sequence[str]) -> int:
    """Run `pager` on the job's whole log (its standard input) and wait for it; its exit
    status. The reader is stopped if the pager is left before it has read everything."""
    logs = subprocess.Popen(
        [sys.executable, "-m", "gpudesk", "logs", str(job_id)], stdout=subprocess.PIPE
    )
    assert logs.stdout is not None
    try:
        return subprocess.call(list(pager), stdin=logs.stdout)
    finally:
        logs.stdout.close()  # a reader still writing gets SIGPIPE
        if logs.poll() is None:
            logs.terminate()
        logs.wait()
