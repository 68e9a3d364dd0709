from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from studio_outbox import (
    AckTokenMismatch,
    DispatchNotFound,
    InvalidArgument,
    InvalidDispatchState,
    TransportResult,
)
from studio_outbox import postgres as pg
from studio_outbox.testing import RecordingTransport
from studio_state import ManualClock

from .conftest import Rows


async def _ready(dsn: str) -> psycopg.AsyncConnection[Any]:
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    await pg.ensure_schema(conn)
    return conn


async def test_ack_with_the_sent_token_and_views_without_it(pg_dsn: str, pg_rows: Rows) -> None:
    clock = ManualClock()
    transport = RecordingTransport()
    async with await _ready(pg_dsn) as conn:
        dispatch_id = await pg.enqueue_dispatch(
            conn, kind="k", deliver_to="x", ack_required=True, body={"a": 1}, clock=clock
        )
        await pg.deliver_due_dispatches(conn, transport=transport, clock=clock)
        token = json.loads(transport.sent[0].payload)["ack_token"]
        with pytest.raises(AckTokenMismatch):
            await pg.ack_dispatch(conn, dispatch_id, "0" * 32, clock=clock)
        view = await pg.get_dispatch(conn, dispatch_id)
        assert view is not None and view["status"] == "pending"
        assert "ack_token" not in view and "ack_token" not in view["payload"]
        assert view["payload"]["body"] == {"a": 1} and view["ack_required"] is True
        assert await pg.ack_dispatch(conn, dispatch_id, token, clock=clock)
        assert await pg.ack_dispatch(conn, dispatch_id, token, clock=clock)  # idempotent
        assert await pg.count_dispatches(conn, status="acked") == 1
        assert await pg.count_dispatches(conn, kind="k") == 1
        assert await pg.get_dispatch(conn, "missing") is None
        keyed = await pg.enqueue_dispatch(conn, kind="k2", deliver_to="x", dedup_key="d1")
        assert await pg.dispatch_id_for_dedup_key(conn, "d1") == keyed
        assert await pg.dispatch_id_for_dedup_key(conn, "d2") is None
        with pytest.raises(DispatchNotFound):
            await pg.ack_dispatch(conn, "missing", token)
        with pytest.raises(InvalidArgument):
            await pg.count_dispatches(conn, status="lost")
    history = await pg_rows(
        "SELECT count(*) AS n FROM status_transitions WHERE reason_code = 'dispatch.acked.consumer'"
    )
    assert history == [{"n": 1}]


async def test_retry_a_dead_letter_then_purge_and_the_backlog(pg_dsn: str, pg_rows: Rows) -> None:
    clock = ManualClock()
    failing = RecordingTransport(lambda e: TransportResult.permanent_failure("HTTP 410"))
    async with await _ready(pg_dsn) as conn:
        dispatch_id = await pg.enqueue_dispatch(conn, kind="k", deliver_to="x", clock=clock)
        first_due = clock()
        clock.advance(1)  # the first is due before the second: limit=1 takes it
        await pg.enqueue_dispatch(conn, kind="k", deliver_to="x", clock=clock)
        backlog = await pg.dispatch_backlog(conn, clock=clock)
        assert backlog["due"] == 2 and backlog["oldest_due_at"] == first_due
        assert backlog["by_status"]["pending"] == 2
        await pg.deliver_due_dispatches(conn, transport=failing, clock=clock, limit=1)
        assert (await pg.get_dispatch(conn, dispatch_id) or {})["status"] == "dead_letter"
        with pytest.raises(InvalidDispatchState):
            await pg.retry_dispatch(conn, await _other(pg_rows, dispatch_id), clock=clock)
        clock.advance(5)
        await pg.retry_dispatch(conn, dispatch_id, clock=clock)
        row = await pg.get_dispatch(conn, dispatch_id)
        assert row is not None
        assert (row["status"], row["attempt"], row["last_error"]) == ("pending", 0, None)
        assert row["payload"]["attempt"] == 0 and row["next_attempt_at"] == clock()
        sent = RecordingTransport()
        await pg.deliver_due_dispatches(conn, transport=sent, clock=clock)
        assert sorted(e.attempt for e in sent.sent) == [1, 1]
        await pg.purge_dispatch(conn, dispatch_id, clock=clock)
        assert await pg.get_dispatch(conn, dispatch_id) is None
        assert (await pg.dispatch_backlog(conn, clock=clock))["by_status"]["delivered"] == 1
    kept = await pg_rows(
        "SELECT count(*) AS n FROM status_transitions WHERE entity_id = %s", (dispatch_id,)
    )
    assert kept[0]["n"] >= 5  # the history outlives the purged row


async def _other(pg_rows: Rows, dispatch_id: str) -> str:
    found = await pg_rows("SELECT id FROM dispatch_outbox WHERE id <> %s", (dispatch_id,))
    return str(found[0]["id"])


async def test_purge_refuses_a_row_whose_send_may_be_in_flight(pg_dsn: str) -> None:
    clock = ManualClock()
    async with await _ready(pg_dsn) as conn:
        dispatch_id = await pg.enqueue_dispatch(conn, kind="k", deliver_to="x", clock=clock)
        await conn.execute(
            "UPDATE dispatch_outbox SET status = 'delivering', next_attempt_at = %s",
            (clock() + 15,),
        )
        with pytest.raises(InvalidDispatchState) as caught:
            await pg.purge_dispatch(conn, dispatch_id, clock=clock)
        assert caught.value.status == "delivering"
        clock.advance(16)
        await pg.purge_dispatch(conn, dispatch_id, clock=clock)
        assert await pg.count_dispatches(conn) == 0


async def test_list_and_keyset_pages_newest_first(pg_dsn: str) -> None:
    clock = ManualClock()
    async with await _ready(pg_dsn) as conn:
        ids = [
            await pg.enqueue_dispatch(
                conn, kind="a" if i % 2 else "b", deliver_to="x", body={"i": i}, clock=clock
            )
            for i in range(7)
        ]
        listed = await pg.list_dispatches(conn)
        assert [row["id"] for row in listed] == ids[::-1]
        assert [row["id"] for row in await pg.list_dispatches(conn, kind="a", limit=2)] == [
            ids[5],
            ids[3],
        ]
        assert await pg.list_dispatches(conn, status="acked") == []
        seen: list[str] = []
        before: int | None = None
        while True:
            page, before = await pg.page_dispatches(conn, limit=3, before=before)
            seen.extend(row["id"] for row in page)
            if before is None:
                break
        assert seen == ids[::-1]
        assert "ack_token" not in listed[0] and listed[0]["payload"]["body"] == {"i": 6}
        with pytest.raises(InvalidArgument, match="before"):
            await pg.page_dispatches(conn, before=0)
        with pytest.raises(InvalidArgument, match="limit"):
            await pg.list_dispatches(conn, limit=0)


async def test_rows_enqueued_before_the_rowid_migration_are_numbered(pg_dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        # Apply migrations 1–5 only (the schema as the previous release left it), enqueue,
        # then let ensure_schema add the rowid column.
        older = pg.MIGRATIONS[:5]
        async with conn.transaction():
            for steps in (pg.STATE_MIGRATIONS, older):
                for migration in steps:
                    await conn.execute(migration.sql)  # type: ignore[arg-type]
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (package TEXT NOT NULL, "
                "version INTEGER NOT NULL, applied_at DOUBLE PRECISION NOT NULL, "
                "PRIMARY KEY (package, version))"
            )
            for migration in older:
                await conn.execute(
                    "INSERT INTO schema_migrations VALUES ('studio-outbox', %s, 0)",
                    (migration.version,),
                )
            await conn.execute("INSERT INTO schema_migrations VALUES ('studio-state', 1, 0)")
        first = await pg.enqueue_dispatch(conn, kind="k", deliver_to="x")
        second = await pg.enqueue_dispatch(conn, kind="k", deliver_to="x")
        await pg.ensure_schema(conn)
        assert [row["id"] for row in await pg.list_dispatches(conn)] == [second, first]
        third = await pg.enqueue_dispatch(conn, kind="k", deliver_to="x")
        assert [row["id"] for row in await pg.list_dispatches(conn, limit=1)] == [third]
