"""What an engine run by root does for a user, and how it treats what a user controls.

The rule (docs/security.md): **root never runs a program, loads a library, follows a path, or
believes a record that a user controls.**

- Everything done for a user that runs her tools or touches her files happens in a process that
  has dropped to her identity first, started with an environment the engine built
  (`engine_environment`), never the one her client sent: the dynamic loader reads `LD_PRELOAD`,
  `LD_LIBRARY_PATH`, `LD_AUDIT`, glibc reads `GCONV_PATH` … before any of the process's own code
  runs, so a variable of hers in a root process is her code running as root. Her own
  environment is applied only after the switch (the job wrapper's child, `wrapper._start_as`).
- Programs are found on the site's PATH (`site_path`: the engine's own), never on hers.
- What root must read from a place she can write is opened with `open_untrusted`:
  `O_NOFOLLOW | O_NONBLOCK` (a link is not followed, a FIFO does not block the open), then checked
  to be a regular file with one name, of the expected owner, no larger than the reader takes,
  and parsed as untrusted input by the caller.
"""

from __future__ import annotations

import os
import pwd
import shutil

from gpudesk.core.identity import Identity, OwnerGone, as_known_now

# Opening what sits where a user can write: a leaf module (gpudesk.joblog, which the engine
# imports, reads logs with it too), named here as the rule's other primitives are.
from gpudesk.untrusted import RECORD_MAX_BYTES as RECORD_MAX_BYTES
from gpudesk.untrusted import UntrustedFileError as UntrustedFileError
from gpudesk.untrusted import check_untrusted as check_untrusted
from gpudesk.untrusted import open_untrusted as open_untrusted
from gpudesk.untrusted import read_untrusted as read_untrusted

# Where the site's programs are when the engine's own environment names no PATH (the default
# PATH of a Debian root login, which also holds Slurm's clients).
DEFAULT_SITE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The variables the dynamic loader and glibc honour at a process's start (ld.so(8), the
# "ENVIRONMENT" section; glibc's unsecvars.h, which a setuid program drops for the same
# reason). None ever reaches a root process the engine starts for a user: the engine builds
# that environment whole (`engine_environment`), so this list is for the tests and the docs,
# not a filter.
LOADER_VARIABLES = (
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "LD_BIND_NOW",
    "LD_BIND_NOT",
    "LD_DEBUG",
    "LD_DEBUG_OUTPUT",
    "LD_DYNAMIC_WEAK",
    "LD_HWCAP_MASK",
    "LD_ORIGIN_PATH",
    "LD_PROFILE",
    "LD_PROFILE_OUTPUT",
    "LD_SHOW_AUXV",
    "LD_USE_LOAD_BIAS",
    "LD_ASSUME_KERNEL",
    "GCONV_PATH",
    "GETCONF_DIR",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "LOCPATH",
    "MALLOC_TRACE",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TMPDIR",
    "TZDIR",
    "GLIBC_TUNABLES",
    "MALLOC_CHECK_",
    "MALLOC_ARENA_MAX",
)


def engine_environment(owner: Identity | None, **extra: str) -> dict[str, str]:
    """The whole environment of a process the engine starts for `owner` (None: for itself):
    the site's PATH, the owner's HOME, USER, LOGNAME and SHELL from the password database (never
    from her request), a UTF-8 locale, and `extra` (SLURM_CONF, say). Nothing the user sent."""
    env = {"PATH": site_path(), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    uid = owner.uid if owner is not None else os.geteuid()
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:  # a uid without a name: no home to name
        env.update(HOME="/", USER=str(uid), LOGNAME=str(uid))
    else:
        env.update(
            HOME=entry.pw_dir or "/",
            USER=entry.pw_name,
            LOGNAME=entry.pw_name,
            SHELL=entry.pw_shell or "/bin/sh",
        )
    env.update(extra)
    return env


# How long asking the user database whom a process the engine starts for a user runs as (a
# shared-loader producer, a tracking worker) may take before its start is given up, and tried
# again as a failed start is: past nss-systemd's 45 s varlink timeout, within the minute a job
# started with its producer waits for it (loader.consumer.START_WAIT_S).
OWNER_BOUND_S = 55.0
RunsAs = tuple[Identity, dict[str, str]]  # whom a process started for a user runs as, its env


def known_environment(owner: Identity, **extra: str) -> RunsAs | str:
    """`owner` as the user database has her now (`as_known_now`), and the environment of a
    process started for her (`engine_environment`); or why none may be (she is not the user she
    was). Both ask the database, which may take seconds or hang (LDAP down): an engine asks on
    a worker thread, never its loop (a tracking worker's start)."""
    try:
        known = as_known_now(owner)
    except OwnerGone as exc:
        return str(exc)
    return known, engine_environment(known, **extra)


def site_path() -> str:
    """The site's PATH: the engine's own (root's service unit sets it; a user's request never
    does), else DEFAULT_SITE_PATH. What every process the engine starts for a user searches."""
    return os.environ.get("PATH") or DEFAULT_SITE_PATH


def site_program(name: str) -> str | None:
    """`name` found on the site's PATH (never a user's), or None."""
    return shutil.which(name, path=site_path())
