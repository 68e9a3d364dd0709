"""``GET /api/health``: served without a token, answers from the engine's memory only."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from .. import __about__
from .._deps import EngineDep, SettingsDep
from .._models import (
    DatabaseHealth,
    DispatchHealth,
    HealthOut,
    Holder,
    SchedulerHealth,
    TransportHealth,
)
from .._models.health import RetentionHealth
from .._storage import StorageHealth

router = APIRouter(prefix="/api", tags=["health"])

# A tick older than this many tick intervals (plus slack for a long tick) means degraded.
_STALE_TICKS = 3
_STALE_SLACK_SECONDS = 60.0


@router.get("/health", response_model=HealthOut)
async def health(request: Request, engine: EngineDep, settings: SettingsDep) -> HealthOut:
    """The tick's last run, in-flight fires, due and dispatch backlogs, delivery pause, the
    database's durability mode and storage fault, and this node: ``node_id``, ``leader``
    (whether it evaluates schedules now) and ``backend`` (``sqlite`` or ``postgresql``).

    ``status`` is ``degraded`` when the loop is not running, its last tick is older than three
    tick intervals (plus a minute), a concern of the last tick failed (``last_tick_error``),
    or writes to the database fail (``database.problem``: a read-only or full file system, an
    I/O error ...; re-checked every few seconds until a write lands again), or retention's
    last pass could not write its archive (``retention.archive_problem``, naming the archive
    directory and the error; cleared by the next pass that archives).
    """
    storage: StorageHealth = request.app.state.storage
    problem = await storage.check()
    data = engine.health()
    last_tick = data.get("last_tick_at")
    age = max(0.0, time.time() - last_tick) if last_tick is not None else None
    last_retention = engine.last_retention
    archive_problem = None if last_retention is None else last_retention.archive_error
    stale_after = settings.tick_seconds * _STALE_TICKS + _STALE_SLACK_SECONDS
    healthy = (
        bool(data.get("running"))
        and (age is None or age <= stale_after)
        and not data.get("last_tick_error")
        and problem is None
        and archive_problem is None
    )
    scheduler = SchedulerHealth.of(
        data,
        seconds_since_last_tick=age,
        tick_seconds=settings.tick_seconds,
        holders=[Holder.of(h) for h in data.get("holders", [])],
        fire_lag_last_seconds=request.app.state.metrics.last_lag,
        fire_lag_max_seconds=request.app.state.metrics.max_lag,
    )
    dispatch = DispatchHealth(
        backlog=int(data.get("dispatch_backlog", 0)),
        delivery_paused=bool(data.get("delivery_paused", False)),
        delivery_paused_transports=list(data["delivery_paused_transports"]),
        delivery_paused_dispatches=dict(data.get("delivery_paused_dispatches") or {}),
        delivery_paused_reason=data.get("delivery_paused_reason"),
        transports={
            "argv": TransportHealth.of(data["transports"]["argv"]),
            "webhook": TransportHealth.of(data["transports"]["webhook"]),
        },
    )
    return HealthOut(
        status="ok" if healthy else "degraded",
        version=__about__.__version__,
        node_id=engine.node_id,
        leader=engine.is_leader,
        backend=engine.backend,
        wake_listening=data.get("wake_listening"),
        scheduler=scheduler,
        dispatch=dispatch,
        database=DatabaseHealth(
            synchronous=str(request.app.state.synchronous),
            problem=problem,
            problem_since=storage.since if problem is not None else None,
        ),
        retention=RetentionHealth(
            archive_dir=settings.archive_dir, archive_problem=archive_problem
        ),
    )
