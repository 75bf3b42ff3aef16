"""The example profiles and job traces that ship inside the package.

The README's commands name them by their repository paths (`profiles/quickstart.toml`,
`traces/carma-philly-t1.json`). Installed from a wheel, gpudesk runs outside the checkout, so a
path that does not exist where the user stands falls back to the bundled copy of the same name:
`profiles/quickstart.toml`, `quickstart.toml` and `quickstart` all find it. A file that does exist
always wins, so a user's own `profiles/quickstart.toml` is never shadowed.

In the repository, `gpudesk/examples/profiles` and `.../traces` are links to the top-level folders,
so there is one copy of each file; the wheel build copies the files themselves. Standard library
only: the profile and trace loaders use it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

Kind = Literal["profiles", "traces"]

_SUFFIX: dict[Kind, str] = {"profiles": ".toml", "traces": ".json"}
HERE = Path(__file__).resolve().parent


def folder(kind: Kind) -> Path:
    return HERE / kind


def names(kind: Kind) -> list[str]:
    """The bundled files of a kind, by file name."""
    try:
        return sorted(p.name for p in folder(kind).iterdir() if p.suffix == _SUFFIX[kind])
    except OSError:
        return []


def bundled(path: str | os.PathLike[str], kind: Kind) -> Path | None:
    """The bundled file `path` names when `path` itself does not exist, else None.

    Only a bare name or `KIND/name` (as the README writes them) counts: `elsewhere/x.toml` or an
    absolute path is a typo for a file of the user's, not a request for the example."""
    text = os.fsdecode(path)
    if not text or os.path.lexists(text):
        return None
    folder_part, base = os.path.split(os.path.normpath(text))
    if folder_part not in ("", kind):
        return None
    if not base.endswith(_SUFFIX[kind]):
        base += _SUFFIX[kind]
    return folder(kind) / base if base in names(kind) else None
