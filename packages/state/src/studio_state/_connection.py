"""Opening connections: a SQLite file with Studio's PRAGMAs, or a PostgreSQL URL."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, cast

import aiosqlite

from ._backend import connect_postgres, is_postgres, postgres_module, register
from ._exceptions import InvalidSetting
from ._ownership import GatedConnection

BUSY_TIMEOUT_MS = 5000

SYNCHRONOUS_MODES = ("full", "normal")
"""Accepted values of ``synchronous=``: ``full`` (the default) survives power loss, ``normal``
may lose the last commits on power loss in exchange for fewer fsyncs."""

DEFAULT_SYNCHRONOUS = "full"


def check_synchronous(value: str) -> str:
    """Return ``value`` normalised to ``full`` or ``normal``; raise :class:`InvalidSetting`."""
    mode = value.strip().lower() if isinstance(value, str) else value
    if mode not in SYNCHRONOUS_MODES:
        raise InvalidSetting(f"synchronous must be 'full' or 'normal', got {value!r}")
    return str(mode)


def _pragmas(synchronous: str) -> tuple[str, ...]:
    return (
        "PRAGMA journal_mode=WAL",
        f"PRAGMA synchronous={check_synchronous(synchronous).upper()}",
        "PRAGMA foreign_keys=ON",
        f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}",
    )


def dict_row_factory(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    """Row factory that returns each row as a plain ``dict`` keyed by column name."""
    return {col[0]: value for col, value in zip(cursor.description, row, strict=True)}


def _prepare_path(path: str | os.PathLike[str]) -> str:
    if str(path) == ":memory:":
        return ":memory:"
    db_path = Path(path).expanduser()
    db_path.parent.mkdir(parents=True, exist_ok=True)
    return str(db_path)


_LEVELS = {"normal": 1, "full": 2}


async def open_connection(
    target: str | os.PathLike[str],
    *,
    synchronous: str = DEFAULT_SYNCHRONOUS,
    application_name: str | None = None,
) -> aiosqlite.Connection:
    """Open and configure a connection; the caller must ``await conn.close()``.

    ``target`` is a SQLite database path or a PostgreSQL URL (``postgresql://…``, see
    :func:`is_postgres`; needs ``pip install 'studio-state[postgres]'``, else
    :class:`InvalidSetting`). Either way the result is an ``aiosqlite.Connection`` with
    ``dict`` rows on which Studio's stores, transactions and :func:`run_sync` work; on
    PostgreSQL its worker thread drives a DB-API object over a psycopg connection (qmark
    placeholders, ``BEGIN IMMEDIATE`` as ``BEGIN``, Studio's ``PRAGMA`` statements answered,
    errors as ``sqlite3`` classes; see ``studio_state._pg_dbapi``). ``backend_of(conn)`` tells
    which one it is.

    ``synchronous`` is ``"full"`` (default: an acknowledged commit survives power loss) or
    ``"normal"`` (WAL's cheaper mode, which may lose the last commits on power loss); anything
    else raises :class:`InvalidSetting` before the file is touched. On PostgreSQL the value is
    checked and reported by ``PRAGMA synchronous`` but changes nothing: durability is the
    server's ``synchronous_commit``. ``application_name`` names a PostgreSQL session (as
    ``pg_stat_activity`` shows it); it is ignored for SQLite.

    The connection runs in autocommit mode (``isolation_level=None``): transactions are only
    the explicit ones opened by :func:`studio_state.write_transaction` or by the caller, so
    ``conn.in_transaction`` tells exactly whether a caller's transaction is open.
    """
    pragmas = _pragmas(synchronous)
    if is_postgres(target):
        return await _open_postgres(str(target), synchronous, application_name)
    conn = await aiosqlite.connect(
        _prepare_path(target),
        isolation_level=None,
        timeout=BUSY_TIMEOUT_MS / 1000,
    )
    try:
        for pragma in pragmas:
            await conn.execute(pragma)
    except BaseException:
        await conn.close()
        raise
    conn.row_factory = dict_row_factory  # type: ignore[assignment]  # aiosqlite types it as a class
    return conn


async def _open_postgres(
    url: str, synchronous: str, application_name: str | None
) -> aiosqlite.Connection:
    postgres_module()  # InvalidSetting naming the extra, before a thread is started
    level = _LEVELS[check_synchronous(synchronous)]
    # The session is opened before aiosqlite's worker thread exists: a server that refuses
    # it raises here with no thread left behind (aiosqlite stops a thread whose connector
    # failed without waiting for it, and that thread then reports to a loop that may be
    # closed by the time it runs).
    opened = await asyncio.to_thread(
        partial(connect_postgres, url, synchronous=level, application_name=application_name)
    )
    # aiosqlite drives whatever its connector returns with sqlite3's DB-API calls; another
    # task's statement waits for an open transaction instead of running inside it.
    conn = GatedConnection(
        cast("Callable[[], sqlite3.Connection]", lambda: opened), iter_chunk_size=64
    )
    await conn
    register(conn)
    return conn


@asynccontextmanager
async def connect(
    target: str | os.PathLike[str],
    *,
    synchronous: str = DEFAULT_SYNCHRONOUS,
    application_name: str | None = None,
) -> AsyncIterator[aiosqlite.Connection]:
    """Open ``target`` (a SQLite path, its parent directory created, or a PostgreSQL URL) as
    an async context manager; arguments as :func:`open_connection`.

    A SQLite connection has ``journal_mode=WAL``, ``synchronous=FULL`` (or ``NORMAL`` when
    asked), ``foreign_keys=ON`` and ``busy_timeout=5000``. Rows are ``dict``. It is closed on
    exit.
    """
    conn = await open_connection(target, synchronous=synchronous, application_name=application_name)
    try:
        yield conn
    finally:
        await conn.close()


def connect_sync(
    target: str | os.PathLike[str],
    *,
    synchronous: str = DEFAULT_SYNCHRONOUS,
    application_name: str | None = None,
) -> sqlite3.Connection:
    """A synchronous connection to ``target`` (arguments as :func:`open_connection`).

    For a SQLite path: a ``sqlite3.Connection`` with the same settings as
    :func:`open_connection` (autocommit, Studio's PRAGMAs, ``dict`` rows). For a PostgreSQL
    URL: the DB-API object that :func:`open_connection` drives on its thread (typed as a
    ``sqlite3.Connection``: it answers the same calls), usable from one thread at a time.
    The caller closes it.
    """
    pragmas = _pragmas(synchronous)
    if is_postgres(target):
        level = _LEVELS[check_synchronous(synchronous)]
        db = connect_postgres(str(target), synchronous=level, application_name=application_name)
        return cast(sqlite3.Connection, db)
    conn = sqlite3.connect(
        _prepare_path(target), isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000
    )
    try:
        for pragma in pragmas:
            conn.execute(pragma)
    except BaseException:
        conn.close()
        raise
    conn.row_factory = dict_row_factory
    return conn
