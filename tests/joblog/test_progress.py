"""Progress lines in a job's log (gpudesk.joblog.progress): what a line says, and the reader
that takes only the new whole lines."""

from __future__ import annotations

from pathlib import Path

from gpudesk.joblog.progress import (
    MAX_LINE_BYTES,
    ProgressLine,
    ProgressReader,
    parse_progress,
    parse_progress_line,
)


def test_progress_lines() -> None:
    assert parse_progress(b"progress 120/1000") == 120.0
    assert parse_progress(b"  progress 7.5  ") == 7.5
    assert parse_progress(b"progress 3 / 10\r") == 3.0
    for other in (b"progress", b"progress x", b"my progress 3", b"progress 3 of 10", b"\xff"):
        assert parse_progress(other) is None


def test_a_number_past_what_a_float_holds_is_not_progress() -> None:
    """400 digits read as infinity: a TOTAL of it once reached `show` as a remaining time of
    null said to come from "no TOTAL", a DONE of it as a rate of NaN. The line is ignored."""
    huge = b"9" * 400
    assert parse_progress_line(b"progress 5/" + huge) is None
    assert parse_progress_line(huge.join((b"progress ", b"/10"))) is None
    big = b"1" + b"0" * 300  # 1e300: large, but a number
    assert parse_progress_line(b"progress 5/" + big) == ProgressLine(5.0, 1e300)


def test_the_reader_takes_only_new_whole_lines(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(b"starting\n\xff\xfe not utf-8\nprogress 1/10\nprog")
    reader = ProgressReader(str(log))
    assert reader.read() == [1.0]
    assert reader.read() == []
    with log.open("ab") as out:
        out.write(b"ress 2/10\n" + b"x" * (MAX_LINE_BYTES + 10) + b"\nprogress 3\n")
    assert reader.read() == [2.0, 3.0]
    with log.open("ab") as out:  # a line too long, written in two parts, is skipped whole
        out.write(b"progress 4" + b"0" * (MAX_LINE_BYTES + 1))
    assert reader.read() == []
    with log.open("ab") as out:
        out.write(b"\nprogress 5\n")
    assert reader.read() == [5.0]
    assert ProgressReader.from_end(str(log)).read() == []
    assert ProgressReader(str(tmp_path / "missing")).read() == []
