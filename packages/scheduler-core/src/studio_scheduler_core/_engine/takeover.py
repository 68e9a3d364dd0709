"""What an engine does when it starts leading schedule evaluation.

At its own start (on SQLite always, on PostgreSQL when it wins the election at once) the
scheduler restarted: the runs a previous process left ``running`` are
``run.failed.daemon_restart`` and missed-fire policies apply once. A takeover later in the
process's life (PostgreSQL: another node's leader session ended) fails those runs as
``run.failed.node_lost`` and applies no missed-fire policy: the service did not stop, so the
rows due meanwhile are late, not missed, and the next evaluation fires them (interval slots
coalesced as ever). Either way cron cadence is re-armed, and this engine's own runs in flight
are never touched. With ``scheduled_on_any_node`` the fires still queued or running on a
worker hold their slots again (they are leased: lease recovery, not this, settles a dead
worker's).
"""

from __future__ import annotations

from .._admission.dispatched import restore_holds
from .._observe.summary import recovery_event
from .._recovery.orphans import OrphanReaper
from .._recovery.reconcile import reconcile_startup
from .._settings import SchedulerSettings
from .._triggers.cadence import rearm
from .running import Running


async def take_over(
    run: Running,
    *,
    now: float,
    settings: SchedulerSettings,
    reaper: OrphanReaper,
    children_db: str | None,
    startup: bool,
) -> None:
    """Re-arm cron, reconcile the runs a previous leader left running, and (at ``startup``)
    apply missed-fire policies. ``children_db`` is what children got as ``LIONAGI_STUDIO_DB``
    (``None``: the connection's file)."""
    conn = run.conn
    await rearm(conn, now=now, timezone=settings.timezone)
    recovered = await reconcile_startup(
        conn,
        now=now,
        reaper=reaper,
        db_path=children_db,
        node_lost=not startup,
        owned_runs=set(run.env.committed) | set(run.env.live),
        owned_invocations={p.invocation_id for p in run.env.committed.values()},
    )
    if settings.scheduled_on_any_node:
        await restore_holds(run.admission, conn)
    missed = await run.evaluator.missed_fires(now) if startup else {}
    recovery_event(recovered, reaper.signalled, missed)
