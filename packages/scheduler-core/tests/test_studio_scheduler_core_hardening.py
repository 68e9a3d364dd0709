"""Hardening regressions: lease reads see committed rows only, queued runs survive a stop,
a schedule deleted mid-tick does not sink the deferral batch."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from studio_scheduler_core import AdhocWorker, SchedulerEngine
from studio_state import fetch_one

_TERMINAL_STATUS_PAUSE = (
    "CREATE TEMP TRIGGER studio_test_slow_terminal AFTER UPDATE OF status ON invocations "
    "WHEN NEW.status <> 'running' BEGIN SELECT studio_test_pause(); END"
)


async def _run(conn: Any, run_id: str) -> dict[str, Any]:
    row = await fetch_one(conn, "SELECT * FROM schedule_runs WHERE id = ?", (run_id,))
    assert row is not None
    return row


async def test_the_lease_watcher_never_sees_the_runs_own_uncommitted_terminal_write(
    settings, db_path, clock, h
) -> None:
    """The terminal write is held open (a slow SQLite trigger inside it) while the watcher
    checks the lease every 10 ms: the watcher must not read the uncommitted status, cancel
    the run mid-commit and leave it ``running``."""
    worker = AdhocWorker(settings=settings, db_path=str(db_path), clock=clock, watch_seconds=0.01)
    engine = SchedulerEngine(db_path, settings=settings, clock=clock, worker=worker)
    await engine.start(loop=False)
    try:
        await engine.conn.create_function("studio_test_pause", 0, lambda: time.sleep(0.3))
        await engine.conn.execute(_TERMINAL_STATUS_PAUSE)
        run = await engine.runs.enqueue({"action_kind": "command", "action_command": "true"})
        await engine.tick_once()

        async def ended() -> bool:
            return (await _run(engine.conn, run["id"]))["status"] != "running"

        await h.eventually(ended)
        done = await _run(engine.conn, run["id"])
        assert (done["status"], done["status_reason_code"]) == ("completed", "run.completed.ok")
        await asyncio.sleep(0.1)  # the watcher has had every chance to revoke it
        assert (await _run(engine.conn, run["id"]))["status"] == "completed"
        assert worker.in_flight() == 0
    finally:
        await engine.stop()
