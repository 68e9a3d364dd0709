"""Durable retries through the engine (injected clock, real child processes)."""

from __future__ import annotations

import json
from typing import Any

from studio_scheduler_core.testing import FLAKY, fire_due, runs_at_depth
from studio_state import fetch_all, fetch_one


async def test_a_failed_run_is_retried_with_backoff_then_on_fail_after_the_last(
    make_engine, clock, h, tmp_path
) -> None:
    engine = await make_engine(clock=clock)
    flaky = h.script("flaky.py", FLAKY)
    created = await engine.service.create(
        h.command_schedule(
            flaky,
            str(tmp_path / "count"),
            "99",
            retry={"max_attempts": 3, "backoff_sec": 10, "backoff_factor": 2},
            on_fail={"command_args": [h.script("ok.py", "pass\n")]},
            pause_on_failure=True,
            notify={"deliver_to": "http://127.0.0.1:9/hook", "on": ["disabled"]},
        )
    )
    await fire_due(engine, clock, float(created.next_fire_at))
    first, planned = await runs_at_depth(engine.conn, created.id, 0)
    assert first.status == "failed" and first.attempt is None
    assert planned.status == "retry_wait"
    assert (planned.retry_of, planned.attempt) == (first.id, 2)
    assert planned.status_reason_code == "run.retry.scheduled"
    assert planned.queued_at == first.ended_at + 10
    # planned in the failure's own transaction: one commit time for both
    [step] = await h.transitions_of(engine.conn, planned.id)
    assert step.created_at == first.ended_at
    # no follow-up yet: on_fail waits for the last attempt
    assert await fetch_all(engine.conn, "SELECT id FROM schedule_runs WHERE chain_depth = 1") == []

    await fire_due(engine, clock, planned.queued_at - 0.5)
    assert (await runs_at_depth(engine.conn, created.id, 0))[1].status == "retry_wait"
    await fire_due(engine, clock, planned.queued_at)
    runs = await runs_at_depth(engine.conn, created.id, 0)
    second, third = runs[1], runs[2]
    assert second.status == "failed" and second.invocation_id is not None
    assert second.trigger_context["attempt"] == 2
    assert (third.status, third.attempt, third.retry_of) == ("retry_wait", 3, second.id)
    assert third.queued_at == second.ended_at + 20  # backoff × factor

    await fire_due(engine, clock, third.queued_at)
    runs = await runs_at_depth(engine.conn, created.id, 0)
    assert [r.status for r in runs] == ["failed", "failed", "failed"]
    follow_ups = await fetch_all(
        engine.conn, "SELECT chain_parent_id FROM schedule_runs WHERE chain_depth = 1"
    )
    assert [f["chain_parent_id"] for f in follow_ups] == [runs[2].id]
    schedule = await h.schedule_row(engine.conn, created.id)
    assert schedule.enabled is False and schedule.disabled_reason == "schedule.disabled.failure"
    notice = await fetch_one(
        engine.conn, "SELECT payload FROM dispatch_outbox WHERE kind = 'schedule.disabled'"
    )
    assert notice is not None
    assert json.loads(notice["payload"])["body"]["reason_code"] == "schedule.disabled.failure"


async def test_a_retry_that_succeeds_ends_the_attempts(make_engine, clock, h, tmp_path) -> None:
    engine = await make_engine(clock=clock)
    flaky = h.script("flaky.py", FLAKY)
    created = await engine.service.create(
        h.command_schedule(
            flaky,
            str(tmp_path / "count"),
            "2",
            retry={"max_attempts": 5, "backoff_sec": 5},
            pause_on_failure=True,
        )
    )
    await fire_due(engine, clock, float(created.next_fire_at))
    planned = (await runs_at_depth(engine.conn, created.id, 0))[1]
    await fire_due(engine, clock, planned.queued_at)
    runs = await runs_at_depth(engine.conn, created.id, 0)
    assert [r.status for r in runs] == ["failed", "completed"]
    assert (await h.schedule_row(engine.conn, created.id)).enabled is True


async def test_a_restart_between_failure_and_retry_keeps_the_plan_and_runs_it_once(
    make_engine, clock, h, tmp_path
) -> None:
    engine = await make_engine(clock=clock)
    flaky = h.script("flaky.py", FLAKY)
    created = await engine.service.create(
        h.command_schedule(
            flaky, str(tmp_path / "count"), "2", retry={"max_attempts": 2, "backoff_sec": 30}
        )
    )
    await fire_due(engine, clock, float(created.next_fire_at))
    planned = (await runs_at_depth(engine.conn, created.id, 0))[1]
    await engine.stop()
    clock.set(planned.queued_at + 100)
    engine = await make_engine(clock=clock)
    for _ in range(3):
        await engine.tick_once()
        await engine.wait_idle()
    top = await runs_at_depth(engine.conn, created.id, 0)
    runs = [r for r in top if r.status != "skipped"]
    assert [(r.status, r.attempt) for r in runs] == [("failed", None), ("completed", 2)]
    assert (tmp_path / "count").read_text() == "2"  # the child ran twice in all


async def test_a_manual_trigger_is_retried_too(make_engine, clock, h, tmp_path) -> None:
    engine = await make_engine(clock=clock)
    flaky = h.script("flaky.py", FLAKY)
    created = await engine.service.create(
        h.command_schedule(
            flaky, str(tmp_path / "count"), "2", retry={"max_attempts": 2, "backoff_sec": 1}
        )
    )
    await engine.fire_now(created.id)
    await engine.wait_idle()
    planned = (await runs_at_depth(engine.conn, created.id, 0))[1]
    assert planned.trigger_context["manual"] is True
    await fire_due(engine, clock, planned.queued_at)
    runs = await runs_at_depth(engine.conn, created.id, 0)
    assert [r.status for r in runs] == ["failed", "completed"]


async def _run_dispatches(conn: Any) -> list[tuple[str, dict[str, Any]]]:
    rows = await fetch_all(
        conn,
        "SELECT kind, payload FROM dispatch_outbox WHERE kind LIKE 'run.%' "
        "ORDER BY created_at, rowid",
    )
    return [(str(r["kind"]), json.loads(r["payload"])["body"]) for r in rows]


async def test_only_the_last_attempts_failure_is_notified_with_its_attempt_number(
    make_engine, clock, h, tmp_path
) -> None:
    engine = await make_engine(clock=clock)
    created = await engine.service.create(
        h.command_schedule(
            h.script("flaky.py", FLAKY),
            str(tmp_path / "count"),
            "99",
            retry={"max_attempts": 2, "backoff_sec": 10},
            notify={"deliver_to": "http://127.0.0.1:9/hook", "on": ["failed", "timed_out"]},
        )
    )
    await fire_due(engine, clock, float(created.next_fire_at))
    first, planned = await runs_at_depth(engine.conn, created.id, 0)
    assert (first.status, planned.status) == ("failed", "retry_wait")
    assert await _run_dispatches(engine.conn) == []  # a later attempt is planned
    await fire_due(engine, clock, planned.queued_at)
    runs = await runs_at_depth(engine.conn, created.id, 0)
    assert [(r.status, r.attempt) for r in runs] == [("failed", None), ("failed", 2)]
    [(kind, body)] = await _run_dispatches(engine.conn)
    assert (kind, body["run_id"], body["run_attempt"]) == ("run.failed", runs[1].id, 2)


async def test_a_run_that_succeeds_on_a_retry_is_not_a_recovery(
    make_engine, clock, h, tmp_path
) -> None:
    engine = await make_engine(clock=clock)
    created = await engine.service.create(
        h.command_schedule(
            h.script("flaky.py", FLAKY),
            str(tmp_path / "count"),
            "2",
            retry={"max_attempts": 3, "backoff_sec": 10},
            notify={
                "deliver_to": "http://127.0.0.1:9/hook",
                "on": ["failed", "completed", "recovered"],
            },
        )
    )
    await fire_due(engine, clock, float(created.next_fire_at))
    _, planned = await runs_at_depth(engine.conn, created.id, 0)
    await fire_due(engine, clock, planned.queued_at)
    runs = await runs_at_depth(engine.conn, created.id, 0)
    assert [r.status for r in runs] == ["failed", "completed"]
    dispatched = await _run_dispatches(engine.conn)
    assert [(k, b["run_id"], b["run_attempt"]) for k, b in dispatched] == [
        ("run.completed", runs[1].id, 2)
    ]
