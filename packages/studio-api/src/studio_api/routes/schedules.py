"""``/api/schedules``: CRUD, enable/disable, manual trigger, runs, preview and limits."""

from __future__ import annotations

import contextlib
from typing import Annotated

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import Response

from studio_scheduler_core import (
    KEEP,
    RUN_PAGE_KEY,
    RunNotCancellable,
    RunNotFound,
    Schedule,
    SchedulerEngine,
    normalize_cursor,
    read_schedule_health,
    read_schedule_status,
)

from .._auth_context import actor_of
from .._cursor import decode_cursor, next_cursor
from .._deps import EngineDep, ReadsDep, ServiceDep, SettingsDep, responses
from .._forward import forward_to_leader, must_forward
from .._models import (
    SCHEDULE_CREATE_EXAMPLES,
    SQLITE_INT_MAX,
    BackfillOut,
    BackfillRequest,
    DisableRequest,
    FireTime,
    Holder,
    LimitsOut,
    PreviewOut,
    RunDetail,
    RunList,
    RunOut,
    RunStatus,
    ScheduleCreate,
    ScheduleList,
    ScheduleOut,
    ScheduleStatusOut,
    ScheduleUpdate,
    TriggerOut,
    TriggerType,
)
from .._reads import Reads

router = APIRouter(prefix="/api/schedules", tags=["schedules"])

Limit = Annotated[int, Query(ge=1, le=1000, description="Page size (1-1000)")]
Offset = Annotated[int, Query(ge=0, le=SQLITE_INT_MAX, description="Rows to skip")]


@router.get("", response_model=ScheduleList, responses=responses())
async def list_schedules(
    reads: ReadsDep,
    enabled: bool | None = None,
    trigger_type: TriggerType | None = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> ScheduleList:
    """One page of schedules (newest first) and the ``total`` number that match."""
    rows, total = await reads.schedules.list(
        enabled=enabled, trigger_type=trigger_type, limit=limit, offset=offset
    )
    return ScheduleList(
        schedules=await _with_health(reads, rows),
        total=total,
        limit=limit,
        offset=offset,
    )


@router.post("", status_code=201, response_model=ScheduleOut, responses=responses(409))
async def create_schedule(
    engine: EngineDep,
    service: ServiceDep,
    request: Request,
    body: Annotated[ScheduleCreate, Body(openapi_examples=SCHEDULE_CREATE_EXAMPLES)],
) -> ScheduleOut:
    """Create a schedule; 422 names the invalid field, 409 when the name is taken."""
    created = await service.create(body.model_dump(exclude_none=True), actor=actor_of(request))
    return (await _with_health(engine, [created]))[0]


@router.get("/limits", response_model=LimitsOut, responses=responses())
async def limits(engine: EngineDep) -> LimitsOut:
    """The global concurrency caps and the fires holding slots now."""
    data = engine.limits()
    return LimitsOut.of(data, holders=[Holder.of(h) for h in data.get("holders", [])])


@router.get("/runs/{run_id}", response_model=RunDetail, responses=responses(404))
async def get_run(reads: ReadsDep, run_id: str) -> RunDetail:
    """One run, with the runs its follow-ups started."""
    return RunDetail.of_record(await reads.schedules.get_run(run_id))


@router.get("/{schedule_id}", response_model=ScheduleOut, responses=responses(404))
async def get_schedule(reads: ReadsDep, schedule_id: str) -> ScheduleOut:
    """One schedule, with its health."""
    return (await _with_health(reads, [await reads.schedules.get(schedule_id)]))[0]


@router.get("/{schedule_id}/status", response_model=ScheduleStatusOut, responses=responses(404))
async def schedule_status(reads: ReadsDep, schedule_id: str) -> ScheduleStatusOut:
    """Is it working: the verdict (``health``) and its figures, the last run that ended
    (status, reason, duration, when, error class, last stderr lines), the runs running now."""
    status = await read_schedule_status(reads.conn, schedule_id, now=reads.clock())
    return ScheduleStatusOut.model_validate(status.to_json())


async def _with_health(source: Reads | SchedulerEngine, rows: list[Schedule]) -> list[ScheduleOut]:
    """The schedule views with their health fields (one read for the whole page), read on
    the read connection (GETs) or the engine's (the answers of writes)."""
    ids = [row.id for row in rows]
    health = await read_schedule_health(source.conn, ids, now=source.clock())
    out = []
    for row in rows:
        view = ScheduleOut.of_record(row)
        found = health.get(row.id)
        out.append(view if found is None else view.model_copy(update=found.to_json()))
    return out


@router.patch("/{schedule_id}", response_model=ScheduleOut, responses=responses(404, 409))
async def update_schedule(
    service: ServiceDep,
    engine: EngineDep,
    request: Request,
    schedule_id: str,
    body: ScheduleUpdate,
) -> ScheduleOut:
    """Change the fields sent (``null`` clears an optional field); the rest is kept, all in
    one transaction.

    ``github_cursor`` (github_poll only, else 422) sets the cursor, or with ``null`` resets it
    so the next poll replays what the listing holds."""
    changes = body.model_dump(exclude_unset=True)
    cursor = normalize_cursor(changes.pop("github_cursor")) if "github_cursor" in changes else KEEP
    row = await service.update(schedule_id, changes, actor=actor_of(request), github_cursor=cursor)
    return (await _with_health(engine, [row]))[0]


@router.delete("/{schedule_id}", response_model=ScheduleOut, responses=responses(404, 409))
async def delete_schedule(
    engine: EngineDep,
    service: ServiceDep,
    request: Request,
    schedule_id: str,
    force: Annotated[bool, Query(description="Cancel its running runs first")] = False,
) -> ScheduleOut:
    """Delete a schedule and its runs; answers the schedule as it was.

    409 (``schedule.delete.running``) while it has running runs, unless ``force=true``:
    then those runs are cancelled (``run.cancelled.operator``) and the schedule deleted.
    """
    actor = actor_of(request)
    [view] = await _with_health(engine, [await service.get(schedule_id)])
    if force:
        for run_id in await service.running_run_ids(schedule_id):
            with contextlib.suppress(RunNotCancellable, RunNotFound):
                await engine.runs.cancel(run_id, actor=actor)
    await service.delete(schedule_id, refuse_running=True, actor=actor)
    return view


@router.post("/{schedule_id}/enable", response_model=ScheduleOut, responses=responses(404, 409))
async def enable_schedule(
    engine: EngineDep, service: ServiceDep, request: Request, schedule_id: str
) -> ScheduleOut:
    """Enable a schedule (its next fire time is recomputed)."""
    row = await service.enable(schedule_id, actor=actor_of(request))
    return (await _with_health(engine, [row]))[0]


@router.post("/{schedule_id}/disable", response_model=ScheduleOut, responses=responses(404, 409))
async def disable_schedule(
    engine: EngineDep,
    service: ServiceDep,
    request: Request,
    schedule_id: str,
    body: Annotated[DisableRequest | None, Body()] = None,
) -> ScheduleOut:
    """Disable a schedule, optionally recording why (``{"reason": "..."}``)."""
    reason = body.reason if body is not None else None
    row = await service.disable(schedule_id, reason, actor=actor_of(request))
    return (await _with_health(engine, [row]))[0]


@router.post(
    "/{schedule_id}/trigger",
    status_code=202,
    response_model=TriggerOut,
    responses=responses(404, 409),
)
async def trigger_schedule(
    engine: EngineDep, request: Request, schedule_id: str
) -> TriggerOut | Response:
    """Fire a schedule now: 202 with the run id, or 409 with the refusal's ``reason_code``.
    A node that does not lead forwards the request to the leader (503 naming it when it
    cannot)."""
    if must_forward(engine):
        return await forward_to_leader(engine, request)
    run_id = await engine.fire_now(schedule_id, actor=actor_of(request))
    engine.wake()
    return TriggerOut(run_id=run_id)


@router.post(
    "/{schedule_id}/backfill",
    status_code=202,
    response_model=BackfillOut,
    responses=responses(404, 409),
)
async def backfill_schedule(
    engine: EngineDep,
    service: ServiceDep,
    request: Request,
    schedule_id: str,
    body: BackfillRequest,
) -> BackfillOut | Response:
    """Queue every occurrence in [start, end) (ISO 8601 or epoch; ``start < end <= now``, at
    most 1000): the engine runs them one at a time through the gates with
    ``trigger_context.backfill``. 409 (``schedule.backfill.disabled``) for a disabled
    schedule. A node that does not lead forwards the request to the leader (503 naming it
    when it cannot)."""
    if must_forward(engine):
        return await forward_to_leader(engine, request)
    queued = await service.backfill(schedule_id, body.start, body.end, actor=actor_of(request))
    return BackfillOut(runs=queued)


@router.get("/{schedule_id}/runs", response_model=RunList, responses=responses(404))
async def list_runs(
    reads: ReadsDep,
    schedule_id: str,
    status: RunStatus | None = None,
    limit: Limit = 100,
    offset: Offset = 0,
    cursor: Annotated[str | None, Query(description="A page's next_cursor")] = None,
) -> RunList:
    """One page of a schedule's runs (newest first) and the ``total`` that match; ``cursor``
    (a page's ``next_cursor``) continues after that page at constant cost."""
    after = None if cursor is None else decode_cursor(cursor, (float, float, str), offset=offset)
    rows, total = await reads.schedules.list_runs(
        schedule_id, status=status, limit=limit, offset=offset, after=after
    )
    return RunList(
        runs=[RunOut.of_record(row) for row in rows],
        total=total,
        limit=limit,
        offset=offset,
        next_cursor=next_cursor(rows, RUN_PAGE_KEY, limit),
    )


@router.get("/{schedule_id}/preview", response_model=PreviewOut, responses=responses(404))
async def preview(
    reads: ReadsDep,
    settings: SettingsDep,
    schedule_id: str,
    n: Annotated[int, Query(ge=1, le=100, description="How many fire times")] = 5,
) -> PreviewOut:
    """The next ``n`` fire times, in UTC and in the scheduler's time zone."""
    schedule = await reads.schedules.get(schedule_id)
    times = await reads.schedules.preview(schedule_id, n)
    return PreviewOut(
        schedule_id=schedule_id,
        timezone=schedule.timezone or settings.timezone,
        fire_times=[FireTime.of(t) for t in times],
    )
