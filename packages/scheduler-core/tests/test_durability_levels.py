"""Writes that commit at ``synchronous=NORMAL`` on the engine's FULL connection (retention
batches, the child-pid record), seen through SQLite's own statement trace."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from studio_outbox import enqueue_dispatch
from studio_scheduler_core._recovery.retention import retention_pass
from studio_state import fetch_value, run_sync

pytestmark = pytest.mark.sqlite_only(
    "reads SQLite's synchronous levels through sqlite3's trace callback"
)

DAY = 86400.0


async def _trace(conn: Any) -> list[str]:
    statements: list[str] = []

    def install(db: sqlite3.Connection) -> None:
        db.set_trace_callback(statements.append)

    await run_sync(conn, install)
    return statements


async def _untrace(conn: Any) -> None:
    def remove(db: sqlite3.Connection) -> None:
        db.set_trace_callback(None)

    await run_sync(conn, remove)


def _level_before(statements: list[str], index: int) -> str | None:
    """The ``PRAGMA synchronous = N`` set since the last COMMIT/ROLLBACK before ``index``."""
    for text in reversed(statements[:index]):
        if text.startswith("PRAGMA synchronous = "):
            return text.rsplit(" ", 1)[1]
        if text in ("COMMIT", "ROLLBACK"):
            return None
    return None


async def test_retention_batches_commit_at_normal_and_the_connection_stays_full(
    conn: Any, clock: Any, tmp_path: Path
) -> None:
    for i in range(120):
        await enqueue_dispatch(conn, kind="k", deliver_to=f"x{i}", clock=clock)
    await conn.execute("UPDATE dispatch_outbox SET status = 'expired'")
    await conn.commit()
    statements = await _trace(conn)
    report = await retention_pass(
        conn, now=clock() + 10 * DAY, retention_days=1, runs_dir=tmp_path, time_budget=60
    )
    await _untrace(conn)
    assert report.done and report.dispatches == 120
    deletes = [i for i, s in enumerate(statements) if s.startswith("DELETE FROM dispatch_outbox")]
    assert deletes
    assert {_level_before(statements, i) for i in deletes} == {"1"}
    assert int(await fetch_value(conn, "PRAGMA synchronous")) == 2
    assert int(await fetch_value(conn, "SELECT COUNT(*) FROM dispatch_outbox")) == 0


async def test_the_child_record_commits_at_normal_and_the_fire_stays_full(
    make_engine: Any, clock: Any, h: Any
) -> None:
    engine = await make_engine(clock=clock)
    ok = h.script("ok.py", "pass\n")
    schedule = await engine.service.create(h.command_schedule(ok, name="s"))
    statements = await _trace(engine.conn)
    clock.set(float(schedule.next_fire_at))
    await engine.tick_once()
    await engine.wait_idle()
    await _untrace(engine.conn)
    runs = await h.runs_of(engine.conn, schedule.id)
    assert [r.status for r in runs] == ["completed"]
    assert runs[0].child_pid
    records = [
        i for i, s in enumerate(statements) if s.startswith("UPDATE schedule_runs SET child")
    ]
    assert len(records) == 1
    assert _level_before(statements, records[0]) == "1"
    # The fire's claim and its terminal write run at the connection's FULL.
    others = [
        i
        for i, s in enumerate(statements)
        if s.startswith(("INSERT INTO schedule_runs", "UPDATE schedule_runs SET status"))
    ]
    assert others
    assert {_level_before(statements, i) for i in others} <= {None, "2"}
    assert int(await fetch_value(engine.conn, "PRAGMA synchronous")) == 2
