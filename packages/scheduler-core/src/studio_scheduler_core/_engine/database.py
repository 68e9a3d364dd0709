"""The engine's database file and storage health, as the tick sees them.

Opening migrates the file and proves it writable (a read-only file opens and reads fine).
Before each tick the file and its ``-wal`` file are checked to be the ones opened (not
deleted or replaced: then nothing is written at all, terminal writes included), and a
storage fault met by any write ("disk full", "read-only", "disk I/O error") holds the tick
until the file system takes a new file beside the database and a probe write lands again:
nothing advances meanwhile, and health says why.
"""

from __future__ import annotations

import logging
import sqlite3

import aiosqlite

from studio_state import is_postgres, open_connection

from .._exceptions import DatabaseUnavailable
from .._fire.dbfile import (
    DatabaseFile,
    StorageHealth,
    filesystem_fault,
    probe_writable,
    storage_fault,
)
from .._schema import ensure_schema
from . import store

logger = logging.getLogger("studio_scheduler_core")


class EngineDatabase:
    """Opens the writer connection and says whether the tick may run."""

    def __init__(
        self,
        path: str,
        storage: StorageHealth,
        *,
        postgres: bool = False,
        application_name: str | None = None,
    ) -> None:
        self.path = path
        self.application_name = application_name
        """How the connection's PostgreSQL session is named (``studio:<node_id>``)."""
        self.postgres = postgres
        """A PostgreSQL URL: no file to probe or to check the identity of."""
        self.storage = storage
        """The storage fault the last write met, shared with every terminal write."""
        # A file's identity is checked on SQLite only: a PostgreSQL database has no file.
        self._file = None if is_postgres(path) else DatabaseFile(path)
        if self._file is not None and storage.path is None:
            storage.path = path
            storage.files = self._file  # a terminal write checks them before each attempt
        self.file_problem: str | None = None
        """Set while the file opened is no longer the one at ``path``."""

    @property
    def problem(self) -> str | None:
        """The file or storage problem holding the tick, if any."""
        return self.file_problem or self.storage.halted or self.storage.problem

    def check_file(self) -> str | None:
        """Is the database file or its ``-wal`` file no longer the one opened? Sets
        ``file_problem`` and ``storage.halted`` (no write at all then), logged once."""
        problem = None if self._file is None else self._file.problem()
        if problem is not None and problem != self.file_problem:
            logger.error("%s", problem)  # writes would go to a file no one can open again
        self.file_problem = self.storage.halted = problem
        return problem

    async def open(self) -> aiosqlite.Connection:
        """The writer connection, migrated and proven writable (storage faults: unavailable)."""
        try:
            conn = await open_connection(self.path, application_name=self.application_name)
        except sqlite3.OperationalError as exc:
            if storage_fault(exc):
                raise DatabaseUnavailable(self.path, str(exc)) from exc
            raise
        try:
            await ensure_schema(conn)
            if self._file is not None:
                await probe_writable(conn, self.path)
                self._file.remember()
        except BaseException as exc:
            await conn.close()
            if storage_fault(exc):
                raise DatabaseUnavailable(self.path, str(exc)) from exc
            raise
        self.file_problem = None
        self.storage.problem = None
        self.storage.halted = None
        return conn

    async def refusal(self, conn: aiosqlite.Connection) -> tuple[str, str] | None:
        """Why nothing may tick now, as ``(problem, tick error)``; ``None``: tick."""
        problem = self.check_file()
        if problem is not None:
            return problem, problem
        if self.storage.problem is not None and not await self._writable(conn):
            return self.storage.problem, f"storage fault: {self.storage.problem}"
        return None

    async def _writable(self, conn: aiosqlite.Connection) -> bool:
        """Has the fault healed? A new file beside the database takes a small write (a header
        rewrite alone may reuse space the log already has on a disk still full), then the
        header is written once (``user_version`` to its own value)."""
        if self._file is not None:
            fault = filesystem_fault(self.path)
            if fault is not None:
                return False  # still the same fault: no new log line, no write tried
        try:
            await store.rewrite_header(conn)
        except (sqlite3.Error, OSError) as exc:
            if self.storage.failed(exc) is None:
                logger.warning("storage probe failed: %s", exc)
            return False
        self.storage.succeeded()
        return True
