"""Retention of the counters kept as runs end (migration 16).

The hour rows of ``run_activity`` and the day rows of ``schedule_counters`` are only read over
the last 7 days; a pass deletes those older than :data:`COUNTER_KEEP_DAYS`. The running
totals (``schedule_health``, ``action_spend``) are what older buckets fold into and are kept;
a deleted schedule's health row goes.
"""

from __future__ import annotations

from typing import Final

import aiosqlite

from studio_state import run_write_transaction

from .._records.vocab import DAY_SECONDS
from . import store

COUNTER_KEEP_DAYS: Final = 8
"""Hour and day counter rows older than this many days are deleted (reads cover 7 days)."""


async def prune_counters(conn: aiosqlite.Connection, *, now: float) -> int:
    """Delete counter rows older than :data:`COUNTER_KEEP_DAYS` and the health rows of
    schedules that no longer exist, and roll the health rows' 7-day sums to ``now``'s day, in
    one write transaction; return the rows deleted."""
    cutoff = int(now) - COUNTER_KEEP_DAYS * DAY_SECONDS
    day = int(now // DAY_SECONDS * DAY_SECONDS)

    return await run_write_transaction(
        conn, lambda db: store.prune_counter_rows_sync(db, cutoff, day)
    )
