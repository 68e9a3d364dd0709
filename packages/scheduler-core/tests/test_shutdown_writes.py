"""Shutdown while writes are in flight: a terminal write the stop interrupts still lands."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from studio_launcher import is_same_process
from studio_state import connect, fetch_one


@pytest.mark.sqlite_only("holds SQLite's write lock through sqlite3")
async def test_a_terminal_write_waiting_for_the_lock_at_shutdown_still_lands(
    make_engine, clock, h, tmp_path: Path
) -> None:
    """The child exits, its terminal write waits for the write lock, and the engine stops
    meanwhile: the run must not be left ``running`` with no process."""
    engine = await make_engine(clock=clock)
    go = tmp_path / "go"
    child = h.script(
        "waits.py",
        f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.02)\n",
    )
    created = await engine.service.create(h.command_schedule(child))
    run_id = await engine.fire_now(created.id)

    async def started() -> bool:
        row = await fetch_one(
            engine.conn, "SELECT child_pid FROM schedule_runs WHERE id = ?", (run_id,)
        )
        return row is not None and row["child_pid"] is not None

    await h.eventually(started)
    row = await fetch_one(
        engine.conn, "SELECT child_pid, child_started_at FROM schedule_runs WHERE id = ?", (run_id,)
    )
    holder = sqlite3.connect(engine.db_path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    try:
        go.write_text("")

        async def exited() -> bool:
            return not is_same_process(row["child_pid"], row["child_started_at"])

        await h.eventually(exited)
        await asyncio.sleep(0.3)  # the terminal write now waits for the lock
        stopping = asyncio.create_task(engine.stop())
        await asyncio.sleep(0.3)
        assert not stopping.done()  # the stop waits for the write
    finally:
        holder.commit()
        holder.close()
    await stopping
    async with connect(engine.db_path) as conn:
        run = await fetch_one(conn, "SELECT * FROM schedule_runs WHERE id = ?", (run_id,))
        inv = await fetch_one(
            conn, "SELECT status FROM invocations WHERE id = ?", (run["invocation_id"],)
        )
    assert (run["status"], run["status_reason_code"]) == ("completed", "run.completed.ok")
    assert inv["status"] == "completed"
