"""What a new engine does before its loop: it takes the home's single-instance lock, opens the
home's database (refusing to start afresh beside the folders of jobs a lost database recorded)
and works out the station config it starts with (the last engine's, with what the client asked
for laid over it). Kept apart from the loop (`daemon`) because each of these answers "may an
engine run here, and how", once, before anything is served; `gpudesk engine start` and the tests
read them on their own.
"""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from gpudesk import diskspace
from gpudesk.core.lost_database import job_folders, lost_database
from gpudesk.core.station import StationConfig
from gpudesk.engine.store.damage import damaged_text
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.schema import IncompatibleStore, StoreError
from gpudesk.paths import Home, HomeError, open_state_file

log = logging.getLogger("gpudesk.engine")

LOCK_RETRY_S = 1.0


class AlreadyRunning(RuntimeError):
    pass


def acquire_lock(path: Path, wait_s: float = LOCK_RETRY_S) -> IO[str]:
    """Hold the home's single-instance lock for the life of the process.

    Retries briefly because a client probing whether an engine runs holds it for an instant.
    The file is opened never through a link and only when it is a plain file of this user
    (paths.open_private_file, close-on-exec), so the truncation below cannot reach another file.
    """
    fd = open_state_file(path, os.O_RDWR | os.O_CREAT)
    handle = os.fdopen(fd, "r+")  # held until the process exits
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.seek(0)
                pid = handle.read().strip() or "?"
                handle.close()
                raise AlreadyRunning(
                    f"an engine is already running for this home (pid {pid})"
                ) from None
            time.sleep(0.02)
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def initial_config(store: Store, requested: Mapping[str, Any] | None) -> StationConfig:
    """What the last engine of this home used (else defaults) with the settings the client
    asked for laid over it: only the keys `requested` names change."""
    config = saved_config(store.setting("station"))
    if requested:
        asked = StationConfig.from_dict(requested)
        config = dataclasses.replace(config, **{key: getattr(asked, key) for key in requested})
    return config.with_env_override()


def saved_config(saved: object) -> StationConfig:
    """The station config the last engine saved. A setting this version no longer accepts (a
    grid code dropped from a newer table, say) goes back to its default alone, with a warning
    naming it; the admin's other settings are kept."""
    if not isinstance(saved, dict) or not saved:
        return StationConfig()
    try:
        return StationConfig.from_dict(saved)
    except ValueError:
        pass
    kept: dict[str, object] = {}
    for key, value in saved.items():
        try:
            StationConfig.from_dict({key: value})
        except ValueError as exc:
            log.warning("the saved station setting is not used, its default is: %s", exc)
            continue
        kept[key] = value
    return StationConfig.from_dict(kept)


def open_store(home: Home) -> Store:
    """The home's database, or HomeError saying in one paragraph why it cannot be used."""
    problem = lost_database(home)
    if problem:
        raise HomeError(problem)
    try:
        store = Store.open(home.db)
    except IncompatibleStore as exc:
        raise HomeError(f"{home.db}: {exc}") from None
    except StoreError as exc:
        if diskspace.is_full(exc, home.root):
            raise  # not damage: `main` says the disk is full, and what to do
        raise HomeError(damaged_text(home.db, home.root, str(exc))) from None
    # A database restored from an older backup must not hand out the ids of the jobs that ran
    # after it was taken: their folders are there.
    store.reserve_job_ids(max(job_folders(home), default=0))
    store.checkpoint_elsewhere()
    return store
