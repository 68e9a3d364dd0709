"""Request dependencies: the engine and the settings the lifespan put on ``app.state``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request

from studio_scheduler_core import SchedulerEngine, ScheduleService

from ._models import ErrorOut
from ._reads import Reads
from ._settings import StudioSettings

# The dependencies are ``async def`` although they never await: FastAPI runs a plain ``def``
# dependency in its thread pool, a thread round trip on every request (seen in profiles).


def _running_engine(request: Request) -> SchedulerEngine:
    engine: SchedulerEngine = request.app.state.engine
    if request.url.path != "/api/health":
        problem = engine.health().get("database_error")
        if problem:
            raise HTTPException(503, detail=str(problem), headers={"Retry-After": "30"})
    return engine


async def get_engine(request: Request) -> SchedulerEngine:
    """The running engine (started by the lifespan before the first request is served).

    While the engine reports its database file deleted or replaced, every route but
    ``/api/health`` answers 503 naming the problem: a write would be acknowledged into a file
    nobody can open again.
    """
    return _running_engine(request)


async def get_service(request: Request) -> ScheduleService:
    """The schedule service bound to the engine's connection (``on_change`` wakes the tick)."""
    return _running_engine(request).service


async def get_reads(request: Request) -> Reads:
    """The read-only connection and its services, for routes that only read: a read there
    never waits for a write transaction on the engine's connection (503 as
    :func:`get_engine` while the database file is gone)."""
    _running_engine(request)
    reads: Reads = request.app.state.reads
    return reads


async def get_settings(request: Request) -> StudioSettings:
    """The settings the app was created with."""
    settings: StudioSettings = request.app.state.settings
    return settings


EngineDep = Annotated[SchedulerEngine, Depends(get_engine)]
ServiceDep = Annotated[ScheduleService, Depends(get_service)]
SettingsDep = Annotated[StudioSettings, Depends(get_settings)]
ReadsDep = Annotated[Reads, Depends(get_reads)]


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the error statuses a route can answer."""
    descriptions = {
        401: "Missing or wrong bearer token",
        404: "Not found",
        409: "Conflict",
        422: "Invalid input; `detail` names the field",
        503: "Database busy (retry), or unavailable (detail says why)",
    }
    return {
        code: {"model": ErrorOut, "description": descriptions[code]} for code in (*codes, 422, 503)
    }
