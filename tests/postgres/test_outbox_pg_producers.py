from __future__ import annotations

import subprocess
import sys
from typing import Any

import asyncpg
import psycopg
import pytest

import studio_state
from studio_outbox import InvalidDispatch
from studio_outbox import postgres as pg

from .conftest import Rows


def test_importing_the_outbox_does_not_import_a_postgres_driver() -> None:
    code = (
        "import sys, studio_outbox, studio_state; "
        "print(sorted(m for m in ('psycopg', 'asyncpg') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


async def test_sync_enqueue_joins_the_producers_transaction(pg_dsn: str, pg_rows: Rows) -> None:
    with psycopg.Connection.connect(pg_dsn) as conn:
        pg.ensure_schema_sync(conn)
        conn.execute("CREATE TABLE orders (id int)")
        conn.commit()
        conn.execute("INSERT INTO orders VALUES (1)")
        kept = pg.enqueue_dispatch_sync(conn, kind="order.created", deliver_to="ops")
        assert await pg_rows("SELECT id FROM dispatch_outbox") == []  # not committed by us
        conn.commit()
        conn.execute("INSERT INTO orders VALUES (2)")
        pg.enqueue_many_sync(conn, [{"kind": "order.created", "deliver_to": "ops"}] * 2)
        conn.rollback()
    assert await pg_rows("SELECT id FROM dispatch_outbox") == [{"id": kept}]
    assert await pg_rows("SELECT count(*) AS n FROM orders") == [{"n": 1}]
    history = await pg_rows("SELECT entity_id FROM status_transitions")
    assert history == [{"entity_id": kept}]


async def test_sync_enqueue_in_autocommit_commits_its_own_transaction(
    pg_dsn: str, pg_rows: Rows
) -> None:
    with psycopg.Connection.connect(pg_dsn, autocommit=True) as conn:
        pg.ensure_schema_sync(conn)
        first = pg.enqueue_dispatch_sync(conn, kind="k", deliver_to="x", dedup_key="d")
        again = pg.enqueue_dispatch_sync(conn, kind="k", deliver_to="y", dedup_key="d")
        with pytest.raises(InvalidDispatch) as caught:
            pg.enqueue_many_sync(conn, [{"kind": "k", "deliver_to": ""}])
    assert first == again
    assert caught.value.field == "items[0].deliver_to"
    assert await pg_rows("SELECT count(*) AS n FROM dispatch_outbox") == [{"n": 1}]


async def test_asyncpg_enqueue_joins_the_producers_transaction(pg_dsn: str, pg_rows: Rows) -> None:
    conn: Any = await asyncpg.connect(pg_dsn)
    try:
        await pg.ensure_schema(conn)
        async with conn.transaction():
            kept = await pg.enqueue_dispatch(
                conn, kind="k", deliver_to="x", body={"n": 1}, expires_at=2e9
            )
            assert await pg_rows("SELECT id FROM dispatch_outbox") == []
        rolled_back = conn.transaction()
        await rolled_back.start()
        await pg.enqueue_many(conn, [{"kind": "k", "deliver_to": "x"}] * 3)
        await rolled_back.rollback()
        own = await pg.enqueue_dispatch(conn, kind="k", deliver_to="x", dedup_key="d")
        assert await pg.enqueue_dispatch(conn, kind="k", deliver_to="x", dedup_key="d") == own
    finally:
        await conn.close()
    found = await pg_rows("SELECT id, payload FROM dispatch_outbox ORDER BY created_at")
    assert [r["id"] for r in found] == [kept, own]
    assert found[0]["payload"]["body"] == {"n": 1}
    history = await pg_rows("SELECT count(*) AS n FROM status_transitions")
    assert history == [{"n": 2}]


async def test_a_newer_schema_is_refused_on_every_driver(pg_dsn: str) -> None:
    with psycopg.Connection.connect(pg_dsn, autocommit=True) as conn:
        pg.ensure_schema_sync(conn)
        conn.execute(
            "INSERT INTO schema_migrations VALUES ('studio-outbox', %s, 0)",
            (len(pg.MIGRATIONS) + 1,),
        )
        with pytest.raises(studio_state.SchemaTooNew) as caught:
            pg.ensure_schema_sync(conn)
    assert caught.value.package == "studio-outbox"
    assert caught.value.database_version == len(pg.MIGRATIONS) + 1
    conn2: Any = await asyncpg.connect(pg_dsn)
    try:
        with pytest.raises(studio_state.SchemaTooNew):
            await pg.ensure_schema(conn2)
    finally:
        await conn2.close()


async def test_ensure_schema_refuses_an_open_transaction(pg_dsn: str, pg_rows: Rows) -> None:
    with psycopg.Connection.connect(pg_dsn) as conn:
        conn.execute("SELECT 1")
        with pytest.raises(studio_state.MigrationError):
            pg.ensure_schema_sync(conn)
    assert await pg_rows("SELECT to_regclass('dispatch_outbox') AS t") == [{"t": None}]


async def test_a_database_at_version_3_upgrades_and_keeps_its_counts(
    pg_dsn: str, pg_rows: Rows
) -> None:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        # The schema as the first PostgreSQL release left it: versions 1-3, rows in it.
        await conn.execute(
            "CREATE TABLE schema_migrations (package TEXT NOT NULL, version INTEGER NOT NULL, "
            "applied_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (package, version))"
        )
        for package, migrations in (
            ("studio-state", pg.STATE_MIGRATIONS),
            ("studio-outbox", pg.MIGRATIONS[:3]),
        ):
            for migration in migrations:
                await conn.execute(migration.sql.encode())
                await conn.execute(
                    "INSERT INTO schema_migrations VALUES (%s, %s, 0)",
                    (package, migration.version),
                )
        await pg.enqueue_many(conn, [{"kind": "a", "deliver_to": "x"}] * 3)
        await pg.ensure_schema(conn)
        await pg.enqueue_dispatch(conn, kind="a", deliver_to="x")
        await conn.execute("UPDATE dispatch_outbox SET status = 'expired'")
    versions = await pg_rows(
        "SELECT version FROM schema_migrations WHERE package = 'studio-outbox' ORDER BY version"
    )
    assert [r["version"] for r in versions] == list(range(1, len(pg.MIGRATIONS) + 1))
    counts = await pg_rows(
        "SELECT status, kind, sum(n) AS n FROM dispatch_outbox_counts "
        "GROUP BY status, kind HAVING sum(n) <> 0"
    )
    assert counts == [{"status": "expired", "kind": "a", "n": 4}]
