"""Every outbox function on a plain ``aiosqlite.connect(path)``, whatever its row factory."""

from __future__ import annotations

import sqlite3
from collections import namedtuple
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

import studio_outbox
from studio_outbox import TransportResult

Pair = namedtuple("Pair", ["first", "rest"])


def _pair(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> Pair:
    return Pair(row[0], row[1:])


FACTORIES: dict[str, Callable[..., Any] | None] = {
    "tuple": None,
    "sqlite3.Row": sqlite3.Row,
    "namedtuple": _pair,
}


@pytest.mark.parametrize("factory", list(FACTORIES), ids=list(FACTORIES))
async def test_every_function_works_whatever_the_row_factory(
    tmp_path: Path, factory: str, transport_factory: Any
) -> None:
    path = tmp_path / "plain.db"
    async with aiosqlite.connect(path) as conn:
        chosen = FACTORIES[factory]
        conn.row_factory = chosen  # type: ignore[assignment]
        await studio_outbox.ensure_schema(conn)
        first = await studio_outbox.enqueue_dispatch(
            conn, kind="job.failed", deliver_to="ops", body={"n": 1}, dedup_key="k1"
        )
        assert (
            await studio_outbox.enqueue_dispatch(
                conn, kind="job.failed", deliver_to="ops", dedup_key="k1"
            )
            == first
        )
        acked, other = await studio_outbox.enqueue_many(
            conn,
            [
                {"kind": "job.done", "deliver_to": "ops", "ack_required": True},
                {"kind": "job.done", "deliver_to": "fail"},
            ],
        )
        row = await studio_outbox.get_dispatch(conn, first)
        assert row is not None and row["status"] == "pending" and row["payload"]["body"] == {"n": 1}
        assert [r["id"] for r in await studio_outbox.list_dispatches(conn)] == [
            other,
            acked,
            first,
        ]
        assert await studio_outbox.count_dispatches(conn, status="pending") == 3
        assert (await studio_outbox.dispatch_backlog(conn))["by_status"]["pending"] == 3
        assert await studio_outbox.next_due_at(conn) is not None

        def behaviour(envelope: Any) -> TransportResult:
            if envelope.deliver_to == "fail":
                return TransportResult.failure("no")
            return TransportResult.success()

        counts = await studio_outbox.deliver_due_dispatches(
            conn, transport=transport_factory(behaviour)
        )
        assert counts == {
            "attempted": 3,
            "delivered": 2,
            "retried": 1,
            "dead_letter": 0,
            "expired": 0,
        }
        token = await _ack_token(path, acked)
        assert await studio_outbox.ack_dispatch(conn, acked, token) is True
        await _force(path, other, status="dead_letter")
        await studio_outbox.retry_dispatch(conn, other)
        await studio_outbox.purge_dispatch(conn, first)
        assert await studio_outbox.get_dispatch(conn, first) is None
        statuses = {r["id"]: r["status"] for r in await studio_outbox.list_dispatches(conn)}
        assert statuses == {acked: "acked", other: "pending"}
        # The caller's row factory is untouched.
        assert conn.row_factory is chosen
        cursor = await conn.execute("SELECT 1 AS one")
        sample = await cursor.fetchone()
        await cursor.close()
        expected = {"tuple": tuple, "sqlite3.Row": sqlite3.Row, "namedtuple": Pair}[factory]
        assert type(sample) is expected


async def _ack_token(path: Path, dispatch_id: str) -> str:
    with sqlite3.connect(path) as raw:
        (token,) = raw.execute(
            "SELECT ack_token FROM dispatch_outbox WHERE id = ?", (dispatch_id,)
        ).fetchone()
    return str(token)


async def _force(path: Path, dispatch_id: str, *, status: str) -> None:
    raw = sqlite3.connect(path)
    try:
        with raw:
            raw.execute("UPDATE dispatch_outbox SET status = ? WHERE id = ?", (status, dispatch_id))
    finally:
        raw.close()


async def test_enqueue_joins_the_callers_transaction_on_a_plain_connection(tmp_path: Path) -> None:
    async with aiosqlite.connect(tmp_path / "plain.db", isolation_level=None) as conn:
        await studio_outbox.ensure_schema(conn)
        await conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        await conn.execute("BEGIN")
        await conn.execute("INSERT INTO orders (id) VALUES (1)")
        await studio_outbox.enqueue_dispatch(conn, kind="order.created", deliver_to="ops")
        await conn.rollback()
        assert await studio_outbox.count_dispatches(conn) == 0
