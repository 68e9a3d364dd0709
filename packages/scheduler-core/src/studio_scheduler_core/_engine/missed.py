"""The startup missed-fire pass of the :class:`~studio_scheduler_core._engine.evaluation.
Evaluator`: each due row's ``missed_fire_policy`` applied once (skip, or run_once), before the
first evaluation pass."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .._fire.occurrence import skipped_run, write_skip
from .._records.schedule import Schedule
from .._schedules.jitter import catchup_expired, jitter_delay
from ..abc import Occurrence, TriggerSource
from . import store
from .jitter import fields_view

if TYPE_CHECKING:
    from .evaluation import Evaluator

logger = logging.getLogger("studio_scheduler_core")

BATCH = 1000
MISSED_FIRE = "schedule.skipped.missed_fire"


async def missed_pass(ev: Evaluator, now: float) -> dict[str, int]:
    """Startup: apply each due row's missed_fire_policy once (skip, or run_once)."""
    counts: dict[str, int] = {}
    cursor: tuple[float, str] | None = None
    while True:
        rows = await ev.due_rows(now, cursor, BATCH)
        if not rows:
            break
        cursor = (rows[-1].next_fire_at, rows[-1].id)
        for row in rows:
            source = ev.source_for(row.trigger_type)
            if source is None or not source.missed_fire_applies:
                continue
            try:
                schedule = await store.read_schedule(ev.conn, row.id)
                if schedule is None:
                    continue
                outcome = await _missed(ev, source, schedule, now)
            except Exception:
                logger.exception("missed-fire handling of schedule %s failed", row.id)
                outcome = "error"
            counts[outcome] = counts.get(outcome, 0) + 1
        if len(rows) < BATCH:
            break
    await ev.flush_records(now)
    return counts


async def _missed(ev: Evaluator, source: TriggerSource, schedule: Schedule, now: float) -> str:
    due = schedule.next_fire_at
    fields = fields_view(schedule)
    if due is not None and due + jitter_delay(fields, due, timezone=ev.timezone) > now:
        return "pending"  # not missed: its jittered start is still ahead
    expired = catchup_expired(fields, due, now)
    if schedule.missed_fire_policy == "run_once" and not expired:
        context = {"missed_recovery": True, "missed_fire_at": due, "fired_at": now}
        occ = Occurrence(schedule=schedule, due_at=due, trigger_context=context)
        return await ev.handle(source, occ, now, kind="missed_fire")
    occ = Occurrence(schedule=schedule, due_at=due, trigger_context={})
    if schedule.threshold_config:
        # A threshold row's occurrence is a check, not a run: a missed check leaves no
        # skipped row (reference D9); the next occurrence measures again.
        claim = ev.schedule_claim(source, occ, now, advance=True)
        won = await write_skip(ev.conn, claim=claim, run=None, transitions=(), now=now)
        return "advance" if won else "lost"
    run, transition = skipped_run(
        schedule_id=schedule.id,
        action_kind=schedule.action_kind,
        reason_code=MISSED_FIRE,
        summary="the occurrence fell due while the scheduler was not running"
        + (" (older than its catch-up window)" if expired else ""),
        context={"skipped_missed_fire": True, "missed_fire_at": due, "checked_at": now},
        now=now,
        metadata={"missed_fire_policy": "skip", "missed_fire_at": due}
        | ({"catchup_window_sec": schedule.catchup_window_sec} if expired else {}),
    )
    claim = ev.schedule_claim(source, occ, now, advance=True)
    won = await write_skip(ev.conn, claim=claim, run=run, transitions=[transition], now=now)
    return "skip" if won else "lost"
