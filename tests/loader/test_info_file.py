"""A producer's info file as every reader takes it (`protocol.read_info`): an older producer's
(fewer fields, its start as `create_time`) and a newer one's (fields this one does not know,
at the top or in its orphaned state) are read; text that is not UTF-8 (a dataset's argument, a
factory's exception) is written escaped and read back; a field of another type is no info."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil

from gpudesk.loader.orphan import orphan_of
from gpudesk.loader.protocol import ProducerInfo, read_info, recorded_runs, write_info


def test_an_older_producers_file_is_read_with_its_create_time(tmp_path: Path) -> None:
    path = tmp_path / "syn.json"
    legacy = {"name": "syn", "pid": os.getpid(), "create_time": psutil.Process().create_time()}
    path.write_text(json.dumps({**legacy, "control": "ipc:///x", "stream_next": [2, 5]}))
    info = read_info(path)
    assert info is not None and info.started is None and info.stream_next == (2, 5)
    assert recorded_runs(info)  # this process, by its start in the older form


def test_a_newer_producers_fields_are_passed_over(tmp_path: Path) -> None:
    path = tmp_path / "syn.json"
    orphaned = {"engine_pid": 7, "since": 1.0, "grace_s": 60.0, "stops_at": None, "new": 1}
    path.write_text(json.dumps({"name": "syn", "pid": 1, "lease": {"x": 1}, "orphaned": orphaned}))
    info = read_info(path)
    assert info is not None and info.pid == 1
    assert orphan_of({"orphaned": info.orphaned}) is None  # not a state this one knows, only that


def test_text_that_is_not_utf8_is_written_escaped_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "syn.json"
    failed = "cannot open /data/caf\udce9: no such file"  # a Latin-1 name, as os.fsdecode gives it
    write_info(path, ProducerInfo(name="syn", pid=1, failed=failed, transient=False))
    assert "\\udce9" in path.read_text()
    info = read_info(path)
    assert info is not None and info.failed == failed


def test_a_field_of_another_type_is_no_info(tmp_path: Path) -> None:
    path = tmp_path / "syn.json"
    for bad in ({"managed": "yes"}, {"stream_next": [1, 2, 3]}, {"failed": 4}, [1]):
        path.write_text(json.dumps({"pid": 1, **bad} if isinstance(bad, dict) else bad))
        assert read_info(path) is None, bad
    path.write_text('{"pid": 1, "started": NaN}')  # Python's JSON writes one; it is a number
    info = read_info(path)
    assert info is not None and not recorded_runs(info)
