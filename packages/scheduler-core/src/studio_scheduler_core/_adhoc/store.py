"""The SQL of ad-hoc runs: the queue's candidates, the enqueue insert, reads, and the lease's
renewal and ownership checks.

Status changes (claim, cancel, recovery, requeue) go through
:func:`~studio_scheduler_core._records.terminal.apply`; this module holds the rest. A second backend
implements these functions with the same guards.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import aiosqlite

from studio_state import (
    backend_of,
    fetch_all,
    fetch_one,
    fetch_value,
    open_connection,
)

from .._records.codec import run_record
from .._records.run import Run

ADHOC_WHERE = "schedule_id IS NULL AND queued_at IS NOT NULL"
"""What makes a ``schedule_runs`` row an ad-hoc run (fixed SQL for the run pages)."""

CANDIDATES = (
    "SELECT q.* FROM schedule_runs q WHERE q.status = 'queued' AND +q.schedule_id IS NULL "
    "AND (q.concurrency_key IS NULL OR ("
    "NOT EXISTS (SELECT 1 FROM schedule_runs r WHERE r.status = 'running' "
    "AND r.concurrency_key = q.concurrency_key) "
    "AND NOT EXISTS (SELECT 1 FROM schedule_runs o WHERE o.status = 'queued' "
    "AND o.concurrency_key = q.concurrency_key AND (o.queued_at < q.queued_at "
    "OR (o.queued_at = q.queued_at AND o.rowid < q.rowid))))) "
    "ORDER BY q.queued_at, q.rowid LIMIT ?"
)
"""Queued ad-hoc rows a worker may claim now, oldest first: the head of each concurrency key
whose key has no running row. ``+q.schedule_id`` keeps SQLite's planner off the schedule
index (it reads the queued index in order instead)."""

# PostgreSQL has no unary plus on text; its planner needs no such hint. A row another node's
# claim transaction holds is skipped, not read as still queued: that claim would only lose
# its guard after waiting for the other to commit (the guarded claim still decides).
_CANDIDATES_PG = (
    CANDIDATES.replace("+q.schedule_id", "q.schedule_id") + " FOR UPDATE OF q SKIP LOCKED"
)

SCHEDULED_CANDIDATES = (
    "SELECT q.* FROM schedule_runs q WHERE q.status = 'queued' AND q.schedule_id IS NOT NULL "
    "ORDER BY q.queued_at, q.rowid LIMIT ?"
)
"""Scheduled fires the leader queued for any node's worker (``scheduled_on_any_node``),
oldest first; the leader's admission already gave each its slot."""

_ENQUEUE = (
    "INSERT INTO schedule_runs (id, schedule_id, trigger_context, action_kind, "
    "action_args, status, chain_depth, fired_at, created_at, updated_at, "
    "status_reason_code, status_reason_summary, queued_at, concurrency_key, "
    "lease_attempts, notify) "
    "VALUES (?, NULL, ?, ?, ?, 'queued', 0, ?, ?, ?, ?, ?, ?, ?, 0, ?)"
)


CONCURRENCY_LOCK_PREFIX = "studio.concurrency_key:"
"""What the advisory lock of a ``concurrency_key`` is named after (hashed to 64 bits)."""
_KEY_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(?, 0))"


async def candidates(conn: aiosqlite.Connection, limit: int) -> list[Run]:
    """Up to ``limit`` claimable queued runs (see :data:`CANDIDATES`). On PostgreSQL, inside
    the caller's transaction, the rows returned stay locked until it ends and rows another
    transaction holds (a claim in flight on another node) are skipped (``SKIP LOCKED``)."""
    sql = _CANDIDATES_PG if backend_of(conn) == "postgresql" else CANDIDATES
    return [run_record(row) for row in await fetch_all(conn, sql, (limit,))]


async def scheduled_candidates(conn: aiosqlite.Connection, limit: int) -> list[Run]:
    """Up to ``limit`` queued scheduled fires (see :data:`SCHEDULED_CANDIDATES`); on
    PostgreSQL locked as :func:`candidates` locks its rows (another node's claims skipped)."""
    sql = SCHEDULED_CANDIDATES
    if backend_of(conn) == "postgresql":
        sql += " FOR UPDATE OF q SKIP LOCKED"
    return [run_record(row) for row in await fetch_all(conn, sql, (limit,))]


async def lock_concurrency_keys(conn: aiosqlite.Connection, keys: Iterable[str | None]) -> None:
    """On PostgreSQL, take the transaction advisory lock of each ``concurrency_key`` given
    (``None`` ignored), in key order: claims of one key are serialised, and two transactions
    locking several keys never wait on each other in opposite orders. Nothing on SQLite,
    whose write transaction already serialises every claim."""
    if backend_of(conn) != "postgresql":
        return
    for key in sorted({key for key in keys if key is not None}):
        await conn.execute(_KEY_LOCK, (CONCURRENCY_LOCK_PREFIX + key,))


async def insert_queued(
    conn: aiosqlite.Connection,
    *,
    run_id: str,
    context: str | None,
    action_kind: str,
    action: str | None,
    now: float,
    reason_code: str,
    summary: str,
    concurrency_key: str | None,
    notify: str | None,
) -> None:
    """Insert a ``queued`` ad-hoc run (JSON columns already encoded)."""
    await conn.execute(
        _ENQUEUE,
        (
            run_id,
            context,
            action_kind,
            action,
            now,
            now,
            now,
            reason_code,
            summary,
            now,
            concurrency_key,
            notify,
        ),
    )


async def get_adhoc(conn: aiosqlite.Connection, run_id: str) -> Run | None:
    """The :class:`Run` of an ad-hoc run, or ``None`` (unknown id, or a scheduled run)."""
    row = await fetch_one(
        conn, f"SELECT * FROM schedule_runs WHERE id = ? AND {ADHOC_WHERE}", (run_id,)
    )
    return None if row is None else run_record(row)


@dataclass(frozen=True, slots=True)
class LeasedRun:
    """A ``running`` run held under a worker's lease, with its recorded child."""

    id: str
    invocation_id: str | None
    leased_by: str
    lease_expires_at: float | None
    lease_attempts: int
    child_pid: int | None
    child_started_at: float | None


async def leased_running(conn: aiosqlite.Connection) -> list[LeasedRun]:
    """Every ``running`` run held under a lease (what lease recovery inspects)."""
    rows = await fetch_all(
        conn,
        "SELECT id, invocation_id, leased_by, lease_expires_at, lease_attempts, child_pid, "
        "child_started_at FROM schedule_runs WHERE status = 'running' AND leased_by IS NOT NULL",
    )
    return [LeasedRun(**row) for row in rows]


async def extend_lease(
    conn: aiosqlite.Connection, run_id: str, *, worker_id: str, attempt: int, expires_at: float
) -> bool:
    """Move the lease's expiry of a running row this claim holds; whether it still held."""
    cursor = await conn.execute(
        "UPDATE schedule_runs SET lease_expires_at = ? WHERE id = ? "
        "AND status = 'running' AND leased_by = ? AND lease_attempts = ?",
        (expires_at, run_id, worker_id, attempt),
    )
    renewed = cursor.rowcount == 1
    await cursor.close()
    return renewed


async def lease_held(
    conn: aiosqlite.Connection, run_id: str, *, worker_id: str, attempt: int
) -> bool:
    """Whether the row is still ``running`` under this claim (a read, no write)."""
    found = await fetch_value(
        conn,
        "SELECT 1 FROM schedule_runs WHERE id = ? AND status = 'running' "
        "AND leased_by = ? AND lease_attempts = ?",
        (run_id, worker_id, attempt),
    )
    return found is not None


async def open_reader(db_path: str) -> aiosqlite.Connection:
    """A query-only connection of its own (it sees committed rows only)."""
    reader = await open_connection(db_path)
    try:
        await reader.execute("PRAGMA query_only = ON")
    except BaseException:
        await reader.close()
        raise
    return reader
