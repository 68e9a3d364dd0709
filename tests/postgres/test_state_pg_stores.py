"""Code written for SQLite runs unchanged on a PostgreSQL connection from studio_state."""

from __future__ import annotations

import sqlite3
from typing import Any

import studio_outbox
import studio_state
from studio_outbox.postgres import ensure_schema_sync
from studio_state import connect, fetch_all, run_sync, transition_sync, write_transaction


async def _schema(conn: Any) -> None:
    await run_sync(conn, lambda db: ensure_schema_sync(db.raw))


async def test_the_outbox_sqlite_enqueue_runs_on_a_postgres_connection(pg_dsn: str) -> None:
    async with connect(pg_dsn) as conn:
        await _schema(conn)
        first = await studio_outbox.enqueue_dispatch(
            conn, kind="webhook", deliver_to="https://example.test/h", dedup_key="k1"
        )
        again = await studio_outbox.enqueue_dispatch(
            conn, kind="webhook", deliver_to="https://example.test/h", dedup_key="k1"
        )
        assert again == first
        # Inside the producer's own transaction: rolled back with it.
        await conn.execute("BEGIN")
        await studio_outbox.enqueue_dispatch(
            conn, kind="webhook", deliver_to="https://example.test/h", dedup_key="k2"
        )
        assert conn.in_transaction
        await conn.rollback()
        rows = await fetch_all(conn, "SELECT id, dedup_key, status FROM dispatch_outbox")
        assert rows == [{"id": first, "dedup_key": "k1", "status": "pending"}]
        audit = await fetch_all(
            conn, "SELECT entity_id, status, reason_code FROM status_transitions"
        )
        assert [row["entity_id"] for row in audit] == [first]


async def test_guarded_transitions_write_their_audit_rows(pg_dsn: str) -> None:
    async with connect(pg_dsn) as conn:
        await studio_state.ensure_schema(conn)
        await conn.execute(
            "CREATE TABLE jobs (id TEXT PRIMARY KEY, status TEXT NOT NULL, "
            "updated_at DOUBLE PRECISION)"
        )
        await conn.execute("INSERT INTO jobs (id, status) VALUES (?, ?)", ("j", "queued"))
        async with write_transaction(conn):
            applied = await studio_state.transition(
                conn,
                table="jobs",
                entity_type="schedule_run",
                entity_id="j",
                from_statuses=["queued"],
                to_status="running",
                reason_code="run.started",
                now=1.0,
            )
        assert applied

        def finish(db: sqlite3.Connection) -> tuple[bool, bool]:
            kwargs: dict[str, Any] = {
                "table": "jobs",
                "entity_type": "schedule_run",
                "entity_id": "j",
                "from_statuses": ["running", "queued"],
                "to_status": "succeeded",
                "reason_code": "run.succeeded",
                "now": 2.0,
            }
            return transition_sync(db, **kwargs), transition_sync(db, **kwargs)

        assert await studio_state.run_write_transaction(conn, finish) == (True, False)
        audit = await fetch_all(
            conn,
            "SELECT previous_status, status, created_at FROM status_transitions "
            "ORDER BY created_at",
        )
        assert audit == [
            {"previous_status": "queued", "status": "running", "created_at": 1.0},
            {"previous_status": "running", "status": "succeeded", "created_at": 2.0},
        ]
