"""Opening connections with Studio's PRAGMAs."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from ._exceptions import InvalidSetting

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


def _prepare_path(path: str | Path) -> str:
    if str(path) == ":memory:":
        return ":memory:"
    db_path = Path(path).expanduser()
    db_path.parent.mkdir(parents=True, exist_ok=True)
    return str(db_path)


async def open_connection(
    path: str | Path, *, synchronous: str = DEFAULT_SYNCHRONOUS
) -> aiosqlite.Connection:
    """Open and configure a connection; the caller must ``await conn.close()``.

    ``synchronous`` is ``"full"`` (default: an acknowledged commit survives power loss) or
    ``"normal"`` (WAL's cheaper mode, which may lose the last commits on power loss); anything
    else raises :class:`InvalidSetting` before the file is touched.

    The connection runs in autocommit mode (``isolation_level=None``): transactions are only
    the explicit ones opened by :func:`studio_state.write_transaction` or by the caller, so
    ``conn.in_transaction`` tells exactly whether a caller's transaction is open.
    """
    pragmas = _pragmas(synchronous)
    conn = await aiosqlite.connect(
        _prepare_path(path),
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


@asynccontextmanager
async def connect(
    path: str | Path, *, synchronous: str = DEFAULT_SYNCHRONOUS
) -> AsyncIterator[aiosqlite.Connection]:
    """Open ``path`` (creating its parent directory) as an async context manager.

    The connection has ``journal_mode=WAL``, ``synchronous=FULL`` (or ``NORMAL`` when asked),
    ``foreign_keys=ON`` and ``busy_timeout=5000``, and returns rows as ``dict``. It is closed on
    exit.
    """
    conn = await open_connection(path, synchronous=synchronous)
    try:
        yield conn
    finally:
        await conn.close()
