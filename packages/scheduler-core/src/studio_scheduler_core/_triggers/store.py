"""The SQL of the triggers: the threshold metrics' statements, the threshold gate's stamps on
the schedule row, and the start-up re-arming of ``next_fire_at``.

The metric functions in :mod:`.metrics` and the gate in :mod:`.threshold` hold no SQL; a second
backend implements these functions (every metric must stay an indexed read: the query-plan
test checks :data:`SQL` against SQLite's planner).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import aiosqlite

from studio_state import execute, fetch_all, fetch_one, fetch_value, write_transaction

from .._records.column import from_row
from .._records.vocab import TriggerType

_GITHUB_ROWS = (
    "FROM schedules WHERE trigger_type = 'github_poll' "
    "AND (enabled = 1 OR disabled_reason = 'schedule.disabled.github_auth')"
)

SQL: dict[str, str] = {
    "failed_runs": (
        "SELECT COUNT(*) FROM schedule_runs WHERE status IN ('failed', 'timed_out') "
        "AND ended_at >= ? AND (schedule_id IS NULL OR schedule_id != ?)"
    ),
    "failed_sessions": (
        "SELECT COUNT(*) FROM (SELECT DISTINCT COALESCE('i:' || s.invocation_id, 's:' || s.id), "
        "s.status FROM sessions s "
        "LEFT JOIN invocations i ON i.id = s.invocation_id "
        "LEFT JOIN schedule_runs r ON r.id = i.schedule_run_id "
        "WHERE s.status IN ('failed', 'timed_out') "
        "AND COALESCE(s.ended_at, s.started_at, s.created_at) >= ? "
        "AND (r.schedule_id IS NULL OR r.schedule_id != ?)) AS causes"
    ),
    "total_cost_usd": (
        "SELECT COALESCE(SUM(total_cost_usd), 0) AS cost, "
        "COALESCE(SUM(CASE WHEN total_cost_usd IS NULL AND status != 'running' THEN 1 ELSE 0 END), "
        "0) AS unreported "
        "FROM sessions WHERE COALESCE(ended_at, started_at, created_at) >= ?"
    ),
    "latency_rows": (
        "FROM invocations i LEFT JOIN schedule_runs r ON r.id = i.schedule_run_id "
        "WHERE i.started_at >= ? AND i.ended_at IS NOT NULL AND i.ended_at >= i.started_at "
        "AND i.status NOT IN ('running', 'cancelled') "
        "AND COALESCE(i.status_reason_code, '') "
        "NOT IN ('run.failed.daemon_restart', 'run.failed.node_lost') "
        "AND (r.schedule_id IS NULL OR r.schedule_id != ?)"
    ),
    "dead_letters": (
        "SELECT COUNT(*) FROM dispatch_outbox WHERE status = 'dead_letter' "
        "AND COALESCE(updated_at, created_at) >= ?"
    ),
    "pending_dispatch": (
        "SELECT COUNT(*) FROM dispatch_outbox WHERE status IN ('pending', 'delivering')"
    ),
    "github_poll_healthy_age_minutes": (
        "SELECT id, github_repo, COALESCE(last_healthy_poll_at, created_at) AS since "
        f"{_GITHUB_ROWS} ORDER BY since LIMIT 1"
    ),
    "github_poll_consecutive_401": (
        f"SELECT id, github_repo, poller_consecutive_401 AS n {_GITHUB_ROWS} "
        "ORDER BY poller_consecutive_401 DESC LIMIT 1"
    ),
}
"""The metric statements (exposed for the query-plan test)."""


async def count(conn: aiosqlite.Connection, metric: str, params: Sequence[Any] = ()) -> float:
    """The single number a counting metric's statement answers (0 when NULL)."""
    return float(await fetch_value(conn, SQL[metric], tuple(params)) or 0)


async def session_cost(conn: aiosqlite.Connection, start: float) -> tuple[float, int]:
    """``(cost, unreported)``: session cost since ``start`` and the ended sessions without one."""
    row = await fetch_one(conn, SQL["total_cost_usd"], (start,))
    if row is None:
        return 0.0, 0
    return float(row["cost"]), int(row["unreported"])


async def latency_samples(conn: aiosqlite.Connection, start: float, own: str) -> int:
    """How many invocations count towards the latency percentile."""
    rows = SQL["latency_rows"]
    return int(await fetch_value(conn, f"SELECT COUNT(*) {rows}", (start, own)) or 0)


async def latency_at_rank(conn: aiosqlite.Connection, start: float, own: str, rank: int) -> float:
    """The ``rank``-th (0-based, ascending) latency in milliseconds of those invocations."""
    rows = SQL["latency_rows"]
    value = await fetch_value(
        conn,
        f"SELECT (i.ended_at - i.started_at) * 1000.0 AS ms {rows} ORDER BY ms LIMIT 1 OFFSET ?",
        (start, own, rank),
    )
    return float(value or 0.0)


class GithubPoll(NamedTuple):
    """A watched github_poll schedule and the figure a metric reads of it."""

    id: str
    github_repo: str | None
    figure: float | None
    """Its last healthy poll (or creation) time, or its consecutive 401s."""


async def _github_poll(conn: aiosqlite.Connection, statement: str) -> GithubPoll | None:
    row = await fetch_one(conn, SQL[statement])
    if row is None:
        return None
    figure = row.get("since", row.get("n"))
    return GithubPoll(str(row["id"]), row["github_repo"], None if figure is None else float(figure))


async def stalest_github_poll(conn: aiosqlite.Connection) -> GithubPoll | None:
    """The watched github_poll schedule healthy longest ago (``figure``: since when)."""
    return await _github_poll(conn, "github_poll_healthy_age_minutes")


async def most_401_github_poll(conn: aiosqlite.Connection) -> GithubPoll | None:
    """The watched github_poll schedule with the most consecutive 401s (``figure``: how
    many)."""
    return await _github_poll(conn, "github_poll_consecutive_401")


async def stamp_evaluated(conn: aiosqlite.Connection, schedule_id: str, now: float) -> None:
    """Stamp ``last_evaluated_at`` in a transaction of its own."""
    async with write_transaction(conn):
        await execute(
            conn, "UPDATE schedules SET last_evaluated_at = ? WHERE id = ?", (now, schedule_id)
        )


async def last_alert_at(conn: aiosqlite.Connection, schedule_id: str) -> float | None:
    """The schedule's ``last_alert_at`` (``None``: never alerted, or the row is gone)."""
    value = await fetch_value(
        conn, "SELECT last_alert_at FROM schedules WHERE id = ?", (schedule_id,)
    )
    return None if value is None else float(value)


@dataclass(frozen=True, kw_only=True)
class Cadence:
    """What start-up re-arming reads of a schedule: its cadence columns and its due time (each
    field the ``Schedule`` field of the same name)."""

    id: str
    trigger_type: TriggerType
    cron_expr: str | None
    interval_sec: int | None
    at: str | None
    timezone: str | None
    next_fire_at: float | None


_CADENCE = ", ".join(f.name for f in fields(Cadence))


async def rows_to_rearm(conn: aiosqlite.Connection, now: float) -> list[Cadence]:
    """Enabled schedules with no ``next_fire_at``, and enabled cron schedules not yet due at
    ``now``."""
    rows = await fetch_all(
        conn,
        f"SELECT {_CADENCE} FROM schedules WHERE enabled = 1 AND (next_fire_at IS NULL OR "
        "(trigger_type = 'cron' AND next_fire_at > ?))",
        (now,),
    )
    return [from_row(Cadence, row) for row in rows]


async def move_next_fire_times(
    conn: aiosqlite.Connection, moves: Sequence[tuple[str, float | None, float]], *, now: float
) -> None:
    """Set each ``(id, old, new)`` row's ``next_fire_at`` to ``new`` in one transaction, each
    guarded on ``old`` still being the stored value (a concurrent change wins)."""
    if not moves:
        return
    async with write_transaction(conn):
        await conn.executemany(
            "UPDATE schedules SET next_fire_at = ?, updated_at = ? WHERE id = ? "
            "AND next_fire_at IS NOT DISTINCT FROM ?",
            [(new, now, sid, old) for sid, old, new in moves],
        )
