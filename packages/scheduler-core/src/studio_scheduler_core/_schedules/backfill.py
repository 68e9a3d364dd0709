"""Backfill: every occurrence of a cron or interval schedule in [start, end), run on purpose.

Each occurrence becomes a buffered run row (``waiting_dependency``, reason
``schedule.backfill.queued``, ``trigger_context.backfill = true`` and its ``due_at``), all in
one transaction; the engine starts them one at a time, oldest first, each through the gates
(budget, max_runs, the global slot) like any buffered occurrence. An occurrence that already
has a run (same ``due_at``) is not run again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import aiosqlite

from studio_state import Transition, lock_row, new_id, record_transitions, write_transaction

from .._exceptions import FireRefused, ScheduleValidationError
from .._records.vocab import ENGINE_ACTOR
from .._triggers.cadence import schedule_zone
from .._triggers.cron import next_after, zone
from . import store

MAX_BACKFILL = 1000
BACKFILL_QUEUED = "schedule.backfill.queued"
BACKFILL_DISABLED = "schedule.backfill.disabled"


def parse_instant(field: str, value: Any, timezone: str) -> float:
    """Epoch seconds, or ISO 8601 text (without an offset: in ``timezone``)."""
    if isinstance(value, bool):
        raise ScheduleValidationError(field, f"must be ISO 8601 or epoch seconds, got {value!r}")
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            try:
                parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            except ValueError:
                raise ScheduleValidationError(
                    field, f"must be ISO 8601 or epoch seconds, got {value!r}"
                ) from None
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=zone(timezone))
            number = parsed.timestamp()
    else:
        raise ScheduleValidationError(field, f"must be ISO 8601 or epoch seconds, got {value!r}")
    if not math.isfinite(number) or not 0 <= number < 253402300800:  # year 10000
        raise ScheduleValidationError(field, f"is out of range: {value!r}")
    return number


def occurrences(
    schedule: Mapping[str, Any], start: float, end: float, *, timezone: str
) -> list[float]:
    """Due times of the schedule in [start, end); refused past :data:`MAX_BACKFILL`."""
    out: list[float] = []
    trigger = schedule.get("trigger_type")
    if trigger == "cron":
        expr, tz = str(schedule["cron_expr"]), schedule_zone(schedule, timezone)
        at = next_after(expr, tz, start - 1e-3)
        while at < end:
            out.append(at)
            if len(out) > MAX_BACKFILL:
                break
            at = next_after(expr, tz, at)
    elif trigger == "interval":
        step = float(schedule["interval_sec"])
        anchor = float(schedule.get("next_fire_at") or schedule["created_at"])
        k = math.ceil((start - anchor) / step)
        count = max(0, math.ceil((end - anchor) / step) - k)
        if count > MAX_BACKFILL:
            out = [0.0] * (MAX_BACKFILL + 1)
        else:
            out = [anchor + (k + i) * step for i in range(count)]
            out = [t for t in out if start <= t < end]
    else:
        raise ScheduleValidationError("trigger_type", "backfill applies to cron and interval")
    if len(out) > MAX_BACKFILL:
        raise ScheduleValidationError(
            "end", f"the window holds more than {MAX_BACKFILL} occurrences; narrow it"
        )
    return out


async def backfill(
    conn: aiosqlite.Connection,
    schedule: Mapping[str, Any],
    start: Any,
    end: Any,
    *,
    now: float,
    timezone: str,
    actor: str | None = None,
) -> int:
    """Queue the schedule's occurrences in [start, end) (``start < end <= now``); returns how
    many runs were queued. :class:`FireRefused` (409) for a disabled schedule. ``actor``: the
    operator who asked (each queued run's transition row names them)."""
    tz = schedule_zone(schedule, timezone)
    first = parse_instant("start", start, tz)
    last = parse_instant("end", end, tz)
    if first >= last:
        raise ScheduleValidationError("start", "must be before end")
    if last > now:
        raise ScheduleValidationError("end", "must not be in the future")
    if not schedule.get("enabled"):
        raise FireRefused(BACKFILL_DISABLED, "the schedule is disabled; enable it first")
    due_times = occurrences(schedule, first, last, timezone=timezone)
    sid = str(schedule["id"])
    async with write_transaction(conn):
        # PostgreSQL: two backfills of one schedule are serialised, so the second sees the
        # occurrences the first queued (SQLite's write lock does this already).
        await lock_row(conn, "schedules", sid)
        done = await store.backfilled_due_times(conn, sid, first, last)
        queued = 0
        transitions: list[Transition] = []
        for due in due_times:
            if due in done:
                continue
            run_id = new_id()
            context = {"backfill": True, "due_at": due, "backfill_window": [first, last]}
            summary = "an occurrence of a backfill window, waiting its turn"
            await store.insert_run_row(
                conn,
                {
                    "id": run_id,
                    "schedule_id": sid,
                    "trigger_context": context,
                    "action_kind": schedule.get("action_kind"),
                    "action_args": [],
                    "status": "waiting_dependency",
                    "chain_depth": 0,
                    "fired_at": now,
                    "created_at": now,
                    "updated_at": now,
                    "status_reason_code": BACKFILL_QUEUED,
                    "status_reason_summary": summary,
                    "status_evidence_refs": [{"kind": "schedule", "id": sid}],
                    "queued_at": now,
                },
            )
            transitions.append(
                Transition(
                    entity_type="schedule_run",
                    entity_id=run_id,
                    status="waiting_dependency",
                    reason_code=BACKFILL_QUEUED,
                    reason_summary=summary,
                    evidence_refs=[{"kind": "schedule", "id": sid}],
                    actor=actor or ENGINE_ACTOR,
                    metadata={"due_at": due},
                    created_at=now,
                )
            )
            queued += 1
        await record_transitions(conn, transitions)
    return queued
