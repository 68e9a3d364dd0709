"""Issue 37 on PostgreSQL: scoped tokens (and their audit rows) on a served Studio, the
operator's ack and the bulk purge, through a studio-state connection and the outbox's own
PostgreSQL functions."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import psycopg

import studio_outbox
import studio_state
from studio_api import StudioSettings
from studio_api._tokens import create_token, list_tokens, revoke_token
from studio_api.testing import StudioServers
from studio_outbox import postgres as pg
from studio_scheduler_core import ensure_schema

from .conftest import Rows


async def test_tokens_are_enforced_and_audited_on_postgres(
    pg_dsn: str, pg_rows: Rows, tmp_path: Path
) -> None:
    async with studio_state.connect(pg_dsn) as conn:
        await ensure_schema(conn)
        _, read = await create_token(conn, "viewer", "read", now=time.time(), actor="cli:ops")
        _, operate = await create_token(conn, "ops", "operate", now=time.time(), actor="cli:ops")
        dispatch_id = await studio_outbox.enqueue_dispatch(
            conn, kind="k", deliver_to="nowhere", ack_required=True
        )

    def settings(**overrides: object) -> StudioSettings:
        return StudioSettings.from_env(
            {}, db=pg_dsn, port=0, tick_seconds=1, run_log_dir=tmp_path / "runs", **overrides
        )

    with StudioServers(settings) as servers:
        studio = servers()
        base = studio.base_url
        assert httpx.get(f"{base}/api/schedules").status_code == 401
        headers = {"Authorization": f"Bearer {read}"}
        assert httpx.get(f"{base}/api/schedules", headers=headers).status_code == 200
        refused = httpx.post(
            f"{base}/api/dispatch/{dispatch_id}/ack", json={"operator": True}, headers=headers
        )
        assert refused.status_code == 403 and refused.json()["required_role"] == "operate"
        acked = httpx.post(
            f"{base}/api/dispatch/{dispatch_id}/ack",
            json={"operator": True},
            headers={"Authorization": f"Bearer {operate}"},
        )
        assert acked.status_code == 200 and acked.json()["status"] == "acked", acked.text
        audit = httpx.get(f"{base}/api/audit", params={"actor": "ops"}, headers=headers).json()
        assert [e["reason_code"] for e in audit["entries"]] == ["dispatch.acked.operator"]
        tokens = httpx.get(f"{base}/api/audit", params={"entity": "token"}, headers=headers)
        assert {e["metadata"]["name"] for e in tokens.json()["entries"]} == {"viewer", "ops"}

        async with studio_state.connect(pg_dsn) as conn:
            await revoke_token(conn, "viewer", now=time.time(), actor="cli:ops")
            assert [t.name for t in await list_tokens(conn)] == ["ops"]
        assert httpx.get(f"{base}/api/schedules", headers=headers).status_code == 401

    rows = await pg_rows(
        "SELECT reason_code, actor FROM status_transitions WHERE entity_type = 'token' "
        "ORDER BY created_at"
    )
    assert [(r["reason_code"], r["actor"]) for r in rows] == [
        ("token.created", "cli:ops"),
        ("token.created", "cli:ops"),
        ("token.revoked", "cli:ops"),
    ]


async def test_operator_ack_and_bulk_purge_on_postgres(pg_dsn: str, pg_rows: Rows) -> None:
    clock = studio_state.ManualClock(10_000.0)
    async with studio_state.connect(pg_dsn) as conn:
        await studio_outbox.ensure_schema(conn)
        ids = [
            await studio_outbox.enqueue_dispatch(
                conn, kind="k", deliver_to=f"d{i}", ack_required=True, clock=clock
            )
            for i in range(5)
        ]
        assert await studio_outbox.operator_ack_dispatch(conn, ids[0], actor="alice", clock=clock)
        await conn.execute(
            "UPDATE dispatch_outbox SET status = 'delivering', next_attempt_at = ? WHERE id = ?",
            (clock() + 300, ids[4]),
        )
        await conn.commit()
    # the outbox's own PostgreSQL functions, on a psycopg connection
    async with await psycopg.AsyncConnection.connect(pg_dsn) as raw:
        assert await pg.operator_ack_dispatch(raw, ids[1], actor="bob", clock=clock)
        assert await pg.purge_dispatches(raw, status="acked", actor="bob", dry_run=True) == 2
        assert await pg.purge_dispatches(raw, status="acked", actor="bob", clock=clock) == 2
    async with studio_state.connect(pg_dsn) as conn:
        assert (
            await studio_outbox.purge_dispatches(conn, status="pending", actor="carol", clock=clock)
            == 2
        )
        left = [row["id"] for row in await studio_outbox.list_dispatches(conn)]
        assert left == [ids[4]]  # the delivering row is never purged in bulk
    rows = await pg_rows(
        "SELECT entity_id, reason_code, actor FROM status_transitions "
        "WHERE reason_code IN ('dispatch.acked.operator', 'dispatch.purged.operator') "
        "ORDER BY entity_id, reason_code"
    )
    assert {(r["entity_id"], r["reason_code"], r["actor"]) for r in rows} == {
        (ids[0], "dispatch.acked.operator", "alice"),
        (ids[1], "dispatch.acked.operator", "bob"),
        (ids[0], "dispatch.purged.operator", "bob"),
        (ids[1], "dispatch.purged.operator", "bob"),
        (ids[2], "dispatch.purged.operator", "carol"),
        (ids[3], "dispatch.purged.operator", "carol"),
    }
