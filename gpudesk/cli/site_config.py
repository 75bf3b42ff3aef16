"""The site's defaults for command options: `/etc/gpudesk/config.toml`, set by an admin for
everyone (`GPUDESK_SITE_CONFIG=FILE` names another, `GPUDESK_SITE_CONFIG=` none). Its tables
and keys are the user's config file's (gpudesk.cli.config); the layers, each over the one
before: gpudesk's own defaults < the site's < the user's < the command line.

The file sets defaults for every user, root included (`sudo gpudesk engine start --system`
reads it), so it is read only when no one else could have written it, as sshd reads its
files: a regular file reached through no link, owned by root (or by the user reading it, who
could set her own defaults anyway), writable by neither its group nor others, in folders
(up to /) of the same owners that neither group nor others may write to (unless sticky, as
/tmp). It is opened with gpudesk.untrusted's primitives. Kept to the standard library: the
queue's fast path and the help cache ask for its path before typer is imported.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gpudesk.untrusted import UntrustedFileError, open_untrusted

SITE_CONFIG_ENV = "GPUDESK_SITE_CONFIG"
SITE_CONFIG = Path("/etc/gpudesk/config.toml")
MAX_BYTES = 1024 * 1024  # a file of defaults; more is not one


class SiteConfigRefused(Exception):
    """The site config file exists but is not one gpudesk may trust (the message says why)."""


def site_config_path() -> Path | None:
    """The site config file to read (it may not exist), or None when GPUDESK_SITE_CONFIG is
    empty."""
    named = os.environ.get(SITE_CONFIG_ENV)
    if named is not None:
        return Path(named).expanduser() if named.strip() else None
    return SITE_CONFIG


def _owners() -> frozenset[int]:
    return frozenset({0, os.geteuid()})


def _writable_by_others(st: os.stat_result) -> bool:
    return bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _check_folders(path: Path) -> None:
    owners = _owners()
    for folder in Path(os.path.abspath(path)).parents:
        try:
            st = os.stat(folder)
        except OSError as exc:
            raise SiteConfigRefused(f"its folder {folder} cannot be read: {exc.strerror}") from None
        if st.st_uid not in owners:
            raise SiteConfigRefused(f"its folder {folder} belongs to uid {st.st_uid}, not root")
        if _writable_by_others(st) and not st.st_mode & stat.S_ISVTX:
            raise SiteConfigRefused(
                f"its folder {folder} is writable by its group or by everyone (mode "
                f"{stat.S_IMODE(st.st_mode):04o}): anyone who may write there could put another "
                f"file in its place (`sudo chmod go-w {folder}`)"
            )


def read_site_bytes(path: Path) -> bytes | None:
    """The site config file's bytes, None when there is none; SiteConfigRefused when it is
    there but not to be trusted, OSError when it cannot be read."""
    try:
        fd = open_untrusted(path, _owners())
    except FileNotFoundError:
        return None
    except UntrustedFileError as exc:
        raise SiteConfigRefused(str(exc.strerror)) from None
    try:
        st = os.fstat(fd)
        if _writable_by_others(st):
            raise SiteConfigRefused(
                f"it is writable by its group or by everyone (mode {stat.S_IMODE(st.st_mode):04o})"
                f": anyone who may write it sets every user's defaults (`sudo chmod go-w {path}`)"
            )
        _check_folders(path)
        chunks, size = [], 0
        while size <= MAX_BYTES:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > MAX_BYTES:
        raise SiteConfigRefused(f"it is larger than {MAX_BYTES} bytes")
    return b"".join(chunks)
