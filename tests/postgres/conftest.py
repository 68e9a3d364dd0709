"""The PostgreSQL suite's fixtures: the session's throwaway cluster and a fresh database of it.

The cluster is the one scheduler-core's own tests run their ``postgresql`` params on (the
``postgres`` matrix entry runs both folders in one session): both conftests take it from
``packages/scheduler-core/tests/pg_databases.py``, loaded once under one module name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from studio_state.testing import clean_environment, load_beside  # noqa: F401  (autouse fixture)

_CORE_TESTS = Path(__file__).resolve().parents[2] / "packages" / "scheduler-core" / "tests"
pg_databases = load_beside(
    _CORE_TESTS / "conftest.py", "pg_databases.py", "studio_scheduler_core_test_pg_databases"
)


@pytest.fixture(scope="session")
def pg_cluster_dsn(pytestconfig: pytest.Config) -> str:
    """The session's throwaway PostgreSQL cluster; fails (never skips) without binaries."""
    dsn: str = pg_databases.cluster_dsn(pytestconfig)
    return dsn


@pytest.fixture
def pg_dsn(pg_cluster_dsn: str) -> Iterator[str]:
    """A DSN of a new, empty database of the cluster for each test (dropped afterwards)."""
    with pg_databases.fresh_database(pg_cluster_dsn) as url:
        yield url


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
