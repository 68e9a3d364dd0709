"""The producer side on PostgreSQL: enqueue inside the producer's own transaction.

The validation and the SQL are the SQLite path's own (``studio_outbox._new_row`` and
``studio_outbox._enqueue``), and so are the public functions (``studio_outbox.enqueue_dispatch`` /
``enqueue_many``, and ``studio_outbox.sync``'s): this module only drives the one insert on a
psycopg (async or sync) or asyncpg connection, which those functions hand it. The insert fires the
``NOTIFY`` that wakes waiting deliverers, delivered when the producer's transaction commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._connections import ASYNC_EXPECTED, SYNC_EXPECTED, ConnectionKind, connection_kind, refuse
from .._enqueue import insert_steps
from .._new_row import NewRow
from ._drive import run_in_transaction_async, run_in_transaction_sync

_ASYNC_KINDS = (ConnectionKind.ASYNCPG, ConnectionKind.PSYCOPG_ASYNC)


async def insert_async(conn: Any, rows: Sequence[NewRow], now: float, actor: str) -> list[str]:
    """Insert validated ``rows`` on an asyncpg or psycopg async ``conn``, joining its open
    transaction (else in one of its own); any other connection raises
    :class:`UnsupportedConnection`."""
    if connection_kind(conn) not in _ASYNC_KINDS:
        raise refuse(conn, ASYNC_EXPECTED)
    return await run_in_transaction_async(conn, insert_steps(rows, now, actor))


def insert_sync(conn: Any, rows: Sequence[NewRow], now: float, actor: str) -> list[str]:
    """:func:`insert_async` on a psycopg (sync) ``Connection``."""
    if connection_kind(conn) is not ConnectionKind.PSYCOPG_SYNC:
        raise refuse(conn, SYNC_EXPECTED)
    return run_in_transaction_sync(conn, insert_steps(rows, now, actor))
