"""The fire pipeline's edges: an ad-hoc run's own timeout, the reaper and a run's own timeout,
the child record in one trip, coalesced slots counted and recorded, scheduling lag."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

from studio_scheduler_core import AdhocRunService, ScheduleValidationError
from studio_scheduler_core._fire import store
from studio_scheduler_core._fire.commit import commit
from studio_scheduler_core._fire.env import FireEnv, Prepared
from studio_scheduler_core._fire.occurrence import ScheduleClaim
from studio_scheduler_core._fire.prepare import prepare
from studio_scheduler_core._recovery.reconcile import STALE_GRACE_SECONDS, reap_stale
from studio_state import fetch_one, fetch_value

SLEEPER = "import time\ntime.sleep(30)\n"


async def _status(conn: Any, run_id: str) -> dict[str, Any]:
    row = await fetch_one(conn, "SELECT * FROM schedule_runs WHERE id = ?", (run_id,))
    assert row is not None
    return row


async def test_an_adhoc_run_ends_at_its_own_timeout_sec(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)  # the server's deadline is 60 s
    sleeper = h.script("sleeper.py", SLEEPER)
    run = await engine.runs.enqueue(
        {
            "action_kind": "command",
            "action_command": h.PY,
            "action_command_args": [sleeper],
            "timeout_sec": 1,
        }
    )
    assert run.action_args["timeout_sec"] == 1
    await engine.tick_once()

    async def ended() -> bool:
        return (await _status(engine.conn, run.id))["status"] != "running"

    await h.eventually(ended, timeout=20.0)
    row = await _status(engine.conn, run.id)
    assert (row["status"], row["status_reason_code"]) == ("timed_out", "run.timed_out.deadline")


@pytest.mark.parametrize("value", [0, -5, 7 * 86400 + 1, "60x", True, 1.5])
async def test_adhoc_timeout_sec_refusals_name_the_field_and_write_nothing(
    conn, settings, clock, value: Any
) -> None:
    runs = AdhocRunService(conn, settings=settings, clock=clock)
    with pytest.raises(ScheduleValidationError) as caught:
        await runs.enqueue(
            {"action_kind": "command", "action_command": "true", "timeout_sec": value}
        )
    assert caught.value.field == "timeout_sec"
    assert await fetch_value(conn, "SELECT COUNT(*) FROM schedule_runs") == 0


async def _running_fire(
    conn: Any, service: Any, settings: Any, clock: Any, h: Any, db_path: Path, **fields: Any
) -> Prepared:
    """A scheduled fire committed ``running`` (no child started)."""
    created = await service.create(h.command_schedule(h.script("ok.py", "pass\n"), **fields))
    env = FireEnv(conn=conn, settings=settings, clock=clock, db_path=str(db_path))
    fire = prepare(env, created, {"scheduled": True}, kind="scheduled")
    claim = ScheduleClaim(
        "occurrence",
        created.id,
        due_at=created.next_fire_at,
        next_fire_at=created.next_fire_at + 60,
    )
    assert await commit(env, fire, claim)
    return fire


async def test_the_reaper_leaves_a_run_within_its_schedules_own_longer_timeout(
    conn, service, settings, clock, h, db_path: Path
) -> None:
    own = await _running_fire(
        conn, service, settings, clock, h, db_path, name="own", timeout_sec=7200
    )
    plain = await _running_fire(conn, service, settings, clock, h, db_path, name="plain")
    fired = clock()
    # Past the 60 s invocation deadline: the plain run is stale, the one with 2 h is not.
    assert await reap_stale(conn, now=fired + 600, deadline_seconds=60, owned_runs=()) == 1
    assert (await _status(conn, plain.run_id))["status"] == "timed_out"
    assert (await _status(conn, own.run_id))["status"] == "running"
    invocation = await fetch_one(
        conn, "SELECT status FROM invocations WHERE id = ?", (own.invocation_id,)
    )
    assert invocation == {"status": "running"}
    # Its own timeout and the grace passed: now it is stale too.
    later = fired + 7200 + STALE_GRACE_SECONDS + 1
    assert await reap_stale(conn, now=later, deadline_seconds=60, owned_runs=()) == 1
    row = await _status(conn, own.run_id)
    assert (row["status"], row["status_reason_code"]) == ("timed_out", "run.timed_out.deadline")


async def test_recording_the_child_is_one_trip_and_reports_an_ended_run(
    conn, service, settings, clock, h, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fire = await _running_fire(conn, service, settings, clock, h, db_path)
    hops = 0
    original = aiosqlite.Connection._execute

    async def counting(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal hops
        hops += 1
        return await original(self, fn, *args, **kwargs)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counting)
    assert await store.record_child(conn, fire.run_id, 4242, 12.5) is False
    assert hops == 1  # BEGIN IMMEDIATE, the guarded UPDATE and COMMIT in one trip
    monkeypatch.undo()
    row = await _status(conn, fire.run_id)
    assert (row["child_pid"], row["child_started_at"]) == (4242, 12.5)
    await conn.execute("UPDATE schedule_runs SET status = 'cancelled' WHERE id = ?", (fire.run_id,))
    await conn.commit()
    assert await store.record_child(conn, fire.run_id, 4343, 13.0) is True  # stop that child
    assert (await _status(conn, fire.run_id))["child_pid"] == 4242
    assert await store.record_child(conn, "no-such-run", 1, 1.0) is False


async def _coalesced(h: Any, conn: Any, schedule_id: str) -> list[dict[str, Any]]:
    return [
        r
        for r in await h.runs_of(conn, schedule_id)
        if r.status_reason_code == "schedule.skipped.coalesced"
    ]


async def test_coalesced_slots_are_counted_and_recorded_on_the_first_and_eleventh(
    make_engine, clock, h
) -> None:
    engine = await make_engine(clock=clock)
    created = await engine.service.create(h.command_schedule(h.script("ok.py", "pass\n")))
    sid = created.id
    clock.set(created.next_fire_at + 600)  # 10 slots pass while the scheduler is late
    await engine.tick_once()
    await engine.wait_idle()
    records = await _coalesced(h, engine.conn, sid)
    assert len(records) == 1
    assert records[0].status == "skipped"
    fired = [r for r in await h.runs_of(engine.conn, sid) if r.status == "completed"]
    assert len(fired) == 1
    meta = json.loads(
        await fetch_value(
            engine.conn,
            "SELECT metadata FROM status_transitions WHERE entity_id = ?",
            (records[0].id,),
        )
    )
    assert meta["slots"] == 10 and meta["coalesced_count"] == 1
    assert meta["run_id"] == fired[0].id
    assert engine.health()["coalesced_slots"] == 10
    for _ in range(10):  # ten more late fires, 2 slots passed over each
        row = await h.schedule_row(engine.conn, sid)
        clock.set(row.next_fire_at + 120)
        await engine.tick_once()
        await engine.wait_idle()
    records = await _coalesced(h, engine.conn, sid)
    assert len(records) == 2  # the 1st and the 11th consecutive coalescing fire
    meta = json.loads(
        await fetch_value(
            engine.conn,
            "SELECT metadata FROM status_transitions WHERE entity_id = ?",
            (records[1].id,),
        )
    )
    assert (meta["slots"], meta["coalesced_count"]) == (2, 11)
    assert engine.health()["coalesced_slots"] == 30
    # A fire on time ends the streak: the next coalescing is a first one again.
    row = await h.schedule_row(engine.conn, sid)
    clock.set(row.next_fire_at)
    await engine.tick_once()
    await engine.wait_idle()
    row = await h.schedule_row(engine.conn, sid)
    clock.set(row.next_fire_at + 60)
    await engine.tick_once()
    await engine.wait_idle()
    assert len(await _coalesced(h, engine.conn, sid)) == 3
    assert engine.health()["coalesced_slots"] == 31


async def test_health_shows_how_far_behind_the_oldest_due_schedule_is(
    make_engine, clock, h, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock, max_scheduled_concurrent=1)
    flag = tmp_path / "flag"
    first = await engine.service.create(h.command_schedule(h.blocker, str(flag), name="a"))
    await engine.service.create(h.command_schedule(h.blocker, str(flag), name="b"))
    assert engine.health()["scheduling_lag_seconds"] == 0.0
    clock.set(first.next_fire_at + 30)
    await engine.tick_once()  # one fires and holds the only slot; the other waits
    health = engine.health()
    assert health["due_backlog"] == 1
    assert health["scheduling_lag_seconds"] == 30.0
    flag.touch()
    await engine.wait_idle()
    await engine.tick_once()  # the waiting one fires now
    await engine.wait_idle()
    assert engine.health()["scheduling_lag_seconds"] == 0.0
