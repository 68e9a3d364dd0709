"""Threshold metrics: one indexed query (or two) per metric, studio-wide.

Every metric is studio-wide (they are health alerts), measured over the last
``window_minutes`` unless it is a point-in-time figure. The alert schedule's own runs (and
their invocations and sessions) are left out of ``failed_runs``, ``failed_sessions`` and
``p95_latency_ms``, so an alert whose action fails or runs long cannot keep re-triggering
itself. Definitions:

- ``failed_runs``: schedule runs (scheduled, follow-up and ad-hoc) that ended ``failed`` or
  ``timed_out`` in the window.
- ``failed_sessions``: distinct failure causes among sessions ``failed``/``timed_out`` in the
  window (time = ended, else started, else created): one per (invocation, status), so a
  fan-out that fails in one way counts once; a session without an invocation counts alone.
- ``total_cost_usd``: the sum of session cost in the window (NULL counts 0); a breach also
  reports ``unreported_sessions`` (ended sessions with no cost) and ``spend_is_partial``.
- ``p95_latency_ms``: the 95th percentile (nearest rank) of ``ended_at - started_at`` of
  invocations started in the window and ended (not cancelled, not closed by a daemon-restart
  reconciliation, whose end time is not the child's); 0 with none.
- ``dead_letters``: outbox rows that became ``dead_letter`` in the window.
- ``pending_dispatch``: outbox rows now ``pending`` or ``delivering`` (point in time).
- ``github_poll_healthy_age_minutes``: minutes since the stalest github_poll schedule's last
  healthy poll (since its creation if it never had one); 0 with none. Point in time.
- ``github_poll_consecutive_401``: the highest ``poller_consecutive_401``; 0 with none.
  Point in time.

The github metrics look at enabled github_poll schedules and at those the poller disabled for
401s, so an auth failure keeps alerting until someone re-enables (or deletes) the schedule.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import aiosqlite

from studio_state import fetch_one, fetch_value

MetricResult = tuple[float, dict[str, Any]]
Measure = Callable[[aiosqlite.Connection, float, float, str], Awaitable[MetricResult]]

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
        "AND (r.schedule_id IS NULL OR r.schedule_id != ?))"
    ),
    "total_cost_usd": (
        "SELECT COALESCE(SUM(total_cost_usd), 0) AS cost, "
        "COALESCE(SUM(total_cost_usd IS NULL AND status != 'running'), 0) AS unreported "
        "FROM sessions WHERE COALESCE(ended_at, started_at, created_at) >= ?"
    ),
    "latency_rows": (
        "FROM invocations i LEFT JOIN schedule_runs r ON r.id = i.schedule_run_id "
        "WHERE i.started_at >= ? AND i.ended_at IS NOT NULL AND i.ended_at >= i.started_at "
        "AND i.status NOT IN ('running', 'cancelled') "
        "AND COALESCE(i.status_reason_code, '') != 'run.failed.daemon_restart' "
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
"""The statements (exposed for the query-plan test)."""


async def _count(conn: aiosqlite.Connection, sql: str, params: tuple[Any, ...]) -> float:
    return float(await fetch_value(conn, sql, params) or 0)


async def _failed_runs(
    conn: aiosqlite.Connection, now: float, start: float, own: str
) -> MetricResult:
    return await _count(conn, SQL["failed_runs"], (start, own)), {}


async def _failed_sessions(
    conn: aiosqlite.Connection, now: float, start: float, own: str
) -> MetricResult:
    return await _count(conn, SQL["failed_sessions"], (start, own)), {}


async def _total_cost(
    conn: aiosqlite.Connection, now: float, start: float, own: str
) -> MetricResult:
    row = await fetch_one(conn, SQL["total_cost_usd"], (start,))
    cost = float(row["cost"]) if row else 0.0
    unreported = int(row["unreported"]) if row else 0
    extras: dict[str, Any] = {"unreported_sessions": unreported}
    if unreported:
        extras["spend_is_partial"] = True
    return cost, extras


async def _p95(conn: aiosqlite.Connection, now: float, start: float, own: str) -> MetricResult:
    rows = SQL["latency_rows"]
    n = int(await fetch_value(conn, f"SELECT COUNT(*) {rows}", (start, own)) or 0)
    if n == 0:
        return 0.0, {"samples": 0}
    rank = math.ceil(0.95 * n) - 1
    value = await fetch_value(
        conn,
        f"SELECT (i.ended_at - i.started_at) * 1000.0 AS ms {rows} ORDER BY ms LIMIT 1 OFFSET ?",
        (start, own, rank),
    )
    return float(value or 0.0), {"samples": n}


async def _dead_letters(
    conn: aiosqlite.Connection, now: float, start: float, own: str
) -> MetricResult:
    return await _count(conn, SQL["dead_letters"], (start,)), {}


async def _pending_dispatch(
    conn: aiosqlite.Connection, now: float, start: float, own: str
) -> MetricResult:
    return await _count(conn, SQL["pending_dispatch"], ()), {}


async def _healthy_age(
    conn: aiosqlite.Connection, now: float, start: float, own: str
) -> MetricResult:
    row = await fetch_one(conn, SQL["github_poll_healthy_age_minutes"])
    if row is None or row["since"] is None:
        return 0.0, {}
    age = max(0.0, (now - float(row["since"])) / 60.0)
    return age, {"github_schedule_id": row["id"], "github_repo": row["github_repo"]}


async def _consecutive_401(
    conn: aiosqlite.Connection, now: float, start: float, own: str
) -> MetricResult:
    row = await fetch_one(conn, SQL["github_poll_consecutive_401"])
    if row is None:
        return 0.0, {}
    return float(row["n"] or 0), {
        "github_schedule_id": row["id"],
        "github_repo": row["github_repo"],
    }


MEASURES: dict[str, Measure] = {
    "failed_runs": _failed_runs,
    "failed_sessions": _failed_sessions,
    "total_cost_usd": _total_cost,
    "p95_latency_ms": _p95,
    "dead_letters": _dead_letters,
    "pending_dispatch": _pending_dispatch,
    "github_poll_healthy_age_minutes": _healthy_age,
    "github_poll_consecutive_401": _consecutive_401,
}


async def measure(
    conn: aiosqlite.Connection, metric: str, *, now: float, window_minutes: float, own: str
) -> MetricResult:
    """``(observed, extra context)`` of ``metric`` at ``now`` (``KeyError``: unknown metric).

    ``own`` is the evaluating schedule's id (left out of the run-derived metrics).
    """
    return await MEASURES[metric](conn, now, now - float(window_minutes) * 60.0, own)
