"""Copying a finished run's log into the database (PostgreSQL), so every node serves it.

A run's log file is written on the node that ran it. On PostgreSQL, when the run ends, that
node copies the file's bounded content (the launcher keeps at most the run-log bound: the
head, a drop marker, the most recent output) into ``run_logs``, after the terminal write and
never in its way: a copy that fails is logged and copied again by the node's periodic pass
(:class:`~studio_scheduler_core._recovery.run_logs.StoredLogs`). A node that dies before copying
leaves no stored log; its run's log is then asked of it as before. On SQLite nothing is copied:
the log file beside the database is readable by every process that can open the database.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sqlite3

import aiosqlite

from studio_state import backend_of, is_postgres, run_write_transaction

from .._settings import SchedulerSettings
from . import store
from .runlog import run_log_path

logger = logging.getLogger("studio_scheduler_core")

_MARKER = re.compile(rb"\n\[\.\.\. (\d+) bytes dropped \.\.\.\]\n")


def bounded_log(path: str, bound: int) -> bytes | None:
    """The log file's content, its last ``bound`` bytes at most (``None``: no file)."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, size - bound))
            return handle.read(bound)
    except FileNotFoundError:
        return None


def dropped_bytes(content: bytes) -> int:
    """How many bytes of output the log's drop marker says were dropped (0: none)."""
    found = _MARKER.search(content)
    return int(found.group(1)) if found else 0


async def copy_run_log(
    conn: aiosqlite.Connection,
    *,
    db_path: str,
    settings: SchedulerSettings,
    run_id: str,
    now: float,
) -> bool | None:
    """Store the finished run's log file in ``run_logs`` (PostgreSQL).

    ``True`` when stored now; ``False`` when there is nothing to store (SQLite, no file here,
    the run not ended or gone, or stored already); ``None`` when the copy failed (logged; the
    caller tries again later). Never raises.
    """
    if not is_postgres(db_path):
        return False
    try:
        path = run_log_path(db_path, settings, run_id)
        content = await asyncio.to_thread(bounded_log, path, settings.run_log_bytes)
        if content is None:
            return False
        dropped = dropped_bytes(content)

        def write(db: sqlite3.Connection) -> bool:
            return store.store_run_log_sync(db, run_id, content, dropped=dropped, now=now)

        return await run_write_transaction(conn, write)
    except Exception as exc:  # the copy must never break the run's end
        logger.warning("storing the log of run %s failed (retried later): %s", run_id, exc)
        return None


async def read_stored_run_log(
    conn: aiosqlite.Connection, run_id: str, *, tail: int | None = None
) -> bytes | None:
    """The stored log of a finished run (its last ``tail`` bytes when given); ``None`` when
    none is stored (always on SQLite, which keeps only the file)."""
    if backend_of(conn) != "postgresql":
        return None
    content = await store.stored_run_log(conn, run_id)
    if content is None or tail is None:
        return content
    return content[-tail:] if tail > 0 else b""
