"""A due schedule's jitter wait, and the read-only view of a schedule's fields that the
helpers reading a mapping of them take (jitter, catch-up, the coalescing event)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import aiosqlite

from .._records.due import DueSchedule
from .._records.schedule import Schedule
from .._schedules.jitter import jitter_delay
from . import store


def fields_view(schedule: Schedule) -> Mapping[str, Any]:
    """The schedule's fields as a read-only mapping: a view of the record, not a copy (the
    fire path hands one to the coalescing event of every fire)."""
    return MappingProxyType(vars(schedule))


async def jitter_until(
    conn: aiosqlite.Connection, due: DueSchedule, now: float, *, timezone: str
) -> float | None:
    """When the jittered start of a due schedule (one with ``jitter_sec``) is still ahead:
    that instant; else ``None`` (it may fire now)."""
    schedule = await store.read_schedule(conn, due.id)
    if schedule is None:
        return None
    start = due.next_fire_at + jitter_delay(
        fields_view(schedule), due.next_fire_at, timezone=timezone
    )
    return start if start > now else None
