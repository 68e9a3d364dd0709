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

from . import store
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


def _upsert_counters(
    db: sqlite3.Connection, schedule_id: str, now: float, adds: dict[str, float]
) -> None:
    store.add_day_counters_sync(db, schedule_id, int(now // DAY_SECONDS * DAY_SECONDS), adds)


def _activity(db: sqlite3.Connection, column: str, now: float) -> None:
    store.count_activity_sync(db, column, int(now // HOUR_SECONDS * HOUR_SECONDS))


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
        store.count_health_fire_sync(db, schedule_id, now)


@dataclass(frozen=True, slots=True)
class _Usage:
    reported: bool
    usd: float
    tokens: int


def _usage(db: sqlite3.Connection, invocation_id: str | None) -> _Usage:
    if invocation_id is None:
        return _Usage(False, 0.0, 0)
    sessions, usd, tokens = store.read_usage_sync(db, invocation_id)
    return _Usage(sessions > 0, usd, tokens)


def _action_key(db: sqlite3.Connection, schedule_id: str | None, run_kind: str) -> str:
    if schedule_id is None:
        return f"{run_kind}:adhoc"
    row = store.read_action_target_sync(db, schedule_id)
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
    row = store.read_run_to_count_sync(db, run_id)
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
        store.set_error_class_sync(db, run_id, error_class)
    _activity(db, status, now)
    usage = _usage(db, row["invocation_id"])
    missing = 0 if usage.reported else 1
    store.count_action_spend_sync(
        db, _action_key(db, schedule_id, kind), usage.usd, usage.tokens, missing
    )
    if schedule_id is None:
        return
    duration = max(0.0, now - float(fired_at)) if fired_at is not None else 0.0
    adds: dict[str, float] = {status: 1, "duration_sum": duration, "duration_count": 1}
    adds[f"d{duration_column(duration)}"] = 1
    _upsert_counters(db, schedule_id, now, adds)
    day = int(now // DAY_SECONDS * DAY_SECONDS)
    store.set_week_sync(db, schedule_id, day, day - 6 * DAY_SECONDS)
    store.count_health_end_sync(db, schedule_id, usage.usd, usage.tokens, missing)
    if parent is None:
        # a failure adds one to the streak, a completion ends it, a cancel leaves it
        keep, add = (0, 0) if status == "completed" else (1, int(status in FAILED_STATUSES))
        store.set_last_run_sync(db, schedule_id, run_id, status, now, keep=keep, add=add)
