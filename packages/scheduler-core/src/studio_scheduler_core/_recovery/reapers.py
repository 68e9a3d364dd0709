"""The periodic recovery concerns of the tick: the stale-run reaper (with retention and, on
PostgreSQL, the folding of the ad-hoc run counts' delta rows) and the WAL checkpoint.

Each runs at its own interval (``reaper_interval_seconds``, ``checkpoint_interval_seconds``);
a tick between two runs costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

import aiosqlite

from studio_state import is_postgres

from .._admission.store import compact_counts
from .._fire.runlog import run_log_dir
from .._settings import SchedulerSettings
from .reconcile import reap_stale
from .retention import RetentionReport, retention_pass
from .store import WalCheckpoint, checkpoint


class Reapers:
    """Interval bookkeeping around :func:`reap_stale` and :func:`checkpoint`."""

    def __init__(
        self,
        conn: aiosqlite.Connection,
        *,
        db_path: str,
        settings: SchedulerSettings,
        owned_runs: Callable[[], Collection[str]],
        started: float,
    ) -> None:
        self._conn = conn
        self._db_path = db_path
        self._settings = settings
        self._owned_runs = owned_runs
        self._last_reap: float | None = None
        self._last_checkpoint = started  # the first checkpoint waits one interval
        self.last_retention: RetentionReport | None = None
        """What the last retention pass deleted."""

    async def reap(self, now: float) -> int | None:
        """Time out stale runs if the reaper interval has passed (``None``: not yet)."""
        last = self._last_reap
        if last is not None and now - last < self._settings.reaper_interval_seconds:
            return None
        self._last_reap = now
        reaped = await reap_stale(
            self._conn,
            now=now,
            deadline_seconds=self._settings.invocation_deadline_seconds,
            owned_runs=set(self._owned_runs()),
        )
        # On PostgreSQL there is no database file to keep logs beside: the configured run
        # log directory (which the engine requires there).
        runs_dir = (
            run_log_dir(self._db_path, self._settings)
            if is_postgres(self._db_path)
            else Path(self._db_path).parent / "runs"
        )
        self.last_retention = await retention_pass(
            self._conn,
            now=now,
            retention_days=self._settings.retention_days,
            runs_dir=runs_dir,
            dispatch_retention_days=self._settings.dispatch_retention_days,
            dead_letter_retention_days=self._settings.dead_letter_retention_days,
            audit_retention_days=self._settings.audit_retention_days,
            archive_dir=self._settings.archive_dir,
            log_bytes=self._settings.run_log_bytes,
        )
        # On PostgreSQL the ad-hoc run counts are delta rows; fold those written since.
        await compact_counts(self._conn)
        return reaped

    async def checkpoint(self, now: float) -> WalCheckpoint | None:
        """Checkpoint the WAL if the checkpoint interval has passed (``None``: not yet; always
        on PostgreSQL, whose server manages its own checkpoints)."""
        if is_postgres(self._db_path):
            return None
        if now - self._last_checkpoint < self._settings.checkpoint_interval_seconds:
            return None
        self._last_checkpoint = now
        return await checkpoint(self._db_path)
