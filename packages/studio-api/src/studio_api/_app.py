"""``create_app``: the FastAPI app whose lifespan starts and stops the scheduler engine."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from studio_scheduler_core import SchedulerEngine, SchedulerError
from studio_state import StateError, run_sync

from .__about__ import __version__
from ._auth import PUBLIC_PATHS, AuthMiddleware
from ._body_limit import BodyLimitMiddleware
from ._dashboard import install_dashboard
from ._docs import install_docs
from ._errors import LastResortMiddleware, install_error_handlers
from ._metrics_route import METRICS_PATH, install_metrics_route
from ._models import ErrorOut
from ._observe import StudioMetrics
from ._reads import open_reads
from ._setting_values import shown_target
from ._settings import StudioSettings
from ._storage import StorageHealth
from .routes import (
    admin,
    audit,
    dispatch,
    health,
    run_ops,
    runs,
    schedule_sets,
    schedules,
    stats,
    tokens,
)

logger = logging.getLogger("studio_api")


def create_app(settings: StudioSettings | None = None) -> FastAPI:
    """The Studio app for ``settings`` (default: read from the environment now).

    The lifespan builds a :class:`SchedulerEngine` on ``settings.db``, starts it (migrating
    every package's tables, taking the database's engine lock, reconciling, then the tick)
    before the first request is served, and stops it on shutdown: fires in flight are
    cancelled, their children terminated and their runs left ``cancelled``.

    Raises :class:`SettingsError` when ``settings.host`` is not a loopback address and no auth
    token is set.
    """
    settings = settings if settings is not None else StudioSettings()
    settings.check_bind()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = SchedulerEngine(
            settings.db, settings=settings.to_scheduler_settings(), node_id=settings.node_id
        )
        app.state.startup_error = None
        try:
            await engine.start()
        except EXPECTED_STARTUP_ERRORS as exc:
            app.state.startup_error = exc
            raise
        app.state.engine = engine
        metrics.install()
        try:
            app.state.synchronous = await apply_synchronous(engine, settings.synchronous)
            app.state.reads = await open_reads(engine, settings.synchronous)
        except BaseException:
            await engine.stop()
            raise
        logger.info(
            "studio %s: scheduler started on %s as node %s (tick %ss, time zone %s, "
            "synchronous=%s)",
            __version__,
            shown_target(settings.db),
            engine.node_id,
            settings.tick_seconds,
            settings.timezone,
            app.state.synchronous,
        )
        try:
            yield
        finally:
            await app.state.reads.conn.close()
            await engine.stop()
            metrics.uninstall()
            logger.info("studio: scheduler stopped")

    app = FastAPI(
        title="Studio",
        version=__version__,
        summary="Schedules, runs and dispatch delivery of a Studio host.",
        lifespan=lifespan,
        docs_url=None,  # served from this machine by install_docs, not from a CDN
        redoc_url=None,
    )
    app.state.settings = settings
    metrics = StudioMetrics(settings.db, lambda: getattr(app.state, "engine", None))
    app.state.metrics = metrics
    install_metrics_route(app, metrics)
    app.state.storage = StorageHealth(settings.db_file, synchronous=settings.synchronous)
    app.state.synchronous = settings.synchronous
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(run_ops.router)
    app.include_router(schedules.router)
    app.include_router(stats.router)
    app.include_router(schedule_sets.router)
    app.include_router(runs.router)
    app.include_router(dispatch.router)
    app.include_router(audit.router)
    app.include_router(admin.router)
    app.include_router(tokens.router)
    install_dashboard(app)
    install_docs(app)
    app.add_middleware(LastResortMiddleware)
    # always installed: scoped tokens in the database enforce authentication on their own
    app.add_middleware(
        AuthMiddleware,
        owner=app,
        admin_token=(
            settings.auth_token.get_secret_value() if settings.auth_token is not None else None
        ),
        public=frozenset({METRICS_PATH}) if settings.metrics_public else frozenset(),
    )
    if settings.auth_token is not None:
        _document_bearer_auth(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(StartupMessageMiddleware, owner=app)
    return app


_SYNCHRONOUS_NAMES = {0: "off", 1: "normal", 2: "full", 3: "extra"}
#: What health shows as ``database.synchronous`` on PostgreSQL: its server decides
#: (``synchronous_commit``); ``LIONAGI_STUDIO_SYNCHRONOUS`` applies to SQLite only.
POSTGRES_SYNCHRONOUS = "server"
_SYNCHRONOUS_WAIT_SECONDS = 30.0


async def apply_synchronous(engine: SchedulerEngine, mode: str) -> str:
    """Set ``PRAGMA synchronous`` on the engine's connection (every request and the tick use
    it) and return the mode SQLite reports back, which health shows.

    The engine opens its connection with the library default (FULL) and its startup writes
    use it. WIRING: once SchedulerEngine takes ``synchronous=``, pass the setting there instead.
    SQLite refuses to change the mode inside a transaction, and the engine's tasks may have one
    open on the connection as soon as it started: the change waits for a moment between them.
    """
    if engine.backend == "postgresql":
        return POSTGRES_SYNCHRONOUS
    conn = engine.conn
    deadline = time.monotonic() + _SYNCHRONOUS_WAIT_SECONDS
    statement = f"PRAGMA synchronous = {mode.upper()}"

    def set_between_transactions(db: sqlite3.Connection) -> bool:
        # On the connection's thread, so no other task's statement comes between the check
        # and the change (SQLite refuses the change inside a transaction).
        if db.in_transaction:
            return False
        db.execute(statement)
        return True

    while (current := await _synchronous_of(conn)) != mode:
        if not await run_sync(conn, set_between_transactions):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"PRAGMA synchronous: the engine's connection stayed inside a transaction "
                    f"for {_SYNCHRONOUS_WAIT_SECONDS} s"
                )
            await asyncio.sleep(0.01)
    return current


async def _synchronous_of(conn: Any) -> str:
    async with conn.execute("PRAGMA synchronous") as cursor:
        row = await cursor.fetchone()
    value = next(iter(dict(row).values())) if row else None
    return _SYNCHRONOUS_NAMES.get(int(value), str(value)) if value is not None else "unknown"


#: Startup failures an operator can fix (another engine holds the database, a schema from a
#: newer release, an unwritable directory, a file that is not a database): reported in one line.
EXPECTED_STARTUP_ERRORS = (SchedulerError, StateError, OSError, sqlite3.Error)


class StartupMessageMiddleware:
    """Replace the traceback of an expected startup failure by a one-line message.

    Starlette reports a lifespan failure to the server as the formatted traceback; for the
    errors in :data:`EXPECTED_STARTUP_ERRORS` the operator gets ``studio cannot start: ...``
    instead. The failure itself is unchanged: the server does not serve and exits.
    """

    def __init__(self, app: ASGIApp, *, owner: FastAPI) -> None:
        self.app = app
        self.owner = owner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def rewriting_send(message: Message) -> None:
            error = getattr(self.owner.state, "startup_error", None)
            if message["type"] == "lifespan.startup.failed" and error is not None:
                message = {**message, "message": f"studio cannot start: {error}"}
            await send(message)

        await self.app(scope, receive, rewriting_send)


def create_app_from_env() -> FastAPI:
    """App factory for ``uvicorn --factory`` (reload mode): settings from the environment."""
    return create_app(StudioSettings())


def _document_bearer_auth(app: FastAPI) -> None:
    """Declare the bearer scheme and the 401 answer of every protected operation."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        components = schema.setdefault("components", {})
        components.setdefault("securitySchemes", {})["bearerAuth"] = {
            "type": "http",
            "scheme": "bearer",
        }
        error_ref = {"$ref": f"#/components/schemas/{ErrorOut.__name__}"}
        for path, operations in schema.get("paths", {}).items():
            if path in PUBLIC_PATHS:
                continue
            for operation in operations.values():
                operation["security"] = [{"bearerAuth": []}]
                operation.setdefault("responses", {})["401"] = {
                    "description": "Missing or wrong bearer token",
                    "content": {"application/json": {"schema": error_ref}},
                }
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
