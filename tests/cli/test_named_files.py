"""A file the user names is read in full, never without bound (`gpudesk.named_file`).

`gpudesk simulate /dev/zero` (or `--truth /dev/zero`, or GPUDESK_CONFIG=/dev/zero) read until
memory ran out and ended in a MemoryError traceback. Each child here runs under an address-space
limit, so that before the fix it failed with that traceback instead of taking the test machine's
memory. A pipe is still read (`gpudesk simulate <(zcat day.json.gz)`), as `cat` would, but a
named pipe with no writer is not waited on.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import refuses

from gpudesk.named_file import FileTooLarge, read_named

TRACE = Path(__file__).parents[2] / "traces" / "carma-philly-t1.json"
MEMORY_LIMIT = 3 << 30  # bytes of address space a child may map (assumption: 6 x what it needs)


def limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def gpudesk(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpudesk", *args],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limited,
        env={**os.environ, **(env or {})},
    )


def one_sentence(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    return refuses(done)


@pytest.mark.slow(3)
def test_a_device_named_as_the_trace_gets_one_sentence() -> None:
    said = one_sentence(gpudesk("simulate", "/dev/zero", "-p", "auto"))
    assert said == (
        "error: cannot read the trace /dev/zero: it holds more than 256.0 MiB "
        "(268,435,456 bytes), the most a trace may be"
    )


def test_a_device_named_as_the_truth_gets_one_sentence() -> None:
    said = one_sentence(gpudesk("simulate", str(TRACE), "--truth", "/dev/zero", "-p", "auto"))
    assert said == (
        "error: --truth: cannot read /dev/zero: it holds more than 16.0 MiB (16,777,216 bytes), "
        "the most a parameters file may be"
    )


def test_json_nested_past_the_stack_gets_one_sentence(tmp_path: Path) -> None:
    """json recurses once per level: `[[[[…` 100,000 deep was a RecursionError traceback."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    said = one_sentence(gpudesk("simulate", str(deep)))
    assert said == f"error: {deep} is not a JSON trace: it is nested too deeply to read"
    said = one_sentence(gpudesk("simulate", str(TRACE), "--truth", str(deep), "-p", "auto"))
    assert said == f"error: --truth: {deep} is not JSON: it is nested too deeply to read"


def test_a_device_named_as_the_config_file_gets_one_sentence() -> None:
    said = one_sentence(gpudesk("simulate", str(TRACE), env={"GPUDESK_CONFIG": "/dev/zero"}))
    assert said == (
        "error: cannot read the config file /dev/zero: it holds more than 1.0 MiB "
        "(1,048,576 bytes), the most a config file may be"
    )


def test_a_device_named_as_the_profile_gets_one_sentence() -> None:
    said = gpudesk("run", "/dev/zero")
    assert said.returncode == 2 and "Traceback" not in said.stderr, said.stderr
    assert (
        "/dev/zero: it holds more than 1.0 MiB (1,048,576 bytes), the most a profile may be"
        in said.stderr
    )


GPUDESK_SIMULATE = (sys.executable, "-m", "gpudesk", "simulate")


def test_a_trace_given_through_a_pipe_is_read() -> None:
    """`gpudesk simulate <(zcat day.json.gz)`: the shell passes /dev/fd/N, a pipe it writes."""
    read_end, write_end = os.pipe()

    def write() -> None:
        with open(write_end, "wb") as writing:  # blocks once the pipe's buffer is full
            writing.write(TRACE.read_bytes())

    writer = threading.Thread(target=write)
    writer.start()
    try:
        done = subprocess.run(
            [*GPUDESK_SIMULATE, f"/dev/fd/{read_end}", "-p", "auto", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            pass_fds=(read_end,),
            preexec_fn=limited,
        )
    finally:
        os.close(read_end)
        writer.join(30)
    assert done.returncode == 0, done.stderr
    assert '"auto"' in done.stdout


def test_a_named_pipe_no_program_writes_to_gets_one_sentence_at_once(tmp_path: Path) -> None:
    """`gpudesk run fifo.toml` waited for a writer for ever, as `cat fifo` does; now each
    kind of named file is one sentence, exit 2."""
    fifo = tmp_path / "day.json"
    os.mkfifo(fifo)
    nothing = "it is a named pipe (FIFO) that gave nothing to read"
    said = one_sentence(gpudesk("simulate", str(fifo), "-p", "auto"))
    assert said == f"error: cannot read the trace {fifo}: {nothing}"
    said = one_sentence(gpudesk("simulate", str(TRACE), "--truth", str(fifo), "-p", "auto"))
    assert said == f"error: --truth: cannot read {fifo}: {nothing}"
    done = gpudesk("run", str(fifo))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"{fifo}: cannot read the file: {nothing}" in done.stderr
    with pytest.raises(OSError, match="named pipe"):
        read_named(fifo, 10, "a thing")


def test_read_named_bounds_a_pipe_and_a_file_alike(tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.write_bytes(b"x" * 10)
    assert read_named(small, 10, "a thing") == b"x" * 10
    with pytest.raises(FileTooLarge, match=r"^the file is 11 bytes; a thing may be at most 10"):
        small.write_bytes(b"x" * 11)
        read_named(small, 10, "a thing")
    with pytest.raises(FileTooLarge, match=r"^it holds more than 10 bytes, the most a thing may"):
        read_named("/dev/zero", 10, "a thing")
    with pytest.raises(IsADirectoryError):
        read_named(tmp_path, 10, "a thing")
    with pytest.raises(FileNotFoundError):
        read_named(tmp_path / "missing", 10, "a thing")


def test_a_small_file_is_read_without_reserving_the_whole_limit() -> None:
    """A 22 KB trace read with a 256 MiB limit: `read(limit + 1)` allocated the 256 MiB up front,
    so it failed in a process allowed 160 MiB of address space."""
    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_AS, (160 << 20, 160 << 20)); "
        "from gpudesk.named_file import read_named; "
        f"print(len(read_named({str(TRACE)!r}, 256 << 20, 'a trace')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == TRACE.stat().st_size
