"""Which driver a producer's connection belongs to, told without importing any driver.

The enqueue functions take a producer's own connection: ``aiosqlite``/``sqlite3`` (SQLite or
Studio's own PostgreSQL connections), or on PostgreSQL an asyncpg connection or a psycopg 3
``AsyncConnection``/``Connection``. A PostgreSQL driver that was never imported cannot have
made ``conn``, so each is looked up in ``sys.modules`` only: importing the outbox never
imports asyncpg or psycopg, and works where they are not installed.
"""

from __future__ import annotations

import sqlite3
import sys
from enum import Enum

import aiosqlite

from ._exceptions import UnsupportedConnection


class ConnectionKind(Enum):
    """The driver behind a connection handed to the outbox."""

    AIOSQLITE = "aiosqlite"
    SQLITE3 = "sqlite3"
    ASYNCPG = "asyncpg"
    PSYCOPG_ASYNC = "psycopg-async"
    PSYCOPG_SYNC = "psycopg-sync"
    UNKNOWN = "unknown"


ASYNC_EXPECTED = (
    "an aiosqlite.Connection, an asyncpg connection or a psycopg AsyncConnection "
    "(use studio_outbox.sync for sqlite3 and psycopg Connection)"
)
SYNC_EXPECTED = (
    "a sqlite3.Connection or a psycopg Connection "
    "(use the functions of studio_outbox itself for aiosqlite, asyncpg and psycopg "
    "AsyncConnection)"
)


def connection_kind(conn: object) -> ConnectionKind:
    """The driver of ``conn`` (:attr:`ConnectionKind.UNKNOWN` for anything else)."""
    if isinstance(conn, aiosqlite.Connection):
        return ConnectionKind.AIOSQLITE
    if isinstance(conn, sqlite3.Connection) or getattr(conn, "backend", None) == "postgresql":
        # The latter: studio_state.connect_sync's PostgreSQL connection, which answers
        # sqlite3's calls.
        return ConnectionKind.SQLITE3
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        if isinstance(conn, psycopg.AsyncConnection):
            return ConnectionKind.PSYCOPG_ASYNC
        if isinstance(conn, psycopg.Connection):
            return ConnectionKind.PSYCOPG_SYNC
    asyncpg = sys.modules.get("asyncpg")
    if asyncpg is not None:
        # A pool's connection is a proxy of asyncpg.pool, not an asyncpg.Connection.
        pool = sys.modules.get("asyncpg.pool")
        proxy = getattr(pool, "PoolConnectionProxy", None)
        if isinstance(conn, asyncpg.Connection) or (proxy is not None and isinstance(conn, proxy)):
            return ConnectionKind.ASYNCPG
    return ConnectionKind.UNKNOWN


def refuse(conn: object, expected: str) -> UnsupportedConnection:
    """The error for a ``conn`` of the wrong kind (to raise)."""
    kind = type(conn)
    return UnsupportedConnection(f"{kind.__module__}.{kind.__qualname__}", expected)
