"""``/api/schedules/runs/{run_id}``: the run's log (whole, tail, live stream) and cancel.

These serve every run kind (scheduled, follow-up, ad-hoc): a run id is looked up in
``schedule_runs`` whatever its origin.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import PlainTextResponse, StreamingResponse

from studio_launcher import RUN_LOG_HEAD_BYTES
from studio_scheduler_core import (
    RunNotFound,
    RunState,
    SchedulerEngine,
    read_run_log,
    read_run_status,
    read_stored_run_log,
    run_log_path,
)

from .._auth_context import actor_of
from .._deps import EngineDep, responses
from .._models import RunOut
from .._node_proxy import fetch_log, node_elsewhere, open_stream

router = APIRouter(prefix="/api/schedules/runs", tags=["runs"])

TERMINAL = frozenset({"completed", "failed", "timed_out", "cancelled", "skipped"})
POLL_SECONDS = 0.2
"""How often a stream looks for new output and for the run's end."""
MAX_PARTIAL = 8192
"""Output without a newline is sent once this much of it has accumulated."""


async def _run_row(engine: SchedulerEngine, run_id: str) -> RunState:
    row = await read_run_status(engine.conn, run_id)
    if row is None:
        raise RunNotFound(run_id)
    return row


def _log_path(engine: SchedulerEngine, run_id: str) -> str:
    try:
        return run_log_path(engine.db_path, engine.settings, run_id)
    except ValueError:
        raise RunNotFound(run_id) from None


async def _stored(engine: SchedulerEngine, row: RunState, tail: int | None) -> bytes | None:
    """A finished run's log as stored in the database (PostgreSQL) when its file is not on
    this node: so any node serves it, also once the node that ran it is gone."""
    if row.status not in TERMINAL:
        return None
    path = _log_path(engine, row.id)
    if await asyncio.to_thread(os.path.exists, path):
        return None
    return await read_stored_run_log(engine.conn, row.id, tail=tail)


def _json_errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """``responses(...)`` whose error bodies are documented as JSON on a non-JSON route."""
    return {
        code: {**entry, "content": {"application/json": {}}}
        for code, entry in responses(*codes).items()
    }


@router.get("/{run_id}/log", response_class=PlainTextResponse, responses=_json_errors(404, 409))
async def run_log(
    engine: EngineDep,
    request: Request,
    run_id: str,
    tail: Annotated[int | None, Query(description="Only the last N bytes (1..log bound)")] = None,
) -> PlainTextResponse:
    """The run's output (stdout and stderr, interleaved), as text; empty while queued. A
    finished run's log is read from the database when this node does not have its file
    (PostgreSQL); otherwise a run another node ran is fetched from that node (409 naming it
    when it cannot be reached)."""
    bound = engine.settings.run_log_bytes
    if tail is not None and not 1 <= tail <= bound:
        raise HTTPException(422, detail=f"tail: must be between 1 and {bound}, got {tail}")
    row = await _run_row(engine, run_id)
    stored = await _stored(engine, row, tail)
    if stored is not None:
        return PlainTextResponse(stored.decode("utf-8", errors="replace"))
    elsewhere = await node_elsewhere(engine, row, request)
    if elsewhere is not None:
        text = await fetch_log(*elsewhere, request.url.path, request, {"tail": tail})
        return PlainTextResponse(text)
    data = await asyncio.to_thread(read_run_log, _log_path(engine, run_id), tail=tail)
    return PlainTextResponse(data.decode("utf-8", errors="replace"))


def _head_bytes(bound: int) -> int:
    return RUN_LOG_HEAD_BYTES if bound >= 2 * RUN_LOG_HEAD_BYTES else bound // 2


def _read_from(path: str, offset: int, head: int) -> tuple[bytes, int]:
    """New bytes at ``offset`` (back to the end of the head when the file got shorter)."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < offset:
                offset = min(head, size)
            handle.seek(offset)
            data = handle.read(size - offset)
    except FileNotFoundError:
        return b"", offset
    return data, offset + len(data)


def _events(text: str) -> str:
    return "".join(f"data: {line}\n\n" for line in text.split("\n"))


async def follow_log(engine: SchedulerEngine, run_id: str, path: str) -> AsyncIterator[str]:
    """SSE events: each output line as it is written, then ``event: end`` with the status."""
    head = _head_bytes(engine.settings.run_log_bytes)
    offset = 0
    pending = b""
    while True:
        row = await read_run_status(engine.conn, run_id)
        ended = row is None or row.status in TERMINAL
        data, offset = await asyncio.to_thread(_read_from, path, offset, head)
        pending += data
        if b"\n" in pending:
            complete, _, pending = pending.rpartition(b"\n")
            yield _events(complete.decode("utf-8", errors="replace"))
        if len(pending) >= MAX_PARTIAL or (ended and pending):
            yield _events(pending.decode("utf-8", errors="replace"))
            pending = b""
        if ended:
            end = {
                "status": None if row is None else row.status,
                "reason_code": None if row is None else row.status_reason_code,
            }
            yield f"event: end\ndata: {json.dumps(end)}\n\n"
            return
        await asyncio.sleep(POLL_SECONDS)


async def replay_log(row: RunState, content: bytes) -> AsyncIterator[str]:
    """A finished run's stored log as the events :func:`follow_log` sends, then its end."""
    if b"\n" in content:
        complete, _, content = content.rpartition(b"\n")
        yield _events(complete.decode("utf-8", errors="replace"))
    if content:
        yield _events(content.decode("utf-8", errors="replace"))
    end = {"status": row.status, "reason_code": row.status_reason_code}
    yield f"event: end\ndata: {json.dumps(end)}\n\n"


@router.get(
    "/{run_id}/log/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}, **_json_errors(404, 409)},
)
async def run_log_stream(engine: EngineDep, request: Request, run_id: str) -> StreamingResponse:
    """The run's output as Server-Sent Events while it runs; ``event: end`` when it ends. A
    finished run's stored log is replayed when this node does not have its file; a run
    another node runs is streamed from that node (409 naming it when unreachable)."""
    row = await _run_row(engine, run_id)
    stored = await _stored(engine, row, None)
    elsewhere = None if stored is not None else await node_elsewhere(engine, row, request)
    events: AsyncIterator[Any]
    if stored is not None:
        events = replay_log(row, stored)
    elif elsewhere is not None:
        events = await open_stream(*elsewhere, request.url.path, request)
    else:
        events = follow_log(engine, run_id, _log_path(engine, run_id))
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


@router.post(
    "/{run_id}/cancel", status_code=202, response_model=RunOut, responses=responses(404, 409)
)
async def cancel_run(engine: EngineDep, request: Request, run_id: str) -> RunOut:
    """Cancel a queued, running or waiting (``retry_wait``, ``waiting_dependency``) run of any
    kind: a running run's process group gets SIGTERM, 5 s, then SIGKILL (descendants too); a
    waiting one never starts. The run is ``cancelled`` (``run.cancelled.operator``). 409 with
    ``reason_code`` once it has ended."""
    return RunOut.of_record(await engine.runs.cancel(run_id, actor=actor_of(request)))
