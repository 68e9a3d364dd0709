"""Mapping errors to HTTP answers: service errors are 4xx naming the field; never a bare 500.

- 422 ``{"detail": "<field>: <message>", "field", "errors"}``: request validation (body,
  query, path), malformed or undecodable JSON.
- 422 ``{"detail", "field"}``: ``ScheduleValidationError``, ``LaunchError``, outbox
  ``InvalidDispatch`` / ``InvalidArgument``.
- 404 ``{"detail", "field"}``: ``ScheduleNotFound``, ``RunNotFound``, ``DispatchNotFound``.
- 409 ``{"detail", "field": "name"}``: ``ScheduleNameTaken``.
- 409 ``{"detail", "reason_code"}``: ``FireRefused``.
- 409 ``{"detail"}``: ``InvalidDispatchState``, ``AckTokenMismatch``, ``AckNotRequired``,
  any other outbox or scheduler error.
- 503 ``{"detail"}`` with ``Retry-After``: SQLite busy or locked.
- 500 ``{"detail": "internal server error"}``: anything else, its traceback logged.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from studio_launcher import LaunchError
from studio_outbox import (
    AckNotRequired,
    AckTokenMismatch,
    DispatchNotFound,
    InvalidArgument,
    InvalidDispatch,
    InvalidDispatchState,
    OutboxError,
)
from studio_scheduler_core import (
    FireRefused,
    RunNotFound,
    ScheduleNameTaken,
    ScheduleNotFound,
    SchedulerError,
    ScheduleValidationError,
)

logger = logging.getLogger("studio_api")

_LOCATIONS = frozenset({"body", "query", "path", "header", "cookie"})


def error_body(
    detail: str, *, field: str | None = None, reason_code: str | None = None, **extra: Any
) -> dict[str, Any]:
    """The JSON body of every error answer."""
    body: dict[str, Any] = {"detail": detail}
    if field is not None:
        body["field"] = field
    if reason_code is not None:
        body["reason_code"] = reason_code
    body.update(extra)
    return body


def _field_of(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = list(loc)
    if parts and parts[0] in _LOCATIONS:
        where = parts.pop(0)
        if not parts:
            return str(where)
    return ".".join(str(part) for part in parts) or "body"


def _message(raw: object) -> str:
    return str(raw).removeprefix("Value error, ")


async def _request_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = []
    for error in exc.errors():
        loc = tuple(error.get("loc", ()))
        field = "body" if error.get("type") == "json_invalid" else _field_of(loc)
        errors.append(
            {"field": field, "message": _message(error.get("msg", "")), "type": error.get("type")}
        )
    if not errors:
        errors.append({"field": "body", "message": "invalid request", "type": "invalid"})
    first = errors[0]
    return JSONResponse(
        error_body(f"{first['field']}: {first['message']}", field=first["field"], errors=errors),
        status_code=422,
    )


async def _http_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:
        # FastAPI answers 400 for a body it cannot decode at all (not UTF-8, truncated); that
        # is invalid input like any other malformed JSON.
        return JSONResponse(error_body(f"body: {exc.detail}", field="body"), status_code=422)
    return JSONResponse(
        error_body(str(exc.detail)), status_code=exc.status_code, headers=exc.headers
    )


async def _schedule_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ScheduleValidationError)
    return JSONResponse(error_body(str(exc), field=exc.field), status_code=422)


async def _launch_error(request: Request, exc: Exception) -> JSONResponse:
    field = getattr(exc, "field", None)
    return JSONResponse(
        error_body(str(exc), field=field if isinstance(field, str) else None), status_code=422
    )


_NOT_FOUND_FIELD = {ScheduleNotFound: "schedule_id", RunNotFound: "run_id"}


async def _not_found(request: Request, exc: Exception) -> JSONResponse:
    field = next(
        (name for cls, name in _NOT_FOUND_FIELD.items() if isinstance(exc, cls)), "dispatch_id"
    )
    return JSONResponse(error_body(str(exc), field=field), status_code=404)


async def _name_taken(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(error_body(str(exc), field="name"), status_code=409)


async def _fire_refused(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, FireRefused)
    return JSONResponse(error_body(exc.message, reason_code=exc.reason_code), status_code=409)


async def _conflict(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(error_body(str(exc)), status_code=409)


async def _invalid_dispatch(request: Request, exc: Exception) -> JSONResponse:
    field = getattr(exc, "field", None)
    return JSONResponse(
        error_body(str(exc), field=field if isinstance(field, str) else None), status_code=422
    )


async def _operational(request: Request, exc: Exception) -> JSONResponse:
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return JSONResponse(
            error_body("database is busy, retry shortly"),
            status_code=503,
            headers={"Retry-After": "1"},
        )
    logger.error("database error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse(error_body("internal server error"), status_code=500)


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers of the table above on ``app``."""
    app.add_exception_handler(RequestValidationError, _request_validation)
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    app.add_exception_handler(ScheduleValidationError, _schedule_validation)
    app.add_exception_handler(LaunchError, _launch_error)
    app.add_exception_handler(ScheduleNotFound, _not_found)
    app.add_exception_handler(RunNotFound, _not_found)
    app.add_exception_handler(DispatchNotFound, _not_found)
    app.add_exception_handler(ScheduleNameTaken, _name_taken)
    app.add_exception_handler(FireRefused, _fire_refused)
    app.add_exception_handler(InvalidDispatch, _invalid_dispatch)
    app.add_exception_handler(InvalidArgument, _invalid_dispatch)
    for conflict in (InvalidDispatchState, AckTokenMismatch, AckNotRequired, OutboxError):
        app.add_exception_handler(conflict, _conflict)
    app.add_exception_handler(SchedulerError, _conflict)
    app.add_exception_handler(sqlite3.OperationalError, _operational)


_INTERNAL = json.dumps(error_body("internal server error")).encode()


class LastResortMiddleware:
    """Answer an unexpected exception with a plain 500 and log its traceback.

    Sits inside Starlette's error middleware, so the exception stops here instead of being
    printed a second time by the server; a response already under way cannot be replaced and
    is cut short instead.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            logger.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
            if started:
                raise
            await send(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(_INTERNAL)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": _INTERNAL})
