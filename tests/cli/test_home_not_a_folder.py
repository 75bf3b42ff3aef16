"""GPUDESK_HOME set to a file (or to a path under one): the home cannot be a folder. One
paragraph that says so and how to point it at a folder, never "remove it" (the file is the
user's, named by mistake) and never a traceback; the file is left as it was."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpudesk.paths import SYSTEM_SOCKET, system_socket_from_env

GPUDESK = [sys.executable, "-m", "gpudesk"]
TEXT = "notes of mine, not gpudesk's\n"


def gpudesk(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("GPUDESK_HOME", "GPUDESK_SOCKET")}
    return subprocess.run(
        [*GPUDESK, *args], capture_output=True, text=True, timeout=60, env={**clean, **env}
    )


def one_paragraph(result: subprocess.CompletedProcess[str], *phrases: str, code: int = 1) -> None:
    assert result.returncode == code, result.stderr
    message = result.stderr.strip()
    assert message.startswith("error: ") and "\n" not in message, message
    assert "Traceback" not in result.stderr and "emove it" not in message, message
    for phrase in phrases:
        assert phrase in message, message


def test_gpudesk_home_naming_a_file_says_to_point_it_at_a_folder(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text(TEXT)
    point = "Point GPUDESK_HOME at a folder (gpudesk creates it when missing), or unset it"
    for args in (("queue",), ("engine", "status"), ("submit", "--", "true"), ("engine", "start")):
        one_paragraph(
            gpudesk({"GPUDESK_HOME": str(notes)}, *args),
            f"error: GPUDESK_HOME names a file, not a folder: {notes} is a regular file. {point}",
        )
    # a path under the file: stat() said "Not a directory", and `queue` raised a traceback
    under = notes / "gpudesk"
    for args in (("queue",), ("submit", "--", "true")):
        one_paragraph(
            gpudesk({"GPUDESK_HOME": str(under)}, *args),
            f"GPUDESK_HOME names a path under a file, not a folder: {under} lies under "
            f"{notes}, a regular file. {point}",
        )
    assert notes.read_text() == TEXT


def test_a_file_where_the_default_home_goes_is_said_as_the_default_homes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUDESK_HOME", raising=False)
    monkeypatch.delenv("GPUDESK_SOCKET", raising=False)
    if system_socket_from_env() is not None:
        pytest.skip(
            f"this host is a station: without GPUDESK_HOME, gpudesk talks to {SYSTEM_SOCKET}"
        )
    state = tmp_path / "state"
    state.mkdir()
    (state / "gpudesk").write_text(TEXT)
    one_paragraph(
        gpudesk({"XDG_STATE_HOME": str(state)}, "queue"),
        f"gpudesk's home {state / 'gpudesk'} is a regular file, not a folder",
        "move it away",
        "or set GPUDESK_HOME to a folder elsewhere",
    )
    assert (state / "gpudesk").read_text() == TEXT


@pytest.mark.skipif(os.geteuid() != 0, reason="a system engine starts as root only")
def test_a_system_engines_state_folder_is_said_as_its_state_dir(tmp_path: Path) -> None:
    """A system engine's state folder is named by --state-dir (its unit passes it), not by
    GPUDESK_HOME: a file there, a path under a file (a traceback before), or a link is said
    with the setting that names it. Nothing starts; the file is left as it was."""
    notes = tmp_path / "notes.txt"
    notes.write_text(TEXT)
    (tmp_path / "link").symlink_to(tmp_path)
    socket = tmp_path / "run" / "control.sock"
    remedy = "Name a folder of root's with --state-dir (default /var/lib/gpudesk; the service's"
    for state, said in (
        (notes, f"{notes} is a regular file where gpudesk expects a folder"),
        (
            notes / "a" / "b",
            f"the system engine's state folder {notes / 'a' / 'b'} lies under {notes}, a "
            "regular file, not a folder",
        ),
        (tmp_path / "link", f"{tmp_path / 'link'} is a symbolic link"),
    ):
        done = gpudesk(
            {},
            *("engine", "start", "--system", "--state-dir", str(state), "--socket", str(socket)),
            *("--group", "root"),  # a group this system has: the group is checked first
        )
        one_paragraph(done, said, remedy, code=4)  # the daemon's status for its state folder
        assert "GPUDESK_HOME" not in done.stderr
    assert notes.read_text() == TEXT and not socket.exists()


def test_a_home_whose_path_is_not_utf8_is_refused_before_anything_is_queued(
    tmp_path: Path,
) -> None:
    """The store keeps each attempt's log path as text: an engine in a home named with a 0xff
    byte queued the job and then failed every start of it, a traceback in its log every two
    seconds and the job `(Resources)` for ever. Refused where the home is made, in one
    paragraph; nothing is made there."""
    home = os.fsdecode(os.fsencode(tmp_path) + b"/h\xff")
    said = f"error: the gpudesk home '{tmp_path}/h\\xff' has bytes that are not UTF-8 in its path"
    for args in (("submit", "--", "true"), ("engine", "start")):
        one_paragraph(gpudesk({"GPUDESK_HOME": home}, *args), said, "Set GPUDESK_HOME to")
    assert not os.path.lexists(home)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can make folders in another's")
def test_root_makes_no_home_inside_another_users_folder(tmp_path: Path) -> None:
    """`sudo -E gpudesk submit` kept the user's HOME: root made ~/.local/state/gpudesk there,
    root's, and the user's own gpudesk and `pip --user` then failed on it. Refused; nothing made."""
    theirs = tmp_path / "lin"
    theirs.mkdir()
    os.chown(theirs, 54321, 54321)  # a uid no one has: what counts is that it is not root's
    home = theirs / ".local" / "state" / "gpudesk"
    for env in ({"HOME": str(theirs)}, {"GPUDESK_HOME": str(home)}):
        if "HOME" in env and system_socket_from_env() is not None:
            continue  # on a station, no GPUDESK_HOME means the station's engine
        one_paragraph(
            gpudesk({**env, "XDG_STATE_HOME": ""}, "submit", "--", "true"),
            f"you are root, and the gpudesk home {home} lies inside {theirs}, which "
            "belongs to 54321 (uid 54321)",
            "`sudo -H`",
        )
        assert list(theirs.iterdir()) == []
    # her gpudesk home made already (hers): the same, never "take it back: sudo chown -R root"
    made = theirs / ".local" / "state" / "gpudesk"
    made.mkdir(parents=True)
    for folder in (made, *made.parents):
        if folder == theirs:
            break
        os.chown(folder, 54321, 54321)
    for env in ({"HOME": str(theirs)}, {"GPUDESK_HOME": str(made)}):
        if "HOME" in env and system_socket_from_env() is not None:
            continue
        said = gpudesk({**env, "XDG_STATE_HOME": ""}, "queue")
        one_paragraph(said, f"the gpudesk home {made} lies inside", "`sudo -H`")
        assert "chown" not in said.stderr
    shutil.rmtree(theirs / ".local")
    # a link of hers to a folder of root's is hers: root does not follow it (stat did)
    roots = tmp_path / "roots"
    roots.mkdir()
    os.symlink(roots, theirs / ".local")
    os.lchown(theirs / ".local", 54321, 54321)
    linked = gpudesk({"GPUDESK_HOME": str(home), "XDG_STATE_HOME": ""}, "submit", "--", "true")
    one_paragraph(linked, f"lies inside {theirs / '.local'}, which belongs to 54321")
    assert list(roots.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="a system engine starts as root only")
def test_a_system_engine_for_a_group_that_does_not_exist_is_bad_input(tmp_path: Path) -> None:
    """The daemon exits 2 on bad arguments (its unit does not restart it); `engine start
    --system` said so with exit 1, a failure, not 2, as every other bad input is."""
    socket = tmp_path / "run" / "control.sock"
    done = gpudesk(
        {},
        *("engine", "start", "--system", "--group", "gd-no-such-group-x1"),
        *("--state-dir", str(tmp_path / "state"), "--socket", str(socket)),
    )
    assert done.returncode == 2, done.stderr
    # said before anything is started, in the daemon's words (core.identity.no_such_group)
    assert done.stderr.startswith("error: --group gd-no-such-group-x1: there is no such group"), (
        done.stderr
    )
    assert not socket.exists()


def test_a_home_whose_path_is_too_long_is_one_paragraph(tmp_path: Path) -> None:
    """A name in GPUDESK_HOME past the file system's 255 bytes: stat() and mkdir() raise
    ENAMETOOLONG, which was a traceback (`engine start`, `top --once`: from check_owner)."""
    long_home = tmp_path / ("x" * 300)
    for args in (("submit", "--", "true"), ("engine", "start"), ("top", "--once"), ("queue",)):
        one_paragraph(
            gpudesk({"GPUDESK_HOME": str(long_home)}, *args),
            f"the state folder '{long_home}' cannot be used: File name too long",
            "Set GPUDESK_HOME",
        )
