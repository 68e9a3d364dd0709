"""Buffered occurrences: an occurrence that arrives while a run of a ``buffer_one`` or
``buffer_all`` schedule is in flight is kept as a ``waiting_dependency`` run row (durable, in
the occurrence's own transaction) and started when no run of the schedule is in flight.
"""

from __future__ import annotations

import aiosqlite

from . import store

BUFFER_BOUND = 100
"""The most occurrences ``buffer_all`` keeps (``buffer_one`` keeps one)."""
BUFFERED = "schedule.buffered.overlap"
BUFFER_FULL = "schedule.skipped.buffer_full"
FIRED_BUFFERED = "schedule.fired.buffered"
FIRED_BACKFILL = "schedule.fired.backfill"
CANCELLED_OVERLAP = "run.cancelled.overlap"
BUFFER_POLICIES = ("buffer_one", "buffer_all")


def buffer_bound(policy: object) -> int:
    """How many occurrences the policy buffers (0: it buffers none)."""
    return {"buffer_one": 1, "buffer_all": BUFFER_BOUND}.get(str(policy), 0)


async def buffered_count(conn: aiosqlite.Connection, schedule_id: str) -> int:
    """Occurrences of the schedule waiting in its buffer."""
    return len(await store.buffered_ids(conn, schedule_id))
