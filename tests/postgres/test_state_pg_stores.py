"""Code written for SQLite runs unchanged on a PostgreSQL connection from studio_state."""

from __future__ import annotations

import asyncio
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


async def test_racing_guarded_claims_on_separate_connections_let_exactly_one_win(
    pg_dsn: str,
) -> None:
    async with connect(pg_dsn) as setup:
        await studio_state.ensure_schema(setup)
        await setup.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY, status TEXT NOT NULL)")
        await setup.executemany(
            "INSERT INTO jobs (id, status) VALUES (?, 'queued')", [(f"j{i}",) for i in range(20)]
        )

    def claim(job: str) -> Any:
        def fn(db: sqlite3.Connection) -> bool:
            return transition_sync(
                db,
                table="jobs",
                entity_type="schedule_run",
                entity_id=job,
                from_statuses=["queued"],
                to_status="running",
                reason_code="run.claimed",
                now=1.0,
                touch_updated_at=False,
            )

        return fn

    async def node() -> list[str]:
        won: list[str] = []
        async with connect(pg_dsn) as conn:
            for i in range(20):
                if await studio_state.run_write_transaction(conn, claim(f"j{i}")):
                    won.append(f"j{i}")
        return won

    results = await asyncio.gather(*(node() for _ in range(4)))
    claimed = sorted(job for won in results for job in won)
    assert claimed == sorted(f"j{i}" for i in range(20))  # each exactly once
    async with connect(pg_dsn) as check:
        audit = await fetch_all(check, "SELECT count(*) AS n FROM status_transitions")
    assert audit == [{"n": 20}]
