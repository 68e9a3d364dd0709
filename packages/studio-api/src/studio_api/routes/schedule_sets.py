"""``/api/schedule-sets``: plan and apply a ``ScheduleSet`` document sent as the body.

The body is the document as YAML or JSON (JSON is read by the same loader: it is YAML). A
document with problems is 422 with every problem in ``errors`` (one object each: file, path,
message, line, column), nothing written. ``/plan`` answers the plan
(``{"owner", "owners", "changes"}``) and never writes; ``/apply`` writes it in one transaction
(``?dry_run=1``: plan only), answering the plan with ``applied`` counts. A plan with ERROR
changes is 409 with those changes in ``errors``; a schedule changed between the plan and the
write is 409 "changed since plan; re-run". Both: zero writes. A relative ``cwd`` in the body
resolves against the server's working directory.
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from studio_scheduler_core import (
    MAX_DOCUMENT_BYTES,
    ScheduleSetChanged,
    ScheduleSetPlan,
    apply_schedule_plan,
    plan_schedule_sets,
    validate_schedule_set_text,
)

from .._deps import EngineDep, ReadsDep, responses

router = APIRouter(prefix="/api/schedule-sets", tags=["schedule-sets"])

SOURCE = "body"
"""How the body is named in the problems of an invalid document."""
_FLAGS_DOC = {
    "adopt": "Take unowned schedules whose behaviour matches the member.",
    "prune": "Delete (instead of disable) owned schedules the document no longer holds.",
    "force": "With prune: cancel the running runs of a schedule being deleted (in the apply's "
    "transaction: an apply that fails cancels nothing).",
}


def _too_large(size: int) -> JSONResponse:
    return JSONResponse(
        status_code=413,
        headers={"Connection": "close"},
        content={
            "detail": f"body: is {size} bytes; a ScheduleSet document must be smaller than "
            f"{MAX_DOCUMENT_BYTES} bytes",
            "field": "body",
        },
    )


async def _text(request: Request) -> str | JSONResponse:
    """The body as text; 413 for a document of :data:`MAX_DOCUMENT_BYTES` or more.

    Past the bound nothing more is kept, but the rest is still read (the app's body limit
    bounds it): a client sends its whole body before it reads the answer, and a socket
    closed on unread data resets the connection, losing the 413."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size < MAX_DOCUMENT_BYTES:
            chunks.append(chunk)
        else:
            chunks.clear()  # the rest is read (the body limit bounds it) and thrown away
    if size >= MAX_DOCUMENT_BYTES:
        return _too_large(size)
    raw = b"".join(chunks)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return JSONResponse(
            status_code=422,
            content={"detail": f"body: is not UTF-8 text (byte {exc.start})", "field": "body"},
        )


async def _planned(
    request: Request, conn: Any, engine: Any, *, adopt: bool, prune: bool, force: bool
) -> ScheduleSetPlan | JSONResponse:
    text = await _text(request)
    if isinstance(text, JSONResponse):
        return text
    report = validate_schedule_set_text(
        text,
        source=SOURCE,
        base_dir=os.getcwd(),
        settings=engine.settings,
        now=engine.clock(),
    )
    if not report.ok:
        errors = [p.to_json() for p in report.problems]
        return JSONResponse(
            status_code=422,
            content={"detail": str(report.problems[0]), "field": "body", "errors": errors},
        )
    return await plan_schedule_sets(
        conn, report.owners, report.members, adopt=adopt, prune=prune, force=force
    )


def _refused(plan: ScheduleSetPlan) -> JSONResponse:
    return JSONResponse(
        status_code=409,
        content={
            "detail": str(plan.errors[0]),
            "reason_code": "schedule_set.plan_errors",
            "errors": [c.to_json() for c in plan.errors],
            **plan.to_json(),
        },
    )


@router.post("/plan", responses=responses(409))
async def plan_set(
    request: Request,
    engine: EngineDep,
    reads: ReadsDep,
    adopt: bool = Query(False, description=_FLAGS_DOC["adopt"]),
    prune: bool = Query(False, description=_FLAGS_DOC["prune"]),
    force: bool = Query(False, description=_FLAGS_DOC["force"]),
) -> Any:
    """What applying the document in the body would change; nothing is written.

    ``{"owner", "owners", "changes": [{"member", "name", "action", "fields", "detail"}]}``,
    ``action`` one of create, update, unchanged, disable, delete, error; ``fields`` maps each
    changed field of an update to ``[old, new]``. 422 with ``errors`` for an invalid document.
    """
    planned = await _planned(request, reads.conn, engine, adopt=adopt, prune=prune, force=force)
    if isinstance(planned, JSONResponse):
        return planned
    return JSONResponse(planned.to_json())


@router.post("/apply", responses=responses(409))
async def apply_set(
    request: Request,
    engine: EngineDep,
    dry_run: bool = Query(False, description="Plan only: answer the plan, write nothing."),
    adopt: bool = Query(False, description=_FLAGS_DOC["adopt"]),
    prune: bool = Query(False, description=_FLAGS_DOC["prune"]),
    force: bool = Query(False, description=_FLAGS_DOC["force"]),
) -> Any:
    """Apply the document in the body: the whole plan in one transaction, or nothing.

    Answers the plan with ``applied`` (``created``, ``updated``, ``disabled``, ``deleted``,
    ``writes``, and ``cancelled``: the running runs a forced prune cancelled, in the same
    transaction) and ``dry_run``. 409 (nothing written) when the plan holds errors or a
    schedule changed since the plan was read; 422 with ``errors`` for an invalid document.
    Every change is recorded with the actor ``set:<owner>``.
    """
    planned = await _planned(request, engine.conn, engine, adopt=adopt, prune=prune, force=force)
    if isinstance(planned, JSONResponse):
        return planned
    if planned.errors:
        return _refused(planned)
    if dry_run:
        return JSONResponse({**planned.to_json(), "dry_run": True, "applied": None})
    try:
        applied = await apply_schedule_plan(
            engine.conn,
            planned,
            timezone=engine.settings.timezone,
            clock=engine.clock,
            on_change=engine.wake,
            stop_process=engine.runs.stop_process,
        )
    except ScheduleSetChanged as exc:
        return JSONResponse(
            status_code=409,
            content={"detail": str(exc), "reason_code": "schedule_set.changed_since_plan"},
        )
    counts = {
        "created": applied.created,
        "updated": applied.updated,
        "disabled": applied.disabled,
        "deleted": applied.deleted,
        "writes": applied.writes,
        "cancelled": list(applied.cancelled),
    }
    # JSON already: FastAPI's encoder would walk each of a large plan's changes again
    return JSONResponse({**planned.to_json(), "dry_run": False, "applied": counts})
