"""Mapping errors to HTTP answers: service errors are 4xx naming the field; never a bare 500.

- 422 ``{"detail": "<field>: <message>", "field", "errors"}``: request validation (body,
  query, path), malformed or undecodable JSON.
- 422 ``{"detail", "field"}``: ``ScheduleValidationError``, ``LaunchError``, outbox
  ``InvalidDispatch`` / ``InvalidArgument``.
- 404 ``{"detail", "field"}``: ``ScheduleNotFound``, ``RunNotFound``, ``DispatchNotFound``.
- 409 ``{"detail", "field": "name"}``: ``ScheduleNameTaken``.
- 409 ``{"detail", "reason_code"}``: ``FireRefused``, ``RunNotCancellable``,
  ``ScheduleHasRunningRuns``; with ``"field": "at"``: ``ScheduleAtPassed``.
- 409 ``{"detail"}``: ``InvalidDispatchState``, ``AckTokenMismatch``, ``AckNotRequired``,
  any other outbox or scheduler error.
- 503 ``{"detail"}`` with ``Retry-After``: the database busy or locked; a storage fault
  (read-only or full file system, I/O error, corrupt or unopenable file:
  :func:`storage_problem`), whatever error wraps it, with the problem in ``detail``; health
  reports it (``degraded``).
- 500 ``{"detail": "internal server error"}``: anything else, its traceback logged.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sqlite3
from pathlib import Path
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
    RunNotCancellable,
    RunNotFound,
    ScheduleAtPassed,
    ScheduleHasRunningRuns,
    ScheduleNameTaken,
    ScheduleNotFound,
    SchedulerError,
    ScheduleValidationError,
)
from studio_state import StorageFault, is_busy_error, storage_fault_of

logger = logging.getLogger("studio_api")

# What each storage fault (classified by its code: SQLite's result code, PostgreSQL's
# SQLSTATE; never by the message, which a build, a wrapper or ``lc_messages`` may reword).
_FAULTS: dict[StorageFault, str] = {
    "readonly": "the database is read-only",
    "full": "the disk is full",
    "io": "disk I/O error",
    "corrupt": "the database file is corrupt",
    "cantopen": "the database file cannot be opened",
}
# The faults the file system's own answer makes more precise.
_REFINED: frozenset[StorageFault] = frozenset({"io", "readonly", "full"})
_MAX_CHAIN = 8


_FS_ERRNOS = {
    errno.EROFS: "the file system is read-only",
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EIO: "the device reports I/O errors",
}


def file_system_state(path: Path | None) -> str | None:
    """What the file system under ``path`` says to a small write beside it now: read-only,
    out of space, I/O errors; ``None`` when the write succeeds (or fails for another reason).

    SQLite reports most of these as a plain "disk I/O error"; the file system's own answer
    tells the operator which it is (a file system remounted read-only after an error does not
    always say so in its mount flags).
    """
    if path is None:
        return None
    probe = path.with_name(f".{path.name}.probe-{os.getpid()}")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"\0" * 4096)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        return _FS_ERRNOS.get(exc.errno or 0)
    return None


def storage_problem(exc: BaseException, db_path: Path | None = None) -> str | None:
    """A one-line description if ``exc`` (or an exception it was raised from) is a storage
    fault (read-only, full, I/O error, corrupt, cannot open: by SQLite's result code or
    PostgreSQL's SQLSTATE, :func:`studio_state.storage_fault_of`); else ``None``.

    ``db_path`` lets the description say what the file system reports (an I/O error on a file
    system that turned read-only says so). This is the one place that classifies storage
    faults; the answer of every route and of health follows it.
    """
    seen: BaseException | None = exc
    for _ in range(_MAX_CHAIN):
        if seen is None:
            return None
        fault = storage_fault_of(seen) if isinstance(seen, sqlite3.Error) else None
        if fault is not None:
            what = _FAULTS[fault]
            if fault in _REFINED:
                state = file_system_state(db_path)
                if state is not None and state != what:
                    what = f"{what}: {state}"
            where = f" ({db_path})" if db_path is not None else ""
            return f"storage fault{where}: {what} ({seen})"
        if isinstance(seen, OSError) and seen.errno in (errno.EROFS, errno.ENOSPC, errno.EIO):
            return f"storage fault: {seen.strerror}"
        seen = seen.__cause__ or seen.__context__
    return None


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
    field = "body" if exc.status_code == 413 else None
    return JSONResponse(
        error_body(str(exc.detail), field=field), status_code=exc.status_code, headers=exc.headers
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


async def _refused_with_reason(request: Request, exc: Exception) -> JSONResponse:
    reason, field = getattr(exc, "reason_code", None), getattr(exc, "field", None)
    return JSONResponse(
        error_body(
            str(exc),
            field=field if isinstance(field, str) else None,
            reason_code=reason if isinstance(reason, str) else None,
        ),
        status_code=409,
    )


async def _conflict(request: Request, exc: Exception) -> JSONResponse:
    fault = storage_fault_response(request.app, exc)  # a library error raised from one
    if fault is not None:
        return fault
    return JSONResponse(error_body(str(exc)), status_code=409)


async def _invalid_dispatch(request: Request, exc: Exception) -> JSONResponse:
    field = getattr(exc, "field", None)
    return JSONResponse(
        error_body(str(exc), field=field if isinstance(field, str) else None), status_code=422
    )


def storage_fault_response(app: Any, exc: BaseException) -> JSONResponse | None:
    """503 naming the storage fault behind ``exc`` (recorded for health), or ``None``."""
    settings = getattr(getattr(app, "state", None), "settings", None)
    db_path = getattr(settings, "db", None)
    problem = storage_problem(exc, db_path if isinstance(db_path, Path) else None)
    if problem is None:
        return None
    storage = getattr(app.state, "storage", None)
    if storage is not None:
        if storage.problem != problem:
            logger.error("%s", problem)  # once per distinct problem, without a traceback
        storage.record(problem)
    return JSONResponse(error_body(problem), status_code=503, headers={"Retry-After": "30"})


async def _database_error(request: Request, exc: Exception) -> JSONResponse:
    if is_busy_error(exc):
        # One line: on PostgreSQL a deadlock is a lock-order bug worth seeing in the log.
        logger.warning("database busy on %s %s: %s", request.method, request.url.path, exc)
        return JSONResponse(
            error_body("database is busy, retry shortly"),
            status_code=503,
            headers={"Retry-After": "1"},
        )
    fault = storage_fault_response(request.app, exc)
    if fault is not None:
        return fault
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
    app.add_exception_handler(RunNotCancellable, _refused_with_reason)
    app.add_exception_handler(ScheduleHasRunningRuns, _refused_with_reason)
    app.add_exception_handler(ScheduleAtPassed, _refused_with_reason)
    app.add_exception_handler(InvalidDispatch, _invalid_dispatch)
    app.add_exception_handler(InvalidArgument, _invalid_dispatch)
    for conflict in (InvalidDispatchState, AckTokenMismatch, AckNotRequired, OutboxError):
        app.add_exception_handler(conflict, _conflict)
    app.add_exception_handler(SchedulerError, _conflict)
    app.add_exception_handler(sqlite3.Error, _database_error)


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
        except Exception as exc:
            fault = None if started else storage_fault_response(scope.get("app"), exc)
            if fault is not None:
                await fault(scope, receive, send)
                return
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
