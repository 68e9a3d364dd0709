"""Cadence: when a schedule is next due, for each trigger type, and fire-time previews."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any, TypedDict

import aiosqlite

from .._exceptions import ScheduleValidationError
from .._records.schedule import Schedule
from .._records.vocab import MAX_INTERVAL_SEC
from . import store
from .cron import CronError, check_expression, iso, next_after
from .once import parse_at

logger = logging.getLogger("studio_scheduler_core")

DEFAULT_POLL_INTERVAL_SEC = 300


class PreviewEntry(TypedDict):
    """One previewed fire time: the instant and its RFC 3339 forms in UTC and in the zone."""

    at: float
    utc: str
    local: str


def interval_next(due: float, interval: float, now: float) -> float:
    """The first slot ``due + k*interval`` (k >= 1) strictly after ``now``: no drift.

    Slots missed while busy are coalesced into the one returned.
    """
    if interval <= 0:
        raise ValueError(f"interval must be positive, got {interval!r}")
    k = max(1, math.floor((now - due) / interval) + 1)
    nxt = due + k * interval
    while nxt <= now:  # float rounding at the boundary
        k += 1
        nxt = due + k * interval
    return nxt


async def rearm(conn: aiosqlite.Connection, *, now: float, timezone: str) -> int:
    """Re-arm enabled cron rows under ``timezone`` (rows already due are left alone) and arm
    enabled rows with no ``next_fire_at``; returns how many rows moved.

    Run at engine start-up: the configured zone (or the zone database) may have changed since
    the values were written. Each update is guarded on the value read, so a concurrent change
    wins.
    """
    rows = await store.rows_to_rearm(conn, now)
    cache: dict[tuple[str, str], float | None] = {}
    moves: list[tuple[str, float | None, float]] = []
    for row in rows:
        zone = _zone(row.timezone, timezone)
        try:
            if row.trigger_type == "cron":
                key = (str(row.cron_expr), zone)
                if key not in cache:
                    cache[key] = next_after(key[0], key[1], now)
                value = cache[key]
            else:
                value = _first_fire(row.trigger_type, row.interval_sec, row.at, now=now)
        except (CronError, ValueError, TypeError):
            logger.warning("schedule %s: cannot compute its next fire time", row.id)
            continue
        old = row.next_fire_at
        if value is not None and (old is None or abs(float(old) - value) >= 1e-6):
            moves.append((row.id, old, value))
    await store.move_next_fire_times(conn, moves, now=now)
    return len(moves)


def poll_interval(schedule: Schedule) -> int:
    """A github_poll schedule's poll interval in seconds (default 300)."""
    value = schedule.poll_interval_sec
    return int(value) if value else DEFAULT_POLL_INTERVAL_SEC


def _zone(own: str | None, default: str) -> str:
    return str(own) if own else default


def schedule_zone(fields: Mapping[str, Any], default: str) -> str:
    """The zone a schedule's cron is evaluated in: its own ``timezone``, else ``default``
    (``fields``: a schedule's fields, as input or as its record's ``to_row()``)."""
    return _zone(fields.get("timezone"), default)


def first_fire_at(fields: Mapping[str, Any], *, now: float, timezone: str) -> float | None:
    """``next_fire_at`` of a schedule armed at ``now`` (creation, enable, trigger change);
    ``fields``: its fields, as the service validates them."""
    trigger = fields.get("trigger_type")
    if trigger == "cron":
        return next_after(str(fields["cron_expr"]), schedule_zone(fields, timezone), now)
    return _first_fire(trigger, fields.get("interval_sec"), fields.get("at"), now=now)


def _first_fire(
    trigger: str | None, interval_sec: int | None, at: str | None, *, now: float
) -> float | None:
    """``first_fire_at`` of a trigger other than cron."""
    if trigger == "interval":
        if interval_sec is None:
            raise TypeError("interval_sec is not set")
        return now + int(interval_sec)
    if trigger == "github_poll":
        return now
    if trigger == "at":
        return parse_at(str(at))
    return None


def advance(schedule: Schedule, *, due: float | None, now: float, timezone: str) -> float | None:
    """``next_fire_at`` after the occurrence due at ``due`` was handled at ``now``.

    Always strictly later than ``due`` (the occurrence guard relies on it) and than ``now``.
    """
    trigger = schedule.trigger_type
    ref = now if due is None else max(now, due)
    if trigger == "cron":
        zone = _zone(schedule.timezone, timezone)
        return next_after(str(schedule.cron_expr), zone, ref)
    if trigger == "interval":
        if schedule.interval_sec is None:
            raise TypeError("interval_sec is not set")
        return interval_next(now if due is None else due, int(schedule.interval_sec), ref)
    if trigger == "github_poll":
        return ref + poll_interval(schedule)
    return None


def _entry(at: float, timezone: str) -> PreviewEntry | None:
    """One preview entry, or ``None`` past the last representable date (year 9999)."""
    try:
        return PreviewEntry(at=at, utc=iso(at), local=iso(at, timezone))
    except (OverflowError, OSError, ValueError):
        return None


def preview_times(
    *,
    trigger_type: str,
    cron_expr: str | None = None,
    interval_sec: int | None = None,
    poll_interval_sec: int | None = None,
    timezone: str = "UTC",
    start: float,
    n: int = 5,
    first: float | None = None,
) -> list[PreviewEntry]:
    """The next ``n`` fire times after ``start`` (``first``: a known next instant to begin at)."""
    out: list[PreviewEntry] = []
    if n <= 0:
        return out
    if trigger_type == "cron":
        if cron_expr is None:
            raise ValueError("cron_expr is required for a cron preview")
        at = start
        for _ in range(n):
            at = next_after(cron_expr, timezone, at)
            entry = _entry(at, timezone)
            if entry is None:
                break
            out.append(entry)
        return out
    if trigger_type in ("interval", "github_poll"):
        step = interval_sec if trigger_type == "interval" else poll_interval_sec
        step = int(step or (DEFAULT_POLL_INTERVAL_SEC if trigger_type == "github_poll" else 0))
        if step <= 0:
            raise ValueError("interval_sec must be a positive integer for an interval preview")
        at = first if first is not None else start + step
        if at < start:
            at = interval_next(at, step, start)
        for _ in range(n):
            # A stored interval or next fire time may lie past year 9999 (a row written before
            # the bounds, or by hand): the preview ends there instead of raising.
            entry = _entry(at, timezone)
            if entry is None:
                break
            out.append(entry)
            at += step
        return out
    raise ValueError(f"unknown trigger_type {trigger_type!r}")


def preview_fire_times(
    *,
    trigger_type: str,
    cron_expr: str | None = None,
    interval_sec: int | None = None,
    timezone: str = "UTC",
    start: float,
    n: int = 5,
) -> list[PreviewEntry]:
    """The next ``n`` fire times after ``start``: ``[{"at", "utc", "local"}]``.

    For ``studio schedule preview --cron``. A bad expression or interval raises
    :class:`ScheduleValidationError` naming ``cron_expr`` / ``interval_sec``.
    """
    if trigger_type == "cron":
        try:
            check_expression(cron_expr or "")
            return preview_times(
                trigger_type="cron", cron_expr=cron_expr, timezone=timezone, start=start, n=n
            )
        except CronError as exc:
            raise ScheduleValidationError("cron_expr", str(exc)) from None
    if trigger_type == "interval":
        if (
            isinstance(interval_sec, bool)
            or not isinstance(interval_sec, int)
            or not 1 <= interval_sec <= MAX_INTERVAL_SEC
        ):
            raise ScheduleValidationError(
                "interval_sec", f"must be an integer between 1 and {MAX_INTERVAL_SEC}"
            )
        return preview_times(
            trigger_type="interval", interval_sec=interval_sec, timezone=timezone, start=start, n=n
        )
    raise ScheduleValidationError("trigger_type", "preview needs 'cron' or 'interval'")
