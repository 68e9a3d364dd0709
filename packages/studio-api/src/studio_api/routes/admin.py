"""``/api/admin``: maintenance of the database (admin role)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Request
from pydantic import Field

from studio_state import is_postgres, new_id, record_transition, write_transaction

from .. import _maintenance
from .._auth_context import actor_of
from .._deps import EngineDep, responses
from .._models import RequestModel, ResponseModel

router = APIRouter(prefix="/api/admin", tags=["admin"])

#: One maintenance action at a time per process (a second one is "busy", 409).
_running = asyncio.Lock()


class MaintenanceRequest(RequestModel):
    """Body of ``POST /api/admin/maintenance``."""

    action: Annotated[
        Literal["vacuum", "checkpoint", "prune"],
        Field(
            description="vacuum (rewrite the file), checkpoint (empty the WAL) or prune "
            "(a retention pass now)"
        ),
    ]


class MaintenanceOut(ResponseModel):
    """What a maintenance action did."""

    action: str
    actor: str
    result: dict[str, Any]


@router.post("/maintenance", response_model=MaintenanceOut, responses=responses(409))
async def maintenance(
    engine: EngineDep, request: Request, body: MaintenanceRequest
) -> MaintenanceOut:
    """Run one maintenance action now; 409 when the database (or another maintenance action)
    is busy. Each is recorded in the audit trail (``GET /api/audit?entity=maintenance``)."""
    actor = actor_of(request)
    if _running.locked():
        raise HTTPException(409, detail="maintenance: another maintenance action is running")
    async with _running:
        if body.action == "prune":
            result = await _prune(engine, actor)
        else:
            if is_postgres(engine.db_path):
                raise HTTPException(
                    422,
                    detail=f"action: {body.action} applies to SQLite; PostgreSQL's server "
                    "vacuums and checkpoints on its own",
                )
            run = _maintenance.vacuum if body.action == "vacuum" else _maintenance.checkpoint
            try:
                result = await asyncio.to_thread(run, Path(engine.db_path), actor=actor)
            except _maintenance.DatabaseBusy as exc:
                raise HTTPException(409, detail=str(exc)) from None
            except _maintenance.MaintenanceError as exc:
                raise HTTPException(409, detail=str(exc)) from None
    return MaintenanceOut(action=body.action, actor=actor, result=result)


async def _prune(engine: Any, actor: str) -> dict[str, Any]:
    """One retention pass now (the reaper's, with the configured windows and archive)."""
    from studio_scheduler_core._fire.runlog import run_log_dir
    from studio_scheduler_core._recovery.retention import retention_pass

    db_path = str(engine.db_path)
    runs_dir = (
        run_log_dir(db_path, engine.settings)
        if is_postgres(db_path)
        else Path(db_path).parent / "runs"
    )
    now = engine.clock()
    settings = engine.settings
    report = await retention_pass(
        engine.conn,
        now=now,
        retention_days=settings.retention_days,
        runs_dir=runs_dir,
        time_budget=10.0,
        dispatch_retention_days=settings.dispatch_retention_days,
        dead_letter_retention_days=settings.dead_letter_retention_days,
        audit_retention_days=settings.audit_retention_days,
        archive_dir=settings.archive_dir,
        log_bytes=settings.run_log_bytes,
    )
    result = {
        "action": "prune",
        "runs": report.runs,
        "dispatches": report.dispatches,
        "audit_rows": report.audit_rows,
        "log_files": report.log_files,
        "done": report.done,
        "retention_days": settings.retention_days,
        "archives": report.archives,
        # set when the archive failed: that batch and the rest of the pass deleted nothing
        "archive_error": report.archive_error,
    }
    async with write_transaction(engine.conn):
        await record_transition(
            engine.conn,
            entity_type="maintenance",
            entity_id=new_id(),
            status="done",
            reason_code="maintenance.prune",
            reason_summary=f"prune: {report.runs} runs, {report.dispatches} dispatches deleted",
            actor=actor,
            metadata=result,
            now=now,
        )
    return result
