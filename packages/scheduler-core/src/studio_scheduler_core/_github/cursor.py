"""Reading and setting a github_poll schedule's cursor (skip or replay a backlog).

The cursor is the key of the newest event handled (``updated_at#number``). Setting it to an
earlier key, or clearing it (``None``), replays what the listing holds after it; setting it
later skips the events before it. The stored ETag goes with any change: it answered a listing
read against the old cursor, and a ``304`` would otherwise hide the replay.
"""

from __future__ import annotations

import aiosqlite

from studio_state import record_transition, write_transaction

from .._exceptions import ScheduleNotFound, ScheduleValidationError
from .._records.schedule import Schedule
from .._schedules.store import get_schedule, update_schedule
from .events import format_cursor, parse_cursor

CURSOR_SET = "schedule.updated.operator"
"""The reason code of the transition a cursor change writes (like any operator edit)."""


def normalize_cursor(value: object) -> str | None:
    """The stored form of a cursor input (``None``: reset); refusals name ``github_cursor``."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ScheduleValidationError(
            "github_cursor", "must be 'YYYY-MM-DDTHH:MM:SSZ[#number]' or null to reset"
        )
    try:
        key = parse_cursor(value.strip())
    except ValueError as exc:
        raise ScheduleValidationError("github_cursor", str(exc)) from None
    return None if key is None else format_cursor(key)


async def set_github_cursor(
    conn: aiosqlite.Connection,
    schedule_id: str,
    cursor: str | None,
    *,
    now: float,
    actor: str,
) -> Schedule:
    """Set (or with ``None`` clear) the cursor of a github_poll schedule, in one transaction
    with its ``schedule.updated.operator`` transition row; returns the schedule.

    :class:`ScheduleNotFound`; :class:`ScheduleValidationError` naming ``github_cursor`` for a
    malformed value or a schedule of another trigger type.
    """
    value = normalize_cursor(cursor)
    async with write_transaction(conn):
        schedule = await get_schedule(conn, schedule_id)
        if schedule is None:
            raise ScheduleNotFound(schedule_id)
        if schedule.trigger_type != "github_poll":
            raise ScheduleValidationError(
                "github_cursor",
                f"applies only to github_poll schedules, not {schedule.trigger_type!r}",
            )
        if schedule.github_cursor != value:
            await update_schedule(
                conn,
                schedule_id,
                {"github_cursor": value, "github_etag": None, "updated_at": now},
            )
            state = "enabled" if schedule.enabled else "disabled"
            await record_transition(
                conn,
                entity_type="schedule",
                entity_id=schedule_id,
                previous_status=state,
                status=state,
                reason_code=CURSOR_SET,
                reason_summary=f"github_cursor: {schedule.github_cursor} -> {value}",
                actor=actor,
                metadata={"fields": ["github_cursor"], "old": schedule.github_cursor, "new": value},
                now=now,
            )
        updated = await get_schedule(conn, schedule_id)
    assert updated is not None
    return updated
