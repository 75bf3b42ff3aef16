"""The "shm" staging mirror's segments in /dev/shm (gpudesk/loader/staging.py): a producer that
was killed never ran its `close`, so its segments stay; pids are reused, and a later producer of
the same pid used to die at once on the leftover name (FileExistsError, seen in CI). Now each
name carries a token, and the first mirror a producer makes removes this user's segments whose
producer is gone; a live producer's are kept."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudesk.loader import staging
from gpudesk.loader.staging import SHM_DIR, SHM_PREFIX, DeviceMirror, remove_stale_segments


def a_dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid  # reaped: no process has it (until the kernel gives it out again)


@pytest.fixture
def segments() -> Iterator[list[Path]]:
    made: list[Path] = []
    yield made
    for path in made:
        path.unlink(missing_ok=True)


@pytest.fixture
def private_shm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder of its own in /dev/shm, standing for it: the suite's other workers run
    producers, and each one's first mirror removes this user's stale segments too, so in
    /dev/shm itself a test's dead segment could be gone before its own call looked (seen in
    a run: the old-style name was missing from what the call removed)."""
    folder = Path(tempfile.mkdtemp(prefix="gpudesk-test-", dir=SHM_DIR))
    monkeypatch.setattr(staging, "SHM_DIR", str(folder))
    yield folder
    shutil.rmtree(folder)


def segment(made: list[Path], name: str) -> Path:
    path = Path(staging.SHM_DIR) / name  # where the sweep looks (`private_shm` moves it)
    path.write_bytes(b"\0" * 64)
    made.append(path)
    return path


@pytest.mark.usefixtures("private_shm")
def test_a_killed_producers_segments_go_and_a_live_ones_stay(segments: list[Path]) -> None:
    dead = segment(segments, f"{SHM_PREFIX}{a_dead_pid()}-1")  # the old naming too
    dead_new = segment(segments, f"{SHM_PREFIX}{a_dead_pid()}-0badc0de-2")
    live = segment(segments, f"{SHM_PREFIX}{os.getpid()}-0badc0de-1")
    not_ours = segment(segments, f"{SHM_PREFIX}not-a-pid-1")
    removed = remove_stale_segments()
    assert dead.name in removed and dead_new.name in removed
    assert not dead.exists() and not dead_new.exists()
    assert live.exists() and not_ours.exists()


def test_a_leftover_segment_with_this_pid_is_not_in_the_way(segments: list[Path]) -> None:
    # what a killed producer whose pid this process now has would have left
    segment(segments, f"{SHM_PREFIX}{os.getpid()}-1")
    mirror = DeviceMirror("shm")
    try:
        mirror.cover(4096)  # before: FileExistsError
        assert mirror.handle is not None and mirror.size >= 4096
        (name,) = mirror.shm_names
        assert name.startswith(f"{SHM_PREFIX}{os.getpid()}-") and name.endswith("-1")
    finally:
        mirror.close()
    assert not (Path(SHM_DIR) / name).exists()


def test_a_link_is_not_followed_or_removed(segments: list[Path], tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep")
    link = Path(SHM_DIR) / f"{SHM_PREFIX}{a_dead_pid()}-beef-1"
    link.symlink_to(target)
    segments.append(link)
    assert link.name not in remove_stale_segments()
    assert link.is_symlink() and target.read_text() == "keep"
