"""studio_state.migrate on PostgreSQL: the postgres text, the same schema_migrations rules."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

import studio_state
from studio_outbox.postgres import ensure_schema as outbox_ensure_schema
from studio_state import (
    Migration,
    MigrationError,
    SchemaTooNew,
    applied_version,
    connect,
    ensure_schema,
    fetch_all,
    fetch_value,
    migrate,
)

STEPS = (
    Migration(
        1,
        "things",
        "CREATE TABLE things (id TEXT PRIMARY KEY, at REAL)",
        postgres=("CREATE TABLE things (id TEXT PRIMARY KEY, at DOUBLE PRECISION)"),
    ),
    Migration(
        2,
        "a trigger function (dollar quoting, ; inside the body)",
        "CREATE INDEX idx_things_at ON things(at)",
        postgres="""
        CREATE INDEX idx_things_at ON things(at);
        CREATE FUNCTION things_touch() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          NEW.at := coalesce(NEW.at, 0.5);
          RETURN NEW;
        END;
        $$;
        CREATE TRIGGER things_touch BEFORE INSERT ON things
          FOR EACH ROW EXECUTE FUNCTION things_touch();
        """,
    ),
)


async def test_migrate_applies_each_step_once_and_is_idempotent(pg_dsn: str) -> None:
    async with connect(pg_dsn) as conn:
        assert await applied_version(conn, "pkg") == 0
        assert await migrate(conn, "pkg", STEPS, now=7.0) == [1, 2]
        assert await migrate(conn, "pkg", STEPS) == []
        assert await applied_version(conn, "pkg") == 2
        rows = await fetch_all(
            conn, "SELECT version, applied_at FROM schema_migrations WHERE package = ?", ("pkg",)
        )
        assert rows == [{"version": 1, "applied_at": 7.0}, {"version": 2, "applied_at": 7.0}]
        await conn.execute("INSERT INTO things (id) VALUES (?)", ("a",))
        assert await fetch_value(conn, "SELECT at FROM things") == 0.5  # the trigger ran


async def test_a_newer_database_is_refused(pg_dsn: str) -> None:
    async with connect(pg_dsn) as conn:
        await migrate(conn, "pkg", STEPS)
        with pytest.raises(SchemaTooNew) as caught:
            await migrate(conn, "pkg", STEPS[:1])
        assert (caught.value.database_version, caught.value.code_version) == (2, 1)


async def test_a_step_without_postgres_text_is_refused_before_anything_runs(pg_dsn: str) -> None:
    sqlite_only = (STEPS[0], Migration(2, "sqlite only", "CREATE TABLE x (a)"))
    async with connect(pg_dsn) as conn:
        with pytest.raises(MigrationError, match=r"pkg v2 \(sqlite only\) has no PostgreSQL"):
            await migrate(conn, "pkg", sqlite_only)
        assert await applied_version(conn, "pkg") == 0
        assert await fetch_value(conn, "SELECT to_regclass('things') IS NULL") is True


async def test_a_failing_step_is_rolled_back_and_named(pg_dsn: str) -> None:
    broken = (
        STEPS[0],
        Migration(2, "broken", "", postgres="CREATE TABLE y (a int); CREATE TABLE things (b int)"),
    )
    async with connect(pg_dsn) as conn:
        with pytest.raises(MigrationError, match=r"pkg v2 \(broken\) failed: .*already exists"):
            await migrate(conn, "pkg", broken)
        assert not conn.in_transaction
        assert await applied_version(conn, "pkg") == 1
        assert await fetch_value(conn, "SELECT to_regclass('y') IS NULL") is True


async def test_concurrent_migrators_apply_each_step_once(pg_dsn: str) -> None:
    async def one() -> list[int]:
        async with connect(pg_dsn) as conn:
            return await migrate(conn, "pkg", STEPS)

    results = await asyncio.gather(*(one() for _ in range(4)))
    assert sorted(v for applied in results for v in applied) == [1, 2]
    async with connect(pg_dsn) as conn:
        assert await fetch_value(conn, "SELECT count(*) FROM schema_migrations") == 2


@pytest.mark.parametrize("outbox_first", [False, True])
async def test_state_schema_and_the_outbox_runner_agree_in_either_order(
    pg_dsn: str, outbox_first: bool
) -> None:
    async with (
        await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as raw,
        connect(pg_dsn) as conn,
    ):
        if outbox_first:
            await outbox_ensure_schema(raw)
        await ensure_schema(conn)
        await outbox_ensure_schema(raw)
        assert await applied_version(conn, "studio-state") == len(studio_state.STATE_MIGRATIONS)
        versions = await fetch_all(
            conn, "SELECT package, version FROM schema_migrations ORDER BY package, version"
        )
        assert {"package": "studio-state", "version": 1} in versions
        assert studio_state.STATE_MIGRATIONS[0].postgres is not None
        await studio_state.record_transition(
            conn,
            entity_type="dispatch",
            entity_id="d1",
            status="pending",
            reason_code="test",
            now=1.25,
        )
        assert await fetch_value(conn, "SELECT created_at FROM status_transitions") == 1.25


async def test_migrate_refuses_an_open_transaction(pg_dsn: str) -> None:
    async with connect(pg_dsn) as conn:
        await conn.execute("BEGIN")
        with pytest.raises(MigrationError, match="inside an open transaction"):
            await migrate(conn, "pkg", STEPS)
        await conn.execute("ROLLBACK")
