"""``/api/runs``: ad-hoc runs the host task worker claims and executes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from studio_scheduler_core import ADHOC_PAGE_KEY

from .._auth_context import actor_of
from .._cursor import decode_cursor, next_cursor
from .._deps import EngineDep, ReadsDep, responses
from .._models import SQLITE_INT_MAX, RunCreate, RunList, RunOut, RunStatus, TriggerOut

router = APIRouter(prefix="/api/runs", tags=["runs"])


class AdhocRunCreate(RunCreate):
    """Body of ``POST /api/runs``: :class:`RunCreate` and the run's own ``timeout_sec``."""

    timeout_sec: int | None = None
    """The run's deadline in seconds (1 to the schedules' bound; default: the server's)."""


@router.post("", status_code=202, response_model=TriggerOut, responses=responses())
async def enqueue_run(engine: EngineDep, request: Request, body: AdhocRunCreate) -> TriggerOut:
    """Queue an ad-hoc run (same action fields as a schedule, no trigger): 202 with its id.

    The host task worker claims it on the next tick; 422 names an invalid field.
    """
    run = await engine.runs.enqueue(body.model_dump(exclude_none=True), actor=actor_of(request))
    return TriggerOut(run_id=run.id)


@router.get("", response_model=RunList, responses=responses())
async def list_runs(
    reads: ReadsDep,
    status: RunStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Page size (1-1000)")] = 100,
    offset: Annotated[int, Query(ge=0, le=SQLITE_INT_MAX, description="Rows to skip")] = 0,
    cursor: Annotated[str | None, Query(description="A page's next_cursor")] = None,
) -> RunList:
    """One page of ad-hoc runs (newest first) and the ``total`` that match; ``cursor`` (a
    page's ``next_cursor``) continues after that page at constant cost."""
    after = None if cursor is None else decode_cursor(cursor, (float, str), offset=offset)
    rows, total = await reads.runs.list(status=status, limit=limit, offset=offset, after=after)
    return RunList(
        runs=[RunOut.of_record(row) for row in rows],
        total=total,
        limit=limit,
        offset=offset,
        next_cursor=next_cursor(rows, ADHOC_PAGE_KEY, limit),
    )


@router.get("/{run_id}", response_model=RunOut, responses=responses(404))
async def get_run(reads: ReadsDep, run_id: str) -> RunOut:
    """One ad-hoc run."""
    return RunOut.of_record(await reads.runs.get(run_id))


@router.delete("/{run_id}", response_model=RunOut, responses=responses(404, 409))
async def delete_run(engine: EngineDep, request: Request, run_id: str) -> RunOut:
    """Cancel a queued or running ad-hoc run (a running one's process group is terminated);
    the run, ``cancelled``; 409 once it has ended."""
    return RunOut.of_record(await engine.runs.cancel(run_id, actor=actor_of(request)))


@router.post("/{run_id}/cancel", response_model=RunOut, responses=responses(404, 409))
async def cancel_run(engine: EngineDep, request: Request, run_id: str) -> RunOut:
    """Cancel a queued or running run (its child is stopped; a waiting ``retry_wait`` or
    ``waiting_dependency`` run never starts); 409 once it has ended."""
    return RunOut.of_record(await engine.runs.cancel(run_id, actor=actor_of(request)))
