"""Scheduled fires run by any node's worker (``scheduled_on_any_node``).

The leader admits each fire and commits it ``queued``; a worker claims it under a lease and
runs it through the fire runner. The leader keeps the fire's slot until it sees the run end,
and a new leader holds again the slots of fires still queued or running.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from studio_scheduler_core import InvalidSettings, Schedule, SchedulerEngine, SchedulerSettings
from studio_scheduler_core.testing import FLAKY
from studio_state import connect, fetch_value, is_postgres

ANY = {"scheduled_on_any_node": True}
ENDED = ("completed", "failed", "timed_out", "cancelled")


async def _first_fire(engine: Any, clock: Any, data: dict[str, Any]) -> Schedule:
    """Create the schedule, move the clock to its first due time and tick once (the fire is
    admitted and queued); return the created schedule."""
    created = await engine.service.create(data)
    clock.set(created.next_fire_at)
    await engine.tick_once()
    return created


async def _follow_up_completed(h: Any, engine: Any, schedule_id: str) -> None:
    """Tick until the schedule's first follow-up (chain depth 1) has completed."""

    async def done() -> bool:
        await engine.tick_once()
        rows = await h.runs_at_depth(engine.conn, schedule_id, 1)
        return bool(rows) and rows[0].status == "completed"

    await h.eventually(done, timeout=20)


async def _ended(h: Any, engine: Any, schedule_id: str, count: int = 1) -> list[dict[str, Any]]:
    """Tick until ``count`` top-level runs of the schedule ended (deferral and skip records
    aside); return the schedule's runs."""

    async def ended() -> bool:
        await engine.tick_once()
        rows = await h.runs_at_depth(engine.conn, schedule_id, 0)
        done = [r for r in rows if r.status in ENDED]
        return len(done) >= count

    await h.eventually(ended, timeout=20)
    return await h.runs_of(engine.conn, schedule_id)


def test_unset_it_is_on_for_postgresql_and_off_for_sqlite(db_target: str, settings) -> None:
    engine = SchedulerEngine(db_target, settings=replace(settings, scheduled_on_any_node=None))
    assert engine.settings.scheduled_on_any_node is is_postgres(db_target)


@pytest.mark.parametrize("value", ["yes", 1, "false"])
def test_a_setting_that_is_no_bool_is_refused_naming_it(value: object) -> None:
    with pytest.raises(InvalidSettings) as info:
        SchedulerSettings(scheduled_on_any_node=value)  # type: ignore[arg-type]
    assert "scheduled_on_any_node" in str(info.value)


async def test_the_run_shows_the_argv_the_claiming_worker_ran(
    make_engine, clock, h, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock, **ANY)
    created = await _first_fire(engine, clock, h.command_schedule(h.env_dump, str(tmp_path / "a")))
    # Changed while the fire waits in the queue: the worker prepares it from the schedule now.
    changed = str(tmp_path / "b")
    await engine.service.update(created.id, {"action_command_args": [h.env_dump, changed]})
    [run] = await _ended(h, engine, created.id)
    assert run.status == "completed" and Path(changed).exists()
    assert list(run.action_args)[-2:] == [h.env_dump, changed]


async def test_a_due_fire_is_queued_then_claimed_and_run_under_a_lease(
    make_engine, clock, h, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock, **ANY)
    out = tmp_path / "env.jsonl"
    created = await _first_fire(engine, clock, h.command_schedule(h.env_dump, str(out)))
    assert await h.run_reasons(engine.conn, created.id) == [("queued", "schedule.fired.due")]
    # The slot is the leader's from the commit on, while the fire waits for a worker.
    assert engine.limits()["in_flight"] == 1
    [run] = await _ended(h, engine, created.id)
    assert (run.status, run.status_reason_code) == ("completed", "run.completed.ok")
    assert run.leased_by == engine._worker.worker_id
    assert run.lease_attempts == 1 and run.node_id == engine.node_id
    assert out.read_text().count("LIONAGI_INVOCATION_ID") == 1
    steps = [t.status for t in await h.transitions_of(engine.conn, run.id)]
    assert steps == ["queued", "running", "completed"]
    skill = await fetch_value(
        engine.conn, "SELECT skill FROM invocations WHERE id = ?", (run.invocation_id,)
    )
    assert skill == f"scheduled:{created.name}"
    await engine.tick_once()
    assert engine.limits()["in_flight"] == 0
    assert engine.limits()["adhoc_in_flight"] == 0


async def test_the_global_cap_counts_fires_waiting_in_the_queue(
    make_engine, clock, h, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock, max_scheduled_concurrent=1, **ANY)
    flag = tmp_path / "release"
    one = await engine.service.create(h.command_schedule(h.blocker, str(flag), name="one"))
    two = await engine.service.create(h.command_schedule(h.blocker, str(flag), name="two"))
    clock.set(max(one.next_fire_at, two.next_fire_at))
    await engine.tick_once()
    first = await h.run_reasons(engine.conn, one.id) + await h.run_reasons(engine.conn, two.id)
    assert sorted(first) == [
        ("queued", "schedule.fired.due"),
        ("skipped", "schedule.deferred.capacity"),
    ]
    await engine.tick_once()  # claimed and running now: still the only one
    running = await fetch_value(
        engine.conn, "SELECT COUNT(*) FROM schedule_runs WHERE status IN ('queued', 'running')"
    )
    assert running == 1
    flag.touch()
    waiting = two if first[0][0] == "queued" else one
    clock.advance(1.0)

    async def the_other_fired() -> bool:
        await engine.tick_once()
        statuses = [s for s, _ in await h.run_reasons(engine.conn, waiting.id)]
        return "completed" in statuses

    await h.eventually(the_other_fired, timeout=20)


async def test_a_follow_up_is_queued_and_runs_the_overlay_action(
    make_engine, clock, h, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock, **ANY)
    out = tmp_path / "env.jsonl"
    overlay = {"command_args": [h.env_dump, str(tmp_path / "follow.jsonl")], "on_success": None}
    created = await engine.service.create(
        h.command_schedule(h.env_dump, str(out), on_success=overlay)
    )
    clock.set(created.next_fire_at)

    await _follow_up_completed(h, engine, created.id)
    [child] = await h.runs_at_depth(engine.conn, created.id, 1)
    [parent] = await h.runs_at_depth(engine.conn, created.id, 0)
    assert child.chain_parent_id == parent.id and child.leased_by is not None
    steps = [t.status for t in await h.transitions_of(engine.conn, child.id)]
    assert steps == ["queued", "running", "completed"]
    assert (tmp_path / "follow.jsonl").read_text().count("LIONAGI_INVOCATION_ID") == 1


async def test_max_runs_counts_the_fires_still_queued(make_engine, clock, h, tmp_path) -> None:
    engine = await make_engine(clock=clock, **ANY)
    flag = tmp_path / "release"
    created = await engine.service.create(
        h.command_schedule(h.blocker, str(flag), overlap_policy="allow", max_runs=1)
    )
    due = created.next_fire_at
    clock.set(due)
    await engine.tick_once()
    clock.set(due + 60)
    await engine.tick_once()
    row = await h.schedule_row(engine.conn, created.id)
    assert (row.enabled, row.disabled_reason) == (0, "schedule.disabled.max_runs")
    assert [s for s, _ in await h.run_reasons(engine.conn, created.id)] in (
        ["queued"],
        ["running"],
    )
    flag.touch()
    await _ended(h, engine, created.id)


async def test_a_new_leader_holds_the_slot_of_a_fire_still_queued(
    make_engine, clock, h, tmp_path: Path
) -> None:
    first = await make_engine(clock=clock, max_scheduled_concurrent=1, **ANY)
    out = tmp_path / "env.jsonl"
    created = await first.service.create(h.command_schedule(h.env_dump, str(out), name="a"))
    clock.set(created.next_fire_at)
    await first.tick_once()
    assert await h.run_reasons(first.conn, created.id) == [("queued", "schedule.fired.due")]
    await first.stop()  # nothing claimed it: it stays queued, not cancelled
    second = await make_engine(clock=clock, max_scheduled_concurrent=1, start=False, **ANY)
    await second.start(loop=False)
    assert await h.run_reasons(second.conn, created.id) == [("queued", "schedule.fired.due")]
    assert second.limits()["in_flight"] == 1
    other = await second.service.create(h.command_schedule(h.env_dump, str(out), name="b"))
    clock.set(other.next_fire_at)
    [run, *_] = await _ended(h, second, created.id)
    assert (run.status, run.leased_by) == ("completed", second._worker.worker_id)
    assert ("skipped", "schedule.deferred.capacity") in await h.run_reasons(second.conn, other.id)
    await _ended(h, second, other.id)


async def test_a_retry_is_queued_for_a_worker_too(make_engine, clock, h, tmp_path) -> None:
    engine = await make_engine(clock=clock, **ANY)
    flaky = h.script("flaky.py", FLAKY)
    created = await engine.service.create(
        h.command_schedule(
            flaky, str(tmp_path / "count"), "2", retry={"max_attempts": 2, "backoff_sec": 5}
        )
    )
    clock.set(created.next_fire_at)
    await _ended(h, engine, created.id)
    clock.advance(5.0)
    runs = await _ended(h, engine, created.id, count=2)
    retry = runs[1]
    assert (retry.status, retry.attempt, retry.retry_of) == ("completed", 2, runs[0].id)
    steps = [t.status for t in await h.transitions_of(engine.conn, retry.id)]
    assert steps == ["retry_wait", "queued", "running", "completed"]


async def test_a_fire_of_another_machines_worker_whose_lease_lapsed_is_node_lost(
    make_engine, clock, h, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock, **ANY)
    flag = tmp_path / "release"
    created = await _first_fire(engine, clock, h.command_schedule(h.blocker, str(flag)))

    async def child_started() -> dict[str, Any] | None:
        await engine.tick_once()
        [run] = await h.runs_of(engine.conn, created.id)
        return run if run.child_pid else None

    run = await h.eventually(child_started, timeout=20)
    # As if a node on another machine had claimed it and its host died.
    async with connect(engine.db_path) as other:
        await other.execute(
            "UPDATE schedule_runs SET leased_by = 'elsewhere:4242:0000beef', "
            "lease_expires_at = ? WHERE id = ?",
            (clock() - 1, run.id),
        )
    [after] = await _ended(h, engine, created.id)
    assert (after.status, after.status_reason_code) == ("failed", "run.failed.node_lost")
    await h.eventually(lambda: not h.group_has_live_member(int(run.child_pid)), timeout=20)
    await engine.tick_once()
    assert engine.limits()["in_flight"] == 0  # the leader's hold on it is released
    flag.touch()


async def test_an_operator_cancels_a_fire_still_queued(make_engine, clock, h, tmp_path) -> None:
    engine = await make_engine(clock=clock, **ANY)
    out = tmp_path / "env.jsonl"
    created = await _first_fire(engine, clock, h.command_schedule(h.env_dump, str(out)))
    [run] = await h.runs_of(engine.conn, created.id)
    cancelled = await engine.runs.cancel(run.id)
    assert cancelled.status == "cancelled"
    await engine.tick_once()
    await engine.tick_once()
    assert engine.limits()["in_flight"] == 0
    [after] = await h.runs_of(engine.conn, created.id)
    assert (after.status, after.invocation_id, after.leased_by) == (
        "cancelled",
        None,
        None,
    )
    assert not out.exists()


async def test_a_fire_whose_setup_fails_on_the_claiming_node_still_runs_its_on_fail(
    make_engine, clock, h, tmp_path: Path, fake_li: Path
) -> None:
    engine = await make_engine(clock=clock, **ANY)
    out = tmp_path / "follow.jsonl"
    overlay = {
        "action_kind": "command",
        "command": h.PY,
        "command_args": [h.env_dump, str(out)],
        "on_fail": None,
    }
    created = await engine.service.create(
        {
            "name": "agent",
            "trigger_type": "interval",
            "interval_sec": 60,
            "action_kind": "agent",
            "action_prompt": "hello",
            "on_fail": overlay,
        }
    )
    clock.set(created.next_fire_at)
    await engine.tick_once()  # admitted and queued: li was there
    fake_li.rename(tmp_path / "li.gone")  # gone before a worker prepares the fire

    await _follow_up_completed(h, engine, created.id)
    [parent] = await h.runs_at_depth(engine.conn, created.id, 0)
    assert (parent.status, parent.status_reason_code) == ("failed", "run.failed.spawn_error")
    assert out.read_text().count("LIONAGI_INVOCATION_ID") == 1


async def _claimed_and_running(h: Any, engine: Any, schedule_id: str) -> dict[str, Any]:
    async def running() -> dict[str, Any] | None:
        await engine.tick_once()
        rows = await h.runs_at_depth(engine.conn, schedule_id, 0)
        live = [r for r in rows if r.status == "running" and r.child_pid]
        return live[0] if live else None

    found: dict[str, Any] = await h.eventually(running, timeout=20)
    return found


async def test_cancel_other_stops_the_fire_a_worker_runs_and_queues_the_new_one(
    make_engine, clock, h, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock, max_scheduled_concurrent=1, **ANY)
    flag = tmp_path / "release"
    created = await engine.service.create(
        h.command_schedule(h.blocker, str(flag), overlap_policy="cancel_other")
    )
    clock.set(created.next_fire_at)
    first = await _claimed_and_running(h, engine, created.id)
    clock.advance(60)
    await engine.tick_once()  # the one slot is free again for the new occurrence at once
    assert await h.run_reasons(engine.conn, created.id) == [
        ("cancelled", "run.cancelled.overlap"),
        ("queued", "schedule.fired.due"),
    ]
    await h.eventually(lambda: not h.group_has_live_member(int(first.child_pid)), timeout=20)
    flag.touch()
    runs = await _ended(h, engine, created.id, count=2)
    assert [r.status for r in runs] == ["cancelled", "completed"]


async def test_a_buffered_occurrence_is_queued_when_the_fire_a_worker_ran_ends(
    make_engine, clock, h, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock, **ANY)
    flag = tmp_path / "release"
    created = await engine.service.create(
        h.command_schedule(h.blocker, str(flag), overlap_policy="buffer_one")
    )
    clock.set(created.next_fire_at)
    await _claimed_and_running(h, engine, created.id)
    clock.advance(60)
    await engine.tick_once()
    assert [s for s, _ in await h.run_reasons(engine.conn, created.id)] == [
        "running",
        "waiting_dependency",
    ]
    flag.touch()
    runs = await _ended(h, engine, created.id, count=2)
    assert [r.status for r in runs] == ["completed", "completed"], [
        (r["status"], r["status_reason_code"], r["error_detail"]) for r in runs
    ]
    steps = [t.status for t in await h.transitions_of(engine.conn, runs[1].id)]
    assert steps == ["waiting_dependency", "queued", "running", "completed"]
