"""``run()``: serve Studio with uvicorn (what ``studio serve`` calls)."""

from __future__ import annotations

import copy
import errno
import os
import socket
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from studio_scheduler_core import EVENTS_LOGGER

from ._app import create_app
from ._connections import install_accept_error_filter, raise_nofile_limit, server_options
from ._exceptions import PortUnavailable
from ._settings import StudioSettings
from ._startup_log import BannerServer, StartupGate, gated

#: uvicorn's exit status for a server that could not start.
STARTUP_FAILURE = 3

#: Loggers of the Studio packages, shown beside uvicorn's own in the same format.
STUDIO_LOGGERS = ("studio_api", "studio_scheduler_core", "studio_outbox", "studio_launcher")


def log_config(level: str = "info", log_format: str = "text") -> dict[str, Any]:
    """uvicorn's logging configuration plus the Studio packages' loggers at ``level``.

    ``log_format`` ``json`` writes one JSON object per line (scheduler events with ``event``,
    their ids and reason code). The scheduler's events logger runs at DEBUG for the metrics;
    the handlers keep ``level``.
    """
    config = copy.deepcopy(LOGGING_CONFIG)
    for name in STUDIO_LOGGERS:
        config["loggers"][name] = {
            "handlers": ["default"],
            "level": level.upper(),
            "propagate": False,
        }
    config["loggers"][EVENTS_LOGGER] = {
        "handlers": ["default"],
        "level": "DEBUG",
        "propagate": False,
    }
    for handler in ("default", "access"):
        config["handlers"][handler]["level"] = level.upper()
    if log_format == "json":
        for formatter in ("default", "access"):
            config["formatters"][formatter] = {"()": "studio_api._observe.JsonFormatter"}
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

    Once it listens it logs where the dashboard, the API docs and the metrics are.

    ``host``, ``port`` and ``db`` override ``settings`` (default: read from the environment).
    Raises :class:`SettingsError` for an invalid value or for a non-loopback ``host`` without
    ``LIONAGI_STUDIO_AUTH_TOKEN``, and :class:`PortUnavailable` when ``host:port`` is taken,
    before anything is bound or opened; when the engine cannot
    start (``EngineLocked``: another Studio serves this database, ``SchemaTooNew``, an
    unwritable path ...) that error is raised once the server has given up. With ``reload`` the
    server restarts on code changes and re-reads its settings from the environment, so the
    overrides are passed to it as the matching environment variables.
    """
    base = settings if settings is not None else StudioSettings()
    settings = base.with_overrides(host=host, port=port, db=db)
    settings.check_bind()
    check_port(settings.host, settings.port)
    raise_nofile_limit()
    install_accept_error_filter()
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
            log_config=log_config(log_level, settings.log_format),
        )
        return
    strip_secrets(settings)
    app = create_app(settings)
    gate = StartupGate()
    server = BannerServer(
        uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port,
            log_level=log_level,
            log_config=gated(log_config(log_level, settings.log_format), gate),
            timeout_graceful_shutdown=10,
            **server_options(),
        ),
        gate,
    )
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    except SystemExit:
        if server.started:
            raise
    if server.started:
        return
    # uvicorn gave up during startup; give the caller the reason instead, said once
    error = getattr(app.state, "startup_error", None)
    if isinstance(error, BaseException):
        gate.discard()
        raise error from None
    gate.release()
    raise SystemExit(STARTUP_FAILURE)


def check_port(host: str, port: int) -> None:
    """Raise :class:`PortUnavailable` if ``host:port`` cannot be bound now (port 0 always can).

    Checked before the app starts: the engine takes the database's lock and reconciles its
    runs on startup, which a server that then fails to bind must not do.
    """
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise PortUnavailable(host, port, str(exc)) from None
    family, _, _, _, address = infos[0]
    probe = socket.socket(family, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds it
        probe.bind(address)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            reason += " (another server is listening there)"
        raise PortUnavailable(host, port, reason) from None
    finally:
        probe.close()


def strip_secrets(settings: StudioSettings) -> None:
    """Remove the secrets children and transports must not inherit from this process's
    environment (the settings already hold them), so every child and notify transport this
    server starts, whoever builds its environment, goes without them."""
    # The scheduled children get SchedulerSettings.child_env (the same mapping); the notify
    # transport copies os.environ. WIRING: once the outbox's argv transport takes env=, the
    # engine should pass it SchedulerSettings.child_env too, and this becomes belt and braces.
    for name in settings.stripped_secrets():
        os.environ.pop(name, None)
