"""Scheduled fires claimed from the queue (``scheduled_on_any_node``).

The leader admitted the fire and committed its row ``queued``; the claiming worker prepares
it again on its own machine from the schedule as it is now (a follow-up's action replayed
along its chain), then claims it like an ad-hoc run and runs it through the fire runner, so
its end, follow-ups, retries and notifications are the same as on the leader.
"""

from __future__ import annotations

from collections.abc import Mapping

from .._fire.env import FireEnv, Prepared
from .._fire.waiting import prepare_row
from .._records.run import Run
from .._schedules.store import get_schedule


def kind_of(run: Run) -> str:
    """The fire kind of a queued scheduled row (what its log events say)."""
    context = run.trigger_context if isinstance(run.trigger_context, Mapping) else {}
    if run.chain_depth > 0:
        return "follow_up"
    if run.retry_of is not None:
        return "retry"
    if context.get("manual"):
        return "manual"
    if "missed_fire_at" in context:
        return "missed_fire"
    return "scheduled"


async def prepare_scheduled(env: FireEnv, run: Run) -> Prepared | None:
    """Prepare a queued scheduled row for its claim; ``None`` when its schedule is gone (its
    runs are deleted with it)."""
    schedule = await get_schedule(env.conn, str(run.schedule_id))
    if schedule is None:
        return None
    return await prepare_row(env, schedule, run, kind=kind_of(run))
