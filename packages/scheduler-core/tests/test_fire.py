"""The fire (DESIGN §5.4): one occurrence transaction, spawn, every outcome path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studio_scheduler_core import ScheduleValidationError, report_usage
from studio_state import fetch_all, fetch_one, fetch_value


async def _fire_due(engine, clock, schedule) -> None:
    clock.set(schedule.next_fire_at)
    await engine.tick_once()
    await engine.wait_idle()


async def test_occurrence_commits_run_invocation_transitions_and_advance(
    make_engine, clock, h, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock)
    out = tmp_path / "env.jsonl"
    created = await engine.service.create(
        h.command_schedule(h.env_dump, str(out), action_cwd=str(tmp_path))
    )
    await _fire_due(engine, clock, created)
    runs = await h.runs_of(engine.conn, created.id)
    assert len(runs) == 1
    run = runs[0]
    assert (run.status, run.status_reason_code, run.exit_code) == (
        "completed",
        "run.completed.ok",
        0,
    )
    assert list(run.action_args) == [h.PY, h.env_dump, str(out)]
    assert run.child_pid and run.child_started_at
    ctx = run.trigger_context
    assert ctx["scheduled"] is True and ctx["due_at"] == created.next_fire_at
    invocation = await fetch_one(
        engine.conn, "SELECT * FROM invocations WHERE id = ?", (run.invocation_id,)
    )
    assert invocation["status"] == "completed"
    assert invocation["schedule_run_id"] == run.id
    assert invocation["skill"] == f"scheduled:{created.name}"
    env = json.loads(out.read_text().splitlines()[0])
    assert env["LIONAGI_INVOCATION_ID"] == run.invocation_id
    assert env["LIONAGI_STUDIO_DB"] == engine.db_path
    assert env["cwd"] == str(tmp_path)
    steps = [(t.status, t.reason_code) for t in await h.transitions_of(engine.conn, run.id)]
    assert steps == [("running", "schedule.fired.due"), ("completed", "run.completed.ok")]
    row = await h.schedule_row(engine.conn, created.id)
    assert row.next_fire_at == created.next_fire_at + 60
    assert row.last_fired_at == created.next_fire_at


async def test_nonzero_exit_records_code_and_stderr_tail(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    path = h.script(
        "fail.py", "import sys\nsys.stderr.write('boom ' * 1000 + 'END')\nsys.exit(3)\n"
    )
    created = await engine.service.create(h.command_schedule(path))
    await _fire_due(engine, clock, created)
    (run,) = await h.runs_of(engine.conn, created.id)
    assert (run.status, run.status_reason_code, run.exit_code) == (
        "failed",
        "run.failed.exit_nonzero",
        3,
    )
    assert run.error_detail.endswith("END") and len(run.error_detail) <= 2048
    status = await fetch_value(
        engine.conn, "SELECT status FROM invocations WHERE id = ?", (run.invocation_id,)
    )
    assert status == "failed"


async def test_deadline_times_out_and_kills_the_group(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock, invocation_deadline_seconds=0.5)
    path = h.script("slow.py", "import time\ntime.sleep(30)\n")
    created = await engine.service.create(h.command_schedule(path))
    await _fire_due(engine, clock, created)
    (run,) = await h.runs_of(engine.conn, created.id)
    assert (run.status, run.status_reason_code) == ("timed_out", "run.timed_out.deadline")
    from studio_launcher import is_same_process

    assert not is_same_process(run.child_pid, run.child_started_at)


async def test_spawn_failure_fails_the_run_at_once(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock, child_env={"PATH": "/nonexistent"})
    created = await engine.service.create(
        {
            "name": "nope",
            "trigger_type": "interval",
            "interval_sec": 60,
            "action_kind": "command",
            "action_command": "true",
        }
    )
    await _fire_due(engine, clock, created)
    (run,) = await h.runs_of(engine.conn, created.id)
    assert (run.status, run.status_reason_code) == ("failed", "run.failed.spawn_error")
    assert run.child_pid is None and run.ended_at is not None
    assert (
        await fetch_value(engine.conn, "SELECT COUNT(*) FROM invocations WHERE status = 'running'")
        == 0
    )


async def test_invalid_action_at_fire_time_is_recorded_once_and_cadence_moves(
    make_engine, clock, h, db_path
) -> None:
    engine = await make_engine(clock=clock)
    created = await engine.service.create(h.command_schedule(h.blocker, "/x"))
    await engine.stop()
    # The allow-list no longer names the command: the stored row is now refused at fire time.
    engine = await make_engine(clock=clock, command_allowlist=("sh",))
    clock.set(created.next_fire_at - 1)
    await engine.tick_once()
    clock.set(created.next_fire_at)
    await engine.tick_once()
    await engine.tick_once()
    await engine.wait_idle()
    runs = await h.runs_of(engine.conn, created.id)
    assert [(r.status, r.status_reason_code) for r in runs] == [
        ("failed", "run.failed.invalid_action")
    ]
    assert list(runs[0].action_args) == []
    row = await h.schedule_row(engine.conn, created.id)
    assert row.next_fire_at == created.next_fire_at + 60


async def test_missing_cwd_fails_with_its_reason(make_engine, clock, h, tmp_path: Path) -> None:
    engine = await make_engine(clock=clock)
    gone = tmp_path / "gone"
    gone.mkdir()
    created = await engine.service.create(h.command_schedule(h.blocker, "/x", action_cwd=str(gone)))
    gone.rmdir()
    await _fire_due(engine, clock, created)
    (run,) = await h.runs_of(engine.conn, created.id)
    assert (run.status, run.status_reason_code) == ("failed", "run.failed.missing_cwd")


@pytest.mark.parametrize(
    ("tokens", "run_status", "inv_status"),
    [
        ("exit=0", "completed", "completed"),
        ("exit=0 usage=completed:10:5:0.01", "completed", "completed"),
        ("exit=0 usage=completed:1 usage=failed:1", "completed", "failed"),
        ("exit=0 usage=completed_empty", "completed", "completed_empty"),
        ("exit=1 usage=completed:1", "failed", "completed"),
        ("exit=1", "failed", "failed"),
        ("exit=0 usage=aborted usage=timed_out", "completed", "timed_out"),
    ],
)
async def test_invocation_status_comes_from_session_evidence(
    make_engine, clock, h, tokens: str, run_status: str, inv_status: str
) -> None:
    engine = await make_engine(clock=clock)
    created = await engine.service.create(
        {
            "name": "agent",
            "trigger_type": "interval",
            "interval_sec": 60,
            "action_kind": "agent",
            "action_model": "m",
            "action_prompt": f"do it {tokens}",
        }
    )
    await _fire_due(engine, clock, created)
    (run,) = await h.runs_of(engine.conn, created.id)
    assert run.status == run_status
    invocation = await fetch_one(
        engine.conn, "SELECT * FROM invocations WHERE id = ?", (run.invocation_id,)
    )
    assert invocation["status"] == inv_status
    assert invocation["prompt"] == f"do it {tokens}"


async def test_report_usage_writes_a_session(conn, clock) -> None:
    with pytest.raises(ScheduleValidationError) as info:
        await report_usage(conn, invocation_id="000000000000", clock=clock)
    assert info.value.field == "invocation_id"
    await conn.execute(
        "INSERT INTO invocations (id, skill, status, started_at, created_at, updated_at) "
        "VALUES ('inv', 's', 'running', 1, 1, 1)"
    )
    sid = await report_usage(
        conn, invocation_id="inv", input_tokens=3, output_tokens=4, cost_usd=0.5, clock=clock
    )
    (row,) = await fetch_all(conn, "SELECT * FROM sessions WHERE id = ?", (sid,))
    assert (row["status"], row["input_tokens"], row["output_tokens"], row["total_cost_usd"]) == (
        "completed",
        3,
        4,
        0.5,
    )
    assert row["ended_at"] == clock()
    for field, kwargs in [
        ("status", {"status": "done"}),
        ("input_tokens", {"input_tokens": -1}),
        ("cost_usd", {"cost_usd": float("nan")}),
    ]:
        with pytest.raises(ScheduleValidationError) as info:
            await report_usage(conn, invocation_id="inv", clock=clock, **kwargs)
        assert info.value.field == field
