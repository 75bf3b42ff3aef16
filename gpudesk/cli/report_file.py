"""`gpudesk run --report FILE`: the file checked before anything is submitted, and written
atomically once the run has ended.

A report is written at the end of a run that may take hours, so a path that cannot or must not be
written is refused up front, each with one paragraph and exit 2, before the engine is even
reached: a folder that does not exist, loops or cannot be written in; a folder, pipe, device or
socket where the file would go; a read-only file; a symbolic link; the profile being run; anything
inside gpudesk's home (its SQLite database, logs, sockets: `--report ~/.local/state/gpudesk/
gpudesk.db` once replaced an engine's whole history with a few lines of text).

The report is then written to a new file in the same folder and renamed over FILE (rename(2)),
so a write that fails (a full disk) leaves no half report, and any earlier file as it was.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import NoReturn

from gpudesk.cli.common import fail
from gpudesk.cli.exit_codes import EXIT_USAGE
from gpudesk.paths import too_long_text
from gpudesk.text import file_kind


def inside(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or lies under it (by name: callers resolve links first)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def gpudesk_homes() -> list[Path]:
    """The gpudesk homes a command of this user may touch: the engine's (its state folder and its
    sockets; a station's state folder as its engine names it) and the personal one (a simulated
    station of its own lies in it)."""
    from gpudesk.api.state_home import state_home
    from gpudesk.cli.common import current_home
    from gpudesk.paths import resolve_home

    home = state_home(current_home())
    return [home.root, home.socket_dir, resolve_home()]


def home_holding(path: Path, homes: Iterable[Path]) -> Path | None:
    """The gpudesk home `path` lies in, named there or through symbolic links that point there
    (its folder's or its own); None where it lies in none."""
    named = os.path.join(os.path.realpath(path.absolute().parent), path.name)
    # and where a symbolic link there points: the file written through it
    real = os.path.realpath(path)
    for home in homes:
        if any(inside(p, os.path.realpath(home)) for p in (named, real)):
            return home
    return None


def output_file_problem(path: Path, homes: Iterable[Path]) -> str | None:
    """Why a command must not write its output (`--plot FILE`, an appended emissions.csv) to
    `path`, a sentence; None when it may: a file inside gpudesk's home (its database, logs and
    sockets), named there or through a symbolic link that points there, or something there that
    is not a regular file (a FIFO would block the command
    for ever, a device or folder is no file)."""
    home = home_holding(path, homes)
    if home is not None:
        return (
            f"{path} is inside gpudesk's home {home}, which holds the engine's database, "
            "logs and sockets; write it elsewhere"
        )
    try:
        st = os.stat(path)
    except OSError:
        return None  # a new file (whether one can be made there: new_file_problem)
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is {file_kind(st.st_mode)}; the output is written to a regular file"
    return None


def check_report_path(
    report: Path, *, profile: Path, homes: Iterable[Path], option: str = "--report"
) -> None:
    """Fail with exit 2 (one paragraph) when `report` cannot or must not be written: see the
    module's docstring. `profile` is the profile being run, `homes` the gpudesk homes (state
    folders) this run may use, `option` the option that named the file (`select compare
    --out` is checked as `run --report` is)."""

    def refuse(why: str) -> NoReturn:
        fail(f"{option} {report}: {why}. Nothing was submitted.", EXIT_USAGE)

    # What the path names first (a home not made yet is still refused, not to be made)
    folder = report.absolute().parent
    # the folder resolved, not the name: a link is refused below, for what it is
    real = os.path.join(os.path.realpath(folder), report.name)
    if report.name in ("", ".."):  # `.`, `x/..`: a folder, refused below as one
        real = os.path.realpath(report)
    if real == os.path.realpath(profile):
        refuse("is the profile being run, which the report would replace; name another file")
    for home in homes:
        if inside(real, os.path.realpath(home)):
            refuse(
                f"is inside gpudesk's home {home}, which holds the engine's database, logs and "
                "sockets the report could replace; write it elsewhere"
            )
    st: os.stat_result | None
    try:
        st = os.lstat(report)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # a file named as a folder on the way (ENOTDIR), no permission
        refuse(f"cannot be used ({exc.strerror or exc})")
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            # The report is renamed into place, which would replace the link itself rather than
            # write where it points; writing through it instead would let a link (left in a
            # shared folder, or pointing into gpudesk's home) send the report anywhere. Either
            # surprises, so a link is refused, and the file it points to can be named instead.
            refuse(
                f"is a symbolic link (to {os.path.realpath(report)}); the report replaces the "
                "file it is written to, so name the file itself, or a new one"
            )
        if stat.S_ISDIR(st.st_mode):
            refuse(f"is a folder; give a file name, e.g. {report / 'report.txt'}")
        if not stat.S_ISREG(st.st_mode):
            refuse(f"is {file_kind(st.st_mode)}; the report is written to a regular file")
        if not os.access(report, os.W_OK):
            refuse("is read-only; make it writable, or name another file")
    trouble = folder_problem(folder)
    if trouble is not None:
        refuse(f"its folder {folder} {trouble}")


def too_long_problem(path: Path) -> str | None:
    """ "{path} cannot be used: File name too long (…)" where `path`, or a name in it, is longer
    than the file system takes (ENAMETOOLONG: no file can ever be there, and each later look
    at it raised OSError as a traceback); None otherwise."""
    try:
        os.lstat(path)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return f"{path} cannot be used: {too_long_text(exc)}"
    return None


def folder_problem(folder: Path) -> str | None:
    """What keeps a new file from being made in `folder`, the end of a sentence that names it
    ("does not exist; make it first …"); None when nothing does."""
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        return "does not exist; make it first (mkdir -p), or name another file"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return (
                "is a symbolic link that leads back to itself (a loop), never to a folder; "
                "name a file in a folder"
            )
        if exc.errno == errno.ENOTDIR:
            return "lies under a file, not a folder; name a file in a folder"
        return f"cannot be reached ({exc.strerror or exc}); name a file in a folder you can reach"
    if not stat.S_ISDIR(st.st_mode):
        return f"is {file_kind(st.st_mode)}, not a folder; name a file in a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return "cannot be written in (permission denied, or read-only); name another file"
    return None


def folder_path_problem(path: Path) -> str | None:
    """Why `path` cannot be the folder a command writes into (made when missing, with its
    parents: `gpudesk examples INTO`, `export slurm DIR`), the end of a sentence that names it
    ("lies under a file, not a folder"); None when it can be. What is found only when writing
    (no permission, a full disk) is said then."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return (
                "leads through a symbolic link that points back to itself (a loop), never to "
                "a folder"
            )
        if exc.errno == errno.ENOTDIR:
            return "lies under a file, not a folder"
        if exc.errno != errno.ENOENT:
            return f"cannot be reached ({exc.strerror or exc})"
        # missing: made with its parents, unless the nearest entry on its way is a link to
        # nothing (mkdir would say only "File exists")
        for entry in (path, *path.parents):
            if os.path.lexists(entry):
                if os.path.islink(entry) and not os.path.exists(entry):
                    link = f"a symbolic link to {os.readlink(entry)}, which does not exist"
                    return f"is {link}" if entry == path else f"lies under {entry}, {link}"
                return None
        return None
    if not stat.S_ISDIR(st.st_mode):
        return f"exists and is {file_kind(st.st_mode)}, not a folder"
    return None


def new_file_problem(path: Path) -> str | None:
    """Why the file `path` cannot be written (a new file made where it lands, then renamed
    into place: `write_atomically`), a sentence naming it; None when it can be. A link is
    written through, to the file it names, so that file's folder is checked too. Said before
    any work, not once a command that took minutes has its results (`--plot`)."""
    folder = path.absolute().parent
    trouble = folder_problem(folder)
    if trouble is not None:
        return f"{path}: its folder {folder} {trouble}"
    too_long = too_long_problem(path)
    if too_long is not None:
        return too_long
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return (
                f"{path} is a symbolic link that leads back to itself (a loop), never to a "
                "file; remove it, or name another file"
            )
    if os.path.islink(path):
        real = Path(os.path.realpath(path))
        trouble = folder_problem(real.parent)
        if trouble is not None:
            return f"{path} is a symbolic link to {real}, whose folder {real.parent} {trouble}"
    return None


def write_atomically(path: Path, text: str | bytes) -> None:
    """Write `text` (UTF-8, or bytes as they are: a plot) to a new file beside `path`, then
    rename it over `path`: a failure (a full disk) raises OSError and leaves `path` as it was,
    and no other file behind. The file gets the mode of the one it replaces, else the umask's."""
    data = text.encode("utf-8", errors="replace") if isinstance(text, str) else text
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        mode = None
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())  # a full disk is said now, not lost on a later flush
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
