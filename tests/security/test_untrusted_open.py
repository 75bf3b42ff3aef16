"""`gpudesk.untrusted.open_untrusted` and a file written by replacing it (os.replace), as a
shared loader's producer rewrites its info file every second: a reader whose open and check
straddled the replace found the file it opened with no name left, took that for "a file with a
second name", and read no info: its consumer said the producer "holds its name but does not
serve yet" while it served (seen in CI; 0.5 % of reads racing a writer that replaces the file
in a loop). The file that lost its name is passed over for its successor; a second name is
still refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from local_users import local_accounts

from gpudesk.loader.protocol import ProducerInfo, read_info
from gpudesk.untrusted import REOPENS, UntrustedFileError, read_untrusted

SYSTEM_PYTHON = "/usr/bin/python3"  # one the test user may run (the project's may sit in /root)


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
    assert read_info(info) == ProducerInfo(pid=2)
    assert len(replaced) == 1


def test_a_name_replaced_at_every_open_is_said_to_be_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = tmp_path / "syn.json"
    info.write_text('{"pid": 1}')
    replacing_as_opened(monkeypatch, info, times=REOPENS)
    with pytest.raises(FileNotFoundError):
        read_untrusted(info, None)
    assert read_info(info) == ProducerInfo(
        pid=REOPENS + 1
    )  # the writer stopped: its last file is read


def test_a_second_name_is_still_refused(tmp_path: Path) -> None:
    info = tmp_path / "syn.json"
    info.write_text('{"pid": 1}')
    os.link(info, tmp_path / "planted")
    with pytest.raises(UntrustedFileError, match="second name"):
        read_untrusted(info, None)
    assert read_info(info) is None


# Run as the second user: each line on stdin asks for one act in her folder (argv[1]); "done"
# answers it. "replace N": her info file replaced (os.replace) by one saying pid N.
HER_WRITER = """
import os, sys
folder = sys.argv[1]
for line in sys.stdin:
    act, *arg = line.split()
    if act == "replace":
        tmp = os.path.join(folder, "syn.json.tmp")
        with open(tmp, "w") as out:
            out.write('{"pid": %s}' % arg[0])
        os.replace(tmp, os.path.join(folder, "syn.json"))
    elif act == "link":
        os.link(os.path.join(folder, "syn.json"), os.path.join(folder, "second"))
    print("done", flush=True)
"""


def test_root_reads_the_file_a_member_replaced_as_it_opened_it_and_refuses_her_second_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As a station's engine reads a member's producer info file: root, with her uid as the
    only owner it believes. She replaces the file between root's open and its check (her own
    process, on root's cue): root reads her new file, never the one that lost its name; a
    second name she gives it is refused."""
    with local_accounts({"ada": []}) as made:
        ada = made.users["ada"]
        # a folder of hers that she can reach (pytest's own are root's, 0700)
        folder = Path(tempfile.mkdtemp(prefix="gd-untrusted-", dir="/tmp"))
        os.chown(folder, ada.uid, ada.gid)
        folder.chmod(0o755)
        her = subprocess.Popen(
            ["runuser", "-u", ada.name, "--", SYSTEM_PYTHON, "-c", HER_WRITER, str(folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert her.stdin is not None and her.stdout is not None
        stdin, stdout = her.stdin, her.stdout

        def ask(act: str) -> None:
            stdin.write(act + "\n")
            stdin.flush()
            assert stdout.readline().strip() == "done"

        try:
            ask("replace 1")
            info = folder / "syn.json"
            assert read_info(info, ada.uid) == ProducerInfo(pid=1)
            real_open = os.open
            cued: list[int] = []

            def open_then_she_replaces(name: Any, flags: int, *args: Any, **kwargs: Any) -> int:
                fd = real_open(name, flags, *args, **kwargs)
                if str(name) == str(info) and not cued:
                    cued.append(fd)
                    ask("replace 2")  # the file root holds loses its name
                return fd

            with monkeypatch.context() as patched:
                patched.setattr(os, "open", open_then_she_replaces)
                assert read_info(info, ada.uid) == ProducerInfo(pid=2)
            assert cued and os.stat(info).st_uid == ada.uid
            ask("link")
            with pytest.raises(UntrustedFileError, match="second name"):
                read_untrusted(info, ada.uid)
        finally:
            stdin.close()
            her.wait(10)
            shutil.rmtree(folder, ignore_errors=True)
