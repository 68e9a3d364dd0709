"""Request dependencies: the engine and the settings the lifespan put on ``app.state``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from studio_scheduler_core import SchedulerEngine, ScheduleService

from ._models import ErrorOut
from ._settings import StudioSettings


def get_engine(request: Request) -> SchedulerEngine:
    """The running engine (started by the lifespan before the first request is served)."""
    engine: SchedulerEngine = request.app.state.engine
    return engine


def get_service(request: Request) -> ScheduleService:
    """The schedule service bound to the engine's connection (``on_change`` wakes the tick)."""
    return get_engine(request).service


def get_settings(request: Request) -> StudioSettings:
    """The settings the app was created with."""
    settings: StudioSettings = request.app.state.settings
    return settings


EngineDep = Annotated[SchedulerEngine, Depends(get_engine)]
ServiceDep = Annotated[ScheduleService, Depends(get_service)]
SettingsDep = Annotated[StudioSettings, Depends(get_settings)]


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the error statuses a route can answer."""
    descriptions = {
        401: "Missing or wrong bearer token",
        404: "Not found",
        409: "Conflict",
        422: "Invalid input; `detail` names the field",
        503: "Database busy; retry",
    }
    return {
        code: {"model": ErrorOut, "description": descriptions[code]} for code in (*codes, 422, 503)
    }
