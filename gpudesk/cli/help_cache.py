"""`gpudesk --help` from a cache, so that the command people type first answers at once.

The root's help lists every command, and rendering it means importing typer (with its copy of
click) and every command module and reading each command's options from its signature: about
0.25 s of a 2-core machine, where Python itself starts in 0.05 s. The text only changes when
what it is made from changes, so it is kept, per terminal width, in the user's cache folder
(`$XDG_CACHE_HOME/gpudesk` where that is an absolute path, else `~/.cache/gpudesk`) under a
key of everything it depends on: gpudesk's version and the size and modification time of
every module of gpudesk.cli (the commands and their help), of the installed packages' folder
(typer's version), of the config file whose defaults the help shows, and the environment that
names that file. Any change and the help is rendered again, and kept again. Standard library
only: `gpudesk.cli.entry` reads it before anything else is imported. A cache that cannot be
read or written is passed over.

Root keeps no cache: `sudo` may leave HOME (or XDG_CACHE_HOME) naming a user's folder, and root
never believes, follows or writes what a user controls. A user's own cache file is opened
without following a link, and only a regular file of hers is read.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import site
import stat
import sys

import gpudesk

# What names the config files (gpudesk.cli.config: GPUDESK_CONFIG, else platformdirs' folder,
# which follows these; the site's, gpudesk.cli.site_config: GPUDESK_SITE_CONFIG).
CONFIG_ENVIRONMENT = ("GPUDESK_CONFIG", "XDG_CONFIG_HOME", "HOME", "GPUDESK_SITE_CONFIG")


def cache_folder() -> str:
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    if not os.path.isabs(base):  # the XDG spec: a relative value is invalid, to be ignored
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpudesk")


def _cache_file() -> str:
    columns = shutil.get_terminal_size().columns  # click wraps help to the terminal
    return os.path.join(cache_folder(), f"root-help-{columns}.txt")


def _stat(path: str) -> str:
    try:
        found = os.stat(path)
    except OSError:
        return f"{path}:-"
    return f"{path}:{found.st_mtime_ns}:{found.st_size}"


def _site_stat() -> str:
    from gpudesk.cli.site_config import site_config_path

    site = site_config_path()
    return _stat(str(site)) if site is not None else "no site config file"


def fingerprint(config_file: str) -> str:
    """One line naming everything the root help is made from; `config_file` is the config
    file the help's defaults were read from ("" for none)."""
    cli = os.path.join(os.path.dirname(gpudesk.__file__), "cli")
    try:
        modules = sorted(name for name in os.listdir(cli) if name.endswith(".py"))
    except OSError:
        modules = []
    parts = [
        f"gpudesk {gpudesk.__version__}",
        f"python {sys.version.split()[0]} {sys.executable}",
        *(_stat(os.path.join(cli, name)) for name in modules),
        *(_stat(folder) for folder in site.getsitepackages()),
        *(f"{name}={os.environ.get(name)!r}" for name in CONFIG_ENVIRONMENT),
        _stat(config_file) if config_file else "no config file",
        _site_stat(),
    ]
    return " | ".join(parts)


def _usable() -> bool:
    """Whether this process keeps a help cache at all: not root (see above)."""
    return os.geteuid() != 0


def cached_root_help() -> str | None:
    """The root help kept for this terminal width, when nothing it is made from has changed."""
    if not _usable():
        return None
    try:
        fd = os.open(_cache_file(), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or found.st_uid != os.geteuid():
            return None
        # surrogateescape: a path that is not UTF-8 (a HOME or GPUDESK_CONFIG of raw bytes)
        # reads back as the same str that os.environ gave when it was kept
        with os.fdopen(fd, encoding="utf-8", errors="surrogateescape", closefd=False) as kept:
            config_file = kept.readline().rstrip("\n")
            key = kept.readline().rstrip("\n")
            text = kept.read()
    except OSError:
        return None
    finally:
        os.close(fd)
    return text if text and key == fingerprint(config_file) else None


def keep_root_help(text: str, config_file: str) -> None:
    """Keep `text`, the root help rendered with `config_file`'s defaults, for next time."""
    if not _usable():
        return
    path = _cache_file()
    partial = f"{path}.{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as out:
            out.write(f"{config_file}\n{fingerprint(config_file)}\n{text}")
        os.replace(partial, path)
    except (OSError, UnicodeError):  # a text that cannot be kept: rendered again next time
        with contextlib.suppress(OSError):
            os.unlink(partial)
