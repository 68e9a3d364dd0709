"""Short-lived read connections of the metrics collectors (synchronous, on a scrape thread).

On SQLite a read-only ``sqlite3`` connection on the file; on PostgreSQL the DB-API
connection of ``studio_state.connect_sync`` (psycopg underneath), whose queries take the same
qmark SQL.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any


def open_sync_reader(target: Path | str) -> Any:
    """A read connection on ``target`` (a SQLite file or a PostgreSQL URL); close it after."""
    if isinstance(target, Path):
        return sqlite3.connect(f"{target.absolute().as_uri()}?mode=ro", uri=True, timeout=1.0)
    from studio_state import connect_sync

    db = connect_sync(target)
    db.row_factory = None  # tuples, as a bare sqlite3 connection gives (the readers index them)
    return db
