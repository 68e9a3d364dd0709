"""Cancelling a task in the middle of a write: what lands, and what the connection is left with."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

import studio_state


def _hold_write_lock(db_path: Path) -> sqlite3.Connection:
    """Another connection holding the database's write lock until it commits."""
    other = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    return other


async def test_a_write_run_to_completion_lands_though_its_caller_is_cancelled(
    db_path: Path, conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    holder = _hold_write_lock(db_path)
    entered = asyncio.Event()

    async def write() -> str:
        entered.set()
        async with studio_state.write_transaction(conn):
            await conn.execute("INSERT INTO items (id, status) VALUES ('t', 'done')")
        return "written"

    task = asyncio.create_task(studio_state.run_to_completion(write()))
    await entered.wait()
    await asyncio.sleep(0.1)  # the BEGIN now waits for the lock on the connection's thread
    task.cancel()
    await asyncio.sleep(0.1)
    assert not task.done()  # held back until the write has ended
    holder.commit()
    holder.close()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await fetch_all(conn, "SELECT id, status FROM items") == [{"id": "t", "status": "done"}]
    assert conn.in_transaction is False


async def test_run_to_completion_returns_the_result_and_raises_the_error() -> None:
    async def value() -> int:
        return 7

    async def fails() -> int:
        raise LookupError("gone")

    assert await studio_state.run_to_completion(value()) == 7
    with pytest.raises(LookupError, match="gone"):
        await studio_state.run_to_completion(fails())


async def test_a_begin_cancelled_while_waiting_for_the_lock_leaves_no_transaction_to_join(
    db_path: Path, conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    """The thread still runs the BEGIN its caller gave up on; it must be rolled back before the
    next writer runs, or that writer would join it and never commit."""
    holder = _hold_write_lock(db_path)

    async def gives_up() -> None:
        async with studio_state.write_transaction(conn):
            await conn.execute("INSERT INTO items (id, status) VALUES ('lost', 'x')")

    task = asyncio.create_task(gives_up())
    await asyncio.sleep(0.1)  # BEGIN IMMEDIATE is waiting for the lock on the thread
    task.cancel()
    release = asyncio.get_running_loop().call_later(0.2, holder.commit)
    with pytest.raises(asyncio.CancelledError):
        await task
    release.cancel()
    holder.close()
    assert conn.in_transaction is False
    async with studio_state.write_transaction(conn):
        await conn.execute("INSERT INTO items (id, status) VALUES ('next', 'y')")
    async with studio_state.connect(db_path) as reader:
        assert await fetch_all(reader, "SELECT id FROM items") == [{"id": "next"}]
