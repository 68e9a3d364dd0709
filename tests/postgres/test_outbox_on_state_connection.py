"""The outbox's own functions on a studio-state PostgreSQL connection (a ``postgresql://`` URL).

The scheduler, the API and the CLI hold an ``aiosqlite.Connection`` from
``studio_state.connect``, which is PostgreSQL when the target is a URL; the outbox's functions
they call must then work on PostgreSQL's schema exactly as on SQLite.
"""

from __future__ import annotations

import json

import psycopg
import pytest

import studio_outbox
import studio_state
from studio_outbox import InvalidArgument, sync
from studio_outbox import postgres as pg
from studio_outbox.testing import RecordingTransport
from studio_state import ManualClock

from .conftest import Rows


async def test_schema_enqueue_in_a_transaction_and_the_operator_views(
    pg_dsn: str, pg_rows: Rows
) -> None:
    clock = ManualClock(1_000.0)
    async with studio_state.connect(pg_dsn) as conn:
        await studio_outbox.ensure_schema(conn)
        await studio_outbox.ensure_schema(conn)  # idempotent
        # joined: the enqueue commits or rolls back with the caller's transaction
        with pytest.raises(RuntimeError):
            async with studio_state.write_transaction(conn):
                await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="x", clock=clock)
                raise RuntimeError("the producer's change failed")
        assert await studio_outbox.count_dispatches(conn) == 0
        async with studio_state.write_transaction(conn):
            first = await studio_outbox.enqueue_dispatch(
                conn, kind="k", deliver_to="x", body={"n": 1}, clock=clock
            )
        second = await studio_outbox.enqueue_dispatch(
            conn, kind="k", deliver_to="x", dedup_key="once", ack_required=True, clock=clock
        )
        again = await studio_outbox.enqueue_dispatch(
            conn, kind="k", deliver_to="x", dedup_key="once", clock=clock
        )
        assert again == second
        assert await studio_outbox.dispatch_id_for_dedup_key(conn, "once") == second
        listed = await studio_outbox.list_dispatches(conn)
        assert [row["id"] for row in listed] == [second, first]
        page, after = await studio_outbox.page_dispatches(conn, limit=1)
        assert [row["id"] for row in page] == [second] and after is not None
        page, after = await studio_outbox.page_dispatches(conn, limit=1, before=after)
        assert [row["id"] for row in page] == [first]
        assert await studio_outbox.count_dispatches(conn, status="pending") == 2
        backlog = await studio_outbox.dispatch_backlog(conn, now=clock())
        assert backlog["due"] == 2 and backlog["by_status"]["pending"] == 2
        view = await studio_outbox.get_dispatch(conn, first)
        assert view is not None and view["payload"]["body"] == {"n": 1}
        with pytest.raises(InvalidArgument):
            await studio_outbox.list_dispatches(conn, status="lost")

        # delivery through the PostgreSQL deliverer, then the operator calls on this connection
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as raw:
            transport = RecordingTransport()
            await pg.deliver_due_dispatches(raw, transport=transport, clock=clock)
        sent = {envelope.dispatch_id: envelope for envelope in transport.sent}
        token = json.loads(sent[second].payload)["ack_token"]
        assert await studio_outbox.ack_dispatch(conn, second, token, clock=clock)
        assert (await studio_outbox.get_dispatch(conn, second) or {})["status"] == "acked"
        await studio_outbox.purge_dispatch(conn, first, clock=clock)
        assert await studio_outbox.get_dispatch(conn, first) is None
    reasons = await pg_rows(
        "SELECT reason_code, count(*) AS n FROM status_transitions "
        "WHERE entity_type = 'dispatch' GROUP BY reason_code ORDER BY reason_code"
    )
    assert {row["reason_code"] for row in reasons} >= {
        "dispatch.pending.enqueued",
        "dispatch.acked.consumer",
    }


def test_the_sync_functions_on_connect_sync(pg_dsn: str) -> None:
    conn = studio_state.connect_sync(pg_dsn)
    try:
        sync.ensure_schema(conn)
        dispatch_id = sync.enqueue_dispatch(conn, kind="k", deliver_to="x")
        assert [row["id"] for row in sync.list_dispatches(conn)] == [dispatch_id]
        assert sync.count_dispatches(conn, status="pending") == 1
    finally:
        conn.close()
