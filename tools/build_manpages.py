"""Write the man pages (man/man1/*.1) from the command line: gpudesk(1) and a page for each
command (gpudesk.cli.manpages). Run it after changing a command, its help or its options, and
commit what it writes; `--check` exits 1 naming the pages that differ (as the tests do).

    python tools/build_manpages.py [--check] [DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpudesk import __version__
from gpudesk.cli.main import build_app
from gpudesk.cli.manpages import pages

ROOT = Path(__file__).resolve().parents[1]
MAN1 = ROOT / "man" / "man1"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", type=Path, default=MAN1)
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    made = pages(build_app(), __version__)
    folder: Path = args.folder
    there = {p.name: p.read_text(encoding="utf-8") for p in folder.glob("*.1")}
    differ = sorted(n for n in made.keys() | there.keys() if made.get(n) != there.get(n))
    if args.check:
        for name in differ:
            print(
                f"{folder / name}: {'stale' if name in there else 'missing'}"
                + (" (no such command now)" if name not in made else "")
            )
        return 1 if differ else 0
    folder.mkdir(parents=True, exist_ok=True)
    for name in differ:
        if name in made:
            (folder / name).write_text(made[name], encoding="utf-8")
        else:
            (folder / name).unlink()
    print(f"{len(made)} pages in {folder}, {len(differ)} written or removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
