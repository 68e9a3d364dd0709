"""Database maintenance on a SQLite file: online backup, ``VACUUM``, WAL checkpoint.

Each runs on a connection of its own (never the engine's, whose tasks may hold a transaction
open), so a Studio keeps serving meanwhile; a database another connection keeps busy past
:data:`BUSY_SECONDS` is :class:`DatabaseBusy`. Every action that changes the file records a
``maintenance`` row in ``status_transitions`` with its actor, in its own transaction.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from studio_state import is_busy_error, new_id, record_transition_sync

#: How long a maintenance action waits for another connection's lock before giving up.
BUSY_SECONDS = 2.0
ACTIONS = ("vacuum", "checkpoint", "prune")


class MaintenanceError(Exception):
    """A maintenance action could not run (the message says why)."""


class DatabaseBusy(MaintenanceError):
    """Another connection held the database for longer than :data:`BUSY_SECONDS`."""


class BackupCorrupt(MaintenanceError):
    """The copy failed ``PRAGMA integrity_check``."""


def _busy(exc: sqlite3.OperationalError) -> bool:
    # SQLITE_BUSY covers "cannot commit - SQL statements in progress" too.
    return is_busy_error(exc)


def _connect(path: Path, busy_seconds: float) -> sqlite3.Connection:
    if not path.is_file():
        raise MaintenanceError(f"database not found: {path}")
    conn = sqlite3.connect(path, timeout=busy_seconds, isolation_level=None)
    conn.row_factory = sqlite3.Row
    return conn


def record(path: Path, action: str, summary: str, actor: str, details: dict[str, Any]) -> None:
    """The audit row of one maintenance action (its own short transaction)."""
    conn = _connect(path, 10.0)
    try:
        conn.execute("BEGIN IMMEDIATE")
        record_transition_sync(
            conn,
            entity_type="maintenance",
            entity_id=new_id(),
            status="done",
            reason_code=f"maintenance.{action}",
            reason_summary=summary,
            actor=actor,
            metadata=details,
            now=time.time(),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


def vacuum(path: Path, *, actor: str, busy_seconds: float = BUSY_SECONDS) -> dict[str, Any]:
    """``VACUUM`` the database (rewrites the file without its free pages); the sizes before
    and after. :class:`DatabaseBusy` while another connection writes."""
    before = path.stat().st_size
    conn = _connect(path, busy_seconds)
    try:
        conn.execute("VACUUM")
    except sqlite3.OperationalError as exc:
        if _busy(exc):
            raise DatabaseBusy(f"database is busy: {exc}") from None
        raise MaintenanceError(f"vacuum failed: {exc}") from None
    finally:
        conn.close()
    result = {"action": "vacuum", "bytes_before": before, "bytes_after": path.stat().st_size}
    record(path, "vacuum", f"vacuum: {before} -> {result['bytes_after']} bytes", actor, result)
    return result


def checkpoint(path: Path, *, actor: str, busy_seconds: float = BUSY_SECONDS) -> dict[str, Any]:
    """``PRAGMA wal_checkpoint(TRUNCATE)``: copy the WAL into the file and empty it.
    :class:`DatabaseBusy` when a reader or writer kept it from completing."""
    conn = _connect(path, busy_seconds)
    try:
        row = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    except sqlite3.OperationalError as exc:
        if _busy(exc):
            raise DatabaseBusy(f"database is busy: {exc}") from None
        raise MaintenanceError(f"checkpoint failed: {exc}") from None
    finally:
        conn.close()
    busy, wal_pages, moved = (int(value) for value in tuple(row))
    if busy:
        raise DatabaseBusy("database is busy: the checkpoint could not complete; try again")
    result = {"action": "checkpoint", "wal_pages": wal_pages, "checkpointed_pages": moved}
    record(path, "checkpoint", f"checkpoint: {moved} of {wal_pages} WAL pages", actor, result)
    return result


def backup(source: Path, dest: Path) -> dict[str, Any]:
    """An online, consistent copy of ``source`` at ``dest`` (SQLite's backup API: the copy is
    one snapshot even while others write), then ``PRAGMA integrity_check`` on the copy.

    Raises :class:`MaintenanceError` when ``dest`` exists or cannot be written, and
    :class:`BackupCorrupt` (the copy is kept for inspection) when the check fails.
    """
    if dest.exists():
        raise MaintenanceError(f"DEST: {dest} exists; name a new file")
    if not dest.parent.is_dir():
        raise MaintenanceError(f"DEST: directory {dest.parent} does not exist")
    src = _connect(source, 30.0)
    try:
        try:
            target = sqlite3.connect(dest)
        except sqlite3.Error as exc:
            raise MaintenanceError(f"DEST: cannot create {dest}: {exc}") from None
        try:
            # one step, under one read transaction: a snapshot that writers (WAL) never block
            # and that their commits cannot restart, however busy the database is
            src.backup(target)
        except sqlite3.Error as exc:
            raise MaintenanceError(f"backup failed: {exc}") from None
        finally:
            target.close()
    finally:
        src.close()
    return check_integrity(dest)


def check_integrity(path: Path) -> dict[str, Any]:
    """``PRAGMA integrity_check`` of ``path``; :class:`BackupCorrupt` naming the problems."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            problems = [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
            tables = int(
                conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[
                    0
                ]
            )
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise BackupCorrupt(f"integrity_check of {path} failed: {exc}") from None
    if problems != ["ok"]:
        raise BackupCorrupt(f"integrity_check of {path} failed: {'; '.join(problems[:5])}")
    return {"dest": str(path), "bytes": path.stat().st_size, "tables": tables, "integrity": "ok"}
