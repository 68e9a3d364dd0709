"""The SQL of notifications: the terminal run with its schedule's name and ``notify``, the
questions "is a retry planned" and "did the series recover", and the disable transition.

All of these run inside the caller's open transaction (the terminal write's, or the disable's),
so the notification sees exactly what that transaction wrote. A second backend implements
these reads; the enqueue itself is the outbox's.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import aiosqlite

from studio_state import fetch_one, fetch_value

from .._records.codec import run_record
from .._records.run import Run


class RunToNotify(NamedTuple):
    """A run with its schedule's ``name`` and stored ``notify`` (``None``: no schedule)."""

    run: Run
    schedule_name: str | None
    schedule_notify: Any
    """The schedule's ``notify`` column as stored (JSON text)."""


class ScheduleNotify(NamedTuple):
    """A schedule's ``name`` and stored ``notify`` (JSON text, or ``None``)."""

    name: str
    notify: Any


async def run_with_schedule(conn: aiosqlite.Connection, run_id: str) -> RunToNotify | None:
    """The run with its schedule's name and ``notify``, or ``None`` (no such run)."""
    row = await fetch_one(
        conn,
        "SELECT r.*, s.name AS _schedule_name, s.notify AS _schedule_notify "
        "FROM schedule_runs r LEFT JOIN schedules s ON s.id = r.schedule_id WHERE r.id = ?",
        (run_id,),
    )
    if row is None:
        return None
    return RunToNotify(run_record(row), row["_schedule_name"], row["_schedule_notify"])


async def retry_planned(conn: aiosqlite.Connection, run_id: str) -> bool:
    """Whether a later attempt of the run exists (a row whose ``retry_of`` is the run)."""
    found = await fetch_value(conn, "SELECT 1 FROM schedule_runs WHERE retry_of = ?", (run_id,))
    return found is not None


async def previous_series_status(
    conn: aiosqlite.Connection, schedule_id: str, run_id: str
) -> str | None:
    """The status of the schedule's latest ended top-level run other than ``run_id`` whose
    series had ended (no retry planned after it), or ``None``."""
    value = await fetch_value(
        conn,
        "SELECT status FROM schedule_runs r WHERE schedule_id = ? AND chain_depth = 0 "
        "AND id != ? AND status IN ('completed', 'failed', 'timed_out') "
        "AND ended_at IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM schedule_runs n WHERE n.retry_of = r.id) "
        "ORDER BY ended_at DESC, rowid DESC LIMIT 1",
        (schedule_id, run_id),
    )
    return None if value is None else str(value)


async def schedule_notify(conn: aiosqlite.Connection, schedule_id: str) -> ScheduleNotify | None:
    """The schedule's ``name`` and stored ``notify`` (``None``: no such schedule)."""
    row = await fetch_one(conn, "SELECT name, notify FROM schedules WHERE id = ?", (schedule_id,))
    return None if row is None else ScheduleNotify(str(row["name"]), row["notify"])


async def latest_disable_transition(conn: aiosqlite.Connection, schedule_id: str) -> Any:
    """The id of the schedule's latest ``disabled`` transition row (``None``: none)."""
    return await fetch_value(
        conn,
        "SELECT id FROM status_transitions WHERE entity_type = 'schedule' AND entity_id = ? "
        "AND status = 'disabled' ORDER BY created_at DESC, rowid DESC LIMIT 1",
        (schedule_id,),
    )
