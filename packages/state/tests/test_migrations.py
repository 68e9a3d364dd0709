from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import studio_state
from studio_state import Migration, MigrationError, SchemaTooNew

MIGRATIONS = [
    Migration(1, "widgets", "CREATE TABLE widgets (id TEXT PRIMARY KEY);"),
    Migration(
        2,
        "widget names and a trigger",
        """
        ALTER TABLE widgets ADD COLUMN name TEXT;
        CREATE TABLE widget_log (id TEXT);
        CREATE TRIGGER widgets_log AFTER INSERT ON widgets BEGIN
          INSERT INTO widget_log (id) VALUES (NEW.id);
        END;
        """,
    ),
]


async def test_migrations_apply_in_order_and_are_idempotent(db_path: Path, fetch_all: Any) -> None:
    async with studio_state.connect(db_path) as conn:
        assert await studio_state.migrate(conn, "widgets", MIGRATIONS) == [1, 2]
        assert await studio_state.migrate(conn, "widgets", MIGRATIONS) == []
        assert await studio_state.applied_version(conn, "widgets") == 2
        await conn.execute("INSERT INTO widgets (id, name) VALUES ('w1', 'one')")
        assert await fetch_all(conn, "SELECT id FROM widget_log") == [{"id": "w1"}]
        rows = await fetch_all(
            conn, "SELECT package, version FROM schema_migrations ORDER BY version"
        )
        assert rows == [{"package": "widgets", "version": 1}, {"package": "widgets", "version": 2}]


async def test_later_migrations_apply_on_an_older_database(db_path: Path) -> None:
    async with studio_state.connect(db_path) as conn:
        assert await studio_state.migrate(conn, "widgets", MIGRATIONS[:1]) == [1]
        assert await studio_state.migrate(conn, "widgets", MIGRATIONS) == [2]


async def test_packages_have_separate_version_lines(db_path: Path) -> None:
    other = [Migration(1, "gadgets", "CREATE TABLE gadgets (id TEXT);")]
    async with studio_state.connect(db_path) as conn:
        await studio_state.migrate(conn, "widgets", MIGRATIONS)
        assert await studio_state.migrate(conn, "gadgets", other) == [1]
        assert await studio_state.applied_version(conn, "gadgets") == 1
        assert await studio_state.applied_version(conn, "nobody") == 0


async def test_newer_database_is_refused_with_a_clear_error(db_path: Path) -> None:
    async with studio_state.connect(db_path) as conn:
        await studio_state.migrate(conn, "widgets", MIGRATIONS)
        with pytest.raises(SchemaTooNew) as info:
            await studio_state.migrate(conn, "widgets", MIGRATIONS[:1])
        assert info.value.database_version == 2 and info.value.code_version == 1
        assert "widgets" in str(info.value) and "newer" in str(info.value)


@pytest.mark.parametrize(
    "bad",
    [
        [Migration(2, "skips one", "SELECT 1;")],
        [Migration(1, "a", "SELECT 1;"), Migration(1, "dup", "SELECT 1;")],
    ],
)
async def test_misnumbered_migrations_are_refused(db_path: Path, bad: list[Migration]) -> None:
    async with studio_state.connect(db_path) as conn:
        with pytest.raises(MigrationError, match="numbered"):
            await studio_state.migrate(conn, "widgets", bad)


async def test_a_failing_migration_leaves_nothing_behind(db_path: Path, fetch_all: Any) -> None:
    broken = [
        *MIGRATIONS,
        Migration(
            3, "half applied", "CREATE TABLE half (id TEXT); INSERT INTO nowhere VALUES (1);"
        ),
    ]
    async with studio_state.connect(db_path) as conn:
        with pytest.raises(MigrationError, match="v3"):
            await studio_state.migrate(conn, "widgets", broken)
        assert await studio_state.applied_version(conn, "widgets") == 2
        tables = await fetch_all(conn, "SELECT name FROM sqlite_master WHERE name = 'half'")
        assert tables == []
        assert conn.in_transaction is False


async def test_two_connections_migrating_at_once_apply_each_step_once(
    db_path: Path, fetch_all: Any
) -> None:
    async with studio_state.connect(db_path) as a, studio_state.connect(db_path) as b:
        results = await asyncio.gather(
            studio_state.migrate(a, "widgets", MIGRATIONS),
            studio_state.migrate(b, "widgets", MIGRATIONS),
        )
        assert sorted(results[0] + results[1]) == [1, 2]
        rows = await fetch_all(
            a, "SELECT count(*) AS n FROM schema_migrations WHERE package = 'widgets'"
        )
        assert rows == [{"n": 2}]


async def test_migrate_refuses_to_run_inside_an_open_transaction(db_path: Path) -> None:
    async with studio_state.connect(db_path) as conn:
        await conn.execute("BEGIN")
        with pytest.raises(MigrationError, match="transaction"):
            await studio_state.migrate(conn, "widgets", MIGRATIONS)
        await conn.rollback()


def test_split_statements_keeps_triggers_whole() -> None:
    statements = studio_state.split_statements(MIGRATIONS[1].sql)
    assert len(statements) == 3
    assert statements[2].startswith("CREATE TRIGGER") and statements[2].endswith("END;")
    with pytest.raises(MigrationError, match="incomplete"):
        studio_state.split_statements("CREATE TABLE x (id TEXT")


async def test_state_schema_has_the_transitions_table_and_index(
    conn: object, fetch_all: Any
) -> None:
    import aiosqlite

    assert isinstance(conn, aiosqlite.Connection)
    cols = [r["name"] for r in await fetch_all(conn, "PRAGMA table_info(status_transitions)")]
    assert cols == [
        "id",
        "entity_type",
        "entity_id",
        "previous_status",
        "status",
        "reason_code",
        "reason_summary",
        "evidence_refs",
        "actor",
        "metadata",
        "created_at",
    ]
    indexes = await fetch_all(conn, "PRAGMA index_list(status_transitions)")
    assert "idx_status_transitions_entity" in {r["name"] for r in indexes}
