"""``/api/dispatch``: inspect, acknowledge, retry and purge outbox rows (tokens never shown)."""

from __future__ import annotations

from typing import Annotated, Any

import aiosqlite
from fastapi import APIRouter, Query, Request, Response

import studio_outbox
from studio_state import write_transaction

from .._auth_context import actor_of
from .._cursor import cursor_error, decode_cursor, encode_cursor
from .._deps import EngineDep, ReadsDep, responses
from .._models import (
    SQLITE_INT_MAX,
    AckRequest,
    DispatchCreate,
    DispatchCreated,
    DispatchList,
    DispatchOut,
    DispatchStatus,
)

router = APIRouter(prefix="/api/dispatch", tags=["dispatch"])


async def _get(conn: aiosqlite.Connection, dispatch_id: str) -> DispatchOut:
    row = await studio_outbox.get_dispatch(conn, dispatch_id)
    if row is None:
        raise studio_outbox.DispatchNotFound(dispatch_id)
    return DispatchOut.from_row(row)


@router.get("", response_model=DispatchList, responses=responses())
async def list_dispatches(
    reads: ReadsDep,
    status: DispatchStatus | None = None,
    kind: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Page size (1-1000)")] = 100,
    offset: Annotated[int, Query(ge=0, le=SQLITE_INT_MAX, description="Rows to skip")] = 0,
    cursor: Annotated[str | None, Query(description="A page's next_cursor")] = None,
) -> DispatchList:
    """One page of outbox rows (newest first) and the ``total`` that match ``status`` and
    ``kind``; ``cursor`` (a page's ``next_cursor``) continues after that page at constant
    cost."""
    before = None
    if cursor is not None:
        (before,) = decode_cursor(cursor, (int,), offset=offset)
        if before < 1:
            raise cursor_error()
    rows, following = await studio_outbox.page_dispatches(
        reads.conn, status=status, kind=kind, limit=limit, offset=offset, before=before
    )
    total = await studio_outbox.count_dispatches(reads.conn, status=status, kind=kind)
    return DispatchList(
        dispatches=[DispatchOut.from_row(row) for row in rows],
        total=total,
        limit=limit,
        offset=offset,
        next_cursor=None if following is None else encode_cursor([following]),
    )


_DEDUP_HIT: dict[int | str, dict[str, Any]] = {
    200: {"model": DispatchCreated, "description": "dedup_key taken: the existing row's id"}
}


@router.post(
    "",
    status_code=201,
    response_model=DispatchCreated,
    responses={**responses(), **_DEDUP_HIT},
)
async def enqueue_dispatch(
    engine: EngineDep, request: Request, body: DispatchCreate, response: Response
) -> DispatchCreated:
    """Enqueue a dispatch (the arguments of ``studio_outbox.enqueue_dispatch``): 201 with its
    id, or 200 with ``created: false`` and the existing row's id when ``dedup_key`` is taken;
    422 names a bad field."""
    conn = engine.conn
    async with write_transaction(conn):
        existing = None
        if body.dedup_key is not None:
            existing = await studio_outbox.dispatch_id_for_dedup_key(conn, body.dedup_key)
        dispatch_id = await studio_outbox.enqueue_dispatch(
            conn, **body.model_dump(), clock=engine.clock, actor=actor_of(request)
        )
    engine.wake()
    if existing is not None:
        response.status_code = 200
        return DispatchCreated(id=str(existing), created=False)
    return DispatchCreated(id=dispatch_id, created=True)


@router.get("/{dispatch_id}", response_model=DispatchOut, responses=responses(404))
async def get_dispatch(reads: ReadsDep, dispatch_id: str) -> DispatchOut:
    """One outbox row."""
    return await _get(reads.conn, dispatch_id)


@router.post("/{dispatch_id}/ack", response_model=DispatchOut, responses=responses(404, 409))
async def ack_dispatch(
    engine: EngineDep, request: Request, dispatch_id: str, body: AckRequest
) -> DispatchOut:
    """Acknowledge a delivered row with its token (409: wrong token or no ack required), or
    as an operator with ``{"operator": true}`` (``dispatch.acked.operator``, with the actor)."""
    if body.operator:
        await studio_outbox.operator_ack_dispatch(
            engine.conn, dispatch_id, actor=actor_of(request), clock=engine.clock
        )
        return await _get(engine.conn, dispatch_id)
    acked = await studio_outbox.ack_dispatch(engine.conn, dispatch_id, str(body.token))
    if not acked:
        raise studio_outbox.AckTokenMismatch(dispatch_id)
    return await _get(engine.conn, dispatch_id)


@router.post("/{dispatch_id}/retry", response_model=DispatchOut, responses=responses(404, 409))
async def retry_dispatch(engine: EngineDep, request: Request, dispatch_id: str) -> DispatchOut:
    """Send a ``dead_letter`` or ``expired`` row again (409 from any other status)."""
    await studio_outbox.retry_dispatch(engine.conn, dispatch_id, actor=actor_of(request))
    engine.wake()
    return await _get(engine.conn, dispatch_id)


@router.delete("/{dispatch_id}", response_model=DispatchOut, responses=responses(404, 409))
async def purge_dispatch(engine: EngineDep, request: Request, dispatch_id: str) -> DispatchOut:
    """Delete a row (409 while a delivery holds it); answers the row as it was."""
    row = await _get(engine.conn, dispatch_id)
    await studio_outbox.purge_dispatch(engine.conn, dispatch_id, actor=actor_of(request))
    return row
