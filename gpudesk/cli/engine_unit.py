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


def unit_text(argv: Sequence[str]) -> str:
    """The unit whose ExecStart runs `argv`."""
    return unit_template().replace(EXEC_START, " ".join(systemd_word(w) for w in argv))
