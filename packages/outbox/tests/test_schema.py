from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import aiosqlite
import pytest

import studio_outbox
import studio_state


async def test_ensure_schema_is_idempotent_and_needs_no_studio_tables(tmp_path: Path) -> None:
    async with studio_state.connect(tmp_path / "fresh.db") as conn:
        await studio_outbox.ensure_schema(conn)
        await studio_outbox.ensure_schema(conn)
        tables = {
            r["name"]
            for r in await conn.execute_fetchall(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
            )
        }
        assert tables == {
            "schema_migrations",
            "status_transitions",
            "dispatch_outbox",
            "dispatch_outbox_counts",
            "api_tokens",
        }
        versions = await conn.execute_fetchall(
            "SELECT package, version FROM schema_migrations ORDER BY package"
        )
        assert [(r["package"], r["version"]) for r in versions] == [
            ("studio-outbox", 1),
            ("studio-outbox", 2),
            ("studio-outbox", 3),
            ("studio-state", 1),
            ("studio-state", 2),
        ]


async def test_table_is_adr_d5_with_soft_references(conn: aiosqlite.Connection) -> None:
    columns = await conn.execute_fetchall("PRAGMA table_info(dispatch_outbox)")
    assert [(c["name"], c["type"], c["notnull"]) for c in columns] == [
        ("id", "TEXT", 0),
        ("kind", "TEXT", 1),
        ("deliver_to", "TEXT", 1),
        ("payload", "JSON", 1),
        ("dedup_key", "TEXT", 0),
        ("status", "TEXT", 1),
        ("attempt", "INTEGER", 1),
        ("max_attempts", "INTEGER", 1),
        ("next_attempt_at", "REAL", 1),
        ("ack_required", "INTEGER", 1),
        ("ack_token", "TEXT", 0),
        ("session_id", "TEXT", 0),
        ("schedule_run_id", "TEXT", 0),
        ("last_error", "TEXT", 0),
        ("created_at", "REAL", 1),
        ("expires_at", "REAL", 0),
        ("updated_at", "REAL", 0),
        ("claimed_by", "TEXT", 0),
    ]
    assert list(await conn.execute_fetchall("PRAGMA foreign_key_list(dispatch_outbox)")) == []
    indexes = {
        r["name"]: r["sql"]
        for r in await conn.execute_fetchall(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' "
            "AND tbl_name = 'dispatch_outbox' AND sql IS NOT NULL"
        )
    }
    assert "UNIQUE" in indexes["idx_dispatch_outbox_dedup"]
    assert "WHERE dedup_key IS NOT NULL" in indexes["idx_dispatch_outbox_dedup"]
    assert (
        "(next_attempt_at) WHERE status IN ('pending', 'delivering')"
        in (indexes["idx_dispatch_outbox_due"])
    )


async def test_status_check_constraint(conn: aiosqlite.Connection) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="d")
    with pytest.raises(Exception, match="CHECK constraint failed"):
        await conn.execute(
            "UPDATE dispatch_outbox SET status = 'bogus' WHERE id = ?", (dispatch_id,)
        )


async def test_due_scan_uses_the_partial_index(conn: aiosqlite.Connection) -> None:
    from studio_outbox._steps import _SCAN

    plan = " ".join(
        str(r["detail"])
        for r in await conn.execute_fetchall("EXPLAIN QUERY PLAN " + _SCAN, (1, 1, 1, 1, 1))
    )
    assert "idx_dispatch_outbox_due" in plan
    assert "idx_dispatch_outbox_expiry" in plan
    assert "SCAN dispatch_outbox" not in plan


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    async with studio_state.connect(tmp_path / "newer.db") as conn:
        await studio_outbox.ensure_schema(conn)
        await conn.execute(
            "INSERT INTO schema_migrations (package, version, applied_at) "
            "VALUES ('studio-outbox', 99, 0)"
        )
        with pytest.raises(studio_state.SchemaTooNew, match="studio-outbox"):
            await studio_outbox.ensure_schema(conn)


async def test_the_dispatch_record_is_the_table(tmp_path: Path) -> None:
    async with studio_state.connect(tmp_path / "record.db") as conn:
        await studio_outbox.ensure_schema(conn)
        rows = await conn.execute_fetchall("PRAGMA table_info(dispatch_outbox)")
    names = [str(r["name"]) for r in rows]
    fields = [f.name for f in dataclasses.fields(studio_outbox.Dispatch)]
    assert fields == names
    public = studio_outbox._record.PUBLIC_DISPATCH_COLUMNS
    assert "ack_token" not in public and len(public) == len(names) - 2
    assert typing.get_args(studio_outbox.DispatchStatus) == studio_outbox.DISPATCH_STATUSES
