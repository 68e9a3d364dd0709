"""The SQL of recovery: the runs and invocations start-up reconciliation and the stale-run
reaper inspect, the database's file and the WAL checkpoint, the pruning of old counter
rows, and what deleted runs leave in their schedule's carried totals (migration 20).

The writes themselves go through :func:`~studio_scheduler_core._records.terminal.apply`. A second
backend implements these reads (and replaces the checkpoint with its own maintenance).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

import aiosqlite

from studio_state import backend_of, connect, fetch_all, fetch_ids_in

from .._records.codec import TERMINAL_RUN_STATUSES
from .._records.store import roll_weeks_sync
from .._records.vocab import DAY_SECONDS


@dataclass(frozen=True, slots=True)
class RunningRun:
    """A scheduled run (no lease) still ``running``, with its recorded child."""

    id: str
    invocation_id: str | None
    child_pid: int | None
    child_started_at: float | None
    fired_at: float = 0.0
    timeout_sec: int | None = None
    """Its schedule's own ``timeout_sec`` (``None``: none, or the schedule is gone)."""


@dataclass(frozen=True, slots=True)
class RunningInvocation:
    """A ``running`` invocation and the run it belongs to (``None``: no run)."""

    id: str
    schedule_run_id: str | None


async def unleased_running_runs(conn: aiosqlite.Connection) -> list[RunningRun]:
    """Scheduled runs (no lease) still ``running``, with their recorded child."""
    rows = await fetch_all(
        conn,
        "SELECT id, invocation_id, child_pid, child_started_at FROM schedule_runs "
        "WHERE status = 'running' AND leased_by IS NULL",
    )
    return [RunningRun(**row) for row in rows]


async def unleased_running_invocations(conn: aiosqlite.Connection) -> list[str]:
    """Ids of ``running`` invocations whose run is gone or not leased."""
    rows = await fetch_all(
        conn,
        "SELECT i.id FROM invocations i LEFT JOIN schedule_runs r ON r.id = i.schedule_run_id "
        "WHERE i.status = 'running' AND (r.id IS NULL OR r.leased_by IS NULL)",
    )
    return [str(row["id"]) for row in rows]


async def runs_fired_before(conn: aiosqlite.Connection, cutoff: float) -> list[RunningRun]:
    """Scheduled runs still ``running`` that fired before ``cutoff``, with their child and
    their schedule's own ``timeout_sec``."""
    rows = await fetch_all(
        conn,
        "SELECT r.id, r.invocation_id, r.child_pid, r.child_started_at, r.fired_at, "
        "s.timeout_sec FROM schedule_runs r LEFT JOIN schedules s ON s.id = r.schedule_id "
        "WHERE r.status = 'running' AND r.leased_by IS NULL AND r.fired_at < ?",
        (cutoff,),
    )
    return [RunningRun(**row) for row in rows]


async def invocations_started_before(
    conn: aiosqlite.Connection, cutoff: float
) -> list[RunningInvocation]:
    """``running`` invocations (of no run, or of an unleased one) started before ``cutoff``."""
    rows = await fetch_all(
        conn,
        "SELECT i.id, i.schedule_run_id FROM invocations i "
        "LEFT JOIN schedule_runs r ON r.id = i.schedule_run_id "
        "WHERE i.status = 'running' AND i.started_at < ? AND (r.id IS NULL OR r.leased_by IS NULL)",
        (cutoff,),
    )
    return [RunningInvocation(**row) for row in rows]


async def ended_run_invocations(conn: aiosqlite.Connection, ids: list[str]) -> set[str]:
    """Which of the invocation ``ids`` belong to a run and are no longer ``running``."""
    return await fetch_ids_in(
        conn,
        "SELECT id FROM invocations WHERE id IN ({marks}) "
        "AND schedule_run_id IS NOT NULL AND status <> 'running'",
        ids,
    )


async def database_path(conn: aiosqlite.Connection) -> str | None:
    """The file of the connection's main database (what children get as LIONAGI_STUDIO_DB);
    ``None`` on PostgreSQL, which has no file (its callers pass the URL instead)."""
    if backend_of(conn) == "postgresql":
        return None
    for row in await fetch_all(conn, "PRAGMA database_list"):
        if row.get("name") == "main":
            return str(row.get("file") or "") or None
    return None


@dataclass(frozen=True, slots=True)
class WalCheckpoint:
    """What ``PRAGMA wal_checkpoint`` answered: whether a reader or writer kept it from
    completing (``busy``), the WAL's pages and how many of them were copied into the file
    (SQLite's ``log`` and ``checkpointed``; -1 when the database is not in WAL mode)."""

    busy: bool
    log: int
    checkpointed: int


async def checkpoint(db_path: str) -> WalCheckpoint | None:
    """``PRAGMA wal_checkpoint(TRUNCATE)`` on a short-lived connection of its own (``None``:
    SQLite answered no row)."""
    async with connect(db_path) as conn:
        rows = await fetch_all(conn, "PRAGMA wal_checkpoint(TRUNCATE)")
    if not rows:
        return None
    row = rows[0]
    return WalCheckpoint(
        busy=bool(row["busy"]), log=int(row["log"]), checkpointed=int(row["checkpointed"])
    )


def prune_counter_rows_sync(db: sqlite3.Connection, cutoff: int, day: int) -> int:
    """Delete the hour and day counter rows that start before ``cutoff`` and the health rows
    of schedules that no longer exist, and re-sum the 7-day figures of the health rows not
    yet as of ``day``; return how many rows went."""
    roll_weeks_sync(db, day, day - 6 * DAY_SECONDS)
    deleted = db.execute("DELETE FROM run_activity WHERE hour_start < ?", (cutoff,)).rowcount
    deleted += db.execute("DELETE FROM schedule_counters WHERE day_start < ?", (cutoff,)).rowcount
    deleted += db.execute(
        "DELETE FROM schedule_health WHERE NOT EXISTS "
        "(SELECT 1 FROM schedules s WHERE s.id = schedule_health.schedule_id)"
    ).rowcount
    return max(deleted, 0)


_FIRED = ", ".join(f"'{s}'" for s in TERMINAL_RUN_STATUSES)
# What the admission counts lose when these runs go: the top-level first attempts that fired
# and ended (the rows ``fired_run_count`` and ``admitted_run_count`` count: retention deletes
# no queued or running run) and the usage of the sessions ``schedule_spend`` joins to them.
_FOLD = f"""
UPDATE schedule_health SET pruned_runs = schedule_health.pruned_runs + o.runs,
  pruned_cost_usd = schedule_health.pruned_cost_usd + o.usd,
  pruned_tokens = schedule_health.pruned_tokens + o.tokens
FROM (
  SELECT r.schedule_id,
    sum(CASE WHEN r.chain_depth = 0 AND r.retry_of IS NULL AND r.status IN ({_FIRED})
      THEN 1 ELSE 0 END) AS runs,
    COALESCE(sum(u.usd), 0) AS usd, COALESCE(sum(u.tokens), 0) AS tokens
  FROM schedule_runs r LEFT JOIN (
    SELECT s.invocation_id, COALESCE(sum(s.total_cost_usd), 0) AS usd,
      COALESCE(sum(COALESCE(s.input_tokens, 0) + COALESCE(s.output_tokens, 0)), 0) AS tokens
    FROM sessions s WHERE s.invocation_id IN (
      SELECT invocation_id FROM schedule_runs WHERE id IN ({{marks}}))
    GROUP BY s.invocation_id
  ) u ON u.invocation_id = r.invocation_id
  WHERE r.id IN ({{marks}}) AND r.schedule_id IS NOT NULL GROUP BY r.schedule_id
) o WHERE o.schedule_id = schedule_health.schedule_id
"""


def fold_pruned_runs_sync(db: sqlite3.Connection, ids: list[str]) -> None:
    """Add to their schedules' carried totals what deleting the runs ``ids`` takes out of the
    ``max_runs`` counts and the spend (in the transaction that deletes them, before it does).

    A schedule that no longer exists has no health row: nothing is carried for it.
    """
    marks = ", ".join("?" * len(ids))
    db.execute(_FOLD.format(marks=marks), (*ids, *ids))
