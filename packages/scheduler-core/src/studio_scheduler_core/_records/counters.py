"""Counters kept as runs fire and end, written in the transaction of the write they count.

A fire's commit calls :func:`count_fire_sync`; a run's terminal write (:func:`~._records.
terminal.apply_sync`, and a fire refused at setup, written ended) calls
:func:`count_end_sync`. Both are upserts (``INSERT … ON CONFLICT … DO UPDATE``, the same text on
SQLite and PostgreSQL), so concurrent writers add rather than overwrite. The health verdicts
and the stats read these rows, never the runs (migration 16 describes the tables).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Final

from .vocab import DAY_SECONDS, FIRED_END_STATUSES

HOUR_SECONDS: Final = 3600

DURATION_BOUNDS: Final[tuple[float, ...]] = (
    1,
    2,
    5,
    10,
    30,
    60,
    120,
    300,
    600,
    1800,
    3600,
    7200,
    21600,
    86400,
    604800,
)
"""The duration histogram's upper bounds in seconds: ``d<i>`` counts the runs that lasted at
most ``DURATION_BOUNDS[i]`` (and more than the bound before); the last column also takes
longer runs."""

FAILED_STATUSES: Final = ("failed", "timed_out")

_SIGNAL_EXITS: Final = frozenset({128 + 9, 128 + 15, 128 + 2, 128 + 1})


def duration_column(seconds: float) -> int:
    """The histogram column (index into :data:`DURATION_BOUNDS`) of a duration."""
    for index, bound in enumerate(DURATION_BOUNDS):
        if seconds <= bound:
            return index
    return len(DURATION_BOUNDS) - 1


def classify_error(
    status: str, reason_code: str | None, exit_code: int | None, detail: str | None
) -> str | None:
    """The ``error_class`` of a run that ended ``status`` (``None`` unless failed/timed out),
    decided from its reason code, exit status and spawn error text."""
    if status not in FAILED_STATUSES:
        return None
    reason = reason_code or ""
    text = (detail or "").lower()
    if status == "timed_out" or reason.startswith("run.timed_out"):
        return "timeout"
    if reason in (
        "run.failed.node_lost",
        "run.failed.daemon_restart",
        "run.failed.lease_exhausted",
    ):
        return "node_lost"
    if reason == "run.failed.missing_cwd":
        return "not_found"
    if reason in ("run.failed.spawn_error", "run.failed.invalid_action"):
        if "permission" in text or "eacces" in text:
            return "permission"
        if "no such file" in text or "not found" in text or "enoent" in text:
            return "not_found"
        return "spawn_failed"
    if reason == "run.failed.exit_nonzero" and exit_code is not None:
        if exit_code < 0 or exit_code in _SIGNAL_EXITS:
            return "killed"
        if exit_code == 126:
            return "permission"
        if exit_code == 127:
            return "not_found"
        return "nonzero_exit"
    return "unclassified"


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


def _upsert_counters(
    db: sqlite3.Connection, schedule_id: str, now: float, adds: dict[str, float]
) -> None:
    cols = ", ".join(adds)
    marks = ", ".join("?" * len(adds))
    sets = ", ".join(f"{c} = schedule_counters.{c} + excluded.{c}" for c in adds)
    day = int(now // DAY_SECONDS * DAY_SECONDS)
    db.execute(
        _COUNTERS.format(cols=cols, marks=marks, sets=sets), (schedule_id, day, *adds.values())
    )


def _activity(db: sqlite3.Connection, column: str, now: float) -> None:
    hour = int(now // HOUR_SECONDS * HOUR_SECONDS)
    db.execute(_ACTIVITY.format(col=column), (hour,))


def count_fire_sync(
    db: sqlite3.Connection, schedule_id: str | None, now: float, *, top_level: bool = True
) -> None:
    """Count one committed fire of ``schedule_id`` (``None``: not a schedule's) at ``now``.

    Only a ``top_level`` fire (not a follow-up, not a retry) counts in the schedule's health
    row: that count is what ``max_runs`` limits.
    """
    _activity(db, "fires", now)
    if schedule_id is None:
        return
    _upsert_counters(db, schedule_id, now, {"fires": 1})
    if top_level:
        db.execute(_HEALTH_FIRE, (schedule_id, now))


@dataclass(frozen=True, slots=True)
class _Usage:
    reported: bool
    usd: float
    tokens: int


def _usage(db: sqlite3.Connection, invocation_id: str | None) -> _Usage:
    if invocation_id is None:
        return _Usage(False, 0.0, 0)
    row = db.execute(_USAGE, (invocation_id,)).fetchone()
    return _Usage(int(row["n"]) > 0, float(row["usd"]), int(row["tokens"]))


def _action_key(db: sqlite3.Connection, schedule_id: str | None, run_kind: str) -> str:
    if schedule_id is None:
        return f"{run_kind}:adhoc"
    row = db.execute(_TARGET, (schedule_id,)).fetchone()
    if row is None:
        return run_kind
    kind = row["action_kind"]
    target = {
        "command": row["action_command"],
        "agent": row["action_agent"],
        "play": row["action_playbook"],
    }.get(kind)
    return f"{kind}:{target}" if target else str(kind)


def count_end_sync(db: sqlite3.Connection, run_id: str, now: float) -> None:
    """Count the end of run ``run_id`` (just written terminal at ``now``): its error class,
    the hour's activity, its schedule's day counters, health row and the spend it reported."""
    row = db.execute(_RUN, (run_id,)).fetchone()
    if row is None:
        return
    schedule_id, parent, fired_at = row["schedule_id"], row["chain_parent_id"], row["fired_at"]
    status, kind = str(row["status"]), str(row["action_kind"])
    if status not in FIRED_END_STATUSES:
        return
    error_class = classify_error(
        status, row["status_reason_code"], row["exit_code"], row["status_reason_summary"]
    )
    if error_class is not None:
        db.execute("UPDATE schedule_runs SET error_class = ? WHERE id = ?", (error_class, run_id))
    _activity(db, status, now)
    usage = _usage(db, row["invocation_id"])
    missing = 0 if usage.reported else 1
    db.execute(
        _ACTION_SPEND,
        (_action_key(db, schedule_id, kind), usage.usd, usage.tokens, missing),
    )
    if schedule_id is None:
        return
    duration = max(0.0, now - float(fired_at)) if fired_at is not None else 0.0
    adds: dict[str, float] = {status: 1, "duration_sum": duration, "duration_count": 1}
    adds[f"d{duration_column(duration)}"] = 1
    _upsert_counters(db, schedule_id, now, adds)
    db.execute(_HEALTH_SPEND, (schedule_id, usage.usd, usage.tokens, missing))
    if parent is None:
        # a failure adds one to the streak, a completion ends it, a cancel leaves it
        keep, add = (0, 0) if status == "completed" else (1, int(status in FAILED_STATUSES))
        db.execute(_HEALTH_LAST, (run_id, status, now, keep, add, schedule_id))
