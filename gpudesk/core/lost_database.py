"""Whether a home's jobs outlived its database: job folders under `jobs/` with no database (or
an empty one) to say what they were. The engine refuses to start afresh over them (engine/
startup.py); a command that finds no engine says so rather than "start one, its jobs are kept".
And what the engine says of a damaged database."""

from __future__ import annotations

import os
from pathlib import Path

from gpudesk.paths import Home


def job_folders(home: Home) -> list[int]:
    """The ids of the jobs whose folders `jobs/` holds: what the database recorded."""
    try:
        return [int(e.name) for e in os.scandir(home.jobs_dir) if e.name.isdecimal()]
    except OSError:
        return []


def lost_database(home: Home) -> str | None:
    """Why the engine must not start afresh here, or None: a database that is missing or empty
    while `jobs/` holds earlier jobs' folders. Starting would reuse their ids and mix new logs
    into theirs, and say nothing of the jobs it forgot."""
    try:
        size = home.db.stat().st_size
    except FileNotFoundError:
        size = 0
    found = len(job_folders(home)) if not size else 0
    if not found:
        return None
    state = "empty" if home.db.exists() else "missing"
    return (
        f"the gpudesk database {home.db} is {state}, but {home.jobs_dir} holds the folders of "
        f"{found} earlier job(s): the record of those jobs is gone, and starting afresh would "
        "reuse their ids and mix new logs into theirs, so the engine does not start. Restore "
        f"{home.db.name} from a backup if there is one; or keep the old folders and start "
        f"afresh: move them aside (`mv {home.jobs_dir} {home.jobs_dir}.old`) and start again."
    )


# What the engine says about a damaged database, wherever SQLite finds the damage: at open (a
# damaged header) or at the first query that reads a damaged page (a settings row at start, a job
# at `gpudesk show`). `sqlite_file.is_damage` tells damage from other SQLite errors.
def damaged_text(db: Path, home_root: Path, detail: str) -> str:
    """The engine's paragraph for a damaged database `db` of the home at `home_root`; `detail`:
    what SQLite or the store said."""
    return (
        f"{detail}. The file is damaged or not a gpudesk database, so the engine does not "
        f"start. Keep it for now: restore {db.name} from a backup, or move the whole "
        f"home aside to start afresh (`mv {home_root} {home_root}.damaged`), which keeps "
        "its job logs."
    )


def request_text(detail: str) -> str:
    """What a request that met damage in the database is answered: one paragraph."""
    return (
        f"the gpudesk database is damaged ({detail}), so the engine cannot answer this "
        "request. Stop the engine (`gpudesk engine stop`), keep the file, and restore "
        "gpudesk.db from a backup, or move the whole home aside to start afresh (its job "
        "logs stay in it)."
    )
