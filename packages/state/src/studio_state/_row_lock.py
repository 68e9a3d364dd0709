"""Row locks for check-then-act transactions on PostgreSQL.

On SQLite a write transaction (``BEGIN IMMEDIATE``) holds the database's one write lock from
its first statement, so what it reads cannot change before it writes. On PostgreSQL (READ
COMMITTED) another session can change a row between this transaction's read and its write:
a transaction that decides from a row it then changes locks that row first
(``SELECT … FOR UPDATE``). A concurrent writer of the row waits for this transaction to end,
and every statement after the lock reads what the other committed.
"""

from __future__ import annotations

import re
from typing import Final

import aiosqlite

from ._backend import backend_of

_NAME: Final = re.compile(r"[a-z_][a-z0-9_]*")


async def lock_rows(
    conn: aiosqlite.Connection, table: str, column: str, value: object, *, statuses: tuple[str, ...]
) -> None:
    """Lock the rows of ``table`` whose ``column`` is ``value`` and whose ``status`` is one of
    ``statuses`` (PostgreSQL; nothing on SQLite). A row another transaction is changing is
    waited for; the statements after this one see what it committed."""
    for name in (table, column):
        if not _NAME.fullmatch(name):
            raise ValueError(f"not a plain name: {name!r}")
    if backend_of(conn) != "postgresql" or not statuses:
        return
    marks = ", ".join("?" * len(statuses))
    # In ``id`` order: two transactions locking overlapping sets never wait on each other in
    # opposite orders (a deadlock, which PostgreSQL ends by aborting one of them).
    await conn.execute(
        f"SELECT id FROM {table} WHERE {column} = ? AND status IN ({marks}) ORDER BY id FOR UPDATE",
        (value, *statuses),
    )


async def lock_row(conn: aiosqlite.Connection, table: str, row_id: str) -> bool:
    """Lock the row of ``table`` whose ``id`` is ``row_id`` until the open transaction ends
    (PostgreSQL: ``FOR UPDATE``; SQLite: nothing to do, the write lock is held). Returns
    whether the row exists (always ``True`` on SQLite). Call it inside a write transaction.
    """
    if not _NAME.fullmatch(table):
        raise ValueError(f"table: not a plain table name: {table!r}")
    if backend_of(conn) != "postgresql":
        return True
    cursor = await conn.execute(f"SELECT id FROM {table} WHERE id = ? FOR UPDATE", (row_id,))
    return await cursor.fetchone() is not None
