"""The systemd unit of the station's engine, shipped in the package (data/systemd/) and printed
by `gpudesk engine print-unit` with its ExecStart naming the Python gpudesk is installed in."""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib.resources import files

UNIT_RESOURCE = "data/systemd/gpudesk.service"
EXEC_START = "@EXEC_START@"  # the template's placeholder for the engine's command line
_BARE = re.compile(r"[A-Za-z0-9_@%+=:,./$-]+")  # a word systemd reads as it is (after escapes)


def unit_template() -> str:
    """The unit as the package ships it, with its placeholder."""
    return files("gpudesk").joinpath(UNIT_RESOURCE).read_text(encoding="utf-8")


def systemd_word(word: str) -> str:
    """`word` as one word of a unit's command line: `%` (a specifier) and `$` (a variable)
    doubled, in double quotes with C escapes where it holds anything else."""
    word = word.replace("%", "%%").replace("$", "$$")
    if word and _BARE.fullmatch(word) and word != ";":
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def unit_text(argv: Sequence[str], state_dir: bool = True, runtime_dir: bool = True) -> str:
    """The unit whose ExecStart runs `argv`; with systemd's StateDirectory= (/var/lib/gpudesk)
    only where `state_dir`, and its RuntimeDirectory= (/run/gpudesk) only where `runtime_dir`:
    the engine's folders are the defaults. Either folder there makes every client take the
    host for a station at the default socket (docs/shared-station.md), so a unit for other
    paths makes neither, and the engine makes its own (Home.ensure)."""
    left_out: tuple[str, ...] = () if state_dir else ("StateDirectory=",)
    left_out += () if runtime_dir else ("RuntimeDirectory=", "RuntimeDirectoryPreserve=")
    lines = unit_template().splitlines(keepends=True)
    text = "".join(line for line in lines if not line.startswith(left_out))
    return text.replace(EXEC_START, " ".join(systemd_word(w) for w in argv))
