"""``studio_outbox.sync``: the outbox on a standard ``sqlite3.Connection``, and ``synchronous=``."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import studio_outbox
import studio_state
from studio_outbox import sync as outbox


@pytest.fixture
def sconn(db_path: Path) -> Iterator[sqlite3.Connection]:
    conn = outbox.connect(db_path)
    try:
        yield conn
    finally:
        conn.close()


def _other(path: Path) -> sqlite3.Connection:
    """A second, independent connection (what another process would see)."""
    return sqlite3.connect(path)


def _count(path: Path, sql: str) -> int:
    other = _other(path)
    try:
        return int(other.execute(sql).fetchone()[0])
    finally:
        other.close()


def test_enqueue_without_a_transaction_commits_its_own(
    sconn: sqlite3.Connection, db_path: Path
) -> None:
    dispatch_id = outbox.enqueue_dispatch(sconn, kind="order.created", deliver_to="ops")
    assert not sconn.in_transaction
    assert _count(db_path, "SELECT count(*) FROM dispatch_outbox") == 1
    history = _count(
        db_path, f"SELECT count(*) FROM status_transitions WHERE entity_id = '{dispatch_id}'"
    )
    assert history == 1


def test_enqueue_joins_the_callers_transaction_and_rolls_back_with_it(
    sconn: sqlite3.Connection, db_path: Path
) -> None:
    sconn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    with pytest.raises(RuntimeError, match="producer failed"), sconn:
        sconn.execute("INSERT INTO orders (id) VALUES (1)")
        assert sconn.in_transaction
        outbox.enqueue_dispatch(sconn, kind="order.created", deliver_to="ops")
        assert sconn.in_transaction  # joined: nothing committed by the outbox
        assert _count(db_path, "SELECT count(*) FROM dispatch_outbox") == 0
        raise RuntimeError("producer failed")
    assert _count(db_path, "SELECT count(*) FROM dispatch_outbox") == 0
    assert _count(db_path, "SELECT count(*) FROM status_transitions") == 0
    assert _count(db_path, "SELECT count(*) FROM orders") == 0


def test_enqueue_in_the_callers_transaction_commits_with_it(
    sconn: sqlite3.Connection, db_path: Path
) -> None:
    sconn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    with sconn:
        sconn.execute("INSERT INTO orders (id) VALUES (1)")
        first, second = outbox.enqueue_many(
            sconn,
            [
                {"kind": "order.created", "deliver_to": "ops", "dedup_key": "o1"},
                {"kind": "order.created", "deliver_to": "ops", "dedup_key": "o1"},
            ],
        )
    assert first == second
    assert _count(db_path, "SELECT count(*) FROM dispatch_outbox") == 1
    assert _count(db_path, "SELECT count(*) FROM orders") == 1


@pytest.mark.parametrize("factory", [None, sqlite3.Row], ids=["tuple", "sqlite3.Row"])
def test_every_function_on_a_plain_sqlite3_connection(
    db_path: Path, factory: Any, clock: studio_state.ManualClock
) -> None:
    first = sqlite3.connect(db_path)
    first.close()
    conn = sqlite3.connect(db_path)
    try:
        conn.row_factory = factory
        outbox.ensure_schema(conn)
        acked = outbox.enqueue_dispatch(
            conn, kind="k", deliver_to="ops", ack_required=True, body={"a": 1}, clock=clock
        )
        dead = outbox.enqueue_dispatch(conn, kind="k", deliver_to="ops", clock=clock)
        row = outbox.get_dispatch(conn, acked)
        assert row is not None
        assert row["ack_required"] is True and row["payload"]["body"] == {"a": 1}
        assert "ack_token" not in row["payload"]
        assert [r["id"] for r in outbox.list_dispatches(conn, kind="k")] == [dead, acked]
        assert outbox.count_dispatches(conn, status="pending") == 2
        assert outbox.dispatch_backlog(conn, clock=clock)["due"] == 2
        assert outbox.next_due_at(conn) == clock()
        (token,) = conn.execute(
            "SELECT ack_token FROM dispatch_outbox WHERE id = ?", (acked,)
        ).fetchone()
        with pytest.raises(studio_outbox.AckTokenMismatch):
            outbox.ack_dispatch(conn, acked, "wrong")
        assert outbox.ack_dispatch(conn, acked, token, clock=clock) is True
        assert outbox.ack_dispatch(conn, acked, token, clock=clock) is True
        with pytest.raises(studio_outbox.InvalidDispatchState):
            outbox.retry_dispatch(conn, dead)
        with conn:
            conn.execute("UPDATE dispatch_outbox SET status = 'dead_letter' WHERE id = ?", (dead,))
        outbox.retry_dispatch(conn, dead, clock=clock)
        assert outbox.get_dispatch(conn, dead)["status"] == "pending"  # type: ignore[index]
        outbox.purge_dispatch(conn, dead)
        with pytest.raises(studio_outbox.DispatchNotFound):
            outbox.purge_dispatch(conn, dead)
        assert conn.row_factory is factory
        reasons = [
            r[0]
            for r in conn.execute(
                "SELECT reason_code FROM status_transitions WHERE entity_id = ? ORDER BY rowid",
                (acked,),
            )
        ]
        assert reasons == ["dispatch.pending.enqueued", "dispatch.acked.consumer"]
    finally:
        conn.close()


async def test_sync_rows_match_async_rows_and_are_delivered_by_the_async_loop(
    db_path: Path, sconn: sqlite3.Connection, transport_factory: Any
) -> None:
    dispatch_id = outbox.enqueue_dispatch(sconn, kind="k", deliver_to="ops", dedup_key="same")
    async with studio_outbox.connect(db_path) as conn:
        again = await studio_outbox.enqueue_dispatch(
            conn, kind="k", deliver_to="ops", dedup_key="same"
        )
        assert again == dispatch_id
        assert await studio_outbox.get_dispatch(conn, dispatch_id) == outbox.get_dispatch(
            sconn, dispatch_id
        )
        transport = transport_factory()
        counts = await studio_outbox.deliver_due_dispatches(conn, transport=transport)
        assert counts["delivered"] == 1
        assert [e.dispatch_id for e in transport.sent] == [dispatch_id]
    assert outbox.get_dispatch(sconn, dispatch_id)["status"] == "delivered"  # type: ignore[index]


def test_bad_arguments_name_the_field_and_write_nothing(
    sconn: sqlite3.Connection, db_path: Path, tmp_path: Path
) -> None:
    with pytest.raises(studio_outbox.InvalidDispatch, match="max_attempts"):
        outbox.enqueue_dispatch(sconn, kind="k", deliver_to="ops", max_attempts=0)
    with pytest.raises(studio_outbox.InvalidArgument, match="status"):
        outbox.list_dispatches(sconn, status="nope")
    with pytest.raises(studio_outbox.InvalidArgument, match="conn"):
        outbox.get_dispatch("not a connection", "x")  # type: ignore[arg-type]
    assert _count(db_path, "SELECT count(*) FROM dispatch_outbox") == 0
    memory = sqlite3.connect(":memory:")
    try:
        with pytest.raises(studio_outbox.InvalidArgument, match="database file"):
            outbox.ensure_schema(memory)
    finally:
        memory.close()
    sconn.execute("BEGIN")
    with pytest.raises(studio_outbox.InvalidArgument, match="open transaction"):
        outbox.ensure_schema(sconn)
    sconn.execute("ROLLBACK")
    missing = tmp_path / "never" / "made.db"
    with pytest.raises(studio_outbox.InvalidArgument, match="synchronous"):
        outbox.connect(missing, synchronous="fast")
    assert not missing.parent.exists()


def _synchronous(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA synchronous").fetchone()[0])


async def test_synchronous_full_by_default_normal_when_asked(tmp_path: Path) -> None:
    full, normal = 2, 1
    conn = outbox.connect(tmp_path / "a.db")
    try:
        assert _synchronous(conn) == full
    finally:
        conn.close()
    conn = outbox.connect(tmp_path / "b.db", synchronous="NORMAL")
    try:
        assert _synchronous(conn) == normal
        outbox.ensure_schema(conn, synchronous="full")
        assert _synchronous(conn) == full
    finally:
        conn.close()
    for mode, expected in (("full", full), ("normal", normal)):
        async with studio_outbox.connect(tmp_path / f"{mode}.db", synchronous=mode) as aconn:
            rows = list(await aconn.execute_fetchall("PRAGMA synchronous"))
            assert next(iter(rows[0].values())) == expected
            await studio_outbox.ensure_schema(aconn, synchronous="full")
            rows = list(await aconn.execute_fetchall("PRAGMA synchronous"))
            assert next(iter(rows[0].values())) == full
    with pytest.raises(studio_outbox.InvalidArgument, match="synchronous"):
        async with studio_outbox.connect(tmp_path / "c.db", synchronous="off"):
            pass
    assert not (tmp_path / "c.db").exists()
