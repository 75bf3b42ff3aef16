"""`gpudesk examples [INTO]` as a user types it: the folder's name is the user's text."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def examples(into: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "gpudesk", "examples", into]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60)


def test_examples_spell_out_a_folder_name_and_refuse_an_empty_one(tmp_path: Path) -> None:
    """A control character in the folder's name is spelled out, never sent to the terminal,
    and the `cd` it suggests is a shell's $'...'; an empty INTO (`gpudesk examples "$DIR"`, DIR
    unset) is refused rather than taken for the current folder."""
    done = examples("a\x1b[2Jb", tmp_path)
    assert done.returncode == 0 and "\x1b" not in done.stdout, done.stderr
    assert "into a\\x1b[2Jb/profiles" in done.stdout
    assert "try: cd $'a\\x1b[2Jb' && " in done.stdout
    assert (tmp_path / "a\x1b[2Jb" / "profiles" / "quickstart.toml").is_file()
    empty = examples("", tmp_path)
    assert empty.returncode == 2 and empty.stderr.startswith("error: INTO is empty"), empty.stderr
    assert not (tmp_path / "profiles").exists()


def test_a_copy_cut_short_leaves_no_half_file_for_the_next_to_keep(tmp_path: Path) -> None:
    """A full disk, as the file-size limit simulates it (EFBIG past 8 KiB, as ENOSPC would
    be): the copy fails in one paragraph, and the file it was writing is not left cut short,
    where the next `gpudesk examples` kept it as "already there" (a trace that no longer
    parses)."""
    import resource

    from gpudesk.examples import folder, names

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))

    command = [sys.executable, "-m", "gpudesk", "examples", "ex"]
    # no bytecode written: Python's writer of a module's .pyc does not check for a short
    # write, and a first import under the limit leaves it cut at 8 KiB (EOFError after)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    cut = subprocess.run(
        command,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=small_files,
        env=env,
    )
    assert cut.returncode == 1, cut.stdout + cut.stderr
    assert cut.stderr.startswith("error: cannot copy the examples into ex: File too large")
    assert "Traceback" not in cut.stderr
    again = examples("ex", tmp_path)
    assert again.returncode == 0, again.stderr
    for kind in ("profiles", "traces"):
        for name in names(kind):
            copied = (tmp_path / "ex" / kind / name).read_bytes()
            assert copied == (folder(kind) / name).read_bytes(), name


def test_a_folder_that_can_never_be_one_is_refused_as_bad_input(tmp_path: Path) -> None:
    """A symbolic-link loop, a file on the way, a link to nothing: exit 2 with one paragraph,
    as a file named INTO is, before anything is copied (a loop was exit 1, "Too many levels of
    symbolic links"; a link to nothing was exit 1, "File exists")."""
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "gone").symlink_to("nowhere")
    for into, said in (
        ("loop", "loop leads through a symbolic link that points back to itself (a loop)"),
        ("loop/ex", "loop/ex leads through a symbolic link that points back to itself"),
        ("notes.txt", "notes.txt exists and is a regular file, not a folder"),
        ("notes.txt/ex", "notes.txt/ex lies under a file, not a folder"),
        ("gone", "gone is a symbolic link to nowhere, which does not exist"),
        ("gone/ex", "gone/ex lies under gone, a symbolic link to nowhere, which does not exist"),
    ):
        done = examples(into, tmp_path)
        assert done.returncode == 2, (into, done.stderr)
        assert done.stderr.startswith(f"error: {said}"), done.stderr
        assert done.stderr.count("\n") == 1 and done.stdout == "", done.stdout + done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gone", "loop", "notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "mine\n"
