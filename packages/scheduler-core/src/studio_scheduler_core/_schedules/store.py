"""The schedules' storage: every SQL statement the schedule service runs, plus the shared
schedule/run reads and writes the gates and the engine use.

Policies (service, validation) call these functions and hold no SQL; a second backend
implements this module's functions (docs/architecture.md, "The storage seam").
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import aiosqlite

from studio_state import (
    backend_of,
    execute_many,
    fetch_all,
    fetch_one,
    fetch_value,
    record_transition,
    run_sync,
    violates,
    write_transaction,
)

from .._admission.store import adhoc_count
from .._exceptions import ScheduleNameTaken, ScheduleValidationError
from .._notify.service import notify_schedule_disabled
from .._observe.events import emit
from .._records.codec import (
    SCHEDULE_COLUMNS,
    dumps,
    run_record,
    schedule_record,
)
from .._records.run import Run
from .._records.schedule import Schedule
from .._records.terminal import StatusChange, apply
from .._records.vocab import ENGINE_ACTOR, RUN_STATUSES

RUN_PAGE_KEY = ("fired_at", "created_at", "id")
"""A schedule's runs page order (each descending): the run fields a keyset cursor carries."""

ADHOC_PAGE_KEY = ("queued_at", "id")
"""The ad-hoc runs page order (each descending): the run fields a keyset cursor carries."""

# The name's uniqueness constraint on PostgreSQL; on SQLite (which names none) the table's
# only unique constraint besides the primary key.
_NAME_CONSTRAINT = "schedules_name_key"


async def get_schedule(conn: aiosqlite.Connection, schedule_id: str) -> Schedule | None:
    """The :class:`Schedule` with this id, or ``None``."""
    row = await fetch_one(conn, "SELECT * FROM schedules WHERE id = ?", (schedule_id,))
    return None if row is None else schedule_record(row)


async def get_schedule_named(conn: aiosqlite.Connection, name: str) -> Schedule | None:
    """The :class:`Schedule` called ``name``, or ``None``."""
    row = await fetch_one(conn, "SELECT * FROM schedules WHERE name = ?", (name,))
    return None if row is None else schedule_record(row)


async def name_taken(
    conn: aiosqlite.Connection, name: str, *, other_than: str | None = None
) -> bool:
    """Whether a schedule (other than ``other_than``) is called ``name``."""
    if other_than is None:
        found = await fetch_value(conn, "SELECT id FROM schedules WHERE name = ?", (name,))
    else:
        found = await fetch_value(
            conn, "SELECT id FROM schedules WHERE name = ? AND id != ?", (name, other_than)
        )
    return found is not None


def _savepointed(db: sqlite3.Connection, sql: str, params: list[Any]) -> None:
    db.execute("SAVEPOINT studio_schedule_name")
    try:
        db.execute(sql, params)
    except sqlite3.IntegrityError:
        db.execute("ROLLBACK TO studio_schedule_name")
        db.execute("RELEASE studio_schedule_name")
        raise
    db.execute("RELEASE studio_schedule_name")


async def _name_guarded(conn: aiosqlite.Connection, sql: str, params: list[Any]) -> None:
    """``sql`` under a savepoint, in one hop to the connection's thread: a refused name
    leaves the transaction usable (PostgreSQL aborts a transaction at a failed statement,
    and reads of other tasks on the same connection would fail until it rolled back)."""
    await run_sync(conn, lambda db: _savepointed(db, sql, params))


async def insert_schedule(conn: aiosqlite.Connection, values: Mapping[str, Any]) -> None:
    """Insert a schedule from encoded column values (inside the caller's transaction).

    :class:`ScheduleNameTaken` when the name's uniqueness constraint refuses it.
    """
    columns = [c for c in SCHEDULE_COLUMNS if c in values]
    sql = f"INSERT INTO schedules ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    try:
        await _name_guarded(conn, sql, [values[c] for c in columns])
    except sqlite3.IntegrityError as exc:
        if violates(exc, "unique", _NAME_CONSTRAINT):
            raise ScheduleNameTaken(str(values.get("name"))) from None
        raise


async def insert_schedules(conn: aiosqlite.Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert many schedules from encoded column values, one statement batch per column set
    (inside the caller's transaction, which must roll back on a refusal): for an apply that
    checked its names under its locks, a refused name is a race it loses.

    :class:`ScheduleNameTaken` when the name's uniqueness constraint refuses one.
    """
    groups: dict[tuple[str, ...], list[list[Any]]] = {}
    for values in rows:
        columns = tuple(c for c in SCHEDULE_COLUMNS if c in values)
        groups.setdefault(columns, []).append([values[c] for c in columns])
    try:
        for columns, params in groups.items():
            marks = ", ".join("?" * len(columns))
            sql = f"INSERT INTO schedules ({', '.join(columns)}) VALUES ({marks})"
            await execute_many(conn, sql, params)
    except sqlite3.IntegrityError as exc:
        if violates(exc, "unique", _NAME_CONSTRAINT):
            raise ScheduleNameTaken("a name of the batch") from None
        raise


async def update_schedule(
    conn: aiosqlite.Connection, schedule_id: str, values: Mapping[str, Any]
) -> None:
    """Set encoded column ``values`` of one schedule (inside the caller's transaction).

    :class:`ScheduleNameTaken` when the name's uniqueness constraint refuses a new name.
    """
    sql = f"UPDATE schedules SET {', '.join(f'{c} = ?' for c in values)} WHERE id = ?"
    try:
        await _name_guarded(conn, sql, [*values.values(), schedule_id])
    except sqlite3.IntegrityError as exc:
        if "name" in values and violates(exc, "unique", _NAME_CONSTRAINT):
            raise ScheduleNameTaken(str(values["name"])) from None
        raise


async def delete_schedule(conn: aiosqlite.Connection, schedule_id: str) -> None:
    """Delete one schedule (its runs go with it; inside the caller's transaction)."""
    await conn.execute("DELETE FROM schedules WHERE id = ?", (schedule_id,))


async def page_schedules(
    conn: aiosqlite.Connection,
    *,
    enabled: bool | None,
    trigger_type: str | None,
    limit: int,
    offset: int,
) -> tuple[list[Schedule], int]:
    """``(schedules, total)`` ordered by creation, optionally filtered, one page."""
    where: list[str] = []
    params: list[Any] = []
    if enabled is not None:
        where.append("enabled = ?")
        params.append(1 if enabled else 0)
    if trigger_type is not None:
        where.append("trigger_type = ?")
        params.append(trigger_type)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    total = await fetch_value(conn, f"SELECT COUNT(*) FROM schedules{clause}", params)
    rows = await fetch_all(
        conn,
        f"SELECT * FROM schedules{clause} ORDER BY created_at, rowid LIMIT ? OFFSET ?",
        [*params, max(0, int(limit)), max(0, int(offset))],
    )
    return [schedule_record(r) for r in rows], int(total or 0)


async def running_run_ids(conn: aiosqlite.Connection, schedule_id: str) -> list[str]:
    """Ids of the schedule's runs (follow-ups included) that are ``running`` now."""
    rows = await fetch_all(
        conn,
        "SELECT id FROM schedule_runs WHERE schedule_id = ? AND status = 'running' "
        "ORDER BY fired_at",
        (schedule_id,),
    )
    return [str(row["id"]) for row in rows]


async def get_run(conn: aiosqlite.Connection, run_id: str) -> Run | None:
    """The :class:`Run` with this id, or ``None``."""
    row = await fetch_one(conn, "SELECT * FROM schedule_runs WHERE id = ?", (run_id,))
    return None if row is None else run_record(row)


async def chain_runs(conn: aiosqlite.Connection, run_id: str) -> list[Run]:
    """Every follow-up run below ``run_id`` (children, their children …), by depth."""
    rows = await fetch_all(
        conn,
        "WITH RECURSIVE chain(id) AS (SELECT id FROM schedule_runs WHERE chain_parent_id = ? "
        "UNION ALL SELECT r.id FROM schedule_runs r JOIN chain c ON r.chain_parent_id = c.id) "
        "SELECT * FROM schedule_runs WHERE id IN (SELECT id FROM chain) "
        "ORDER BY chain_depth, fired_at",
        (run_id,),
    )
    return [run_record(r) for r in rows]


async def page_runs(
    conn: aiosqlite.Connection,
    where: str,
    params: list[Any],
    *,
    key: tuple[str, ...],
    status: str | None,
    limit: int,
    offset: int,
    after: Sequence[Any] | None = None,
    counted: str | None = None,
    counted_adhoc: bool = False,
) -> tuple[list[Run], int]:
    """``(runs, total)`` of the ``schedule_runs`` matching ``where`` (fixed SQL from the caller,
    values bound), optionally of one ``status``, one page newest first by the columns ``key``
    (fixed SQL ending in a unique column; an index must hold them in this order). ``after``
    (the ``key`` values of the previous page's last row) seeks past that row instead of
    skipping ``offset`` rows, so a deep page costs what the first does. With ``counted`` (a
    schedule id, ``where`` selecting exactly that schedule's runs) the total is read from the
    trigger-kept ``schedule_run_counts``; with ``counted_adhoc`` (``where`` selecting exactly
    the ad-hoc runs) from the trigger-kept ``adhoc_run_counts``."""
    if status is not None:
        if status not in RUN_STATUSES:
            raise ScheduleValidationError("status", f"must be one of {', '.join(RUN_STATUSES)}")
        where, params = f"{where} AND status = ?", [*params, status]
    if counted is not None:
        total = await fetch_value(
            conn,
            "SELECT coalesce(sum(n), 0) FROM schedule_run_counts WHERE schedule_id = ?"
            + ("" if status is None else " AND status = ?"),
            [counted] if status is None else [counted, status],
        )
    elif counted_adhoc:
        total = await adhoc_count(conn, status)
    else:
        total = await fetch_value(conn, f"SELECT COUNT(*) FROM schedule_runs WHERE {where}", params)
    page_where, page_params = where, params
    if after is not None:
        if offset:
            raise ScheduleValidationError("cursor", "cannot be combined with a non-zero offset")
        if len(after) != len(key):
            raise ScheduleValidationError("cursor", "does not belong to this list")
        page_where = f"{where} AND ({', '.join(key)}) < ({', '.join('?' * len(key))})"
        page_params = [*params, *after]
    order = ", ".join(f"{column} DESC" for column in key)
    rows = await fetch_all(
        conn,
        f"SELECT * FROM schedule_runs WHERE {page_where} ORDER BY {order} LIMIT ? OFFSET ?",
        [*page_params, max(0, int(limit)), max(0, int(offset))],
    )
    return [run_record(r) for r in rows], int(total or 0)


async def set_enabled(
    conn: aiosqlite.Connection,
    schedule_id: str,
    *,
    enabled: bool,
    reason_code: str,
    now: float,
    reason_summary: str | None = None,
    disabled_reason: str | None = None,
    next_fire_at: float | None = None,
    actor: str = ENGINE_ACTOR,
    metadata: Mapping[str, object] | None = None,
) -> bool:
    """Enable or disable a schedule, guarded on its current state, with its transition row.

    Returns ``False`` (nothing written) when the schedule is missing or already in that state.
    """
    async with write_transaction(conn):
        if enabled:
            cursor = await conn.execute(
                "UPDATE schedules SET enabled = 1, disabled_reason = NULL, next_fire_at = ?, "
                "updated_at = ? WHERE id = ? AND enabled = 0",
                (next_fire_at, now, schedule_id),
            )
        else:
            cursor = await conn.execute(
                "UPDATE schedules SET enabled = 0, disabled_reason = ?, updated_at = ? "
                "WHERE id = ? AND enabled = 1",
                (disabled_reason or reason_code, now, schedule_id),
            )
        applied = cursor.rowcount == 1
        await cursor.close()
        if not applied:
            return False
        await record_transition(
            conn,
            entity_type="schedule",
            entity_id=schedule_id,
            previous_status="disabled" if enabled else "enabled",
            status="enabled" if enabled else "disabled",
            reason_code=reason_code,
            reason_summary=reason_summary,
            actor=actor,
            metadata=metadata,
            now=now,
        )
        if not enabled:
            await drop_buffered(conn, schedule_id, now=now)
            await notify_schedule_disabled(
                conn, schedule_id, reason_code=reason_code, reason_summary=reason_summary, now=now
            )
    if not enabled:
        emit(
            "disable",
            f"schedule {schedule_id} disabled [{reason_code}]"
            + (f": {reason_summary}" if reason_summary else ""),
            level=logging.WARNING,
            schedule_id=schedule_id,
            reason_code=reason_code,
            actor=actor,
        )
    return True


DROPPED_DISABLED = "schedule.skipped.disabled"
"""A buffered occurrence skipped because its schedule was disabled."""

INSERTED_JSON_COLUMNS = frozenset({"trigger_context", "action_args", "status_evidence_refs"})
"""The run columns :func:`insert_run_row` and the fire path's row writes encode as JSON (the
others arrive already encoded, copied from a stored row)."""


# Run rows the schedule owns before they fire: buffered and backfilled occurrences, planned
# retries.


async def insert_run_row(conn: aiosqlite.Connection, run: Mapping[str, Any]) -> None:
    """Insert a ``schedule_runs`` row with exactly the given columns (JSON ones encoded)."""
    values = {k: dumps(v) if k in INSERTED_JSON_COLUMNS else v for k, v in run.items()}
    await conn.execute(
        f"INSERT INTO schedule_runs ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
        tuple(values.values()),
    )


async def buffered_ids(conn: aiosqlite.Connection, schedule_id: str) -> list[str]:
    """The ids of the schedule's buffered (``waiting_dependency``) runs."""
    rows = await conn.execute_fetchall(
        "SELECT id FROM schedule_runs WHERE schedule_id = ? AND status = 'waiting_dependency'",
        (schedule_id,),
    )
    return [str(row["id"]) for row in rows]


async def backfilled_due_times(
    conn: aiosqlite.Connection, schedule_id: str, first: float, last: float
) -> set[float]:
    """The due times in [first, last) the schedule already has a (not skipped) run for."""
    # JSON paths differ: SQLite's json_extract, PostgreSQL's ->> on the text cast to json.
    due = (
        "(trigger_context::json ->> 'due_at')::double precision"
        if backend_of(conn) == "postgresql"
        else "json_extract(trigger_context, '$.due_at')"
    )
    rows = await conn.execute_fetchall(
        f"SELECT {due} AS due FROM schedule_runs WHERE schedule_id = ? AND {due} >= ? "
        f"AND {due} < ? AND status != 'skipped'",
        (schedule_id, first, last),
    )
    return {float(row["due"]) for row in rows if row["due"] is not None}


async def drop_buffered(conn: aiosqlite.Connection, schedule_id: str, *, now: float) -> int:
    """Skip every buffered occurrence of a schedule being disabled (in the caller's
    transaction): ``schedule.skipped.disabled``. Returns how many were dropped."""
    run_ids = await buffered_ids(conn, schedule_id)
    changes = [
        StatusChange(
            "schedule_runs",
            run_id,
            "skipped",
            DROPPED_DISABLED,
            "the schedule was disabled while this occurrence waited in its buffer",
            ENGINE_ACTOR,
            now,
            previous="waiting_dependency",
            sets={"ended_at": now},
        )
        for run_id in run_ids
    ]
    return sum(await apply(conn, changes)) if changes else 0
