"""Issue 35, the general check "every record root reads from a process or file she controls",
for the records of a job's attempt: the engine reads `exit.json` (how the job ended) and
`wrapper.json` (its wrapper's pid and containment) from the attempt's folder, as root, and the
job runs as its owner. The folder and the records are root's, so the job can neither rewrite
them nor plant a link or a FIFO beside them; what it can write (its `output.log`) is parsed as
untrusted text. Root only: real users and a real system engine (tests/shared/station_fixture).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from station_fixture import Station, make_station

# What ada's job tries in its own attempt folder ($STATE/jobs/ID/N: the station's state folder,
# no secret, given by the test; the ids from its environment): every way of making the engine
# believe another ending, or of planting a file root would open. Each line that succeeds says so.
TAMPER = r"""
d="$STATE/jobs/$GPUDESK_JOB_ID/$GPUDESK_ATTEMPT"
exec 2>/dev/null  # only what succeeds is said
[ -d "$d" ] && echo found-folder
for record in exit.json wrapper.json; do
  echo '{"exit_code": 0, "pid": 1}' > "$d/$record" 2>/dev/null && echo "wrote $record"
  mv "$d/output.log" "$d/$record" 2>/dev/null && echo "replaced $record"
  rm "$d/$record" 2>/dev/null && echo "removed $record"
done
ln -s /etc/shadow "$d/output.log.1" 2>/dev/null && echo planted-link
mkfifo "$d/output.log.rotation" 2>/dev/null && echo planted-fifo
ln "$d/output.log" "$d/output.log.2" 2>/dev/null && echo planted-hard-link
exit 3
"""


@pytest.fixture
def station() -> Iterator[Station]:
    yield from make_station()


def test_a_job_cannot_rewrite_or_plant_the_records_root_reads(station: Station) -> None:
    job = {"name": "tamper", "command": ["sh", "-c", TAMPER], "workdir": "/", "gpus": 0}
    job_id = station.submit(
        "ada", job, env={"PATH": "/usr/bin:/bin", "STATE": str(station.state_dir)}
    )
    done = station.wait_state(job_id, "succeeded", "failed")
    log = Path(done["log"])
    said = log.read_text().split()
    assert said == ["found-folder"], said  # it reached its folder, and changed nothing there
    assert done["state"] == "failed" and done["exit_code"] == 3  # the ending root recorded
    folder = log.parent
    for name in ("exit.json", "wrapper.json"):
        record = os.lstat(folder / name)
        assert stat.S_ISREG(record.st_mode) and record.st_uid == 0, name
        assert stat.S_IMODE(record.st_mode) == 0o600, name
    entries = sorted(p.name for p in folder.iterdir())
    assert not {"output.log.1", "output.log.2", "output.log.rotation"} & set(entries), entries
    ada = station.users["ada"]
    for path in (folder, folder.parent, folder.parent.parent):  # root's, 0711: no writing
        info = os.stat(path)
        assert info.st_uid == 0 and not info.st_mode & 0o022, path
    assert os.stat(log).st_uid == ada.uid  # her log: the one thing there that is hers


@pytest.mark.parametrize("record", ["exit.json", "wrapper.json"])
def test_a_record_nested_past_the_stack_is_no_record(tmp_path: Path, record: str) -> None:
    """Under a user's own engine the job runs as the engine's user and can write its records:
    `[[[[…` 100,000 deep raised RecursionError (not a ValueError) into the engine."""
    from gpudesk.hw.runner import read_exit, read_wrapper

    (tmp_path / record).write_text("[" * 100_000 + "]" * 100_000)
    assert read_exit(tmp_path) is None and read_wrapper(tmp_path) is None
