"""A Slurm job's output, read for the `log` request: by a process run as the job's owner.

The file sits in her Slurm folder, every part of whose path is hers: she can make any of them
a link, a FIFO or a folder of something else, so no check root could make on the last name
would do. Read as her, a link leads only where she may read anyway, and a FIFO or a stalled
file system costs a bounded wait (READ_S), never the engine's loop. A personal engine reads
its own user's file itself (gpudesk.joblog), as for a station job.
"""

from __future__ import annotations

import msgspec

from gpudesk.core.identity import Identity
from gpudesk.slurm.as_owner import TimedOut, run_as
from gpudesk.text import safe_text
from gpudesk.trust import engine_environment, site_program

READ_S = 5.0  # the longest a read as her may take, off the loop (a FIFO makes dd fail at once)
# $1 the log, $2 where to start, $3 how much: its size on the first line (0 when it is not
# there yet), then at most $3 bytes from $2. nonblock: a FIFO does not hold the open.
READ_SCRIPT = (
    '[ -e "$1" ] || { echo 0; exit 0; }; stat -L -c %s -- "$1" || exit 1; '
    'exec dd if="$1" iflag=skip_bytes,count_bytes,nonblock skip="$2" count="$3" bs=65536 '
    "status=none"
)


class LogUnreadable(Exception):
    """The owner's process could not read the log; str() says why, in one paragraph."""


class LogRead(msgspec.Struct, frozen=True):
    data: bytes  # at most the bytes asked for, from the offset asked
    end: int  # the file's size when it was read


def read_as_owner(owner: Identity, path: str, offset: int, limit: int) -> LogRead:
    """Up to `limit` bytes of `path` from `offset`, read by a process run as `owner`."""
    shell = site_program("sh")
    if shell is None:
        raise LogUnreadable("there is no sh on the site's PATH to read the log with")
    try:
        done = run_as(
            owner,
            [shell, "-c", READ_SCRIPT, "gpudesk-log", path, str(offset), str(limit)],
            engine_environment(owner),
            timeout=READ_S,
            max_bytes=limit + 64,
        )
    except TimedOut:
        raise LogUnreadable(
            f"reading {safe_text(path)} as {owner.name} took longer than {READ_S:g} s"
        ) from None
    except OSError as exc:
        raise LogUnreadable(f"could not read {safe_text(path)}: {exc.strerror or exc}") from None
    size, newline, data = done.stdout.partition(b"\n")
    if done.returncode != 0 or not newline or not size.isdigit():
        said = safe_text(done.err.strip())[:300] or f"exit status {done.returncode}"
        raise LogUnreadable(f"could not read {safe_text(path)} as {owner.name}: {said}")
    return LogRead(data[:limit], int(size))
