"""Opening connections with Studio's PRAGMAs."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

BUSY_TIMEOUT_MS = 5000

_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA foreign_keys=ON",
    f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}",
)


def dict_row_factory(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    """Row factory that returns each row as a plain ``dict`` keyed by column name."""
    return {col[0]: value for col, value in zip(cursor.description, row, strict=True)}


def _prepare_path(path: str | Path) -> str:
    if str(path) == ":memory:":
        return ":memory:"
    db_path = Path(path).expanduser()
    db_path.parent.mkdir(parents=True, exist_ok=True)
    return str(db_path)


async def open_connection(path: str | Path) -> aiosqlite.Connection:
    """Open and configure a connection; the caller must ``await conn.close()``.

    The connection runs in autocommit mode (``isolation_level=None``): transactions are only
    the explicit ones opened by :func:`studio_state.write_transaction` or by the caller, so
    ``conn.in_transaction`` tells exactly whether a caller's transaction is open.
    """
    conn = await aiosqlite.connect(
        _prepare_path(path),
        isolation_level=None,
        timeout=BUSY_TIMEOUT_MS / 1000,
    )
    try:
        for pragma in _PRAGMAS:
            await conn.execute(pragma)
    except BaseException:
        await conn.close()
        raise
    conn.row_factory = dict_row_factory  # type: ignore[assignment]  # aiosqlite types it as a class
    return conn


@asynccontextmanager
async def connect(path: str | Path) -> AsyncIterator[aiosqlite.Connection]:
    """Open ``path`` (creating its parent directory) as an async context manager.

    The connection has ``journal_mode=WAL``, ``synchronous=NORMAL``, ``foreign_keys=ON`` and
    ``busy_timeout=5000``, and returns rows as ``dict``. It is closed on exit.
    """
    conn = await open_connection(path)
    try:
        yield conn
    finally:
        await conn.close()
