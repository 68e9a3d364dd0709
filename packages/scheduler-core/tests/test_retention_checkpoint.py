"""Retention and the WAL: batches commit without an auto-checkpoint, the pass checkpoints
between them on its own connection, and the connection's setting comes back afterwards."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from studio_outbox import enqueue_dispatch
from studio_scheduler_core._recovery.retention import retention_pass
from studio_state import fetch_value

DAY = 86400.0


async def _expired_dispatches(conn: Any, clock: Any, n: int) -> None:
    for i in range(n):
        await enqueue_dispatch(conn, kind="k", deliver_to=f"x{i}", clock=clock)
    await conn.execute("UPDATE dispatch_outbox SET status = 'expired'")
    await conn.commit()


async def test_the_connections_autocheckpoint_is_restored_after_a_pass(
    conn: Any, clock: Any, tmp_path: Path
) -> None:
    await _expired_dispatches(conn, clock, 300)
    await conn.execute("PRAGMA wal_autocheckpoint = 777")
    report = await retention_pass(
        conn, now=clock() + 10 * DAY, retention_days=1, runs_dir=tmp_path, time_budget=60
    )
    assert report.done and report.dispatches == 300
    assert int(await fetch_value(conn, "PRAGMA wal_autocheckpoint")) == 777


async def test_the_autocheckpoint_is_restored_when_the_pass_stops_at_its_budget(
    conn: Any, clock: Any, tmp_path: Path
) -> None:
    await _expired_dispatches(conn, clock, 300)
    ticks = iter(float(i) for i in range(1000))  # every batch "holds" 1 s: over budget at once
    report = await retention_pass(
        conn,
        now=clock() + 10 * DAY,
        retention_days=1,
        runs_dir=tmp_path,
        time_budget=1.5,
        timer=lambda: next(ticks),
    )
    assert not report.done
    assert int(await fetch_value(conn, "PRAGMA wal_autocheckpoint")) == 1000  # SQLite's default


@pytest.mark.sqlite_only("copies the SQLite file and reads it with sqlite3")
async def test_deleted_pages_reach_the_database_file_without_an_auto_checkpoint(
    conn: Any, clock: Any, db_path: Path, tmp_path: Path
) -> None:
    await _expired_dispatches(conn, clock, 300)
    await conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    await conn.execute("PRAGMA wal_autocheckpoint = 0")  # only the pass's checkpoints run
    report = await retention_pass(
        conn, now=clock() + 10 * DAY, retention_days=1, runs_dir=tmp_path, time_budget=60
    )
    assert report.dispatches == 300
    # The pass's passive checkpoints copied its commits into the file: a reader of the file
    # alone (no WAL) sees the rows gone.
    copy = tmp_path / "file-only.db"
    copy.write_bytes(db_path.read_bytes())
    reader = sqlite3.connect(copy)
    try:
        assert reader.execute("SELECT COUNT(*) FROM dispatch_outbox").fetchone()[0] == 0
    finally:
        reader.close()
