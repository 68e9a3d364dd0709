"""A manual fire: an operator's "fire now", through the gates that apply to it."""

from __future__ import annotations

from .._exceptions import FireRefused, ScheduleNotFound
from .._fire.occurrence import ScheduleClaim
from .._fire.pipeline import fire
from .._schedules.store import get_schedule
from .running import Running

NOT_LEADER = "schedule.refused.not_leader"
"""A manual fire sent to a node that does not lead schedule evaluation (PostgreSQL)."""


def refuse_on_follower(node_id: str) -> FireRefused:
    """The refusal of a manual fire sent to a node that does not lead: a follower's fire
    would hold a slot the leader's gates do not see, and its run would look like a lost
    node's to the next leader."""
    return FireRefused(
        NOT_LEADER,
        f"node {node_id} does not lead schedule evaluation now; trigger through "
        "the node whose GET /api/health says leader: true",
    )


async def fire_manually(
    run: Running, schedule_id: str, *, now: float, actor: str | None = None
) -> str:
    """Fire the schedule now on the leading engine's ``run``; return the run id.

    ``actor``, the operator who fired it, goes in the trigger context; the run's transition
    rows name them.

    Budget, max_runs and the global slot apply (overlap and threshold do not); a refusal
    raises :class:`FireRefused` with the gate's reason code and nothing is written.
    """
    schedule = await get_schedule(run.conn, schedule_id)
    if schedule is None:
        raise ScheduleNotFound(schedule_id)
    decision = await run.admission.admit(schedule, now=now, manual=True, path="manual")
    if decision.outcome != "fire" or decision.reservation is None:
        raise FireRefused(decision.reason_code, decision.message)
    fired = await fire(
        run.env,
        schedule,
        {"manual": True, "fired_at": now} | ({"actor": actor} if actor else {}),
        kind="manual",
        claim=lambda: ScheduleClaim("manual", schedule_id),
        reservation=decision.reservation,
        start=run.runner.start,
    )
    if fired is None:
        raise ScheduleNotFound(schedule_id)
    return fired.run_id
