from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest

from studio_state.testing import clean_environment  # noqa: F401  (autouse fixture)
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
    """The cluster's DSN with the outbox's tables dropped before each test."""
    async with await psycopg.AsyncConnection.connect(pg_cluster_dsn, autocommit=True) as conn:
        await conn.execute(
            "DROP TABLE IF EXISTS dispatch_outbox, dispatch_outbox_counts, status_transitions, "
            "schema_migrations CASCADE; DROP FUNCTION IF EXISTS dispatch_outbox_count"
        )
    yield pg_cluster_dsn
