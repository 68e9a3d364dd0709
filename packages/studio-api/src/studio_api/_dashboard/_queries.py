"""Read-only queries of the overview and the runs list: each one indexed statement, no N+1.

Everything the pages change goes through the API (see ``_internal``); these only read, for
views the API has no route for (what is in flight, what fires next, what failed lately).
"""

from __future__ import annotations

from typing import Any

import aiosqlite

from studio_state import fetch_all, fetch_value

_RUN_COLUMNS = (
    "r.id, r.schedule_id, r.action_kind, r.status, r.exit_code, r.chain_depth, r.fired_at, "
    "r.ended_at, r.created_at, r.status_reason_code, r.status_reason_summary, s.name AS "
    "schedule_name"
)


async def schedule_zones(conn: aiosqlite.Connection) -> bool:
    """Whether ``schedules`` has a per-schedule ``timezone`` column (newer schemas)."""
    rows = await fetch_all(conn, "SELECT name FROM pragma_table_info('schedules')")
    return any(row["name"] == "timezone" for row in rows)


async def overview(conn: aiosqlite.Connection, *, zones: bool, limit: int = 10) -> dict[str, Any]:
    """In-flight runs, next fires, recent failures and the dispatch rows by status."""
    zone = "s.timezone" if zones else "NULL"
    in_flight = await fetch_all(
        conn,
        f"SELECT {_RUN_COLUMNS}, {zone} AS timezone FROM schedule_runs r "
        "LEFT JOIN schedules s ON s.id = r.schedule_id "
        "WHERE r.status = 'running' ORDER BY r.fired_at DESC LIMIT ?",
        (limit,),
    )
    next_fires = await fetch_all(
        conn,
        f"SELECT s.id, s.name, s.trigger_type, s.next_fire_at, {zone} AS timezone "
        "FROM schedules s WHERE s.enabled = 1 AND s.next_fire_at IS NOT NULL "
        "ORDER BY s.next_fire_at LIMIT ?",
        (limit,),
    )
    failures = await fetch_all(
        conn,
        f"SELECT {_RUN_COLUMNS}, {zone} AS timezone FROM schedule_runs r "
        "LEFT JOIN schedules s ON s.id = r.schedule_id "
        "WHERE r.status IN ('failed', 'timed_out') ORDER BY r.ended_at DESC LIMIT ?",
        (limit,),
    )
    by_status = await fetch_all(
        conn, "SELECT status, COUNT(*) AS n FROM dispatch_outbox GROUP BY status ORDER BY status"
    )
    counts = await fetch_all(
        conn, "SELECT enabled, COUNT(*) AS n FROM schedules GROUP BY enabled ORDER BY enabled"
    )
    enabled = {bool(row["enabled"]): int(row["n"]) for row in counts}
    return {
        "in_flight": in_flight,
        "next_fires": next_fires,
        "failures": failures,
        "dispatch_by_status": {row["status"]: int(row["n"]) for row in by_status},
        "schedules_enabled": enabled.get(True, 0),
        "schedules_disabled": enabled.get(False, 0),
    }


async def runs_page(
    conn: aiosqlite.Connection, *, status: str | None, zones: bool, limit: int, offset: int
) -> tuple[list[dict[str, Any]], int]:
    """One page of every run (scheduled, follow-up, ad-hoc), newest first, and the total."""
    zone = "s.timezone" if zones else "NULL"
    where, params = ("WHERE r.status = ?", [status]) if status else ("", [])
    rows = await fetch_all(
        conn,
        f"SELECT {_RUN_COLUMNS}, {zone} AS timezone FROM schedule_runs r "
        f"LEFT JOIN schedules s ON s.id = r.schedule_id {where} "
        "ORDER BY r.rowid DESC LIMIT ? OFFSET ?",
        [*params, limit, offset],
    )
    total = await fetch_value(conn, f"SELECT COUNT(*) FROM schedule_runs r {where}", params)
    return rows, int(total or 0)
