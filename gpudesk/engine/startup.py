"""What a new engine does before its loop, once it holds the home's lock (gpudesk.home_lock):
it opens the home's database (refusing to start afresh beside the folders of jobs a lost
database recorded) and works out the station config it starts with (the last engine's, with
what the client asked for laid over it); and the paragraph and exit status of an engine that
stopped on an error. Kept apart from the loop (`daemon`) because each of these answers "may an
engine run here, and how", once; `gpudesk engine start` and the tests read them on their own.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import msgspec

from gpudesk import diskspace
from gpudesk.core.lost_database import damaged_text, job_folders, lost_database
from gpudesk.core.station import StationConfig
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.schema import IncompatibleStore, StoreError
from gpudesk.home_lock import EXIT_BAD_HOME
from gpudesk.paths import Home, HomeError
from gpudesk.sqlite_file import is_damage

log = logging.getLogger("gpudesk.engine")


def home_config(store: Store, requested: Mapping[str, Any] | None) -> StationConfig:
    """What the last engine of this home used (else defaults) with the settings the client
    asked for laid over it (only the keys `requested` names change): what the home keeps,
    without the GPUDESK_BACKEND of this engine's environment."""
    config = StationConfig.from_saved(store.setting("station"), log.warning)
    if requested:
        asked = StationConfig.from_dict(requested)
        config = msgspec.structs.replace(config, **{key: getattr(asked, key) for key in requested})
    return config


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


def stopped_on(exc: Exception, home: Home) -> int:
    """The exit status, and the log's paragraph, of an engine stopped by `exc`."""
    if diskspace.is_full(exc, home.root):
        # One paragraph, on stderr (engine.log may be the file that cannot grow); the
        # exit status tells `gpudesk engine start` to say the same without the log.
        log.error("%s", diskspace.start_text(home.root))
        return diskspace.EXIT_DISK_FULL
    if is_damage(exc):
        # a damaged page past the header, met by a query after the open (core/lost_database.py)
        detail = f"cannot read the gpudesk database {home.db}: {exc}"
        log.error("%s", damaged_text(home.db, home.root, detail))
        return EXIT_BAD_HOME
    log.exception("the engine stopped on an unexpected error")
    return 1
