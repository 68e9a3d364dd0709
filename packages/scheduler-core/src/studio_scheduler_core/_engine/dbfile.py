"""Is the database file the engine opened still the one at its path?

A connection keeps writing to the inode it opened: after the file is deleted (or replaced by
another file) every write lands in a file nobody can open again. The engine checks the path's
identity at every tick and stops ticking while it does not match, so the failure is visible
(health) instead of silent, and the process stays up without looping on errors.
"""

from __future__ import annotations

import os
import sqlite3

import aiosqlite

from studio_state import fetch_value

from .._exceptions import DatabaseUnavailable

# SQLite's words for a storage fault (as opposed to a bug or a bad statement).
_STORAGE_FAULTS = (
    "readonly database",
    "disk i/o error",
    "database or disk is full",
    "unable to open database file",
)


def storage_fault(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite reporting that the storage refuses (read-only, full, I/O)."""
    return isinstance(exc, sqlite3.OperationalError) and any(
        fault in str(exc).lower() for fault in _STORAGE_FAULTS
    )


async def probe_writable(conn: aiosqlite.Connection, path: str) -> None:
    """Write the database header once (``user_version`` to its own value): a read-only file
    opens and reads fine, so startup must write to know. :class:`DatabaseUnavailable` if not."""
    try:
        version = int(await fetch_value(conn, "PRAGMA user_version") or 0)
        await conn.execute(f"PRAGMA user_version = {version}")
    except sqlite3.OperationalError as exc:
        if storage_fault(exc):
            raise DatabaseUnavailable(path, str(exc)) from exc
        raise


class DatabaseFile:
    """The ``(st_dev, st_ino)`` of the database file at open time, checked on demand."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._identity: tuple[int, int] | None = None

    def remember(self) -> None:
        """Record the identity of the file now at ``path`` (right after opening it)."""
        info = os.stat(self.path)
        self._identity = (info.st_dev, info.st_ino)

    def problem(self) -> str | None:
        """``None`` while the path still names the opened file; else what went wrong."""
        if self._identity is None:
            return None
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return (
                f"the database file {self.path} was deleted while Studio was running; "
                "nothing is scheduled until Studio is restarted"
            )
        except OSError as exc:
            return f"the database file {self.path} cannot be checked: {exc}"
        if (info.st_dev, info.st_ino) != self._identity:
            return (
                f"the database file {self.path} was replaced by another file while Studio "
                "was running; nothing is scheduled until Studio is restarted"
            )
        return None
