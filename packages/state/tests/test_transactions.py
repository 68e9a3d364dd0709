from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

import studio_state


async def test_write_transaction_commits_on_success(
    db_path: Path, conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    async with studio_state.write_transaction(conn):
        assert conn.in_transaction
        await conn.execute("INSERT INTO items (id, status) VALUES ('a', 'pending')")
    assert conn.in_transaction is False
    async with studio_state.connect(db_path) as other:
        assert await fetch_all(other, "SELECT id FROM items") == [{"id": "a"}]


async def test_write_transaction_rolls_back_on_error_and_cancellation(
    conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    with pytest.raises(ValueError):
        async with studio_state.write_transaction(conn):
            await conn.execute("INSERT INTO items (id, status) VALUES ('a', 'pending')")
            raise ValueError("no")

    started = asyncio.Event()

    async def writer() -> None:
        async with studio_state.write_transaction(conn):
            await conn.execute("INSERT INTO items (id, status) VALUES ('b', 'pending')")
            started.set()
            await asyncio.sleep(10)

    task = asyncio.create_task(writer())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await fetch_all(conn, "SELECT id FROM items") == []
    assert conn.in_transaction is False


async def test_begin_immediate_takes_the_write_lock_at_once(
    db_path: Path, conn: aiosqlite.Connection
) -> None:
    async with studio_state.write_transaction(conn), studio_state.connect(db_path) as other:
        await other.execute("PRAGMA busy_timeout=0")
        with pytest.raises(aiosqlite.OperationalError, match="locked"):
            await other.execute("BEGIN IMMEDIATE")


async def test_nested_write_transaction_joins_instead_of_nesting(
    db_path: Path, conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    async with studio_state.write_transaction(conn):
        await conn.execute("INSERT INTO items (id, status) VALUES ('outer', 'pending')")
        async with studio_state.write_transaction(conn):
            await conn.execute("INSERT INTO items (id, status) VALUES ('inner', 'pending')")
        assert conn.in_transaction  # the inner block did not commit
        async with studio_state.connect(db_path) as other:
            assert await fetch_all(other, "SELECT id FROM items") == []
    assert {r["id"] for r in await fetch_all(conn, "SELECT id FROM items")} == {"outer", "inner"}


async def test_joins_a_transaction_the_caller_opened_by_hand(
    conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    await conn.execute("BEGIN")
    async with studio_state.write_transaction(conn):
        await conn.execute("INSERT INTO items (id, status) VALUES ('a', 'pending')")
    assert conn.in_transaction
    assert studio_state.in_owned_transaction(conn)
    await conn.rollback()
    assert await fetch_all(conn, "SELECT id FROM items") == []


async def test_an_error_inside_a_joined_block_is_left_to_the_owner(
    conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    async with studio_state.write_transaction(conn):
        await conn.execute("INSERT INTO items (id, status) VALUES ('kept', 'pending')")
        with pytest.raises(KeyError):
            async with studio_state.write_transaction(conn):
                raise KeyError("inner")
        assert conn.in_transaction
    assert await fetch_all(conn, "SELECT id FROM items") == [{"id": "kept"}]


async def test_tasks_sharing_a_connection_do_not_join_each_other(
    conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    first_inside = asyncio.Event()
    release = asyncio.Event()
    order: list[str] = []

    async def first() -> None:
        async with studio_state.write_transaction(conn):
            await conn.execute("INSERT INTO items (id, status) VALUES ('first', 'pending')")
            first_inside.set()
            await release.wait()
            order.append("first-commit")
        order.append("first-done")

    async def second() -> None:
        await first_inside.wait()
        assert not studio_state.in_owned_transaction(conn)
        async with studio_state.write_transaction(conn):
            order.append("second-begin")
            await conn.execute("INSERT INTO items (id, status) VALUES ('second', 'pending')")
            raise RuntimeError("second fails alone")

    t1 = asyncio.create_task(first())
    t2 = asyncio.create_task(second())
    await first_inside.wait()
    await asyncio.sleep(0.05)
    assert order == []  # second is waiting, not writing into first's transaction
    release.set()
    await t1
    with pytest.raises(RuntimeError):
        await t2
    assert order == ["first-commit", "first-done", "second-begin"]
    assert await fetch_all(conn, "SELECT id FROM items") == [{"id": "first"}]


async def test_a_task_never_joins_another_tasks_transaction_while_it_begins(
    conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    """Between BEGIN IMMEDIATE running and its task resuming, ``conn.in_transaction`` is
    already true: another task must still wait for the lock, not join that transaction."""
    for i in range(30):

        async def first(n: int = i) -> None:
            with pytest.raises(RuntimeError):
                async with studio_state.write_transaction(conn):
                    await conn.execute(f"INSERT INTO items (id, status) VALUES ('a{n}', 'x')")
                    raise RuntimeError("roll back")

        async def second(n: int = i) -> None:
            while not conn.in_transaction:
                await asyncio.sleep(0)
            async with studio_state.write_transaction(conn):
                await conn.execute(f"INSERT INTO items (id, status) VALUES ('b{n}', 'x')")

        await asyncio.gather(first(), second())
    rows = await fetch_all(conn, "SELECT id FROM items ORDER BY id")
    assert [r["id"] for r in rows] == sorted(f"b{i}" for i in range(30))
