"""Retention keeps a retry series together: an old failed attempt stays while a live run
retries it, and both go once the series has ended and aged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from studio_scheduler_core._recovery.retention import retention_pass
from studio_state import fetch_all

DAY = 86400.0
DAY_SEC = 86400


async def _runs(conn: Any, schedule_id: str) -> list[dict[str, Any]]:
    return await fetch_all(
        conn,
        "SELECT id, status, retry_of FROM schedule_runs WHERE schedule_id = ? ORDER BY rowid",
        (schedule_id,),
    )


async def test_an_old_attempt_stays_while_its_retry_is_planned(
    make_engine, clock, h, db_path: Path
) -> None:
    engine = await make_engine(clock=clock)
    fail = h.script("fail.py", "import sys\nsys.exit(3)\n")
    created = await engine.service.create(
        h.command_schedule(
            fail, retry={"max_attempts": 2, "backoff_sec": DAY_SEC, "max_backoff_sec": DAY_SEC}
        )
    )
    clock.set(float(created.next_fire_at))
    await engine.tick_once()
    await engine.wait_idle()
    first, planned = await _runs(engine.conn, created.id)
    assert (first["status"], planned["status"]) == ("failed", "retry_wait")
    assert planned["retry_of"] == first["id"]
    runs_dir = db_path.parent / "runs"
    [planned_row] = await fetch_all(
        engine.conn, "SELECT queued_at FROM schedule_runs WHERE id = ?", (planned["id"],)
    )

    # the failed attempt is older than the window, but its retry is still live
    report = await retention_pass(
        engine.conn, now=clock() + 2 * DAY, retention_days=1, runs_dir=runs_dir
    )
    assert report.runs == 0
    assert [r["id"] for r in await _runs(engine.conn, created.id)] == [
        first["id"],
        planned["id"],
    ]

    # the retry runs (and fails: the last attempt), the series has ended
    clock.set(float(planned_row["queued_at"]))
    await engine.tick_once()
    await engine.wait_idle()
    series = {first["id"], planned["id"]}
    ended = {r["id"]: r["status"] for r in await _runs(engine.conn, created.id)}
    assert [ended[i] for i in (first["id"], planned["id"])] == ["failed", "failed"]

    report = await retention_pass(
        engine.conn, now=clock() + 2 * DAY, retention_days=1, runs_dir=runs_dir
    )
    assert report.runs >= 2
    assert not series & {r["id"] for r in await _runs(engine.conn, created.id)}
