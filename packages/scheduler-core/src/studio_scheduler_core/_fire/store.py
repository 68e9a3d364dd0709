"""The SQL of a fire: the schedule claim, the run and invocation inserts, deferral records and
the reads and writes around a running child.

The policies in ``_fire`` (and the evaluator, the ad-hoc worker and recovery) say *what* to
write and in which transaction; this module says *how* on SQLite. A second backend implements
these functions with the same guards: a write that reports ``False`` (or a row count of 0)
wrote nothing because its guard no longer held.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiosqlite

from studio_state import fetch_one, run_sync, run_write_transaction

from .._notify.store import retry_planned as retry_planned
from .._records.codec import dumps, run_record
from .._records.invocation import INVOCATION_COLUMNS, NewInvocation
from .._records.run import Run
from .._schedules.store import (
    INSERTED_JSON_COLUMNS,
)

_RUN_COLUMNS = (
    "id",
    "schedule_id",
    "invocation_id",
    "trigger_context",
    "action_kind",
    "action_args",
    "status",
    "exit_code",
    "chain_parent_id",
    "chain_depth",
    "fired_at",
    "ended_at",
    "error_detail",
    "created_at",
    "updated_at",
    "status_reason_code",
    "status_reason_summary",
    "status_evidence_refs",
    "queued_at",
)
_INSERT_RUN = (
    f"INSERT INTO schedule_runs ({', '.join(_RUN_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(_RUN_COLUMNS))})"
)
_INV_COLUMNS = INVOCATION_COLUMNS
_INSERT_INV = (
    f"INSERT INTO invocations ({', '.join(_INV_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(_INV_COLUMNS))})"
)
_DEFERRAL_RUN = (
    "INSERT INTO schedule_runs (id, schedule_id, trigger_context, action_kind, action_args, "
    "status, chain_depth, fired_at, ended_at, created_at, updated_at, status_reason_code, "
    "status_reason_summary, status_evidence_refs) "
    "SELECT ?, ?, ?, ?, '[]', 'skipped', 0, ?, ?, ?, ?, ?, ?, ? "
    "WHERE EXISTS (SELECT 1 FROM schedules WHERE id = ?)"
)
_DEFERRAL_TRANSITION = (
    "INSERT INTO status_transitions (id, entity_type, entity_id, previous_status, status, "
    "reason_code, reason_summary, evidence_refs, actor, metadata, created_at) "
    "SELECT ?, 'schedule_run', ?, NULL, 'skipped', ?, ?, ?, ?, ?, ? "
    "WHERE EXISTS (SELECT 1 FROM schedule_runs WHERE id = ?)"
)
_RECORD_CHILD = (
    "UPDATE schedule_runs SET child_pid = ?, child_started_at = ?, node_id = ? "
    "WHERE id = ? AND status = 'running'"
)


Guard = tuple[str, Any]
"""``(column, value)``: the row must hold ``value`` there (``None``: ``IS NULL``)."""


def run_params(run: Mapping[str, Any]) -> tuple[Any, ...]:
    """INSERT parameters of a run dict (JSON columns encoded)."""
    return tuple(
        dumps(run.get(column)) if column in INSERTED_JSON_COLUMNS else run.get(column)
        for column in _RUN_COLUMNS
    )


async def schedule_exists(conn: aiosqlite.Connection, schedule_id: str) -> bool:
    """Whether the schedule row is still there (:func:`schedule_exists_sync` in one trip)."""
    return await run_sync(conn, lambda db: schedule_exists_sync(db, schedule_id))


def _update_schedule_sql(
    schedule_id: str, sets: Mapping[str, Any], guards: Sequence[Guard]
) -> tuple[str, list[Any]]:
    where = ["id = ?"]
    params: list[Any] = [schedule_id]
    for column, value in guards:
        if value is None:
            where.append(f"{column} IS NULL")
        else:
            where.append(f"{column} = ?")
            params.append(value)
    sql = f"UPDATE schedules SET {', '.join(f'{c} = ?' for c in sets)} WHERE {' AND '.join(where)}"
    return sql, [*sets.values(), *params]


async def update_schedule(
    conn: aiosqlite.Connection, schedule_id: str, sets: Mapping[str, Any], guards: Sequence[Guard]
) -> bool:
    """``UPDATE schedules SET sets WHERE id = ? AND guards``; whether the row matched
    (:func:`update_schedule_sync` in one trip)."""
    return await run_sync(conn, lambda db: update_schedule_sync(db, schedule_id, sets, guards))


# One implementation of each statement, on the connection's own handle (``db``): a function
# run by ``run_write_transaction`` calls it directly (a batch of fires costs one trip, not one
# per row), and the async function of the same name runs it in one trip (``run_sync``).


def update_schedule_sync(
    db: sqlite3.Connection, schedule_id: str, sets: Mapping[str, Any], guards: Sequence[Guard]
) -> bool:
    """:func:`update_schedule` on ``db``."""
    return bool(db.execute(*_update_schedule_sql(schedule_id, sets, guards)).rowcount == 1)


def schedule_exists_sync(db: sqlite3.Connection, schedule_id: str) -> bool:
    """:func:`schedule_exists` on ``db``."""
    return db.execute("SELECT 1 FROM schedules WHERE id = ?", (schedule_id,)).fetchone() is not None


def insert_invocation_sync(db: sqlite3.Connection, invocation: NewInvocation) -> None:
    """:func:`insert_invocation` on ``db``."""
    db.execute(_INSERT_INV, invocation.params())


def insert_run_sync(db: sqlite3.Connection, run: Mapping[str, Any]) -> None:
    """:func:`insert_run` on ``db``."""
    db.execute(_INSERT_RUN, run_params(run))


async def disable_schedule(
    conn: aiosqlite.Connection, schedule_id: str, *, reason_code: str, now: float
) -> bool:
    """Disable an enabled schedule with ``disabled_reason``; whether it was enabled."""
    cursor = await conn.execute(
        "UPDATE schedules SET enabled = 0, disabled_reason = ?, updated_at = ? "
        "WHERE id = ? AND enabled = 1",
        (reason_code, now, schedule_id),
    )
    changed = cursor.rowcount == 1
    await cursor.close()
    return changed


async def insert_invocation(conn: aiosqlite.Connection, invocation: NewInvocation) -> None:
    """Insert an ``invocations`` row from its record (:func:`insert_invocation_sync` in one
    trip)."""
    await run_sync(conn, lambda db: insert_invocation_sync(db, invocation))


async def delete_invocation(conn: aiosqlite.Connection, invocation_id: str) -> None:
    """Remove an invocation row inserted by a write whose guard was then lost."""
    await conn.execute("DELETE FROM invocations WHERE id = ?", (invocation_id,))


async def insert_run(conn: aiosqlite.Connection, run: Mapping[str, Any]) -> None:
    """Insert a ``schedule_runs`` row from its dict (:func:`insert_run_sync` in one trip)."""
    await run_sync(conn, lambda db: insert_run_sync(db, run))


async def insert_deferrals(
    conn: aiosqlite.Connection,
    runs: Sequence[tuple[Any, ...]],
    transitions: Sequence[tuple[Any, ...]],
) -> int:
    """Insert deferral runs and their transitions (rows of a deleted schedule are skipped);
    returns how many runs were written. Parameter layout: :data:`_DEFERRAL_RUN` and
    :data:`_DEFERRAL_TRANSITION`."""
    cursor = await conn.executemany(_DEFERRAL_RUN, runs)
    written = cursor.rowcount
    await cursor.close()
    await conn.executemany(_DEFERRAL_TRANSITION, transitions)
    return int(written)


async def session_statuses(conn: aiosqlite.Connection, invocation_id: str) -> list[str]:
    """The statuses of the invocation's sessions (its evidence; :func:`session_statuses_sync`
    in one trip)."""
    return await run_sync(conn, lambda db: session_statuses_sync(db, invocation_id))


def session_statuses_sync(db: sqlite3.Connection, invocation_id: str) -> list[str]:
    """:func:`session_statuses` on ``db``."""
    rows = db.execute("SELECT status FROM sessions WHERE invocation_id = ?", (invocation_id,))
    return [row["status"] for row in rows.fetchall()]


def notify_configured_sync(db: sqlite3.Connection, run_id: str) -> bool:
    """Whether the run or its schedule has a ``notify`` (its end may enqueue a dispatch)."""
    row = db.execute(
        "SELECT 1 FROM schedule_runs r LEFT JOIN schedules s ON s.id = r.schedule_id "
        "WHERE r.id = ? AND (r.notify IS NOT NULL OR s.notify IS NOT NULL)",
        (run_id,),
    ).fetchone()
    return row is not None


async def record_child(
    conn: aiosqlite.Connection,
    run_id: str,
    pid: int,
    started: float | None,
    node_id: str | None = None,
) -> bool:
    """Write the spawned child of a ``running`` run and the node running it (where its log
    is): one guarded statement in one trip to the connection's thread. Returns whether the run
    had already ended (its child must stop).

    Committed at ``synchronous=NORMAL``: a pid is only worth anything while this machine keeps
    running (after a power loss the child is gone too), and a crash of this process alone does
    not lose a NORMAL commit. If the row is lost with the power, recovery finds the run
    ``running`` with no child and settles it as it does a crash between spawn and record.
    """

    return await run_write_transaction(
        conn, lambda db: record_child_sync(db, run_id, pid, started, node_id), synchronous="normal"
    )


def record_child_sync(
    db: sqlite3.Connection, run_id: str, pid: int, started: float | None, node_id: str | None
) -> bool:
    """:func:`record_child`'s statements on ``db``, in the caller's transaction (the fire
    path commits those of children spawned in one loop turn together, at NORMAL)."""
    if db.execute(_RECORD_CHILD, (pid, started, node_id, run_id)).rowcount == 1:
        return False
    row = db.execute("SELECT status FROM schedule_runs WHERE id = ?", (run_id,)).fetchone()
    return row is not None and row["status"] != "running"


async def run_status(conn: aiosqlite.Connection, run_id: str) -> str | None:
    """The run's status, or ``None`` when there is no such run."""
    row = await fetch_one(conn, "SELECT status FROM schedule_runs WHERE id = ?", (run_id,))
    return None if row is None else str(row["status"])


async def run_invocation(conn: aiosqlite.Connection, run_id: str) -> str | None:
    """The invocation id of a run, or ``None``."""
    row = await fetch_one(conn, "SELECT invocation_id FROM schedule_runs WHERE id = ?", (run_id,))
    return None if row is None or row["invocation_id"] is None else str(row["invocation_id"])


# A retry's planned attempt and buffered occurrences (their rows are inserted by the
# schedules' store; whether a retry is planned is the notifications' read, re-exported here
# for the fire path).


async def due_retries(conn: aiosqlite.Connection, now: float, limit: int) -> list[Run]:
    """``retry_wait`` runs whose backoff has passed, oldest first."""
    rows = await conn.execute_fetchall(
        "SELECT * FROM schedule_runs WHERE status = 'retry_wait' AND queued_at <= ? "
        "ORDER BY queued_at, id LIMIT ?",
        (now, limit),
    )
    return [run_record(dict(row)) for row in rows]


async def next_retry_at(conn: aiosqlite.Connection) -> float | None:
    """When the earliest planned retry falls due (``None``: none planned)."""
    row = await fetch_one(
        conn, "SELECT MIN(queued_at) AS at FROM schedule_runs WHERE status = 'retry_wait'"
    )
    return None if row is None or row["at"] is None else float(row["at"])


async def waiting_runs(conn: aiosqlite.Connection, limit: int) -> list[Run]:
    """Buffered (``waiting_dependency``) runs, oldest first."""
    rows = await conn.execute_fetchall(
        "SELECT * FROM schedule_runs WHERE status = 'waiting_dependency' "
        "ORDER BY created_at, rowid LIMIT ?",
        (limit,),
    )
    return [run_record(dict(row)) for row in rows]


@dataclass(frozen=True, slots=True)
class Lineage:
    """A run's status, chain depth and attempt (``None``: its first)."""

    status: str
    chain_depth: int
    attempt: int | None


async def retry_lineage(conn: aiosqlite.Connection, run_id: str) -> Lineage | None:
    """A run's status, chain depth and attempt, or ``None``."""
    row = await fetch_one(
        conn, "SELECT status, chain_depth, attempt FROM schedule_runs WHERE id = ?", (run_id,)
    )
    return None if row is None else Lineage(**row)


async def chain_statuses(conn: aiosqlite.Connection, parent_id: str | None) -> list[str]:
    """The statuses of a run's chain ancestors, from ``parent_id`` up, top-level first."""
    statuses: list[str] = []
    while parent_id is not None:
        row = await fetch_one(
            conn, "SELECT status, chain_parent_id FROM schedule_runs WHERE id = ?", (parent_id,)
        )
        if row is None:
            break
        statuses.append(str(row["status"]))
        parent_id = row["chain_parent_id"]
    statuses.reverse()
    return statuses


_ENDED = "('completed', 'failed', 'timed_out', 'cancelled', 'skipped')"


def store_run_log_sync(
    db: sqlite3.Connection,
    run_id: str,
    content: bytes,
    *,
    dropped: int,
    now: float,
) -> bool:
    """Store a finished run's log (PostgreSQL's ``run_logs``, with the run's node); ``False``
    when the run is gone, not finished, or its log is stored already."""
    cursor = db.execute(
        "INSERT INTO run_logs (run_id, content, bytes, dropped, node_id, stored_at) "
        "SELECT id, ?, ?, ?, node_id, ? FROM schedule_runs "
        f"WHERE id = ? AND status IN {_ENDED} "
        "ON CONFLICT (run_id) DO NOTHING",
        (content, len(content), dropped, now, run_id),
    )
    return int(cursor.rowcount) == 1


async def stored_run_log(conn: aiosqlite.Connection, run_id: str) -> bytes | None:
    """The stored log of a finished run (``None``: none stored)."""
    row = await fetch_one(conn, "SELECT content FROM run_logs WHERE run_id = ?", (run_id,))
    return None if row is None else bytes(row["content"])


def stored_run_logs_sync(db: sqlite3.Connection, run_ids: Sequence[str]) -> dict[str, bytes]:
    """The stored logs of those of ``run_ids`` that have one."""
    marks = ", ".join("?" for _ in run_ids)
    rows = db.execute(
        f"SELECT run_id, content FROM run_logs WHERE run_id IN ({marks})", tuple(run_ids)
    ).fetchall()
    return {str(row["run_id"]): bytes(row["content"]) for row in rows}


def unstored_runs_sync(db: sqlite3.Connection, run_ids: Sequence[str]) -> dict[str, bool]:
    """Of ``run_ids``, the runs with no stored log: whether each has ended."""
    marks = ", ".join("?" for _ in run_ids)
    rows = db.execute(
        f"SELECT id, status IN {_ENDED} AS ended FROM schedule_runs r WHERE id IN ({marks}) "
        "AND NOT EXISTS (SELECT 1 FROM run_logs l WHERE l.run_id = r.id)",
        tuple(run_ids),
    ).fetchall()
    return {str(row["id"]): bool(row["ended"]) for row in rows}
