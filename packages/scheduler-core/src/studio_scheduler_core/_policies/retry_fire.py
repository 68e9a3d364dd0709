"""Starting a due retry: its ``retry_wait`` row becomes the running attempt.

The attempt takes a global slot like any fire (it waits while the cap is reached) but passes
no other gate: the occurrence it retries was admitted once, and a retry counts toward neither
``max_runs`` nor the overlap of a new occurrence's admission beyond holding the slot. A
follow-up's attempt (it has a chain parent) takes a slot too, and runs the follow-up's action:
the schedule's overlays applied along its chain, as its parents ended.
"""

from __future__ import annotations

import logging

from .._admission.gates import Admission
from .._fire.env import FireEnv
from .._fire.pipeline import StartFire, Waiting, fire_waiting
from .._fire.retry import RETRY_FIRED, due_retries
from .._schedules.store import get_schedule

logger = logging.getLogger("studio_scheduler_core")


async def fire_due_retries(env: FireEnv, admission: Admission, start: StartFire, now: float) -> int:
    """Start every retry whose backoff has passed while a global slot is free, each through
    the fire pipeline (:func:`~studio_scheduler_core._fire.pipeline.fire_waiting`); returns
    how many started."""
    started = 0
    for row in await due_retries(env.conn, now):
        schedule = await get_schedule(env.conn, str(row.schedule_id))
        if schedule is None:
            continue  # deleted meanwhile: its runs go with it
        reservation = admission.reserve_retry(schedule.id, now=now)
        if reservation is None:
            break  # the global cap is reached: the retry waits for a slot
        waiting = Waiting(
            row,
            kind="retry",
            previous="retry_wait",
            fired=(RETRY_FIRED, "the retry's backoff has passed"),
            lag=max(0.0, now - float(row.queued_at or now)),
        )
        if await fire_waiting(env, schedule, waiting, reservation, start) is not None:
            started += 1
    return started
