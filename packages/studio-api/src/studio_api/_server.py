"""``run()``: serve Studio with uvicorn (what ``studio serve`` calls)."""

from __future__ import annotations

import os
from pathlib import Path

import uvicorn

from ._app import create_app
from ._settings import StudioSettings


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
    ``LIONAGI_STUDIO_AUTH_TOKEN``, before anything is bound or opened. With ``reload`` the
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
        )
        return
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        timeout_graceful_shutdown=10,
    )
