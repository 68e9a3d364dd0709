"""``run_sync`` / ``run_write_transaction`` / the sync transition helpers, on real files."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

import studio_state
from studio_state import ConnectionClosed, InvalidTransition

# A second real process that takes the database's write lock, says so, and holds it for
# argv[2] seconds before committing its own row (id argv[3]).
_HOLDER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
db.execute("INSERT INTO items (id, status) VALUES (?, 'pending')", (sys.argv[3],))
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("COMMIT")
"""


@contextmanager
def _hold_write_lock(
    db_path: Path, seconds: float, row_id: str = "holder"
) -> Iterator[subprocess.Popen[str]]:
    """Run the holder; the block starts once it has the lock and ends after it exits."""
    with subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(db_path), str(seconds), row_id],
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "locked"
        try:
            yield child
        finally:
            child.wait(timeout=10)
    assert child.returncode == 0


def _insert(item_id: str, status: str = "pending") -> Any:
    def fn(db: sqlite3.Connection) -> str:
        db.execute("INSERT INTO items (id, status) VALUES (?, ?)", (item_id, status))
        return item_id

    return fn


async def _ids(db_path: Path, fetch_all: Any) -> list[str]:
    """The committed rows, read through a second connection."""
    async with studio_state.connect(db_path) as other:
        return [r["id"] for r in await fetch_all(other, "SELECT id FROM items ORDER BY id")]


async def test_run_sync_runs_on_the_connections_thread_with_dict_rows(
    conn: aiosqlite.Connection,
) -> None:
    await conn.create_function("thread_id", 0, threading.get_ident)
    worker = await studio_state.fetch_value(conn, "SELECT thread_id() AS t")

    def probe(db: sqlite3.Connection) -> tuple[int, Any]:
        db.execute("INSERT INTO items (id, status) VALUES ('a', 'pending')")
        return threading.get_ident(), db.execute("SELECT id, status FROM items").fetchall()

    ident, rows = await studio_state.run_sync(conn, probe)
    assert ident == worker != threading.get_ident()
    assert rows == [{"id": "a", "status": "pending"}]


async def test_run_sync_raises_what_the_function_raises_and_refuses_a_closed_connection(
    db_path: Path,
) -> None:
    def boom(db: sqlite3.Connection) -> None:
        raise ValueError("closed over by the caller")  # not mistaken for a closed connection

    async with studio_state.connect(db_path) as conn:
        with pytest.raises(ValueError, match="closed over") as info:
            await studio_state.run_sync(conn, boom)
        assert not isinstance(info.value, ConnectionClosed)
    with pytest.raises(ConnectionClosed):
        await studio_state.run_sync(conn, lambda db: None)


async def test_run_write_transaction_commits_in_one_trip(
    db_path: Path, conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    def body(db: sqlite3.Connection) -> bool:
        assert db.in_transaction
        _insert("a")(db)
        _insert("b")(db)
        return db.in_transaction

    assert await studio_state.run_write_transaction(conn, body) is True
    assert conn.in_transaction is False
    assert await _ids(db_path, fetch_all) == ["a", "b"]


async def test_run_write_transaction_takes_the_write_lock_with_begin_immediate(
    db_path: Path, conn: aiosqlite.Connection
) -> None:
    def probe(db: sqlite3.Connection) -> str:
        other = sqlite3.connect(db_path, isolation_level=None, timeout=0)
        try:
            other.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            return str(exc)
        finally:
            other.close()
        return "not locked"

    assert "locked" in await studio_state.run_write_transaction(conn, probe)


async def test_an_exception_rolls_back_everything_the_function_wrote(
    db_path: Path, conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    def body(db: sqlite3.Connection) -> None:
        _insert("a")(db)
        studio_state.record_transition_sync(
            db, entity_type="dispatch", entity_id="a", status="pending", reason_code="x", now=1
        )
        raise RuntimeError("after two writes")

    with pytest.raises(RuntimeError, match="after two writes"):
        await studio_state.run_write_transaction(conn, body)
    assert conn.in_transaction is False
    assert await _ids(db_path, fetch_all) == []
    assert await fetch_all(conn, "SELECT id FROM status_transitions") == []
    # a failing statement (constraint) rolls back the statements before it too
    await studio_state.run_write_transaction(conn, _insert("dup"))

    def clash(db: sqlite3.Connection) -> None:
        _insert("fresh")(db)
        _insert("dup")(db)

    with pytest.raises(sqlite3.IntegrityError):
        await studio_state.run_write_transaction(conn, clash)
    assert await _ids(db_path, fetch_all) == ["dup"]


async def test_joins_the_current_tasks_write_transaction(
    db_path: Path, conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    async with studio_state.write_transaction(conn):
        await conn.execute("INSERT INTO items (id, status) VALUES ('outer', 'pending')")
        await studio_state.run_write_transaction(conn, _insert("inner"))
        assert conn.in_transaction  # the one-hop form did not commit the caller's transaction
        assert await _ids(db_path, fetch_all) == []
    assert await _ids(db_path, fetch_all) == ["inner", "outer"]

    with pytest.raises(KeyError):
        async with studio_state.write_transaction(conn):
            await studio_state.run_write_transaction(conn, _insert("gone"))
            raise KeyError("owner rolls back")
    assert await _ids(db_path, fetch_all) == ["inner", "outer"]


async def test_joins_a_transaction_the_caller_opened_by_hand(
    conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    await conn.execute("BEGIN")
    with pytest.raises(RuntimeError):
        await studio_state.run_write_transaction(conn, _fail)
    assert conn.in_transaction  # an error inside a joined call is left to the owner
    await studio_state.run_write_transaction(conn, _insert("a"))
    assert conn.in_transaction
    await conn.rollback()
    assert await fetch_all(conn, "SELECT id FROM items") == []


def _fail(db: sqlite3.Connection) -> None:
    db.execute("INSERT INTO items (id, status) VALUES ('kept-until-owner-decides', 'x')")
    raise RuntimeError("inside a joined call")


async def test_two_tasks_on_one_connection_are_serialised(
    db_path: Path, conn: aiosqlite.Connection, fetch_all: Any
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

    def second_body(db: sqlite3.Connection) -> None:
        order.append("second-begin")
        _insert("second")(db)
        raise RuntimeError("second fails alone")

    async def second() -> None:
        await first_inside.wait()
        await studio_state.run_write_transaction(conn, second_body)

    t1 = asyncio.create_task(first())
    t2 = asyncio.create_task(second())
    await first_inside.wait()
    await asyncio.sleep(0.05)
    assert order == []  # the one-hop call waits; it does not write into first's transaction
    release.set()
    await t1
    with pytest.raises(RuntimeError):
        await t2
    assert order == ["first-commit", "second-begin"]
    assert await _ids(db_path, fetch_all) == ["first"]


async def test_a_task_never_joins_a_one_hop_transaction_in_flight(
    db_path: Path, conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    """While the hop holds BEGIN on the thread, ``conn.in_transaction`` is true: another
    task's ``write_transaction`` must wait for it, not join it."""

    def slow(db: sqlite3.Connection) -> None:
        _insert("hop")(db)
        time.sleep(0.2)

    async def other() -> None:
        while not conn.in_transaction:
            await asyncio.sleep(0)
        # a joined block would run its INSERT in autocommit after the hop and keep it
        async with studio_state.write_transaction(conn):
            await conn.execute("INSERT INTO items (id, status) VALUES ('other', 'pending')")
            raise RuntimeError("other rolls back its own transaction")

    hop = asyncio.create_task(studio_state.run_write_transaction(conn, slow))
    with pytest.raises(RuntimeError, match="other rolls back"):
        await other()
    await hop
    assert await _ids(db_path, fetch_all) == ["hop"]


async def test_cancelling_the_caller_keeps_the_transaction_whole(
    db_path: Path, conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    entered = threading.Event()

    def slow(db: sqlite3.Connection) -> None:
        _insert("a")(db)
        entered.set()
        time.sleep(0.2)
        _insert("b")(db)

    task = asyncio.create_task(studio_state.run_write_transaction(conn, slow))
    while not entered.is_set():
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # the thread had taken the call: it completed as one transaction before the cancellation
    # surfaced, and the connection is free for the next writer
    assert conn.in_transaction is False
    assert await _ids(db_path, fetch_all) == ["a", "b"]
    await studio_state.run_write_transaction(conn, _insert("c"))
    assert await _ids(db_path, fetch_all) == ["a", "b", "c"]


async def test_waits_for_a_second_process_holding_the_write_lock(
    db_path: Path, conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    with _hold_write_lock(db_path, 0.3):
        started = time.monotonic()
        await studio_state.run_write_transaction(conn, _insert("ours"))
        waited = time.monotonic() - started
    assert waited > 0.1  # it waited for the holder's commit (busy_timeout), then wrote
    assert await _ids(db_path, fetch_all) == ["holder", "ours"]


async def test_begin_busy_at_once_is_retried_then_reported(
    db_path: Path, conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    await conn.execute("PRAGMA busy_timeout=0")  # SQLite answers BUSY at once
    with _hold_write_lock(db_path, 0.15):
        await studio_state.run_write_transaction(conn, _insert("retried"))
    assert await _ids(db_path, fetch_all) == ["holder", "retried"]

    with _hold_write_lock(db_path, 2.0, "holder2"):
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            await studio_state.run_write_transaction(conn, _insert("never"))
        assert conn.in_transaction is False
    assert await _ids(db_path, fetch_all) == ["holder", "holder2", "retried"]


def _claim(db: sqlite3.Connection, item_id: str, **kwargs: Any) -> bool:
    arguments: dict[str, Any] = {
        "table": "items",
        "entity_type": "dispatch",
        "from_statuses": ["pending"],
        "to_status": "delivering",
        "reason_code": "dispatch.delivering.claimed",
        "now": 10.0,
    }
    return studio_state.transition_sync(db, entity_id=item_id, **{**arguments, **kwargs})


async def test_transition_sync_writes_the_change_and_its_row_or_nothing(
    conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    await studio_state.run_write_transaction(conn, _insert("a"))

    def claim_twice(db: sqlite3.Connection) -> tuple[bool, bool]:
        first = _claim(db, "a", set_fields={"attempt": 1}, guards={"note": None}, actor="t")
        return first, _claim(db, "a")  # the guard no longer holds

    assert await studio_state.run_write_transaction(conn, claim_twice) == (True, False)
    rows = await fetch_all(conn, "SELECT status, attempt, updated_at FROM items")
    assert rows == [{"status": "delivering", "attempt": 1, "updated_at": 10.0}]
    audit = await fetch_all(
        conn,
        "SELECT entity_type, entity_id, previous_status, status, reason_code, actor, "
        "created_at FROM status_transitions",
    )
    assert audit == [
        {
            "entity_type": "dispatch",
            "entity_id": "a",
            "previous_status": "pending",
            "status": "delivering",
            "reason_code": "dispatch.delivering.claimed",
            "actor": "t",
            "created_at": 10.0,
        }
    ]

    def from_either(db: sqlite3.Connection) -> bool:
        return _claim(db, "a", from_statuses=["pending", "delivering"], reason_code="again")

    assert await studio_state.run_write_transaction(conn, from_either) is True
    last = await fetch_all(
        conn, "SELECT previous_status FROM status_transitions WHERE reason_code = 'again'"
    )
    assert last == [{"previous_status": "delivering"}]


async def test_transition_sync_refuses_to_run_outside_a_transaction(
    conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    await studio_state.run_write_transaction(conn, _insert("a"))
    with pytest.raises(InvalidTransition, match="open write transaction"):
        await studio_state.run_sync(conn, lambda db: _claim(db, "a"))
    with pytest.raises(InvalidTransition, match="table"):
        await studio_state.run_write_transaction(
            conn, lambda db: _claim(db, "a", table="items; DROP")
        )
    assert await fetch_all(conn, "SELECT status FROM items") == [{"status": "pending"}]
    assert await fetch_all(conn, "SELECT id FROM status_transitions") == []


async def test_record_transitions_sync_writes_every_row_with_the_change_or_none(
    conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    rows = [
        studio_state.Transition("dispatch", item, "pending", "dispatch.pending.new", 5.0)
        for item in ("a", "b")
    ]

    def body(db: sqlite3.Connection) -> int:
        _insert("a")(db)
        _insert("b")(db)
        return studio_state.record_transitions_sync(db, rows)

    assert await studio_state.run_write_transaction(conn, body) == 2
    audit = await fetch_all(
        conn, "SELECT entity_id, status, created_at FROM status_transitions ORDER BY entity_id"
    )
    assert audit == [
        {"entity_id": "a", "status": "pending", "created_at": 5.0},
        {"entity_id": "b", "status": "pending", "created_at": 5.0},
    ]
    bad = [rows[0], studio_state.Transition("nonsense", "c", "x", "y", 6.0)]

    def refused(db: sqlite3.Connection) -> int:
        _insert("c")(db)
        return studio_state.record_transitions_sync(db, bad)

    with pytest.raises(InvalidTransition, match="entity_type"):
        await studio_state.run_write_transaction(conn, refused)
    assert await fetch_all(conn, "SELECT id FROM items ORDER BY id") == [{"id": "a"}, {"id": "b"}]
    assert len(await fetch_all(conn, "SELECT id FROM status_transitions")) == 2
    assert (
        await studio_state.run_write_transaction(
            conn, lambda db: studio_state.record_transitions_sync(db, [])
        )
        == 0
    )
