from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from studio_state.testing_pg import PostgresUnavailable, start_cluster


@pytest.fixture(scope="session")
def pg_cluster_dsn() -> Iterator[str]:
    """A throwaway PostgreSQL cluster for the session; fails (never skips) without binaries."""
    try:
        cluster = start_cluster()
    except PostgresUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield cluster.dsn
    finally:
        cluster.stop()


@pytest.fixture
async def pg_dsn(pg_cluster_dsn: str) -> AsyncIterator[str]:
    """A DSN of a new, empty database of the cluster for each test (dropped afterwards)."""
    name = f"test_{next(_databases)}"
    async with await psycopg.AsyncConnection.connect(pg_cluster_dsn, autocommit=True) as conn:
        await conn.execute(f"CREATE DATABASE {name}")
    try:
        yield pg_cluster_dsn.rsplit("/", 1)[0] + "/" + name
    finally:
        async with await psycopg.AsyncConnection.connect(pg_cluster_dsn, autocommit=True) as conn:
            await conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


_databases = itertools.count()

Rows = Callable[..., Awaitable[list[dict[str, Any]]]]


@pytest.fixture
def pg_rows(pg_dsn: str) -> Rows:
    """``await pg_rows(sql, params)``: every row as dicts, read on a connection of its own."""

    async def read(sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        async with (
            await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn,
            conn.cursor(row_factory=dict_row) as cursor,
        ):
            await cursor.execute(sql, params)
            return await cursor.fetchall()

    return read
