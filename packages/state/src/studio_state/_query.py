"""Small typed query helpers over a Studio connection (rows are ``dict``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

import aiosqlite

Row = dict[str, Any]


# Each helper is one round trip to the connection's thread (``execute_fetchall``), where a
# cursor's execute + fetch + close would be three: the hot paths (a fire, a tick, an API read)
# call these many times.


async def fetch_all(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] | dict[str, Any] = ()
) -> list[Row]:
    """Run ``sql`` and return every row as a ``dict`` (one round trip)."""
    rows = await conn.execute_fetchall(sql, params)
    return cast("list[Row]", list(rows))


async def fetch_one(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] | dict[str, Any] = ()
) -> Row | None:
    """Run ``sql`` and return its first row as a ``dict``, or ``None`` (one round trip).

    The whole result is read, so give it a query that yields one row: a key lookup, an
    aggregate or ``LIMIT 1``.
    """
    rows = await conn.execute_fetchall(sql, params)
    for row in rows:
        return cast("Row", row)
    return None


async def fetch_value(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] | dict[str, Any] = ()
) -> Any:
    """The first column of the first row of ``sql`` (``None`` when no row; one round trip).

    As with :func:`fetch_one`, the whole result is read.
    """
    row = await fetch_one(conn, sql, params)
    if row is None:
        return None
    return next(iter(row.values()))


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


async def fetch_ids_in(
    conn: aiosqlite.Connection, sql: str, ids: Sequence[str], *, chunk: int = 500
) -> set[str]:
    """The ``id`` column of ``sql`` run over ``ids``, ``chunk`` at a time: ``sql`` has one
    ``{marks}`` where the ``IN`` list's placeholders go (a bounded statement per chunk)."""
    found: set[str] = set()
    for start in range(0, len(ids), chunk):
        part = tuple(ids[start : start + chunk])
        rows = await conn.execute_fetchall(sql.format(marks=", ".join("?" * len(part))), part)
        found.update(str(cast("Row", row)["id"]) for row in rows)
    return found
