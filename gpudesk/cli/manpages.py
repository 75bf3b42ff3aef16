"""Man pages written from the command line itself: gpudesk(1), a page for each command and group
(gpudesk-submit(1), gpudesk-engine(1)) and for each command of a group (gpudesk-engine-start(1)),
from the same click tree, help texts and option lists `--help` prints (gpudesk.cli.plain_help).

`tools/build_manpages.py` writes them to man/man1/, which the wheel installs under
share/man/man1 (`man gpudesk` finds them where the environment's bin/ is on PATH); a test
checks that the pages there are the ones the commands make now.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import typer

from gpudesk.cli.plain_help import param_rows

SECTION = "1"
MANUAL = "gpudesk manual"

# What the root page says of the environment and the files; the names are the contracts of
# docs/architecture.md and docs/shared-station.md.
ENVIRONMENT = (
    (
        "GPUDESK_HOME",
        "The folder of a personal engine's state: database, sockets, logs, caches "
        "(default: ~/.local/state/gpudesk).",
    ),
    (
        "GPUDESK_SOCKET",
        "The control socket of a system engine (default: the station's, "
        "/run/gpudesk/control.sock, when it exists).",
    ),
    ("GPUDESK_BACKEND", "auto, nvml, none, or a SIMULATED station such as sim:h100x2."),
    ("GPUDESK_NVIDIA_SMI", "The nvidia-smi executable to call (default: found on PATH)."),
    ("GPUDESK_MPS_CONTROL", "The nvidia-cuda-mps-control executable (default: found on PATH)."),
    ("GPUDESK_CGROUP", "off: each job is held by its process group alone, never a cgroup."),
    (
        "GPUDESK_CONFIG",
        "The user's defaults for command options (default: ~/.config/gpudesk/config.toml).",
    ),
    (
        "GPUDESK_SITE_CONFIG",
        "The site's defaults for command options, under the user's (default: "
        "/etc/gpudesk/config.toml).",
    ),
)
FILES = (
    ("~/.config/gpudesk/config.toml", "The user's defaults for command options."),
    (
        "/etc/gpudesk/config.toml",
        "The site's defaults for everyone, set by an admin: read only when root-owned and "
        "writable by root alone.",
    ),
    ("/run/gpudesk/control.sock", "The station's system engine's control socket."),
    ("/var/lib/gpudesk", "The system engine's state: database, engine.log, the jobs' logs."),
)


def escape(text: str) -> str:
    """Text as troff prints it: backslashes and dashes escaped, no line read as a request."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    # past ASCII, by code point (groff and mandoc both read \[u2026]; a page needs no preconv)
    text = "".join(c if ord(c) < 128 else f"\\[u{ord(c):04X}]" for c in text)
    return "\n".join(
        "\\&" + line if line.startswith((".", "'")) else line for line in text.splitlines()
    )


def _bold_words(text: str) -> str:
    return "\\fB" + escape(text) + "\\fR"


def page_name(path: list[str]) -> str:
    """gpudesk, gpudesk-submit, gpudesk-engine-start."""
    return "-".join(path)


# Commands and contexts are typed Any: typer may carry its own copy of click (typer._click), so
# they are told apart by what they have, not by click's classes.


def _context(path: list[str], command: Any) -> Any:
    return command.context_class(command, info_name=" ".join(path))


def _subcommands(path: list[str], command: Any) -> list[tuple[str, Any]]:
    """A group's visible commands in help's order; [] for a command."""
    if not hasattr(command, "list_commands"):
        return []
    ctx = _context(path, command)
    found = [(name, command.get_command(ctx, name)) for name in command.list_commands(ctx)]
    return [(name, sub) for name, sub in found if sub is not None and not sub.hidden]


def commands(group: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    """Every visible command under `group`, `group` first, as (its words, the command)."""
    yield path, group
    for name, sub in _subcommands(path, group):
        yield from commands(sub, [*path, name])


def _paragraphs(text: str) -> str:
    out = []
    for para in re.split(r"\n\s*\n", text.strip()):
        out.append(".PP\n" + escape(" ".join(para.split())))
    return "\n".join(out)


def _definitions(rows: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> list[str]:
    lines = []
    for term, text in rows:
        lines += [".TP", _bold_words(term), escape(" ".join(text.split())) if text else ""]
    return [line for line in lines if line]


def render(path: list[str], command: Any, version: str) -> str:
    """The page of `command` (at `path`, e.g. ["gpudesk", "engine", "start"])."""
    ctx = _context(path, command)
    name = page_name(path)
    short = command.get_short_help_str(limit=80).rstrip(".")
    lines = [
        f'.TH "{name.upper()}" "{SECTION}" "" "gpudesk {version}" "{MANUAL}"',
        ".SH NAME",
        f"{escape(name)} \\- {escape(short)}",
        ".SH SYNOPSIS",
        ".B " + escape(" ".join(path)),
        escape(" ".join(command.collect_usage_pieces(ctx))),
    ]
    if command.help:
        lines += [".SH DESCRIPTION", _paragraphs(command.help)]
    arguments, options = param_rows(command, ctx)
    if arguments:
        lines += [".SH ARGUMENTS", *_definitions(arguments)]
    if options:
        lines += [".SH OPTIONS", *_definitions(options)]
    listed = _subcommands(path, command)
    subs = [page_name([*path, name]) for name, _ in listed]
    if listed:
        rows = [(name, sub.get_short_help_str(limit=200)) for name, sub in listed]
        lines += [".SH COMMANDS", *_definitions(rows)]
    if len(path) == 1:
        lines += [".SH ENVIRONMENT", *_definitions(ENVIRONMENT)]
        lines += [".SH FILES", *_definitions(FILES)]
    see = [page_name(path[:-1])] if len(path) > 1 else []
    lines += [".SH SEE ALSO", ",\n".join(f".BR {escape(p)} ({SECTION})" for p in see + subs)]
    if not see and not subs:
        lines.pop()
        lines.pop()
    return "\n".join(lines) + "\n"


def pages(app: typer.Typer, version: str) -> dict[str, str]:
    """Every page of the command tree, by file name (gpudesk-submit.1)."""
    root = typer.main.get_command(app)
    return {
        f"{page_name(path)}.{SECTION}": render(path, command, version)
        for path, command in commands(root, ["gpudesk"])
    }
