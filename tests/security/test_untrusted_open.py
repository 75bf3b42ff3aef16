"""`gpudesk.untrusted.open_untrusted` and a file written by replacing it (os.replace), as a
shared loader's producer rewrites its info file every second: a reader whose open and check
straddled the replace found the file it opened with no name left, took that for "a file with a
second name", and read no info: its consumer said the producer "holds its name but does not
serve yet" while it served (seen in CI; 0.5 % of reads racing a writer that replaces the file
in a loop). The file that lost its name is passed over for its successor; a second name is
still refused."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gpudesk.loader.protocol import read_info
from gpudesk.untrusted import REOPENS, UntrustedFileError, read_untrusted


def replacing_as_opened(monkeypatch: pytest.MonkeyPatch, path: Path, times: int) -> list[int]:
    """Each of the first `times` opens of `path` is followed at once by a new file replacing it
    (the writer between the reader's open and its check). Returns the count of those opens."""
    real_open = os.open
    replaced: list[int] = []

    def open_then_replace(name: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = real_open(name, flags, *args, **kwargs)
        if str(name) == str(path) and len(replaced) < times:
            replaced.append(fd)
            successor = path.with_name(f"{path.name}.tmp")
            successor.write_text(f'{{"pid": {len(replaced) + 1}}}')
            os.replace(successor, path)
        return fd

    monkeypatch.setattr(os, "open", open_then_replace)
    return replaced


def test_a_file_replaced_as_it_is_opened_is_read_from_its_successor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = tmp_path / "syn.json"
    info.write_text('{"pid": 1}')
    replaced = replacing_as_opened(monkeypatch, info, times=1)
    assert read_info(info) == {"pid": 2}
    assert len(replaced) == 1


def test_a_name_replaced_at_every_open_is_said_to_be_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = tmp_path / "syn.json"
    info.write_text('{"pid": 1}')
    replacing_as_opened(monkeypatch, info, times=REOPENS)
    with pytest.raises(FileNotFoundError):
        read_untrusted(info, None)
    assert read_info(info) == {"pid": REOPENS + 1}  # the writer stopped: its last file is read


def test_a_second_name_is_still_refused(tmp_path: Path) -> None:
    info = tmp_path / "syn.json"
    info.write_text('{"pid": 1}')
    os.link(info, tmp_path / "planted")
    with pytest.raises(UntrustedFileError, match="second name"):
        read_untrusted(info, None)
    assert read_info(info) is None
