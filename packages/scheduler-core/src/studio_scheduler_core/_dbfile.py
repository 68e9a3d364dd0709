"""Is the database file the engine opened still the one at its path?

A connection keeps writing to the inode it opened: after the file is deleted (or replaced by
another file) every write lands in a file nobody can open again. The engine checks the path's
identity at every tick and stops ticking while it does not match, so the failure is visible
(health) instead of silent, and the process stays up without looping on errors.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3

import aiosqlite

from studio_state import fetch_value

from ._exceptions import DatabaseUnavailable

logger = logging.getLogger("studio_scheduler_core")

# SQLite's primary result codes of a storage fault (as opposed to a bug or a bad statement).
_SQLITE_FAULTS = {
    8: "read-only database (a read-only file system, or the file is not writable)",  # READONLY
    10: "disk I/O error",  # IOERR
    11: "database file is corrupt",  # CORRUPT
    13: "disk full",  # FULL
    14: "cannot open the database file",  # CANTOPEN
    26: "file is not a database",  # NOTADB
}
# The same, by SQLite's message (an error raised without a result code).
_SQLITE_WORDS = (
    ("readonly database", _SQLITE_FAULTS[8]),
    ("disk i/o error", _SQLITE_FAULTS[10]),
    ("malformed", _SQLITE_FAULTS[11]),
    ("database or disk is full", _SQLITE_FAULTS[13]),
    ("unable to open database file", _SQLITE_FAULTS[14]),
    ("file is not a database", _SQLITE_FAULTS[26]),
)
_OS_FAULTS = {
    errno.EROFS: "read-only file system",
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EIO: "disk I/O error",
}


def storage_fault(exc: BaseException) -> str | None:
    """What storage fault ``exc`` reports ("disk full", "read-only …", "disk I/O error",
    "database file is corrupt", "cannot open the database file"), or ``None`` if it is not one.

    For SQLite errors (read-only, full, I/O, corrupt, cannot open, not a database) and OS errors
    (``EROFS``, ``ENOSPC``, ``EDQUOT``, ``EIO``); a :class:`DatabaseUnavailable` gives its
    reason. Callers map a fault to "service unavailable" naming it, never to a crash.
    """
    if isinstance(exc, DatabaseUnavailable):
        return storage_fault(exc.__cause__) if exc.__cause__ is not None else exc.reason
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(code, int) and (code & 0xFF) in _SQLITE_FAULTS:
            return _SQLITE_FAULTS[code & 0xFF]
        text = str(exc).lower()
        for words, problem in _SQLITE_WORDS:
            if words in text:
                return problem
        return None
    if isinstance(exc, OSError) and exc.errno in _OS_FAULTS:
        return _OS_FAULTS[exc.errno]
    return None


class StorageHealth:
    """The storage fault the last write met (``problem``), until a write succeeds again."""

    def __init__(self) -> None:
        self.problem: str | None = None

    def failed(self, exc: BaseException) -> str | None:
        """Record ``exc`` if it is a storage fault; return the fault (``None``: not one)."""
        problem = storage_fault(exc)
        if problem is not None:
            if problem != self.problem:
                logger.error("storage fault: %s (%s)", problem, exc)
            self.problem = problem
        return problem

    def succeeded(self) -> None:
        """A write landed: the fault, if any, is over."""
        if self.problem is not None:
            logger.warning("storage writable again (was: %s)", self.problem)
            self.problem = None


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
