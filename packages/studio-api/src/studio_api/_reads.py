"""The read side of the API: its own read-only connection, so a GET never waits for a write.

Every write (the tick, fires, delivery, POST/PATCH/DELETE) goes through the engine's one
connection, and a write transaction holds that connection's thread until it commits. A GET
queued on the same connection waits behind it. In WAL mode a second connection reads the last
committed state while a write transaction is open, so the read-only GET routes use one here.
It is opened with ``query_only`` set: a write through it fails instead of taking the lock.
"""

from __future__ import annotations

from dataclasses import dataclass

import aiosqlite

import studio_state
from studio_scheduler_core import AdhocRunService, SchedulerEngine, ScheduleService
from studio_state import Clock


@dataclass(frozen=True)
class Reads:
    """The read-only connection and the services bound to it (reads only, never a write)."""

    conn: aiosqlite.Connection
    schedules: ScheduleService
    runs: AdhocRunService
    clock: Clock
    """The engine's clock: the ``now`` of health verdicts and stats."""


async def open_reads(engine: SchedulerEngine, synchronous: str) -> Reads:
    """Open the read-only connection on ``engine``'s database (once it has migrated it)."""
    conn = await studio_state.open_connection(engine.db_path, synchronous=synchronous)
    try:
        await conn.execute("PRAGMA query_only = ON")
    except BaseException:
        await conn.close()
        raise
    settings, clock = engine.settings, engine.clock
    return Reads(
        conn,
        ScheduleService(conn, settings=settings, clock=clock),
        AdhocRunService(conn, settings=settings, clock=clock),
        clock,
    )
