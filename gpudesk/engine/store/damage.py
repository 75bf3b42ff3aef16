"""What the engine says about a damaged database, wherever SQLite finds the damage: at open (a
damaged header) or at the first query that reads a damaged page (a settings row at start, a job
at `gpudesk show`). `sqlite_file.is_damage` tells damage from other SQLite errors.
"""

from __future__ import annotations

from pathlib import Path


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
