"""What the engine does on its own is recorded with the actor ``studio``.

A real engine on a SQLite file (manual clock, real child processes) fires a failing schedule,
retries it, pauses it after the last failure and enqueues its notification, times out a stale
run (the reaper) and, after a restart, fails the run a crashed engine left ``running``
(reconciliation). Then a served Studio over the same file delivers the notifications. Every
``status_transitions`` row none of it was asked by an operator is named ``studio``, and
``GET /api/audit?actor=studio`` lists each of them; the operator's own change keeps its name.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

import studio_state
from studio_scheduler_core import ENGINE_ACTOR, SchedulerEngine, SchedulerSettings
from studio_scheduler_core.testing import (
    FLAKY,
    PY,
    command_schedule,
    fire_due,
    runs_at_depth,
    write_script,
)

OPERATOR = "cli:tester"


async def _insert_running(conn: Any, run_id: str, schedule_id: str | None, at: float) -> None:
    """A run and invocation left ``running`` with no live process (pid 999999)."""
    await conn.execute(
        "INSERT INTO invocations (id, skill, status, started_at, created_at, updated_at) "
        "VALUES (?, 's', 'running', ?, ?, ?)",
        (f"inv-{run_id}", at, at, at),
    )
    await conn.execute(
        "INSERT INTO schedule_runs (id, schedule_id, invocation_id, trigger_context, action_kind, "
        "action_args, status, fired_at, created_at, child_pid, child_started_at) "
        "VALUES (?, ?, ?, '{}', 'command', '[]', 'running', ?, ?, 999999, 1.0)",
        (run_id, schedule_id, f"inv-{run_id}", at, at),
    )
    await conn.commit()


async def _engine_history(db: Path, workdir: Path) -> str:
    """Fire, retry, pause, notify, reap, then reconcile after a restart; the schedule's id."""
    # two hours ago: the served Studio's retention (30 days) keeps all of it
    clock = studio_state.ManualClock(float(int(time.time())) - 7200)
    settings = SchedulerSettings(
        tick_seconds=30.0,
        command_allowlist=(PY,),
        child_env={"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/bin')}"},
        invocation_deadline_seconds=100.0,
    )
    engine = SchedulerEngine(str(db), settings=settings, clock=clock)
    await engine.start(loop=False)
    try:
        flaky = write_script(workdir, "flaky.py", FLAKY)
        data = command_schedule(
            flaky,
            str(workdir / "count"),
            "99",
            name="flaky",
            action_cwd=str(workdir),
            retry={"max_attempts": 2, "backoff_sec": 10},
            pause_on_failure=True,
            notify={"deliver_to": "ops", "on": ["failed", "disabled"]},
        )
        created = await engine.service.create(data, actor=OPERATOR)
        # a library call that names no operator is Studio's own change
        await engine.service.create(command_schedule(flaky, name="quiet", enabled=False))
        await fire_due(engine, clock, float(created.next_fire_at or clock()))
        first, planned = await runs_at_depth(engine.conn, created.id, 0)
        assert (first.status, planned.status) == ("failed", "retry_wait")
        await fire_due(engine, clock, planned.queued_at)
        await _insert_running(engine.conn, "stale", None, clock() - 500)
        clock.advance(1000)
        assert (await engine.tick_once())["reapers"] == 1
        await _insert_running(engine.conn, "lost", created.id, clock())
    finally:
        await engine.stop()
    restarted = SchedulerEngine(str(db), settings=settings, clock=clock)
    await restarted.start(loop=False)
    await restarted.stop()
    return created.id


def _audit(client: httpx.Client, actor: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    params: dict[str, str] = {"actor": actor, "limit": "200"}
    while True:
        answer = client.get("/api/audit", params=params)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        entries += page["entries"]
        if page["next_cursor"] is None:
            return entries
        params["cursor"] = page["next_cursor"]


def test_every_engine_transition_names_studio_and_the_audit_lists_them(
    serve: Callable[..., Any],
    make_settings: Callable[..., Any],
    script: Callable[[str, str], Path],
    workdir: Path,
    wait: Callable[..., Any],
) -> None:
    assert ENGINE_ACTOR == "studio"
    db = make_settings().db
    db.parent.mkdir(parents=True, exist_ok=True)
    schedule_id = asyncio.run(_engine_history(db, workdir))

    studio = serve(db=db, notify_template=("sh", str(script("sink.sh", "cat >/dev/null\n"))))

    def delivered() -> bool:
        rows = studio.db_rows("SELECT status FROM dispatch_outbox")
        return len(rows) >= 3 and all(r["status"] == "delivered" for r in rows)

    wait(delivered, timeout=30)
    studio.stop()  # nothing more is written while the rows are compared
    rows = studio_state_rows(db)
    by_actor: dict[str | None, set[str]] = {}
    for row in rows:
        by_actor.setdefault(row["actor"], set()).add(row["id"])
    assert set(by_actor) == {OPERATOR, ENGINE_ACTOR}, sorted(map(str, by_actor))
    engine_reasons = {r["reason_code"] for r in rows if r["actor"] == ENGINE_ACTOR}
    assert {
        "schedule.fired.due",  # the fire
        "run.retry.scheduled",  # the retry planned ...
        "schedule.fired.retry",  # ... and fired
        "run.failed.exit_nonzero",  # each attempt's end
        "schedule.disabled.failure",  # paused after the last attempt
        "run.timed_out.deadline",  # the reaper
        "run.failed.daemon_restart",  # reconciliation after the restart
        "dispatch.pending.enqueued",  # the notifications
        "dispatch.delivering.claimed",  # delivered by the served engine's own pass
        "dispatch.delivered.transport_ok",
        "schedule.created",  # the library call that named no operator
    } <= engine_reasons, sorted(engine_reasons)
    # the operator's own change keeps its name
    assert [r["reason_code"] for r in rows if r["actor"] == OPERATOR] == ["schedule.created"]
    lost = [r for r in rows if r["entity_id"] == "lost"]
    assert [(r["status"], r["actor"]) for r in lost] == [("failed", ENGINE_ACTOR)]
    assert any(r["entity_id"] == schedule_id for r in rows if r["actor"] == ENGINE_ACTOR)

    reader = serve(db=db)
    listed = _audit(reader.client, ENGINE_ACTOR)
    assert {e["actor"] for e in listed} == {ENGINE_ACTOR}
    assert by_actor[ENGINE_ACTOR] <= {e["id"] for e in listed}
    assert {e["id"] for e in _audit(reader.client, OPERATOR)} == by_actor[OPERATOR]


def studio_state_rows(db: Path) -> list[dict[str, Any]]:
    """Every ``status_transitions`` row, through a plain sqlite3 connection."""
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        found = conn.execute(
            "SELECT id, entity_id, status, reason_code, actor FROM status_transitions "
            "ORDER BY created_at, rowid"
        ).fetchall()
    return [dict(r) for r in found]
