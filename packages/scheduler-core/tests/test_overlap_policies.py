"""buffer_one, buffer_all and cancel_other through the engine (injected clock, real children
that block until a flag file appears, so runs overlap on purpose)."""

from __future__ import annotations

from typing import Any

from studio_state import fetch_all


async def _statuses(conn: Any, schedule_id: str) -> list[tuple[str, str]]:
    rows = await fetch_all(
        conn,
        "SELECT status, status_reason_code FROM schedule_runs WHERE schedule_id = ? "
        "AND chain_depth = 0 ORDER BY created_at, rowid",
        (schedule_id,),
    )
    return [(r["status"], r["status_reason_code"]) for r in rows]


async def _running(conn: Any, schedule_id: str) -> bool:
    rows = await fetch_all(
        conn,
        "SELECT 1 FROM schedule_runs WHERE schedule_id = ? AND status = 'running' "
        "AND child_pid IS NOT NULL",
        (schedule_id,),
    )
    return bool(rows)


async def _start_blocked(engine: Any, clock: Any, h: Any, flag: Any, policy: str) -> Any:
    created = await engine.service.create(
        h.command_schedule(h.blocker, str(flag), overlap_policy=policy)
    )
    clock.set(float(created.next_fire_at))
    await engine.tick_once()
    await h.eventually(lambda: _running(engine.conn, created.id))
    return created


async def _next_occurrence(engine: Any, clock: Any) -> None:
    clock.advance(60)
    await engine.tick_once()


async def test_buffer_one_keeps_one_occurrence_and_starts_it_after_the_running_one(
    make_engine, clock, h, tmp_path
) -> None:
    engine = await make_engine(clock=clock)
    flag = tmp_path / "flag"
    created = await _start_blocked(engine, clock, h, flag, "buffer_one")
    await _next_occurrence(engine, clock)
    await _next_occurrence(engine, clock)
    assert await _statuses(engine.conn, created.id) == [
        ("running", "schedule.fired.due"),
        ("waiting_dependency", "schedule.buffered.overlap"),
        ("skipped", "schedule.skipped.buffer_full"),
    ]
    flag.write_text("go")
    await engine.wait_idle()
    await engine.tick_once()  # the freed slot wakes the loop; here the test ticks
    await engine.wait_idle()
    assert await _statuses(engine.conn, created.id) == [
        ("completed", "run.completed.ok"),
        ("completed", "run.completed.ok"),
        ("skipped", "schedule.skipped.buffer_full"),
    ]


async def test_buffer_all_is_bounded_at_100(make_engine, clock, h, tmp_path) -> None:
    engine = await make_engine(clock=clock)
    flag = tmp_path / "flag"
    created = await _start_blocked(engine, clock, h, flag, "buffer_all")
    for _ in range(101):
        await _next_occurrence(engine, clock)
    statuses = await _statuses(engine.conn, created.id)
    assert statuses.count(("waiting_dependency", "schedule.buffered.overlap")) == 100
    assert statuses[-1] == ("skipped", "schedule.skipped.buffer_full")
    flag.write_text("go")
    for _ in range(3):  # each tick starts the next buffered occurrence once the last ended
        await engine.wait_idle()
        await engine.tick_once()
    await engine.wait_idle()
    completed = [s for s in await _statuses(engine.conn, created.id) if s[0] == "completed"]
    assert len(completed) == 4  # one at a time, oldest first


async def test_buffered_occurrences_are_dropped_when_the_schedule_is_disabled(
    make_engine, clock, h, tmp_path
) -> None:
    engine = await make_engine(clock=clock)
    flag = tmp_path / "flag"
    created = await _start_blocked(engine, clock, h, flag, "buffer_all")
    await _next_occurrence(engine, clock)
    await _next_occurrence(engine, clock)
    await engine.service.disable(created.id)
    assert await _statuses(engine.conn, created.id) == [
        ("running", "schedule.fired.due"),
        ("skipped", "schedule.skipped.disabled"),
        ("skipped", "schedule.skipped.disabled"),
    ]
    flag.write_text("go")
    await engine.wait_idle()
    await engine.tick_once()
    await engine.wait_idle()
    assert [s for s, _ in await _statuses(engine.conn, created.id)] == [
        "completed",
        "skipped",
        "skipped",
    ]


async def test_cancel_other_cancels_the_running_run_and_starts_the_new_one(
    make_engine, clock, h, tmp_path
) -> None:
    engine = await make_engine(clock=clock)
    flag = tmp_path / "flag"
    created = await _start_blocked(engine, clock, h, flag, "cancel_other")
    [first] = await fetch_all(
        engine.conn,
        "SELECT id, child_pid FROM schedule_runs WHERE schedule_id = ?",
        (created.id,),
    )
    await _next_occurrence(engine, clock)
    await h.eventually(lambda: _running(engine.conn, created.id))
    assert await _statuses(engine.conn, created.id) == [
        ("cancelled", "run.cancelled.overlap"),
        ("running", "schedule.fired.due"),
    ]
    assert not h.group_has_live_member(first["child_pid"])
    flag.write_text("go")
    await engine.wait_idle()
    assert [s for s, _ in await _statuses(engine.conn, created.id)] == [
        "cancelled",
        "completed",
    ]
