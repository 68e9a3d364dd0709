"""threshold_config through the engine: breach fires, cooldown, reservation, no run in bounds."""

from __future__ import annotations

import json

from studio_state import fetch_all, fetch_one, new_id, write_transaction


def _alert(name="alert", *, window=5, op="gt", value=0, **fields):
    data = {
        "name": name,
        "trigger_type": "interval",
        "interval_sec": 60,
        "action_kind": "command",
        "action_command": "true",
        "action_command_args": ["{{metric}}={{value}}"],
        "overlap_policy": "allow",
        "threshold_config": {
            "metric": "failed_runs",
            "op": op,
            "value": value,
            "window_minutes": window,
        },
    }
    data.update(fields)
    return data


async def _failed_run(conn, schedule_id, ended_at):
    async with write_transaction(conn):
        await conn.execute(
            "INSERT INTO schedule_runs (id, schedule_id, trigger_context, action_kind, "
            "action_args, status, fired_at, ended_at, created_at) "
            "VALUES (?, ?, '{}', 'command', '[]', 'failed', ?, ?, ?)",
            (new_id(), schedule_id, ended_at, ended_at, ended_at),
        )


async def _other(engine, name="other", **fields):
    data = {
        "name": name,
        "trigger_type": "interval",
        "interval_sec": 86400,
        "action_kind": "command",
        "action_command": "true",
    }
    data.update(fields)
    return (await engine.service.create(data)).id


async def _runs(conn, sid):
    rows = await fetch_all(
        conn, "SELECT * FROM schedule_runs WHERE schedule_id = ? ORDER BY created_at, rowid", (sid,)
    )
    return rows


async def _row(conn, sid):
    return await fetch_one(conn, "SELECT * FROM schedules WHERE id = ?", (sid,))


async def _tick_at(engine, clock, when):
    clock.set(when)
    await engine.tick_once()
    await engine.wait_idle()


async def test_within_bounds_advances_with_no_run(make_engine, clock, h):
    engine = await make_engine(clock=clock)
    alert = await engine.service.create(_alert(value=5))
    await _tick_at(engine, clock, h.T0 + 60)
    assert await _runs(engine.conn, alert.id) == []
    row = await _row(engine.conn, alert.id)
    assert row["last_evaluated_at"] == h.T0 + 60
    assert row["next_fire_at"] == h.T0 + 120 and row["last_alert_at"] is None


async def test_breach_fires_with_context_then_cooldown_then_fires_again(make_engine, clock, h):
    engine = await make_engine(clock=clock)
    other = await _other(engine)
    alert = await engine.service.create(_alert(window=5))
    sid = alert.id
    await _failed_run(engine.conn, other, h.T0 + 30)
    await _tick_at(engine, clock, h.T0 + 60)
    (run,) = await _runs(engine.conn, sid)
    assert run["status"] == "completed"
    ctx = json.loads(run["trigger_context"])
    assert {k: ctx[k] for k in ("metric", "op", "value", "threshold", "window_minutes")} == {
        "metric": "failed_runs",
        "op": "gt",
        "value": 1.0,
        "threshold": 0.0,
        "window_minutes": 5,
    }
    assert json.loads(run["action_args"])[-1] == "failed_runs=1.0"
    row = await _row(engine.conn, sid)
    assert row["last_alert_at"] == h.T0 + 60 and row["last_evaluated_at"] == h.T0 + 60
    # Still breached, inside the 300 s cooldown: evaluated, advanced, no run.
    for k in range(2, 6):
        await _failed_run(engine.conn, other, h.T0 + 60 * k - 1)
        await _tick_at(engine, clock, h.T0 + 60 * k)
        assert len(await _runs(engine.conn, sid)) == 1
        row = await _row(engine.conn, sid)
        assert row["last_evaluated_at"] == h.T0 + 60 * k
        assert row["next_fire_at"] == h.T0 + 60 * (k + 1)
    await _failed_run(engine.conn, other, h.T0 + 359)
    await _tick_at(engine, clock, h.T0 + 360)  # cooldown over
    assert len(await _runs(engine.conn, sid)) == 2
    assert (await _row(engine.conn, sid))["last_alert_at"] == h.T0 + 360


async def test_alert_runs_do_not_feed_their_own_failed_runs(make_engine, clock, h):
    engine = await make_engine(clock=clock)
    alert = await engine.service.create(
        _alert(window=1, action_command="sh", action_command_args=["-c", "exit 3"])
    )
    other = await _other(engine)
    await _failed_run(engine.conn, other, h.T0 + 50)
    await _tick_at(engine, clock, h.T0 + 60)
    (run,) = await _runs(engine.conn, alert.id)
    assert run["status"] == "failed"
    await _tick_at(engine, clock, h.T0 + 180)  # cooldown over; only its own failure is left
    assert len(await _runs(engine.conn, alert.id)) == 1


async def test_reservation_holds_while_the_alert_runs(make_engine, clock, h, tmp_path):
    engine = await make_engine(clock=clock)
    other = await _other(engine)
    flag = tmp_path / "go"
    alert = await engine.service.create(
        _alert(window=1, action_command=h.PY, action_command_args=[h.blocker, str(flag)])
    )
    sid = alert.id
    gate = engine._threshold
    await _failed_run(engine.conn, other, h.T0 + 59)
    clock.set(h.T0 + 60)
    await engine.tick_once()
    assert gate.pending() == {sid}
    await _failed_run(engine.conn, other, h.T0 + 119)
    clock.set(h.T0 + 120)  # the 60 s cooldown is over, but the first alert still runs
    await engine.tick_once()
    assert len(await _runs(engine.conn, sid)) == 1
    flag.write_text("go")
    await engine.wait_idle()
    assert gate.pending() == frozenset()
    await _failed_run(engine.conn, other, h.T0 + 179)
    await _tick_at(engine, clock, h.T0 + 180)
    assert len(await _runs(engine.conn, sid)) == 2


async def test_capacity_deferral_consumes_no_cooldown(make_engine, clock, h, tmp_path):
    engine = await make_engine(clock=clock, max_scheduled_concurrent=1)
    flag = tmp_path / "go"
    hog = await _other(
        engine, "hog", action_command=h.PY, action_command_args=[h.blocker, str(flag)]
    )
    alert = await engine.service.create(_alert())
    sid = alert.id
    await _failed_run(engine.conn, hog, h.T0 + 10)
    await engine.fire_now(hog)  # holds the only slot
    clock.set(h.T0 + 60)
    await engine.tick_once()
    row = await _row(engine.conn, sid)
    assert row["last_alert_at"] is None and row["next_fire_at"] == h.T0 + 60  # still due
    assert engine._threshold.pending() == frozenset()
    assert [r["status_reason_code"] for r in await _runs(engine.conn, sid)] == [
        "schedule.deferred.capacity"
    ]
    flag.write_text("go")
    await engine.wait_idle()
    await engine.tick_once()
    await engine.wait_idle()
    statuses = [r["status"] for r in await _runs(engine.conn, sid)]
    assert statuses == ["skipped", "completed"]
    assert (await _row(engine.conn, sid))["last_alert_at"] == h.T0 + 60


async def test_manual_fire_neither_evaluates_nor_starts_a_cooldown(make_engine, clock, h):
    engine = await make_engine(clock=clock)
    alert = await engine.service.create(_alert(value=100))
    await engine.fire_now(alert.id)
    await engine.wait_idle()
    row = await _row(engine.conn, alert.id)
    assert row["last_alert_at"] is None and row["last_evaluated_at"] is None
    assert len(await _runs(engine.conn, alert.id)) == 1


async def test_missed_fires_of_threshold_rows(make_engine, clock, h):
    engine = await make_engine(clock=clock)
    skip = await engine.service.create(_alert("skip", value=100))
    once = await engine.service.create(_alert("once", value=100, missed_fire_policy="run_once"))
    await engine.stop()
    clock.set(h.T0 + 3600)
    engine = await make_engine(clock=clock)  # both rows are overdue at startup
    # skip: no skipped row for a missed check; run_once: the metric is evaluated (in bounds).
    assert await _runs(engine.conn, skip.id) == []
    assert await _runs(engine.conn, once.id) == []
    assert (await _row(engine.conn, once.id))["last_evaluated_at"] == h.T0 + 3600
    for sid in (skip.id, once.id):
        assert (await _row(engine.conn, sid))["next_fire_at"] > h.T0 + 3600
