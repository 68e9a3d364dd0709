"""One trip to a connection's own thread: run a plain function against its ``sqlite3`` handle.

An ``aiosqlite.Connection`` owns a worker thread that holds the real ``sqlite3.Connection``;
every ``await conn.execute(...)`` is one trip there and back (a queue put, a thread wake-up
and an event-loop wake-up). A transaction of several statements pays that per statement.
:func:`run_sync` pays it once for a whole function.

This module is the only place in Studio that touches aiosqlite's internals: the worker's
private ``_execute`` (queue a callable, await its result) and ``_conn`` (the ``sqlite3``
handle, only read on the worker thread). Both have been there since aiosqlite 0.17; if a
future release drops them, :func:`run_sync` raises :class:`StateError` naming the version.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import aiosqlite

from ._exceptions import ConnectionClosed, StateError

T = TypeVar("T")


def _version() -> str:
    return str(getattr(aiosqlite, "__version__", "unknown"))


def _submitter(conn: aiosqlite.Connection) -> Callable[[Callable[[], Any]], Awaitable[Any]]:
    submit = getattr(conn, "_execute", None)
    if not callable(submit) or not isinstance(getattr(type(conn), "_conn", None), property):
        raise StateError(
            f"aiosqlite {_version()} has no worker-thread entry point (Connection._execute / "
            "Connection._conn): studio-state needs aiosqlite >= 0.17 with that interface"
        )
    return cast("Callable[[Callable[[], Any]], Awaitable[Any]]", submit)


async def run_sync(conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``fn(db)`` on ``conn``'s own thread, where ``db`` is its ``sqlite3.Connection``.

    One round trip for the whole function, however many statements it runs. ``db`` has
    ``conn``'s settings (autocommit mode, the row factory — ``dict`` rows on a Studio
    connection — and the PRAGMAs). ``fn`` runs after every call already queued on ``conn``
    and before any queued later, so it sees their effects; it must not block on the event
    loop (it runs in another thread) and must not keep ``db`` past its return.

    Whatever ``fn`` raises is raised here. A closed connection raises
    :class:`ConnectionClosed`. Cancelling the awaiting task does not stop ``fn`` once the
    thread has taken it: it runs to its end.

    On a PostgreSQL connection (:func:`studio_state.open_connection` on a URL) ``db`` is the
    DB-API object over psycopg that answers the same calls (:func:`studio_state.backend_of`
    tells which).

    This does not open a transaction: use :func:`run_write_transaction` for writes.
    """
    submit = _submitter(conn)
    started = False

    def call() -> T:
        nonlocal started
        started = True
        try:
            db: sqlite3.Connection = getattr(conn, "_conn")  # noqa: B009
        except ValueError as exc:  # aiosqlite's "no active connection"
            raise ConnectionClosed("the connection is closed") from exc
        return fn(db)

    try:
        return cast(T, await submit(call))
    except ValueError as exc:
        if started or isinstance(exc, ConnectionClosed):
            raise
        # aiosqlite refuses to queue on a closed connection with a bare ValueError.
        raise ConnectionClosed("the connection is closed") from exc
