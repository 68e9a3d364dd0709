"""The counters' store: the SQL that keeps the counters as runs fire and end, and the reads of
them behind the health verdicts and the stats (migrations 16 and 19 describe the tables).

Writes are upserts (``INSERT … ON CONFLICT … DO UPDATE``, the same text on SQLite and
PostgreSQL) on the writer's ``db`` handle, inside the transaction of the write they count.
Reads take the caller's asynchronous connection, except :func:`verdict_counts_sync`, which
runs on a metrics collector's synchronous one (rows as tuples or mappings).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, Final

import aiosqlite

from studio_state import fetch_all, run_sync

HISTOGRAM: Final = tuple(f"d{i}" for i in range(15))
"""The duration histogram's columns (``DURATION_BOUNDS`` gives their bounds)."""

WEEK_COLUMNS: Final = ("completed", "failed", "timed_out", *HISTOGRAM)
"""The day-row columns the 7-day figures sum; a health row keeps their sum over the 7 days
ending on its ``week_day`` as ``w_<column>``."""

_WEEK = ", ".join(f"w_{c}" for c in WEEK_COLUMNS)
_WEEK_SUMS = ", ".join(f"COALESCE(sum(c.{c}), 0)" for c in WEEK_COLUMNS)
_SET_WEEK = (
    f"UPDATE schedule_health SET week_day = ?, ({_WEEK}) = (SELECT {_WEEK_SUMS} "
    "FROM schedule_counters c WHERE c.schedule_id = schedule_health.schedule_id "
    "AND c.day_start >= ?) WHERE {where}"
)

# -- writes ---------------------------------------------------------------------------------

_ACTIVITY = """
INSERT INTO run_activity (hour_start, {col}) VALUES (?, 1)
ON CONFLICT (hour_start) DO UPDATE SET {col} = run_activity.{col} + 1
"""
_HEALTH_FIRE = """
INSERT INTO schedule_health (schedule_id, fires, last_fire_at) VALUES (?, 1, ?)
ON CONFLICT (schedule_id) DO UPDATE SET fires = schedule_health.fires + 1,
  last_fire_at = excluded.last_fire_at
"""
_COUNTERS = """
INSERT INTO schedule_counters (schedule_id, day_start, {cols}) VALUES (?, ?, {marks})
ON CONFLICT (schedule_id, day_start) DO UPDATE SET {sets}
"""
_HEALTH_SPEND = """
INSERT INTO schedule_health (schedule_id, ended, spend_usd, spend_tokens, spend_missing)
VALUES (?, 1, ?, ?, ?)
ON CONFLICT (schedule_id) DO UPDATE SET ended = schedule_health.ended + 1,
  spend_usd = schedule_health.spend_usd + excluded.spend_usd,
  spend_tokens = schedule_health.spend_tokens + excluded.spend_tokens,
  spend_missing = schedule_health.spend_missing + excluded.spend_missing
"""
_HEALTH_LAST = """
UPDATE schedule_health SET last_run_id = ?, last_status = ?, last_run_at = ?,
  consecutive_failures = consecutive_failures * ? + ?
WHERE schedule_id = ?
"""
_ACTION_SPEND = """
INSERT INTO action_spend (action, spend_usd, spend_tokens, runs, spend_missing)
VALUES (?, ?, ?, 1, ?)
ON CONFLICT (action) DO UPDATE SET spend_usd = action_spend.spend_usd + excluded.spend_usd,
  spend_tokens = action_spend.spend_tokens + excluded.spend_tokens,
  runs = action_spend.runs + 1,
  spend_missing = action_spend.spend_missing + excluded.spend_missing
"""
_RUN = (
    "SELECT schedule_id, chain_parent_id, invocation_id, fired_at, status, "
    "status_reason_code, exit_code, status_reason_summary, action_kind "
    "FROM schedule_runs WHERE id = ?"
)
_USAGE = (
    "SELECT count(*) AS n, COALESCE(sum(total_cost_usd), 0) AS usd, "
    "COALESCE(sum(COALESCE(input_tokens, 0) + COALESCE(output_tokens, 0)), 0) AS tokens "
    "FROM sessions WHERE invocation_id = ?"
)
_TARGET = (
    "SELECT action_kind, action_command, action_agent, action_playbook FROM schedules WHERE id = ?"
)


def count_activity_sync(db: sqlite3.Connection, column: str, hour_start: int) -> None:
    """Add one to ``column`` (``fires`` or an end status) of the hour ``hour_start``."""
    db.execute(_ACTIVITY.format(col=column), (hour_start,))


def add_day_counters_sync(
    db: sqlite3.Connection, schedule_id: str, day_start: int, adds: Mapping[str, float]
) -> None:
    """Add ``adds`` (column → amount) to the schedule's row of the day ``day_start``."""
    cols = ", ".join(adds)
    marks = ", ".join("?" * len(adds))
    sets = ", ".join(f"{c} = schedule_counters.{c} + excluded.{c}" for c in adds)
    db.execute(
        _COUNTERS.format(cols=cols, marks=marks, sets=sets),
        (schedule_id, day_start, *adds.values()),
    )


def count_health_fire_sync(db: sqlite3.Connection, schedule_id: str, now: float) -> None:
    """One more top-level fire of the schedule, at ``now``."""
    db.execute(_HEALTH_FIRE, (schedule_id, now))


def count_health_end_sync(
    db: sqlite3.Connection, schedule_id: str, usd: float, tokens: int, missing: int
) -> None:
    """One more ended run of the schedule, with the usage it reported (``missing``: 1 if none)."""
    db.execute(_HEALTH_SPEND, (schedule_id, usd, tokens, missing))


def set_last_run_sync(
    db: sqlite3.Connection,
    schedule_id: str,
    run_id: str,
    status: str,
    now: float,
    *,
    keep: int,
    add: int,
) -> None:
    """Make ``run_id`` the schedule's last ended top-level run; the failure streak becomes
    ``streak × keep + add``."""
    db.execute(_HEALTH_LAST, (run_id, status, now, keep, add, schedule_id))


def set_week_sync(db: sqlite3.Connection, schedule_id: str, day: int, since: int) -> None:
    """Make the schedule's 7-day sums those of its day rows from ``since`` on, as of ``day``
    (the day row just written is among them: the sums are exact on that day)."""
    db.execute(_SET_WEEK.format(where="schedule_id = ?"), (day, since, schedule_id))


def roll_weeks_sync(db: sqlite3.Connection, day: int, since: int) -> int:
    """Re-sum the 7-day figures of the health rows not yet as of ``day`` (a new day drops
    the oldest) that have some in the window from ``since``; return how many were rolled."""
    # a row of no ended run, or whose sums are all older than the window, reads as zeros
    where = "(week_day IS NULL AND ended > 0) OR (week_day <> ? AND week_day >= ?)"
    cursor = db.execute(_SET_WEEK.format(where=where), (day, since, day, since))
    return max(cursor.rowcount, 0)


def count_action_spend_sync(
    db: sqlite3.Connection, action: str, usd: float, tokens: int, missing: int
) -> None:
    """One more ended run of the action target ``action``, with the usage it reported."""
    db.execute(_ACTION_SPEND, (action, usd, tokens, missing))


def read_run_to_count_sync(db: sqlite3.Connection, run_id: str) -> Any:
    """The columns of run ``run_id`` its counting reads (``None``: no such run)."""
    return db.execute(_RUN, (run_id,)).fetchone()


def set_error_class_sync(db: sqlite3.Connection, run_id: str, error_class: str) -> None:
    """Store the ``error_class`` of a failed run."""
    db.execute("UPDATE schedule_runs SET error_class = ? WHERE id = ?", (error_class, run_id))


def read_usage_sync(db: sqlite3.Connection, invocation_id: str) -> tuple[int, float, int]:
    """``(sessions, usd, tokens)`` the invocation's sessions reported."""
    row = db.execute(_USAGE, (invocation_id,)).fetchone()
    return int(row["n"]), float(row["usd"]), int(row["tokens"])


def read_action_target_sync(db: sqlite3.Connection, schedule_id: str) -> Any:
    """The schedule's action kind and target columns (``None``: no such schedule)."""
    return db.execute(_TARGET, (schedule_id,)).fetchone()


# -- reads ----------------------------------------------------------------------------------

HEALTH_SCHEDULE_COLUMNS: Final = (
    "id, enabled, trigger_type, cron_expr, interval_sec, poll_interval_sec, timezone, "
    "CASE WHEN threshold_config IS NULL THEN 0 ELSE 1 END AS has_threshold, next_fire_at, "
    "last_fired_at, last_evaluated_at, last_healthy_poll_at, created_at, max_runs"
)
_SCHEDULES = f"SELECT {HEALTH_SCHEDULE_COLUMNS} FROM schedules WHERE id IN ({{marks}})"
_HEALTH_ROWS = (
    "SELECT schedule_id, last_run_id, last_status, last_run_at, consecutive_failures, fires, "
    f"last_fire_at, ended, spend_usd, spend_tokens, spend_missing, week_day, {_WEEK} "
    "FROM schedule_health WHERE schedule_id IN ({marks})"
)
_DAYS = (
    "SELECT schedule_id, sum(completed) AS completed, sum(failed) AS failed, "
    "sum(timed_out) AS timed_out, "
    + ", ".join(f"sum({c}) AS {c}" for c in HISTOGRAM)
    + " FROM schedule_counters WHERE schedule_id IN ({marks}) AND day_start >= ? "
    "GROUP BY schedule_id"
)


async def read_health_inputs(
    conn: aiosqlite.Connection, schedule_ids: Sequence[str]
) -> tuple[Sequence[Mapping[str, Any]], dict[str, Mapping[str, Any]]]:
    """For the schedules ``schedule_ids`` (at most a few hundred): their schedule rows and
    their health rows (with the 7-day sums as of ``week_day``), by id."""
    marks = ", ".join("?" * len(schedule_ids))
    ids = list(schedule_ids)
    schedules = await fetch_all(conn, _SCHEDULES.format(marks=marks), ids)
    rows = await fetch_all(conn, _HEALTH_ROWS.format(marks=marks), ids)
    return schedules, {str(row["schedule_id"]): row for row in rows}


async def read_week_sums(
    conn: aiosqlite.Connection, schedule_ids: Sequence[str], since: int
) -> dict[str, Mapping[str, Any]]:
    """The day counters of ``schedule_ids`` summed from ``since`` on, by id (for the health
    rows whose 7-day sums are of an earlier day)."""
    if not schedule_ids:
        return {}
    marks = ", ".join("?" * len(schedule_ids))
    days = await fetch_all(conn, _DAYS.format(marks=marks), [*schedule_ids, since])
    return {str(row["schedule_id"]): row for row in days}


_CRONS = (
    "SELECT DISTINCT cron_expr, COALESCE(NULLIF(timezone, ''), 'UTC') AS zone FROM schedules "
    "WHERE trigger_type = 'cron' AND enabled = 1 AND cron_expr IS NOT NULL AND cron_expr <> ''"
)
# Every schedule's verdict decided in SQL and counted per verdict: the same rule as
# ``_observe.health`` (which documents it), each cron's typical gap bound from Python.
# The gaps arrive as one JSON array of ``[expr, zone, gap]`` triples (a single bound value,
# however many distinct crons there are: one value per pair would reach SQLite's limit on
# bound variables near 11,000 pairs).
_GAPS_SQLITE = (
    "SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), "
    "CAST(json_extract(value, '$[2]') AS DOUBLE PRECISION) FROM json_each(?)"
)
_GAPS_POSTGRES = (
    "SELECT e->>0, e->>1, CAST(e->>2 AS DOUBLE PRECISION) "
    "FROM jsonb_array_elements(CAST(? AS jsonb)) AS e"
)
_VERDICTS = """
WITH gaps(expr, zone, gap) AS ({gaps}),
sched AS (
  SELECT s.enabled, s.last_fired_at AS sf, h.fires, h.last_status,
    {greatest}(COALESCE(h.last_fire_at, -1), COALESCE(s.last_fired_at, -1),
      CASE WHEN s.trigger_type = 'github_poll' THEN COALESCE(s.last_healthy_poll_at, -1)
        ELSE -1 END,
      CASE WHEN s.trigger_type = 'github_poll' OR s.threshold_config IS NOT NULL
        THEN COALESCE(s.last_evaluated_at, -1) ELSE -1 END) AS stamp,
    s.created_at,
    CASE
      WHEN s.trigger_type = 'interval' AND s.interval_sec <> 0
        THEN CAST(s.interval_sec AS DOUBLE PRECISION)
      WHEN s.trigger_type = 'cron' THEN g.gap
      WHEN s.trigger_type = 'github_poll'
        THEN CAST(COALESCE(NULLIF(s.poll_interval_sec, 0), 60) AS DOUBLE PRECISION)
    END AS cadence
  FROM schedules s
  LEFT JOIN schedule_health h ON h.schedule_id = s.id
  LEFT JOIN gaps g ON s.trigger_type = 'cron' AND g.expr = s.cron_expr
    AND g.zone = COALESCE(NULLIF(s.timezone, ''), 'UTC')
)
SELECT CASE
  WHEN COALESCE(enabled, 0) = 0 THEN 'disabled'
  WHEN COALESCE(fires, 0) = 0 AND last_status IS NULL AND sf IS NULL THEN 'never_fired'
  WHEN last_status IN ({failed}) THEN 'failing'
  WHEN cadence IS NULL THEN 'healthy'
  WHEN ? - CASE WHEN stamp < 0 THEN created_at ELSE stamp END > 3 * cadence
    AND ? - CASE WHEN stamp < 0 THEN created_at ELSE stamp END > cadence + {grace}
    THEN 'overdue'
  ELSE 'healthy'
END AS verdict, count(*) AS n
FROM sched GROUP BY 1
"""
# (a silence longer than max(3 × cadence, cadence + grace) is longer than both)


def rows_of(db: Any, sql: str, params: Sequence[Any] = ()) -> Sequence[Mapping[str, Any]]:
    """Every row of ``sql`` on a synchronous connection, as mappings (tuples are named)."""
    cursor = db.execute(sql, tuple(params))
    names = [d[0] for d in cursor.description]
    return [
        row if isinstance(row, Mapping) else dict(zip(names, row, strict=True))
        for row in cursor.fetchall()
    ]


def verdicts_statement(
    gaps: Sequence[tuple[str, str, float | None]],
    now: float,
    *,
    grace: float,
    failed: Sequence[str],
    postgres: bool = False,
) -> tuple[str, list[Any]]:
    """The statement counting schedules per verdict at ``now`` (in PostgreSQL's dialect
    with ``postgres``), and its values; ``gaps``
    are ``(cron_expr, zone, typical gap or None)`` of every enabled cron
    (:func:`crons_sync` lists the pairs)."""
    sql = _VERDICTS.format(
        gaps=_GAPS_POSTGRES if postgres else _GAPS_SQLITE,
        grace=float(grace),
        failed=", ".join(f"'{status}'" for status in failed),
        greatest="GREATEST" if postgres else "max",
    )
    return sql, [json.dumps([list(gap) for gap in gaps]), now, now]


def crons_sync(db: Any) -> list[tuple[str, str]]:
    """The distinct ``(cron_expr, zone)`` pairs of enabled cron schedules (synchronous)."""
    return [(str(r["cron_expr"]), str(r["zone"])) for r in rows_of(db, _CRONS)]


_ACTIVITY_ROWS = (
    "SELECT hour_start, fires, completed, failed, timed_out, cancelled FROM run_activity "
    "WHERE hour_start >= ? AND hour_start <= ?"
)


def read_activity_rows_sync(db: Any, first: int, last: int) -> list[tuple[int, ...]]:
    """The hour rows from ``first`` to ``last`` (epoch seconds, both included) as tuples
    ``(hour_start, fires, completed, failed, timed_out, cancelled)``: plain tuples, as a
    week's 168 rows cost most in building a mapping each."""
    cursor = db.cursor()
    cursor.row_factory = None
    try:
        cursor.execute(_ACTIVITY_ROWS, (first, last))
        return list(cursor.fetchall())
    finally:
        cursor.close()


async def read_activity_rows(
    conn: aiosqlite.Connection, first: int, last: int
) -> list[tuple[int, ...]]:
    """:func:`read_activity_rows_sync` in one trip to ``conn``'s thread."""
    return await run_sync(conn, lambda db: read_activity_rows_sync(db, first, last))


# each spend grouping's top rows (key, label, usd, tokens, runs, runs reporting no usage),
# read in the order of an index (``idx_schedule_health_spend``, partial: only schedules with
# an ended run; ``idx_action_spend_order``), and its totals (spenders, usd, tokens, runs,
# runs reporting none): by schedule the one row its triggers keep (migration 21), by action
# a sum over the few action targets
_SPEND_TOP: Final[dict[str, str]] = {
    "schedule": (
        "SELECT h.schedule_id, COALESCE(s.name, h.schedule_id), h.spend_usd, h.spend_tokens, "
        "h.ended, h.spend_missing "
        "FROM schedule_health h LEFT JOIN schedules s ON s.id = h.schedule_id "
        "WHERE h.ended > 0 ORDER BY h.spend_usd DESC, h.spend_tokens DESC, h.schedule_id "
        "LIMIT ?"
    ),
    "action": (
        "SELECT action, action, spend_usd, spend_tokens, runs, spend_missing "
        "FROM action_spend WHERE runs > 0 ORDER BY spend_usd DESC, spend_tokens DESC, action "
        "LIMIT ?"
    ),
}
_SPEND_TOTALS: Final[dict[str, str]] = {
    "schedule": (
        "SELECT spenders, spend_usd, spend_tokens, runs, spend_missing "
        "FROM schedule_spend_total WHERE id = 1"
    ),
    "action": (
        "SELECT count(*), COALESCE(sum(spend_usd), 0), COALESCE(sum(spend_tokens), 0), "
        "COALESCE(sum(runs), 0), COALESCE(sum(spend_missing), 0) FROM action_spend "
        "WHERE runs > 0"
    ),
}


def read_spend_rows_sync(
    db: Any, by: str, top: int
) -> tuple[list[tuple[Any, ...]], tuple[Any, ...]]:
    """The ``top`` largest spenders ``by`` ``schedule`` or ``action`` as tuples ``(key,
    label, spend_usd, spend_tokens, runs, spend_missing)``, and the totals over all of them
    ``(count, spend_usd, spend_tokens, runs, spend_missing)`` (zeros when nothing is kept)."""
    cursor = db.cursor()
    cursor.row_factory = None
    try:
        cursor.execute(_SPEND_TOP[by], (top,))
        rows = list(cursor.fetchall())
        cursor.execute(_SPEND_TOTALS[by])
        total = cursor.fetchone()
    finally:
        cursor.close()
    return rows, tuple(total) if total is not None else (0, 0.0, 0, 0, 0)


async def read_spend_rows(
    conn: aiosqlite.Connection, by: str, top: int
) -> tuple[list[tuple[Any, ...]], tuple[Any, ...]]:
    """:func:`read_spend_rows_sync` in one trip to ``conn``'s thread."""
    return await run_sync(conn, lambda db: read_spend_rows_sync(db, by, top))
