"""The SQL of the engine's coordination: the due scan, the next wake-up, the backlog figures,
the webhook due time, the header reads behind the waker and the storage probe, and the wake-up
listener's ``LISTEN`` and liveness probe (PostgreSQL).

A second backend implements these with its own indexes (the due scan must stay an index range
read: ``enabled = 1 AND next_fire_at <= now`` in ``(next_fire_at, id)`` order).
"""

from __future__ import annotations

from typing import Any

import aiosqlite

from studio_state import backend_of, fetch_all, fetch_one, fetch_value, write_transaction

from .._records.codec import schedule_record
from .._records.due import DUE_COLUMNS, DueSchedule
from .._records.schedule import Schedule

_DUE_SELECT = ", ".join(DUE_COLUMNS)
"""What the due scan reads (:class:`DueSchedule`); full rows are read on demand."""

# The earliest due time of webhook rows only (argv rows may be due but paused).
_WEBHOOK_DUE = (
    "SELECT min(t) AS due FROM ("
    "SELECT min(next_attempt_at) AS t FROM dispatch_outbox "
    "WHERE status IN ('pending', 'delivering') "
    "AND (deliver_to LIKE 'http://%' OR deliver_to LIKE 'https://%') "
    "UNION ALL SELECT min(expires_at) FROM dispatch_outbox "
    "WHERE status = 'pending' AND expires_at IS NOT NULL "
    "AND (deliver_to LIKE 'http://%' OR deliver_to LIKE 'https://%')) AS due_times"
)


def due_query(types: tuple[str, ...], *, after: bool) -> str:
    """The due-row query (uses ``idx_schedules_due``); ``after`` adds the keyset condition."""
    placeholders = ", ".join("?" * len(types))
    keyset = " AND (next_fire_at, id) > (?, ?)" if after else ""
    return (
        f"SELECT {_DUE_SELECT} FROM schedules WHERE enabled = 1 AND next_fire_at <= ?"
        f"{keyset} AND trigger_type IN ({placeholders}) ORDER BY next_fire_at, id LIMIT ?"
    )


async def due_rows(
    conn: aiosqlite.Connection,
    types: tuple[str, ...],
    now: float,
    after: tuple[float, str] | None,
    limit: int,
) -> list[DueSchedule]:
    """Up to ``limit`` due rows of ``types`` after the keyset ``after``, in due order."""
    params: list[Any] = [now]
    if after is not None:
        params += list(after)
    params += [*types, limit]
    rows = await fetch_all(conn, due_query(types, after=after is not None), params)
    return [DueSchedule.from_row(row) for row in rows]


async def next_fire_rows(
    conn: aiosqlite.Connection, types: tuple[str, ...], *, floor: float | None, limit: int
) -> list[tuple[str, float]]:
    """``(id, next_fire_at)`` of the earliest armed schedules of ``types`` (only
    ``next_fire_at > floor`` when given)."""
    marks = ", ".join("?" * len(types))
    where = " AND next_fire_at > ?" if floor is not None else ""
    params: list[Any] = [floor] if floor is not None else []
    rows = await fetch_all(
        conn,
        "SELECT id, next_fire_at FROM schedules WHERE enabled = 1 "
        f"AND next_fire_at IS NOT NULL{where} AND trigger_type IN ({marks}) "
        "ORDER BY next_fire_at, id LIMIT ?",
        [*params, *types, limit],
    )
    return [(str(row["id"]), float(row["next_fire_at"])) for row in rows]


async def due_backlog(conn: aiosqlite.Connection, now: float) -> tuple[int, float | None]:
    """How many enabled schedules are due at ``now``, and the oldest due time among them."""
    row = await fetch_one(
        conn,
        "SELECT COUNT(*) AS n, MIN(next_fire_at) AS oldest FROM schedules "
        "WHERE enabled = 1 AND next_fire_at <= ?",
        (now,),
    )
    if row is None:
        return 0, None
    oldest = row["oldest"]
    return int(row["n"] or 0), None if oldest is None else float(oldest)


async def due_schedule(
    conn: aiosqlite.Connection, schedule_id: str, next_fire_at: float
) -> Schedule | None:
    """The schedule, if still enabled and due at the ``next_fire_at`` the scan read (what the
    trigger sources take, and :class:`~studio_scheduler_core.abc.Occurrence`'s ``schedule``)."""
    row = await fetch_one(
        conn,
        "SELECT * FROM schedules WHERE id = ? AND enabled = 1 "
        "AND next_fire_at IS NOT DISTINCT FROM ?",
        (schedule_id, next_fire_at),
    )
    return None if row is None else schedule_record(row)


async def read_schedule(conn: aiosqlite.Connection, schedule_id: str) -> Schedule | None:
    """The schedule, or ``None``."""
    row = await fetch_one(conn, "SELECT * FROM schedules WHERE id = ?", (schedule_id,))
    return None if row is None else schedule_record(row)


async def webhook_due_at(conn: aiosqlite.Connection) -> float | None:
    """When a webhook dispatch is next due (to send, or to expire); ``None``: none."""
    rows = list(await conn.execute_fetchall(_WEBHOOK_DUE))
    value = rows[0]["due"] if rows else None
    return None if value is None else float(value)


async def data_version(conn: aiosqlite.Connection) -> int:
    """``PRAGMA data_version``: changes when another connection commits."""
    return int(await fetch_value(conn, "PRAGMA data_version") or 0)


async def rewrite_header(conn: aiosqlite.Connection) -> None:
    """Write the file's header once (``user_version`` to its own value): a write probe. On
    PostgreSQL (no file header) a write transaction that takes a transaction id."""
    if backend_of(conn) == "postgresql":
        async with write_transaction(conn):
            await fetch_value(conn, "SELECT txid_current()")
        return
    async with write_transaction(conn):
        version = int(await fetch_value(conn, "PRAGMA user_version") or 0)
        await conn.execute(f"PRAGMA user_version = {version}")


async def register_node(
    conn: aiosqlite.Connection, node_id: str, url: str | None, now: float
) -> None:
    """Record this node and the URL its API answers on (``None``: not reachable by others).

    Its own transaction. A node that starts again under the same id replaces its row.
    """
    async with write_transaction(conn):
        await conn.execute(
            "INSERT INTO studio_nodes (node_id, url, started_at, seen_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (node_id) DO UPDATE SET url = excluded.url, "
            "started_at = excluded.started_at, seen_at = excluded.seen_at",
            (node_id, url, now, now),
        )


async def listen(conn: Any, channels: tuple[str, ...]) -> None:
    """``LISTEN`` on each channel (a psycopg autocommit connection; names are our constants)."""
    for channel in channels:
        await conn.execute(f"LISTEN {channel}")


async def answer(conn: Any) -> None:
    """One round trip proving a silent connection still answers."""
    await conn.execute("SELECT 1")
