"""The man pages (man/man1, written by tools/build_manpages.py from the commands): one for every
command the CLI has, the same as the commands would write them now, and each rendered by groff
(what `man` runs) without a warning."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from gpudesk.cli.main import build_app
from gpudesk.cli.manpages import commands, page_name

ROOT = Path(__file__).resolve().parents[2]
MAN1 = ROOT / "man" / "man1"


def command_pages() -> set[str]:
    root = typer.main.get_command(build_app())
    return {f"{page_name(path)}.1" for path, _ in commands(root, ["gpudesk"])}


def test_every_command_has_its_page_and_every_page_a_command() -> None:
    wanted = command_pages()
    # a command of the root, one of a group, and the groups themselves
    assert {"gpudesk.1", "gpudesk-submit.1", "gpudesk-engine.1"} <= wanted
    assert "gpudesk-engine-print-unit.1" in wanted
    there = {p.name for p in MAN1.glob("*.1")}
    assert wanted == there, (
        f"missing: {sorted(wanted - there)}, for no command: {sorted(there - wanted)}; "
        "run `python tools/build_manpages.py`"
    )


def test_the_pages_are_what_the_commands_write_now() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "build_manpages.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, (
        f"{done.stdout}{done.stderr}\nrun `python tools/build_manpages.py` and commit man/"
    )


def test_every_page_renders_without_a_warning_and_names_pages_that_exist() -> None:
    groff = shutil.which("groff")
    if groff is None:
        pytest.skip("groff (what man renders pages with) is not installed here")
    pages = sorted(MAN1.glob("*.1"))
    assert pages
    for page in pages:
        done = subprocess.run(
            [groff, "-man", "-Tutf8", "-ww", "-z", str(page)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0 and not done.stderr, f"{page.name}: {done.stderr}"
        text = page.read_text()
        assert re.search(r"^\.SH NAME\n\S+ \\- \S", text, re.M), page.name
        for named in re.findall(r"^\.BR (\S+) \(1\)", text, re.M):
            assert (MAN1 / f"{named.replace(chr(92) + '-', '-')}.1").is_file(), (page, named)


def test_man_shows_a_page_as_people_read_it() -> None:
    man = shutil.which("man")
    if man is None:
        pytest.skip("man is not installed here")
    done = subprocess.run(
        [man, "-l", str(MAN1 / "gpudesk-engine-print-unit.1")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "MANWIDTH": "80", "MAN_KEEP_FORMATTING": ""},
    )
    assert done.returncode == 0, done.stderr
    text = re.sub(r".\x08", "", done.stdout)  # no overstrike, whatever the pager settings
    assert "gpudesk engine print-unit [OPTIONS]" in text
    assert "--admin-group TEXT" in text and "gpudesk-engine(1)" in text
