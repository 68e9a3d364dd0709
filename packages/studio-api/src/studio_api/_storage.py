"""Storage faults: telling SQLite's I/O-class errors apart, and what ``/api/health`` says of them.

A read-only or full file system, an I/O error, a corrupt or unopenable file is not a bug in a
request: the API answers 503 naming the problem (never a 500 with a traceback), and health
reports ``degraded`` until a write lands again.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

from studio_state import is_busy_error

from ._errors import file_system_state, storage_problem

_PROBE_EVERY_SECONDS = 2.0


class StorageHealth:
    """The last storage fault a request met, until a write to the database lands again.

    ``problem`` is what ``/api/health`` reports; :meth:`check` re-probes (at most every two
    seconds) by writing the database header on a short-lived connection of its own, so the
    fault clears once the file system is writable again even if no request writes.
    ``db_path`` is ``None`` on PostgreSQL: there is no file to probe, and a recorded problem
    clears at the next check (the server's own errors are reported as they come).
    """

    def __init__(self, db_path: Path | None, *, synchronous: str = "full") -> None:
        self.db_path = db_path
        self.synchronous = synchronous
        self.problem: str | None = None
        self.since: float | None = None
        self._probed_at = 0.0

    def record(self, problem: str) -> None:
        """Remember ``problem`` (what a request just met)."""
        if self.problem is None:
            self.since = time.time()
        self.problem = problem
        self._probed_at = time.monotonic()  # report it for a while before probing again

    async def check(self) -> str | None:
        """The current problem, re-probing the database while one is recorded."""
        if self.problem is None:
            return None
        now = time.monotonic()
        if now - self._probed_at < _PROBE_EVERY_SECONDS:
            return self.problem
        self._probed_at = now
        found = await self._probe()
        if found is None:
            self.problem, self.since = None, None
        else:
            self.problem = found
        return self.problem

    async def _probe(self) -> str | None:
        from studio_state import connect

        if self.db_path is None:
            return None
        if not self.db_path.is_file():  # never create a new, empty database here
            return self.problem
        state = file_system_state(self.db_path)
        if state is not None:
            return f"storage fault ({self.db_path}): {state}"
        try:
            async with connect(self.db_path, synchronous=self.synchronous) as conn:
                async with conn.execute("PRAGMA user_version") as cursor:
                    row = await cursor.fetchone()
                version = int(next(iter(dict(row).values()))) if row else 0
                await conn.execute("BEGIN IMMEDIATE")
                try:
                    await conn.execute(f"PRAGMA user_version = {version}")
                    await conn.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        await conn.execute("ROLLBACK")
                    raise
        except (sqlite3.Error, OSError) as exc:
            if is_busy_error(exc):
                return self.problem  # the engine is writing: no verdict this time
            return storage_problem(exc, self.db_path) or f"storage fault: {exc}"
        return None
