"""studio_state's connection on PostgreSQL: the same aiosqlite.Connection interface, on a URL."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import aiosqlite
import pytest

import studio_state
from studio_state import (
    PostgresIntegrityError,
    PostgresOperationalError,
    backend_of,
    connect,
    execute,
    fetch_all,
    fetch_one,
    fetch_value,
    is_postgres,
    run_sync,
    run_write_transaction,
    write_transaction,
)

TABLE = "CREATE TABLE items (id TEXT PRIMARY KEY, status TEXT NOT NULL, n INTEGER, note TEXT)"


@pytest.fixture
async def conn(pg_dsn: str) -> AsyncIterator[aiosqlite.Connection]:
    async with connect(pg_dsn) as opened:
        await opened.execute(TABLE)
        yield opened


def test_is_postgres_tells_urls_from_paths(tmp_path: Any) -> None:
    assert is_postgres("postgresql://u@h/db")
    assert is_postgres("postgres://u@h/db")
    assert is_postgres("PostgreSQL://u@h/db")
    assert not is_postgres("studio.db")
    assert not is_postgres(tmp_path / "postgresql:")
    assert not is_postgres("/var/lib/postgresql://x")


async def test_a_url_opens_an_aiosqlite_connection_with_dict_rows(
    conn: aiosqlite.Connection,
) -> None:
    assert isinstance(conn, aiosqlite.Connection)
    assert backend_of(conn) == "postgresql"
    await conn.execute("INSERT INTO items VALUES (?, ?, ?, ?)", ("a", "new", 1, None))
    assert await fetch_all(conn, "SELECT * FROM items") == [
        {"id": "a", "status": "new", "n": 1, "note": None}
    ]
    async with conn.execute("SELECT id, n FROM items WHERE id = ?", ("a",)) as cursor:
        assert [column[0] for column in cursor.description] == ["id", "n"]
        assert await cursor.fetchone() == {"id": "a", "n": 1}
        assert await cursor.fetchone() is None


async def test_backend_of_a_sqlite_connection_and_of_the_handles(
    conn: aiosqlite.Connection, tmp_path: Any
) -> None:
    async with connect(tmp_path / "s.db") as lite:
        assert backend_of(lite) == "sqlite"
        assert await run_sync(lite, backend_of) == "sqlite"
    assert await run_sync(conn, backend_of) == "postgresql"
    with pytest.raises(studio_state.InvalidSetting, match="conn must be"):
        backend_of(object())


async def test_placeholders_inside_string_literals_and_percent_signs_stay_text(
    conn: aiosqlite.Connection,
) -> None:
    await conn.execute(
        "INSERT INTO items (id, status, note) VALUES (?, 'it''s ? 100%', '-- ?')", ("q",)
    )
    row = await fetch_one(
        conn, "SELECT status, note FROM items WHERE id = ? AND status LIKE '%?%'", ("q",)
    )
    assert row == {"status": "it's ? 100%", "note": "-- ?"}
    # Without parameters the text is sent as written (a literal % needs no doubling).
    assert await fetch_value(conn, "SELECT count(*) AS c FROM items WHERE status LIKE '%100%'") == 1


async def test_write_transaction_commits_and_rolls_back(conn: aiosqlite.Connection) -> None:
    async with write_transaction(conn):
        assert conn.in_transaction
        await conn.execute("INSERT INTO items (id, status) VALUES (?, ?)", ("a", "new"))
    assert not conn.in_transaction
    with pytest.raises(RuntimeError, match="boom"):
        async with write_transaction(conn):
            await conn.execute("INSERT INTO items (id, status) VALUES (?, ?)", ("b", "new"))
            raise RuntimeError("boom")
    assert not conn.in_transaction
    assert await fetch_all(conn, "SELECT id FROM items ORDER BY id") == [{"id": "a"}]


async def test_a_block_joins_the_callers_transaction(conn: aiosqlite.Connection) -> None:
    await conn.execute("BEGIN IMMEDIATE")
    async with write_transaction(conn):
        await conn.execute("INSERT INTO items (id, status) VALUES (?, ?)", ("a", "new"))
    assert conn.in_transaction  # joined: nothing committed here
    await conn.execute("ROLLBACK")
    assert not conn.in_transaction
    assert await fetch_all(conn, "SELECT id FROM items") == []


async def test_run_write_transaction_and_guarded_updates_rowcount(
    conn: aiosqlite.Connection,
) -> None:
    await conn.executemany(
        "INSERT INTO items (id, status) VALUES (?, ?)", [("a", "new"), ("b", "new")]
    )

    def claim(db: sqlite3.Connection) -> tuple[int, int, bool]:
        first = db.execute(
            "UPDATE items SET status = 'run' WHERE id = ? AND status = 'new'", ("a",)
        ).rowcount
        again = db.execute(
            "UPDATE items SET status = 'run' WHERE id = ? AND status = 'new'", ("a",)
        ).rowcount
        return first, again, db.in_transaction

    assert await run_write_transaction(conn, claim, synchronous="normal") == (1, 0, True)
    assert await execute(conn, "UPDATE items SET n = 1 WHERE status = ?", ("new",)) == 1
    assert await fetch_value(conn, "SELECT status FROM items WHERE id = ?", ("a",)) == "run"

    def fail(db: sqlite3.Connection) -> None:
        db.execute("UPDATE items SET status = 'gone'")
        raise LookupError("undo")

    with pytest.raises(LookupError):
        await run_write_transaction(conn, fail)
    assert not conn.in_transaction
    assert await fetch_value(conn, "SELECT count(*) FROM items WHERE status = 'gone'") == 0


async def test_unique_violation_is_a_sqlite_integrity_error_shaped_like_sqlites(
    conn: aiosqlite.Connection,
) -> None:
    await conn.execute("INSERT INTO items (id, status) VALUES (?, ?)", ("a", "new"))
    with pytest.raises(sqlite3.IntegrityError) as caught:
        await conn.execute("INSERT INTO items (id, status) VALUES (?, ?)", ("a", "new"))
    assert isinstance(caught.value, PostgresIntegrityError)
    assert caught.value.sqlstate == "23505"
    assert str(caught.value).startswith("UNIQUE constraint failed: items.id")
    assert "duplicate key" in str(caught.value)
    assert caught.value.__cause__ is not None
    with pytest.raises(sqlite3.IntegrityError, match="NOT NULL constraint failed: items.status"):
        await conn.execute("INSERT INTO items (id) VALUES (?)", ("b",))
    with pytest.raises(sqlite3.OperationalError) as missing:
        await conn.execute("SELECT * FROM no_such_table")
    assert isinstance(missing.value, PostgresOperationalError)


async def test_the_pragmas_studio_issues_are_answered(conn: aiosqlite.Connection) -> None:
    assert await fetch_value(conn, "PRAGMA synchronous") == 2
    await conn.execute("PRAGMA synchronous = NORMAL")
    assert await fetch_one(conn, "PRAGMA synchronous") == {"synchronous": 1}
    assert await fetch_value(conn, "PRAGMA journal_mode=WAL") == "wal"
    assert await fetch_value(conn, "PRAGMA foreign_keys") == 1
    assert await fetch_value(conn, "PRAGMA user_version") == 0
    await conn.execute("PRAGMA user_version = 0")
    assert await fetch_all(conn, "PRAGMA database_list") == [{"seq": 0, "name": "main", "file": ""}]
    assert await fetch_one(conn, "PRAGMA wal_checkpoint(TRUNCATE)") == {
        "busy": 0,
        "log": 0,
        "checkpointed": 0,
    }
    with pytest.raises(sqlite3.OperationalError, match="PRAGMA cache_size is not supported"):
        await conn.execute("PRAGMA cache_size")


async def test_data_version_changes_when_another_session_commits(
    conn: aiosqlite.Connection, pg_dsn: str
) -> None:
    before = await fetch_value(conn, "PRAGMA data_version")
    async with connect(pg_dsn) as other:
        await other.execute("INSERT INTO items (id, status) VALUES (?, ?)", ("x", "new"))
    assert await fetch_value(conn, "PRAGMA data_version") != before


async def test_query_only_makes_the_session_read_only(conn: aiosqlite.Connection) -> None:
    await conn.execute("PRAGMA query_only = ON")
    assert await fetch_value(conn, "PRAGMA query_only") == 1
    with pytest.raises(sqlite3.OperationalError, match="read-only"):
        await conn.execute("INSERT INTO items (id, status) VALUES (?, ?)", ("a", "new"))
    await conn.execute("PRAGMA query_only = OFF")
    await conn.execute("INSERT INTO items (id, status) VALUES (?, ?)", ("a", "new"))


async def test_two_tasks_on_one_connection_do_not_join_each_others_transaction(
    conn: aiosqlite.Connection,
) -> None:
    async def add(item: str) -> None:
        async with write_transaction(conn):
            await conn.execute("INSERT INTO items (id, status) VALUES (?, ?)", (item, "new"))
            await asyncio.sleep(0)
            if item == "bad":
                raise ValueError(item)

    results = await asyncio.gather(add("a"), add("bad"), add("c"), return_exceptions=True)
    assert [type(r) for r in results] == [type(None), ValueError, type(None)]
    rows = await fetch_all(conn, "SELECT id FROM items ORDER BY id")
    assert rows == [{"id": "a"}, {"id": "c"}]


async def test_a_closed_connection_refuses_calls(pg_dsn: str) -> None:
    async with connect(pg_dsn) as opened:
        pass
    with pytest.raises(studio_state.ConnectionClosed):
        await run_sync(opened, lambda db: db.execute("SELECT 1"))
    with pytest.raises(ValueError):
        await opened.execute("SELECT 1")
