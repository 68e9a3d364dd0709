"""Are the database file and its write-ahead log the engine opened still the ones at their
paths? Which storage fault did a write meet?

A connection keeps writing to the inodes it opened: after the file is deleted (or replaced by
another file) every write lands in a file nobody can open again; after its ``-wal`` file is
deleted, the engine goes on appending to the deleted log while another process (the CLI)
starts a new one at the path, and the two checkpoint into the same database file, which
corrupts it. The engine checks both identities at every tick and stops writing while one
does not match (the tick is refused, terminal writes wait), so the failure is visible
(health) instead of silent, and the process stays up without looping on errors.

A storage fault is logged as one line naming it (:class:`StorageFaultFilter` strips the
traceback of any record whose exception is one), once when it starts and once when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import sqlite3

import aiosqlite

from studio_state import StorageFault, fetch_value, storage_fault_of

from .._exceptions import DatabaseUnavailable

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
# PostgreSQL's storage faults (classified by SQLSTATE in studio_state), in the same words.
_BY_CLASS: dict[StorageFault, str] = {
    "readonly": "read-only database",
    "io": _SQLITE_FAULTS[10],
    "corrupt": _SQLITE_FAULTS[11],
    "full": _SQLITE_FAULTS[13],
    "cantopen": _SQLITE_FAULTS[14],
}
# Faults the file system's own answer makes more precise (an I/O error of a read-only one).
_REFINED = frozenset({_SQLITE_FAULTS[8], _SQLITE_FAULTS[10], _SQLITE_FAULTS[13]})
_MAX_CHAIN = 8
_OS_FAULTS = {
    errno.EROFS: "read-only file system",
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EIO: "disk I/O error",
}


class StorageHalted(sqlite3.OperationalError):
    """A write given up without being tried: the database file or its ``-wal`` file is no
    longer the one opened (the message says which). A ``sqlite3`` error, so callers that
    handle a failed write handle this one alike."""


def storage_fault(exc: BaseException) -> str | None:
    """What storage fault ``exc`` reports ("disk full", "read-only …", "disk I/O error",
    "database file is corrupt", "cannot open the database file"), or ``None`` if it is not one.

    For SQLite errors (read-only, full, I/O, corrupt, cannot open, not a database) and OS errors
    (``EROFS``, ``ENOSPC``, ``EDQUOT``, ``EIO``); a :class:`DatabaseUnavailable` gives its
    reason. An error raised while handling a fault is that fault: when a full disk holds
    SQLite's temporary files, SQLite rolls the transaction back by itself and the
    ``ROLLBACK TO`` of a savepoint then fails with "no such savepoint". Callers map a fault to
    "service unavailable" naming it, never to a crash.
    """
    seen: BaseException | None = exc
    for _ in range(_MAX_CHAIN):
        if seen is None:
            return None
        problem = _direct_fault(seen)
        if problem is not None:
            return problem
        seen = seen.__cause__ or seen.__context__
    return None


def _direct_fault(exc: BaseException) -> str | None:
    if isinstance(exc, StorageHalted):
        return str(exc)
    if isinstance(exc, DatabaseUnavailable):
        return storage_fault(exc.__cause__) if exc.__cause__ is not None else exc.reason
    if hasattr(exc, "sqlstate"):
        # PostgreSQL (a psycopg error or its mapped form): by SQLSTATE alone, never by its
        # message, which is in the server's language; no SQLSTATE is no storage fault
        # (a lost connection is the election's and the pool's business)
        fault = storage_fault_of(exc)
        return None if fault is None else _BY_CLASS[fault]
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(code, int) and (code & 0xFF) in _SQLITE_FAULTS:
            return _SQLITE_FAULTS[code & 0xFF]
        # only an SQLite error raised without a result code is read by its words
        text = str(exc).lower()
        for words, problem in _SQLITE_WORDS:
            if words in text:
                return problem
        return None
    if isinstance(exc, OSError) and exc.errno in _OS_FAULTS:
        return _OS_FAULTS[exc.errno]
    return None


class StorageHealth:
    """The storage fault the last write met (``problem``), until a write succeeds again.

    ``halted`` is set while the database file or its ``-wal`` file is no longer the one
    opened: nothing may be written then (a terminal write waits, start-up reconciles it).
    Making one installs :class:`StorageFaultFilter` on Studio's loggers (once).
    """

    def __init__(self, path: str | None = None) -> None:
        install_storage_fault_filter()
        self.path = path
        """The database file (``None``: PostgreSQL, or unknown): lets a fault say what the
        file system reports (SQLite says "disk I/O error" for a read-only one)."""
        self.problem: str | None = None
        self.halted: str | None = None
        self.files: DatabaseFile | None = None
        """The files the engine opened (SQLite), checked by :meth:`halted_now`."""
        self._healed: asyncio.Event | None = None

    def halted_now(self) -> str | None:
        """Why nothing may be written now (the database file or its ``-wal`` file is no
        longer the one opened: checked now, not only at the last tick), or ``None``."""
        if self.halted is None and self.files is not None:
            self.halted = self.files.problem()
        return self.halted

    def failed(self, exc: BaseException) -> str | None:
        """Record ``exc`` if it is a storage fault; return the fault (``None``: not one)."""
        problem = storage_fault(exc)
        if problem in _REFINED and self.path is not None:
            state = filesystem_fault(self.path)
            if state is not None and state not in problem:
                problem = f"{problem}: {state}"
        if problem is not None:
            if problem != self.problem:
                logger.error("storage fault: %s (%s)", problem, one_line(exc))
            self.problem = problem
        return problem

    def succeeded(self) -> None:
        """A write landed: the fault, if any, is over (waiting retries go at once), unless the
        file system still refuses a new file (the write fitted in space the log had)."""
        if self.problem is not None:
            if self.path is not None and filesystem_fault(self.path) is not None:
                return
            logger.warning("storage writable again (was: %s)", self.problem)
            self.problem = None
        if self._healed is not None:
            self._healed.set()
            self._healed = None

    async def wait(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if a write lands meanwhile (a retry then goes at once,
        within a tick of the storage healing rather than at the end of its backoff)."""
        if self._healed is None:
            self._healed = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._healed.wait(), seconds)


def one_line(exc: BaseException) -> str:
    """``exc`` as one line: its type and first line (for a log line without a traceback)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class StorageFaultFilter(logging.Filter):
    """Logs a record whose exception is a storage fault as one line naming the fault.

    A storage fault is not a bug: its traceback tells the operator nothing, and repeated on
    every attempt it buries the one line that matters. The record keeps its message, with
    ``: storage fault: <fault> (<error>)`` added, and loses its traceback.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        info = record.exc_info
        if not info or info[1] is None:
            return True
        problem = storage_fault(info[1])
        if problem is not None:
            record.msg = f"{record.getMessage()}: storage fault: {problem} ({one_line(info[1])})"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


def install_storage_fault_filter(*names: str) -> None:
    """Add :class:`StorageFaultFilter` to the loggers ``names`` (default: this package's), once
    each."""
    for name in names or _STUDIO_LOGGERS:
        target = logging.getLogger(name)
        if not any(isinstance(f, StorageFaultFilter) for f in target.filters):
            target.addFilter(StorageFaultFilter())


_STUDIO_LOGGERS = (
    "studio_scheduler_core",
    "studio_outbox",
    "studio_launcher",
    "studio_state",
    "studio_api",
    "uvicorn.error",  # "Exception in ASGI application"
    "asyncio",  # "Task exception was never retrieved"
)


def filesystem_fault(path: str) -> str | None:
    """What the file system under ``path`` says to a small new file beside it now: "disk
    full", "read-only file system", "disk I/O error"; ``None`` when the write succeeds.

    A rewrite of the database header alone may succeed on a full disk (it reuses space the
    write-ahead log already has), so a fault is over only once new space can be written too.
    """
    probe = f"{path}.probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"\0" * 4096)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        return _OS_FAULTS.get(exc.errno or 0)
    return None


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
    """The ``(st_dev, st_ino)`` of the database file and of its ``-wal`` file at open time,
    checked on demand."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.wal_path = f"{path}-wal"
        self._identity: tuple[int, int] | None = None
        self._wal: tuple[int, int] | None = None

    def remember(self) -> None:
        """Record the identities of the files now at ``path`` and ``path-wal`` (right after
        opening and writing: the connection has the log open from then on)."""
        info = os.stat(self.path)
        self._identity = (info.st_dev, info.st_ino)
        self._wal = _identity(self.wal_path)

    def problem(self) -> str | None:
        """``None`` while the paths still name the opened files; else what went wrong."""
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
        return self._wal_problem()

    def _wal_problem(self) -> str | None:
        if self._wal is None:  # not in WAL mode (or no log yet): nothing to compare
            self._wal = _identity(self.wal_path)
            return None
        try:
            now = _identity(self.wal_path)
        except OSError as exc:
            return f"the database's write-ahead log {self.wal_path} cannot be checked: {exc}"
        if now == self._wal:
            return None
        what = "deleted" if now is None else "replaced by another file"
        return (
            f"wal replaced: the database's write-ahead log {self.wal_path} was {what} while "
            "Studio was running; writing stopped so the database is not damaged further "
            "(restart Studio, after checking the database with PRAGMA integrity_check)"
        )


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return (info.st_dev, info.st_ino)
