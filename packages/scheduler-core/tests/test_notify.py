"""Notifications: a run's terminal write (and a gate's disable) enqueues its dispatch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from studio_scheduler_core import AdhocRunService, ScheduleValidationError, check_notify
from studio_state import connect, fetch_all

RUN_BODY_KEYS = {
    "run_id",
    "schedule_id",
    "schedule_name",
    "status",
    "reason_code",
    "reason_summary",
    "exit_code",
    "stderr_tail",
    "error_class",
    "fired_at",
    "ended_at",
    "duration_seconds",
    "chain_depth",
    "chain_parent_id",
    "run_attempt",
    "trigger_context",
    "log_url",
}
HOOK = "https://hooks.example.test/studio"


async def _dispatches(conn: Any) -> list[dict[str, Any]]:
    rows = await fetch_all(conn, "SELECT * FROM dispatch_outbox ORDER BY created_at, rowid")
    return [dict(r) | {"payload": json.loads(r["payload"])} for r in rows]


async def _fire(engine: Any, clock: Any, at: float) -> None:
    clock.set(at)
    await engine.tick_once()
    await engine.wait_idle()


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"deliver_to": HOOK, "when": ["failed"]}, "notify.when"),
        ({"deliver_to": HOOK, "on": ["exploded"]}, "notify.on"),
        ({"deliver_to": HOOK, "on": []}, "notify.on"),
        ({"deliver_to": HOOK, "max_attempts": 0}, "notify.max_attempts"),
        ({"deliver_to": HOOK, "ack_required": "yes"}, "notify.ack_required"),
        ({"deliver_to": "http:/x"}, "notify.deliver_to"),
        ({"deliver_to": "https://"}, "notify.deliver_to"),
        ({"on": ["failed"]}, "notify.deliver_to"),
        (["failed"], "notify"),
    ],
)
def test_bad_notify_is_refused_naming_the_key(value: Any, field: str) -> None:
    with pytest.raises(ScheduleValidationError) as caught:
        check_notify(value)
    assert caught.value.field == field


def test_notify_defaults() -> None:
    assert check_notify({"deliver_to": "ops-pager"}) == {
        "deliver_to": "ops-pager",
        "on": ["failed", "timed_out", "disabled"],
        "ack_required": False,
        "max_attempts": 8,
    }


async def test_the_duration_is_from_the_fire_to_the_end_on_the_real_clock(
    make_engine: Any, h: Any
) -> None:
    """The child's recorded start comes from /proc with a boot time of whole seconds: it can
    sit up to a second before the fire, so it is not what a duration is measured from."""
    engine = await make_engine()  # the real clock
    created = await engine.service.create(
        h.command_schedule(
            h.script("slow_fail.py", "import sys, time\ntime.sleep(0.3)\nsys.exit(3)\n"),
            notify={"deliver_to": HOOK},
        )
    )
    await engine.fire_now(created.id)
    await engine.wait_idle()
    (run,) = await h.runs_of(engine.conn, created.id)
    (row,) = await _dispatches(engine.conn)
    body = row["payload"]["body"]
    assert run.child_started_at is not None
    assert body["duration_seconds"] == round(run.ended_at - run.fired_at, 3)
    assert body["duration_seconds"] >= 0.3


async def test_bad_notify_on_a_schedule_writes_nothing(service: Any, h: Any) -> None:
    with pytest.raises(ScheduleValidationError) as caught:
        await service.create(h.command_schedule(h.env_dump, notify={"deliver_to": HOOK, "on": []}))
    assert caught.value.field == "notify.on"
    assert await fetch_all(service._conn, "SELECT id FROM schedules") == []


async def test_failed_run_enqueues_run_failed_in_the_terminal_write(
    make_engine: Any, clock: Any, h: Any
) -> None:
    engine = await make_engine(clock=clock)
    fail = h.script("fail.py", "import sys\nsys.stderr.write('it broke')\nsys.exit(3)\n")
    created = await engine.service.create(
        h.command_schedule(fail, name="nightly", notify={"deliver_to": HOOK, "ack_required": True})
    )
    assert created.notify["on"] == ["failed", "timed_out", "disabled"]
    await _fire(engine, clock, created.next_fire_at)
    (run,) = await h.runs_of(engine.conn, created.id)
    (row,) = await _dispatches(engine.conn)
    assert (row["kind"], row["dedup_key"], row["schedule_run_id"], row["deliver_to"]) == (
        "run.failed",
        f"run:{run.id}:run.failed",
        run.id,
        HOOK,
    )
    assert row["ack_required"] == 1 and row["max_attempts"] == 8
    body = row["payload"]["body"]
    assert set(body) == RUN_BODY_KEYS
    assert body["status"] == "failed" and body["reason_code"] == "run.failed.exit_nonzero"
    assert body["exit_code"] == 3 and body["stderr_tail"].endswith("it broke")
    assert body["error_class"] == "nonzero_exit"
    assert body["schedule_name"] == "nightly" and body["schedule_id"] == created.id
    assert body["ended_at"] == run.ended_at and body["duration_seconds"] >= 0
    assert body["trigger_context"]["due_at"] == created.next_fire_at
    assert body["log_url"] == f"/api/schedules/runs/{run.id}/log"
    # the dispatch's enqueue transition is stamped with the terminal write's time
    assert row["created_at"] == run.ended_at


async def test_completed_is_silent_by_default_and_recovered_is_sent_once(
    make_engine: Any, clock: Any, h: Any, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock)
    flag = tmp_path / "fail-now"
    flaky = h.script(
        "flaky.py", f"import os, sys\nsys.exit(4 if os.path.exists({str(flag)!r}) else 0)\n"
    )
    on = ["failed", "recovered"]
    created = await engine.service.create(
        h.command_schedule(flaky, notify={"deliver_to": "pager", "on": on})
    )
    due = created.next_fire_at
    await _fire(engine, clock, due)  # completed: not asked for
    assert await _dispatches(engine.conn) == []
    flag.touch()
    await _fire(engine, clock, due + 60)  # failed
    await _fire(engine, clock, due + 120)  # failed again
    flag.unlink()
    await _fire(engine, clock, due + 180)  # recovered
    await _fire(engine, clock, due + 240)  # completed again: nothing
    kinds = [(d["kind"], d["payload"]["body"]["status"]) for d in await _dispatches(engine.conn)]
    assert kinds == [
        ("run.failed", "failed"),
        ("run.failed", "failed"),
        ("run.recovered", "completed"),
    ]


async def test_setup_refusal_enqueues_with_the_occurrence(
    make_engine: Any, clock: Any, h: Any, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock)
    gone = tmp_path / "gone"
    gone.mkdir()
    created = await engine.service.create(
        h.command_schedule(h.env_dump, action_cwd=str(gone), notify={"deliver_to": "pager"})
    )
    gone.rmdir()
    await _fire(engine, clock, created.next_fire_at)
    (run,) = await h.runs_of(engine.conn, created.id)
    assert run.status_reason_code == "run.failed.missing_cwd"
    (row,) = await _dispatches(engine.conn)
    assert row["dedup_key"] == f"run:{run.id}:run.failed"
    assert row["payload"]["body"]["reason_code"] == "run.failed.missing_cwd"


async def test_gate_disable_enqueues_schedule_disabled(
    make_engine: Any, clock: Any, h: Any
) -> None:
    engine = await make_engine(clock=clock)
    ok = h.script("ok.py", "pass\n")
    created = await engine.service.create(
        h.command_schedule(ok, max_runs=1, notify={"deliver_to": "pager", "on": ["disabled"]})
    )
    due = created.next_fire_at
    await _fire(engine, clock, due)
    await _fire(engine, clock, due + 60)
    (row,) = await _dispatches(engine.conn)
    transition = await fetch_all(
        engine.conn,
        "SELECT id, created_at FROM status_transitions WHERE entity_id = ? AND status = 'disabled'",
        (created.id,),
    )
    assert row["kind"] == "schedule.disabled"
    assert row["dedup_key"] == f"schedule:{created.id}:disabled:{transition[0]['id']}"
    assert row["schedule_run_id"] is None
    assert row["payload"]["body"] == {
        "schedule_id": created.id,
        "schedule_name": created.name,
        "reason_code": "schedule.disabled.max_runs",
        "reason_summary": "max_runs reached (1 of 1)",
        "disabled_at": transition[0]["created_at"],
    }
    # an operator's disable is not a gate: no notification
    await engine.service.update(created.id, {"max_runs": 5})
    await engine.service.enable(created.id)
    await engine.service.disable(created.id)
    assert len(await _dispatches(engine.conn)) == 1


async def test_restart_reconciliation_enqueues_daemon_restart_exactly_once(
    make_engine: Any, db_target: str, clock: Any, h: Any
) -> None:
    engine = await make_engine(clock=clock)
    created = await engine.service.create(
        h.command_schedule(h.env_dump, notify={"deliver_to": "pager"})
    )
    await engine.conn.execute(
        "INSERT INTO invocations (id, skill, status, started_at, created_at, updated_at) "
        "VALUES ('inv1', 's', 'running', ?, ?, ?)",
        (h.T0, h.T0, h.T0),
    )
    await engine.conn.execute(
        "INSERT INTO schedule_runs (id, schedule_id, invocation_id, trigger_context, action_kind, "
        "action_args, status, fired_at, created_at, child_pid, child_started_at) "
        "VALUES ('run1', ?, 'inv1', '{}', 'command', '[]', 'running', ?, ?, 999999, 1.0)",
        (created.id, h.T0, h.T0),
    )
    await engine.conn.commit()
    await engine.stop()
    for _ in range(2):  # a second restart finds nothing left to reconcile
        again = await make_engine(clock=clock)
        await again.stop()
    async with connect(db_target) as conn:
        rows = await _dispatches(conn)
    assert [(r["kind"], r["dedup_key"]) for r in rows] == [("run.failed", "run:run1:run.failed")]
    assert rows[0]["payload"]["body"]["reason_code"] == "run.failed.daemon_restart"


async def test_adhoc_run_takes_notify_and_its_cancel_notifies(
    conn: Any, settings: Any, clock: Any
) -> None:
    service = AdhocRunService(conn, settings=settings, clock=clock)
    with pytest.raises(ScheduleValidationError) as caught:
        await service.enqueue(
            {"action_kind": "command", "action_command": "true", "notify": {"deliver_to": 3}}
        )
    assert caught.value.field == "notify.deliver_to"
    run = await service.enqueue(
        {
            "action_kind": "command",
            "action_command": "true",
            "notify": {"deliver_to": HOOK, "on": ["cancelled"]},
        }
    )
    assert run.notify["on"] == ["cancelled"]
    await service.cancel(run.id)
    (row,) = await _dispatches(conn)
    assert (row["kind"], row["schedule_run_id"]) == ("run.cancelled", run.id)
    body = row["payload"]["body"]
    assert body["schedule_id"] is None and body["schedule_name"] is None
    assert body["reason_code"] == "run.cancelled.operator"


async def test_follow_ups_and_timeouts_notify_like_top_level_runs(
    make_engine: Any, clock: Any, h: Any
) -> None:
    engine = await make_engine(clock=clock, invocation_deadline_seconds=0.5)
    slow = h.script("slow.py", "import time\ntime.sleep(30)\n")
    fail = h.script("fail.py", "import sys\nsys.exit(2)\n")
    created = await engine.service.create(
        h.command_schedule(
            slow,
            on_fail={"command_args": [fail], "on_fail": None},
            notify={"deliver_to": "pager", "on": ["failed", "timed_out"]},
        )
    )
    await _fire(engine, clock, created.next_fire_at)
    parent, child = await h.runs_of(engine.conn, created.id)
    rows = await _dispatches(engine.conn)
    assert [(r["kind"], r["schedule_run_id"]) for r in rows] == [
        ("run.timed_out", parent.id),
        ("run.failed", child.id),
    ]
    body = rows[1]["payload"]["body"]
    assert (body["chain_depth"], body["chain_parent_id"]) == (1, parent.id)
    assert rows[0]["payload"]["body"]["reason_code"] == "run.timed_out.deadline"
