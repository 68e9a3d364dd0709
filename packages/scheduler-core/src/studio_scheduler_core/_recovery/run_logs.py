"""Every node's periodic pass over its own run-log directory (PostgreSQL): the logs of its
finished runs that are not stored yet are copied into the database.

A run's end copies its log (:func:`~studio_scheduler_core._fire.logcopy.copy_run_log`); this
pass copies what that missed: a copy that failed, a run that ended while its node shut down,
logs written before the table existed. Each pass looks at the files written since the last
pass (the first pass at every file), plus the runs it saw still running or failed to copy;
it copies at most :attr:`StoredLogs.PER_PASS` logs and leaves the rest for the next pass.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time

import aiosqlite

from studio_state import run_sync

from .._fire import store
from .._fire.logcopy import copy_run_log
from .._fire.runlog import run_log_dir
from .._settings import SchedulerSettings

_MARGIN = 60.0
"""Seconds of file times looked at again (a file written as the last pass listed the dir)."""
_BATCH = 500


def _recent_logs(directory: str, since: float | None) -> set[str]:
    """The run ids of the ``*.log`` files in ``directory`` written at or after ``since``."""
    found = set()
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if not entry.name.endswith(".log"):
                    continue
                try:
                    if since is None or entry.stat().st_mtime >= since:
                        found.add(entry.name[:-4])
                except FileNotFoundError:
                    continue
    except FileNotFoundError:
        pass
    return found


class StoredLogs:
    """The pass that stores this node's finished runs' logs the run's end did not (one per
    engine on PostgreSQL)."""

    PER_PASS = 200
    """Logs copied per pass at most (the first pass after an upgrade may find many)."""

    def __init__(self, *, db_path: str, settings: SchedulerSettings, interval: float) -> None:
        self.db_path = db_path
        self.settings = settings
        self.interval = float(interval)
        self._next: float | None = None
        self._since: float | None = None
        self._again: set[str] = set()
        """Runs seen running, failed to copy or left over: looked at again next pass."""

    async def tick(self, conn: aiosqlite.Connection, now: float) -> int | None:
        """Copy when due (at the first tick, then every ``interval``); how many logs were
        stored (``None``: not due)."""
        if self._next is not None and now < self._next:
            return None
        self._next = now + self.interval
        return await self.sweep(conn, now)

    async def sweep(self, conn: aiosqlite.Connection, now: float) -> int:
        """Store the logs of this directory's ended runs that have none stored."""
        # File times are the machine's wall clock, whatever clock the engine is given.
        listed_at = time.time()
        directory = run_log_dir(self.db_path, self.settings)
        ids = await asyncio.to_thread(_recent_logs, directory, self._since)
        ids |= self._again
        self._since = listed_at - _MARGIN
        again: set[str] = set()
        stored = 0
        ordered = sorted(ids)
        for start in range(0, len(ordered), _BATCH):
            batch = ordered[start : start + _BATCH]

            def unstored(db: sqlite3.Connection, batch: list[str] = batch) -> dict[str, bool]:
                return store.unstored_runs_sync(db, batch)

            for run_id, ended in (await run_sync(conn, unstored)).items():
                if not ended or stored >= self.PER_PASS:
                    again.add(run_id)
                    continue
                copied = await copy_run_log(
                    conn, db_path=self.db_path, settings=self.settings, run_id=run_id, now=now
                )
                if copied is None:
                    again.add(run_id)
                stored += bool(copied)
        self._again = again
        return stored
