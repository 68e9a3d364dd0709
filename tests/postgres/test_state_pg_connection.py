"""studio_state's connection on PostgreSQL: the same aiosqlite.Connection interface, on a URL."""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import aiosqlite
import psycopg
import pytest

import studio_state
import studio_state.testing
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


async def test_a_failed_statement_aborts_the_transaction_and_commit_says_so(
    conn: aiosqlite.Connection,
) -> None:
    with pytest.raises(sqlite3.OperationalError, match="rolled back") as caught:
        async with write_transaction(conn):
            await conn.execute("INSERT INTO items (id, status) VALUES (?, ?)", ("a", "new"))
            with pytest.raises(sqlite3.IntegrityError):
                await conn.execute("INSERT INTO items (id, status) VALUES (?, ?)", ("a", "new"))
    assert isinstance(caught.value, PostgresOperationalError)
    assert not conn.in_transaction
    assert await fetch_all(conn, "SELECT id FROM items") == []


async def test_executemany_counts_rows_and_takes_any_iterable(conn: aiosqlite.Connection) -> None:
    rows = ((f"k{i}", "new") for i in range(5))
    async with conn.executemany("INSERT INTO items (id, status) VALUES (?, ?)", rows) as cursor:
        assert cursor.rowcount == 5
    async with conn.executemany("UPDATE items SET n = ? WHERE id = ?", []) as cursor:
        assert cursor.rowcount == 0

    def count(db: sqlite3.Connection) -> tuple[int, list[str]]:
        changed = db.executemany(
            "UPDATE items SET n = 1 WHERE id = ? AND n IS NULL", [("k1",), ("k2",), ("k2",)]
        ).rowcount
        return changed, [row["id"] for row in db.execute("SELECT id FROM items ORDER BY id")]

    changed, ids = await run_sync(conn, count)
    assert changed == 2
    assert ids == ["k0", "k1", "k2", "k3", "k4"]


async def test_cursor_iteration_in_chunks_and_explicit_cursors(conn: aiosqlite.Connection) -> None:
    await conn.executemany(
        "INSERT INTO items (id, status, n) VALUES (?, 'new', ?)",
        [(f"i{i:03}", i) for i in range(150)],
    )
    async with conn.execute("SELECT n FROM items ORDER BY n") as cursor:
        seen = [row["n"] async for row in cursor]
    assert seen == list(range(150))
    async with conn.cursor() as cursor:
        await cursor.execute("SELECT count(*) AS c FROM items WHERE n < ?", (10,))
        assert await cursor.fetchall() == [{"c": 10}]
        assert cursor.lastrowid is None


async def test_connect_sync_on_a_url_is_the_same_db_api_object(pg_dsn: str) -> None:
    db = studio_state.connect_sync(pg_dsn, application_name="studio:sync")
    try:
        assert backend_of(db) == "postgresql"
        db.execute(TABLE)
        with db:  # as sqlite3: commits the open transaction on exit
            db.execute("BEGIN")
            db.execute("INSERT INTO items (id, status) VALUES (?, ?)", ("s", "new"))
            assert db.in_transaction
        assert not db.in_transaction
        assert db.execute("SELECT id, status FROM items").fetchall() == [
            {"id": "s", "status": "new"}
        ]
        assert db.total_changes == 1
        name = db.execute("SELECT current_setting('application_name') AS a").fetchone()
        assert name == {"a": "studio:sync"}
    finally:
        db.close()


async def test_application_name_names_the_session(pg_dsn: str) -> None:
    async with connect(pg_dsn, application_name="studio:node-1") as opened:
        assert await fetch_value(opened, "SELECT current_setting('application_name')") == (
            "studio:node-1"
        )


async def test_a_dropped_session_is_an_operational_error(pg_dsn: str, pg_rows: Any) -> None:
    async with connect(pg_dsn, application_name="studio:doomed") as opened:
        await opened.execute("BEGIN")
        await pg_rows(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'studio:doomed'"
        )
        with pytest.raises(sqlite3.OperationalError) as caught:
            await opened.execute("SELECT 1")
        assert isinstance(caught.value, PostgresOperationalError)
        assert not opened.in_transaction


async def test_unreachable_server_and_bad_url(pg_dsn: str) -> None:
    port = studio_state.testing.free_port()
    with pytest.raises(sqlite3.OperationalError):
        await studio_state.open_connection(f"postgresql://u@127.0.0.1:{port}/db?connect_timeout=5")
    with pytest.raises(studio_state.InvalidSetting, match="invalid PostgreSQL URL") as caught:
        studio_state.connect_sync("postgresql://u:s3cret@127.0.0.1:notaport/db")
    assert "s3cret" not in str(caught.value)


async def test_synchronous_is_checked_and_reported_but_the_server_decides(pg_dsn: str) -> None:
    with pytest.raises(studio_state.InvalidSetting, match="synchronous"):
        await studio_state.open_connection(pg_dsn, synchronous="off")
    async with connect(pg_dsn, synchronous="normal") as opened:
        assert await fetch_value(opened, "PRAGMA synchronous") == 1
        assert await fetch_value(opened, "SHOW synchronous_commit") == "off"  # the test cluster's


async def test_cancelled_write_transaction_leaves_no_open_transaction(
    conn: aiosqlite.Connection,
) -> None:
    entered = asyncio.Event()

    async def slow() -> None:
        async with write_transaction(conn):
            await conn.execute("INSERT INTO items (id, status) VALUES (?, ?)", ("a", "new"))
            entered.set()
            await asyncio.sleep(30)

    task = asyncio.create_task(slow())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not conn.in_transaction
    async with write_transaction(conn):
        await conn.execute("INSERT INTO items (id, status) VALUES (?, ?)", ("b", "new"))
    assert await fetch_all(conn, "SELECT id FROM items") == [{"id": "b"}]


async def test_the_pragma_answers_need_no_superuser(pg_dsn: str) -> None:
    role = f"studio_app_{secrets.token_hex(4)}"
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as admin:
        await admin.execute(f"CREATE ROLE {role} LOGIN")
        try:
            async with connect(pg_dsn.replace("postgres@", f"{role}@", 1)) as opened:
                assert isinstance(await fetch_value(opened, "PRAGMA data_version"), int)
                await opened.execute("PRAGMA query_only = 1")
                assert await fetch_value(opened, "PRAGMA query_only") == 1
                assert await fetch_value(opened, "SELECT current_user") == role
        finally:
            await admin.execute(f"DROP ROLE {role}")
