"""Shared schedule reads and writes used by the service, the gates and the engine."""

from __future__ import annotations

import logging
from typing import Any

import aiosqlite

from studio_state import fetch_all, fetch_one, fetch_value, record_transition, write_transaction

from .._exceptions import ScheduleValidationError
from .._notify import notify_schedule_disabled
from .._observe.events import emit
from .._policies.buffer import drop_buffered
from .._rows import TERMINAL_RUN_STATUSES, decode_run, decode_schedule
from .._schema import RUN_STATUSES

_TERMINAL_SQL = ", ".join(f"'{s}'" for s in TERMINAL_RUN_STATUSES)


async def load_schedule(conn: aiosqlite.Connection, schedule_id: str) -> dict[str, Any] | None:
    """The decoded schedule row, or ``None``."""
    row = await fetch_one(conn, "SELECT * FROM schedules WHERE id = ?", (schedule_id,))
    return None if row is None else decode_schedule(row)


async def page_runs(
    conn: aiosqlite.Connection,
    where: str,
    params: list[Any],
    *,
    order: str,
    status: str | None,
    limit: int,
    offset: int,
) -> tuple[list[dict[str, Any]], int]:
    """``(runs, total)`` of the ``schedule_runs`` matching ``where`` (fixed SQL from the caller,
    values bound), optionally of one ``status``, one page in ``order``."""
    if status is not None:
        if status not in RUN_STATUSES:
            raise ScheduleValidationError("status", f"must be one of {', '.join(RUN_STATUSES)}")
        where, params = f"{where} AND status = ?", [*params, status]
    total = await fetch_value(conn, f"SELECT COUNT(*) FROM schedule_runs WHERE {where}", params)
    rows = await fetch_all(
        conn,
        f"SELECT * FROM schedule_runs WHERE {where} ORDER BY {order} LIMIT ? OFFSET ?",
        [*params, max(0, int(limit)), max(0, int(offset))],
    )
    return [decode_run(r) for r in rows], int(total or 0)


async def fired_run_count(conn: aiosqlite.Connection, schedule_id: str) -> int:
    """Top-level runs of the schedule that fired and ended (chain children and skips excluded)."""
    value = await fetch_value(
        conn,
        "SELECT COUNT(*) FROM schedule_runs WHERE schedule_id = ? AND chain_depth = 0 "
        f"AND status IN ({_TERMINAL_SQL}) AND retry_of IS NULL",
        (schedule_id,),
    )
    return int(value or 0)


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
    actor: str = "scheduler",
    metadata: dict[str, Any] | None = None,
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
