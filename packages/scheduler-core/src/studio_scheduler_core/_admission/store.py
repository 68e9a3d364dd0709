"""The SQL of admission: the holds on runs that any node's worker runs, the run counts the
gates and the run lists read (``max_runs``, the ad-hoc total), and usage evidence (the
invocation a report names, the ``sessions`` row it writes, the spend the budget gates compare).

The ``max_runs`` counts and the spend add the schedule's carried totals of what retention
deleted (``schedule_health.pruned_*``, migration 20) to what is still stored, so deleting old
history never re-arms a schedule that reached its limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import aiosqlite

from studio_state import (
    backend_of,
    fetch_all,
    fetch_ids_in,
    fetch_one,
    fetch_value,
    write_transaction,
)

from .._records.codec import TERMINAL_RUN_STATUSES

_IN_FLIGHT = "status IN ('queued', 'running')"
_TERMINAL_SQL = ", ".join(f"'{s}'" for s in TERMINAL_RUN_STATUSES)


async def unfinished(conn: aiosqlite.Connection, run_ids: Sequence[str]) -> set[str]:
    """Which of ``run_ids`` are still queued or running."""
    return await fetch_ids_in(
        conn, f"SELECT id FROM schedule_runs WHERE id IN ({{marks}}) AND {_IN_FLIGHT}", run_ids
    )


class HeldFire(NamedTuple):
    """A top-level scheduled run that holds its slot: its id, schedule and fire time."""

    run_id: str
    schedule_id: str
    fired_at: float


async def top_level_in_flight(conn: aiosqlite.Connection) -> list[HeldFire]:
    """Top-level scheduled runs queued or running under a worker's lease: the fires a
    previous leader admitted that still hold their slot."""
    rows = await fetch_all(
        conn,
        "SELECT id, schedule_id, fired_at FROM schedule_runs "
        f"WHERE {_IN_FLIGHT} AND schedule_id IS NOT NULL AND chain_depth = 0 "
        "AND (status = 'queued' OR leased_by IS NOT NULL) ORDER BY fired_at, id",
    )
    return [HeldFire(str(r["id"]), str(r["schedule_id"]), float(r["fired_at"])) for r in rows]


# What retention deleted of a schedule's counts and spend (migration 20): a schedule with no
# health row (none yet) carries nothing.
_PRUNED = "COALESCE((SELECT {col} FROM schedule_health WHERE schedule_id = ?), 0)"


async def fired_run_count(conn: aiosqlite.Connection, schedule_id: str) -> int:
    """Top-level runs of the schedule that fired and ended (chain children and skips excluded),
    those retention deleted included."""
    value = await fetch_value(
        conn,
        "SELECT (SELECT COUNT(*) FROM schedule_runs WHERE schedule_id = ? AND chain_depth = 0 "
        f"AND status IN ({_TERMINAL_SQL}) AND retry_of IS NULL) + "
        + _PRUNED.format(col="pruned_runs"),
        (schedule_id, schedule_id),
    )
    return int(value or 0)


async def admitted_run_count(conn: aiosqlite.Connection, schedule_id: str) -> int:
    """Top-level runs of the schedule that fired and ended, or are queued or running (what
    ``max_runs`` counts when workers of any node run the fires), those retention deleted
    included."""
    value = await fetch_value(
        conn,
        "SELECT (SELECT COUNT(*) FROM schedule_runs WHERE schedule_id = ? AND chain_depth = 0 "
        f"AND status IN ({_TERMINAL_SQL}, 'queued', 'running') AND retry_of IS NULL) + "
        + _PRUNED.format(col="pruned_runs"),
        (schedule_id, schedule_id),
    )
    return int(value or 0)


async def adhoc_count(conn: aiosqlite.Connection, status: str | None = None) -> int:
    """How many ad-hoc runs there are (of one ``status``), from the trigger-kept counts."""
    value = await fetch_value(
        conn,
        "SELECT coalesce(sum(n), 0) FROM adhoc_run_counts"
        + ("" if status is None else " WHERE status = ?"),
        [] if status is None else [status],
    )
    return int(value or 0)


async def compact_counts(conn: aiosqlite.Connection) -> None:
    """Fold ``adhoc_run_counts``'s delta rows into one row per status (PostgreSQL, where the
    triggers append deltas; a no-op on SQLite, whose triggers keep one row per status).

    Safe beside any writer: one statement deletes the rows it folds and inserts their sums.
    """
    if backend_of(conn) != "postgresql":
        return
    async with write_transaction(conn):
        await fetch_value(conn, "SELECT adhoc_run_counts_compact()")


async def invocation_start(conn: aiosqlite.Connection, invocation_id: str) -> float | None:
    """When the invocation started (``None``: no such invocation)."""
    row = await fetch_one(
        conn, "SELECT id, started_at FROM invocations WHERE id = ?", (invocation_id,)
    )
    return None if row is None else float(row["started_at"])


async def insert_session(
    conn: aiosqlite.Connection,
    *,
    session_id: str,
    invocation_id: str,
    status: str,
    input_tokens: int | None,
    output_tokens: int | None,
    cost_usd: float | None,
    started_at: Any,
    ended_at: float | None,
    now: float,
) -> None:
    """Insert one ``sessions`` row (in the caller's open transaction)."""
    await conn.execute(
        "INSERT INTO sessions (id, invocation_id, status, input_tokens, output_tokens, "
        "total_cost_usd, started_at, ended_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            session_id,
            invocation_id,
            status,
            input_tokens,
            output_tokens,
            cost_usd,
            started_at,
            ended_at,
            now,
        ),
    )


async def schedule_spend(conn: aiosqlite.Connection, schedule_id: str) -> tuple[float, int]:
    """``(cost_usd, tokens)`` summed over the sessions of every run of the schedule, those of
    the runs retention deleted included."""
    row = await fetch_one(
        conn,
        "SELECT l.cost + " + _PRUNED.format(col="pruned_cost_usd") + " AS cost, "
        "l.tokens + " + _PRUNED.format(col="pruned_tokens") + " AS tokens FROM ("
        "SELECT COALESCE(SUM(s.total_cost_usd), 0) AS cost, "
        "COALESCE(SUM(COALESCE(s.input_tokens, 0) + COALESCE(s.output_tokens, 0)), 0) AS tokens "
        "FROM schedule_runs r JOIN sessions s ON s.invocation_id = r.invocation_id "
        "WHERE r.schedule_id = ? AND r.invocation_id IS NOT NULL) l",
        (schedule_id, schedule_id, schedule_id),
    )
    assert row is not None
    return float(row["cost"]), int(row["tokens"])


async def fire_times_since(
    conn: aiosqlite.Connection, schedule_id: str, since: float
) -> list[float]:
    """When the schedule's top-level fires at or after ``since`` fired (skips, deferral records
    and retries of an attempt excluded), oldest first: the rate-limit window's history."""
    rows = await fetch_all(
        conn,
        "SELECT fired_at FROM schedule_runs WHERE schedule_id = ? AND chain_depth = 0 "
        "AND status <> 'skipped' AND retry_of IS NULL AND fired_at >= ? ORDER BY fired_at",
        (schedule_id, since),
    )
    return [float(row["fired_at"]) for row in rows if row["fired_at"] is not None]
