"""Small typed query helpers over a Studio connection (rows are ``dict``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

import aiosqlite

Row = dict[str, Any]


async def fetch_all(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] | dict[str, Any] = ()
) -> list[Row]:
    """Run ``sql`` and return every row as a ``dict``."""
    async with conn.execute(sql, params) as cursor:
        rows = await cursor.fetchall()
    return cast("list[Row]", list(rows))


async def fetch_one(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] | dict[str, Any] = ()
) -> Row | None:
    """Run ``sql`` and return its first row as a ``dict``, or ``None``."""
    async with conn.execute(sql, params) as cursor:
        row = await cursor.fetchone()
    return cast("Row | None", row)


async def fetch_value(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] | dict[str, Any] = ()
) -> Any:
    """Run ``sql`` and return the first column of its first row (``None`` when no row)."""
    async with conn.execute(sql, params) as cursor:
        row = await cursor.fetchone()
    if row is None:
        return None
    return next(iter(cast("Row", row).values()))


async def execute(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] | dict[str, Any] = ()
) -> int:
    """Run one statement and return its ``rowcount``."""
    async with conn.execute(sql, params) as cursor:
        return cursor.rowcount


async def execute_many(
    conn: aiosqlite.Connection, sql: str, params: Iterable[Sequence[Any]]
) -> None:
    """Run one statement for each parameter tuple (one round trip)."""
    await conn.executemany(sql, params)
