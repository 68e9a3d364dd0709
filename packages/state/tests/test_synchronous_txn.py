"""``run_write_transaction(..., synchronous=...)``: one transaction at its own level."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

import studio_state
from studio_state import InvalidSetting, SynchronousInTransaction

FULL, NORMAL = 2, 1


def _level(db: sqlite3.Connection) -> int:
    row = db.execute("PRAGMA synchronous").fetchone()
    return int(row["synchronous"])


async def _conn_level(conn: aiosqlite.Connection) -> int:
    return await studio_state.run_sync(conn, _level)


def _insert_seeing_level(item_id: str, seen: list[int]) -> Any:
    def fn(db: sqlite3.Connection) -> str:
        seen.append(_level(db))
        db.execute("INSERT INTO items (id, status) VALUES (?, 'pending')", (item_id,))
        return item_id

    return fn


async def test_normal_transaction_runs_at_normal_and_restores_full(
    conn: aiosqlite.Connection,
) -> None:
    assert await _conn_level(conn) == FULL
    seen: list[int] = []
    result = await studio_state.run_write_transaction(
        conn, _insert_seeing_level("a", seen), synchronous="normal"
    )
    assert result == "a"
    assert seen == [NORMAL]
    assert await _conn_level(conn) == FULL
    assert not conn.in_transaction
    # The next transaction on the connection runs at the connection's own level.
    await studio_state.run_write_transaction(conn, _insert_seeing_level("b", seen))
    assert seen == [NORMAL, FULL]


async def test_level_restored_after_exception_and_nothing_written(
    conn: aiosqlite.Connection, db_path: Path
) -> None:
    seen: list[int] = []

    def boom(db: sqlite3.Connection) -> None:
        _insert_seeing_level("x", seen)(db)
        raise RuntimeError("fn failed")

    with pytest.raises(RuntimeError, match="fn failed"):
        await studio_state.run_write_transaction(conn, boom, synchronous="normal")
    assert seen == [NORMAL]
    assert await _conn_level(conn) == FULL
    assert not conn.in_transaction
    other = sqlite3.connect(db_path)
    try:
        assert other.execute("SELECT COUNT(*) FROM items").fetchone()[0] == 0
    finally:
        other.close()


async def test_level_restored_after_a_failing_statement(conn: aiosqlite.Connection) -> None:
    await studio_state.run_write_transaction(conn, _insert_seeing_level("dup", []))

    with pytest.raises(sqlite3.IntegrityError):
        await studio_state.run_write_transaction(
            conn, _insert_seeing_level("dup", []), synchronous="normal"
        )
    assert await _conn_level(conn) == FULL


async def test_normal_commit_is_visible_to_a_second_connection(
    conn: aiosqlite.Connection, db_path: Path
) -> None:
    await studio_state.run_write_transaction(
        conn, _insert_seeing_level("seen", []), synchronous="normal"
    )
    other = sqlite3.connect(db_path)
    try:
        rows = other.execute("SELECT id FROM items").fetchall()
    finally:
        other.close()
    assert rows == [("seen",)]


async def test_full_transaction_on_a_normal_connection_restores_normal(db_path: Path) -> None:
    async with studio_state.connect(db_path, synchronous="normal") as conn:
        await conn.execute("CREATE TABLE items (id TEXT PRIMARY KEY, status TEXT NOT NULL)")
        seen: list[int] = []
        await studio_state.run_write_transaction(
            conn, _insert_seeing_level("f", seen), synchronous="FULL"
        )
        assert seen == [FULL]
        assert await _conn_level(conn) == NORMAL


@pytest.mark.parametrize("bad", ["off", "extra", "", 1])
async def test_bad_level_is_refused_naming_the_argument(
    conn: aiosqlite.Connection, bad: Any
) -> None:
    seen: list[int] = []
    with pytest.raises(InvalidSetting, match="synchronous"):
        await studio_state.run_write_transaction(
            conn, _insert_seeing_level("no", seen), synchronous=bad
        )
    assert seen == []
    assert await _conn_level(conn) == FULL
    rows = await conn.execute_fetchall("SELECT id FROM items")
    assert list(rows) == []


async def test_level_inside_an_open_transaction_is_refused(conn: aiosqlite.Connection) -> None:
    seen: list[int] = []
    async with studio_state.write_transaction(conn):
        await conn.execute("INSERT INTO items (id, status) VALUES ('outer', 'pending')")
        with pytest.raises(SynchronousInTransaction, match="synchronous='normal'"):
            await studio_state.run_write_transaction(
                conn, _insert_seeing_level("inner", seen), synchronous="normal"
            )
        # Without a level the same call joins the open transaction.
        await studio_state.run_write_transaction(conn, _insert_seeing_level("joined", seen))
    assert seen == [FULL]
    rows = await conn.execute_fetchall("SELECT id FROM items ORDER BY id")
    assert [row["id"] for row in rows] == ["joined", "outer"]
    assert await _conn_level(conn) == FULL


async def test_level_inside_a_hand_opened_transaction_is_refused(
    conn: aiosqlite.Connection,
) -> None:
    await conn.execute("BEGIN")
    try:
        with pytest.raises(SynchronousInTransaction):
            await studio_state.run_write_transaction(
                conn, _insert_seeing_level("inner", []), synchronous="normal"
            )
        assert conn.in_transaction
    finally:
        await conn.rollback()
    assert issubclass(SynchronousInTransaction, studio_state.StateError)
