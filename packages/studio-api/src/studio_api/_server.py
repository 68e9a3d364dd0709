"""``run()``: serve Studio with uvicorn (what ``studio serve`` calls)."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from ._app import create_app
from ._settings import StudioSettings

#: Loggers of the Studio packages, shown beside uvicorn's own in the same format.
STUDIO_LOGGERS = ("studio_api", "studio_scheduler_core", "studio_outbox", "studio_launcher")


def log_config(level: str = "info") -> dict[str, Any]:
    """uvicorn's logging configuration plus the Studio packages' loggers at ``level``."""
    config = copy.deepcopy(LOGGING_CONFIG)
    for name in STUDIO_LOGGERS:
        config["loggers"][name] = {
            "handlers": ["default"],
            "level": level.upper(),
            "propagate": False,
        }
    return config


def run(
    settings: StudioSettings | None = None,
    *,
    host: str | None = None,
    port: int | None = None,
    db: str | Path | None = None,
    reload: bool = False,
    log_level: str = "info",
) -> None:
    """Serve Studio until interrupted; blocks.

    ``host``, ``port`` and ``db`` override ``settings`` (default: read from the environment).
    Raises :class:`SettingsError` for an invalid value or for a non-loopback ``host`` without
    ``LIONAGI_STUDIO_AUTH_TOKEN``, before anything is bound or opened; when the engine cannot
    start (``EngineLocked``: another Studio serves this database, ``SchemaTooNew``, an
    unwritable path ...) that error is raised once the server has given up. With ``reload`` the
    server restarts on code changes and re-reads its settings from the environment, so the
    overrides are passed to it as the matching environment variables.
    """
    base = settings if settings is not None else StudioSettings()
    settings = base.with_overrides(host=host, port=port, db=db)
    settings.check_bind()
    if reload:
        for name in ("host", "port", "db"):
            value = getattr(settings, name)
            os.environ[StudioSettings.ENV_VARS[name]] = str(value)
        uvicorn.run(
            "studio_api._app:create_app_from_env",
            factory=True,
            reload=True,
            host=settings.host,
            port=settings.port,
            log_level=log_level,
            log_config=log_config(log_level),
        )
        return
    app = create_app(settings)
    try:
        uvicorn.run(
            app,
            host=settings.host,
            port=settings.port,
            log_level=log_level,
            log_config=log_config(log_level),
            timeout_graceful_shutdown=10,
        )
    except SystemExit:
        # uvicorn exits when the lifespan fails; give the caller the reason instead
        error = getattr(app.state, "startup_error", None)
        if isinstance(error, BaseException):
            raise error from None
        raise
