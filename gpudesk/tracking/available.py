"""Whether this Python can track to a store: the `mlflow` extra (`pip install
'gpudesk[mlflow]'`: mlflow-skinny, and SQLAlchemy and Alembic for an SQLite or other database
store, which mlflow-skinny leaves out). Asked of the engine's interpreter, which is the one its
tracking workers run; found without importing anything (importing mlflow takes seconds)."""

from __future__ import annotations

import importlib.util
import sys

EXTRA_HINT = "pip install 'gpudesk[mlflow]'"
# Schemes whose stores MLflow keeps in a database through SQLAlchemy (and migrates with Alembic).
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_for(uri: str) -> str | None:
    """Why a job tracked to `uri` cannot be tracked from this Python (one paragraph), or None."""
    needed = ["mlflow"]
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower()
    if scheme in DATABASE_SCHEMES:
        needed += ["sqlalchemy", "alembic"]
    missing = [module for module in needed if not _installed(module)]
    if not missing:
        return None
    return (
        f"MLflow tracking needs the mlflow extra: {EXTRA_HINT} (into the engine's Python, "
        f"{sys.executable}; it lacks {', '.join(missing)}), then restart the engine "
        "(gpudesk engine stop). Nothing was submitted; or leave out [tracking] / --mlflow-uri."
    )
