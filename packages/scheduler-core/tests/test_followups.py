"""Follow-ups (ADR-0070 D4, DESIGN §5.5): overlay, linkage, depth cap, no slot/max_runs claim."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from studio_state import fetch_all


async def _fire(engine, clock, created) -> None:
    clock.set(created.next_fire_at)
    await engine.tick_once()
    await engine.wait_idle()


async def test_on_success_chain_links_and_stops_at_depth_10(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    ok = h.script("ok.py", "pass\n")
    # a chain is written by nesting: eleven levels of overlay, the tenth follow-up is the last
    overlay: dict[str, Any] = {"command_args": [ok, "again"]}
    for _ in range(9):
        overlay = {"command_args": [ok, "again"], "on_success": overlay}
    created = await engine.service.create(h.command_schedule(ok, on_success=overlay))
    await _fire(engine, clock, created)
    runs = await h.runs_of(engine.conn, created.id)
    assert [r.chain_depth for r in runs] == list(range(11))
    for parent, child in zip(runs, runs[1:], strict=False):
        assert child.chain_parent_id == parent.id
        ctx = child.trigger_context
        assert ctx["chain_from"] == parent.id
        assert ctx["parent_exit_code"] == 0 and ctx["parent_status"] == "completed"
        assert ctx["scheduled"] is True  # the parent's context is kept
        assert list(child.action_args) == [h.PY, ok, "again"]
    assert all(r.status == "completed" for r in runs)
    detail = await engine.service.get_run(runs[0].id)
    assert [c.chain_depth for c in detail.chain_children] == list(range(1, 11))
    # children never move the schedule's cadence
    row = await h.schedule_row(engine.conn, created.id)
    assert row.next_fire_at == created.next_fire_at + 60
    reasons = {r.status_reason_code for r in runs[1:]}
    assert reasons == {"run.completed.ok"}
    fired = await fetch_all(
        engine.conn,
        "SELECT reason_code FROM status_transitions WHERE entity_id = ? AND status = 'running'",
        (runs[1].id,),
    )
    assert [f["reason_code"] for f in fired] == ["schedule.fired.follow_up"]


async def test_on_fail_after_failure_and_timeout_with_overlay(
    make_engine, clock, h, tmp_path: Path
) -> None:
    # generous: the deadline also bounds the failing child and both follow-ups (python start-up
    # under load); only slow.py may reach it
    engine = await make_engine(clock=clock, invocation_deadline_seconds=4.0)
    fail = h.script("fail.py", "import sys\nsys.exit(4)\n")
    slow = h.script("slow.py", "import time\ntime.sleep(20)\n")
    out = tmp_path / "chain.jsonl"
    overlay = {"command_args": [h.env_dump, str(out)], "on_fail": None}
    failing = await engine.service.create(h.command_schedule(fail, on_fail=overlay))
    timing = await engine.service.create(h.command_schedule(slow, name="slow", on_fail=overlay))
    await _fire(engine, clock, failing)
    await _fire(engine, clock, timing)
    f_runs = await h.runs_of(engine.conn, failing.id)
    assert [(r.chain_depth, r.status) for r in f_runs] == [(0, "failed"), (1, "completed")]
    assert f_runs[1].trigger_context["parent_exit_code"] == 4
    t_runs = await h.runs_of(engine.conn, timing.id)
    assert [(r.chain_depth, r.status) for r in t_runs] == [
        (0, "timed_out"),
        (1, "completed"),
    ]
    ctx = t_runs[1].trigger_context
    assert ctx["parent_status"] == "timed_out" and ctx["parent_exit_code"] is None


async def test_follow_up_overlay_changes_kind_and_prompt(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    ok = h.script("ok.py", "pass\n")
    created = await engine.service.create(
        h.command_schedule(
            ok,
            on_success={
                "kind": "agent",
                "model": "gpt-x",
                "prompt": "after {{chain_from}} exit={{parent_exit_code}}",
                "on_success": None,
            },
        )
    )
    await _fire(engine, clock, created)
    parent, child = await h.runs_of(engine.conn, created.id)
    argv = list(child.action_args)
    assert child.action_kind == "agent"
    assert argv[1:4] == ["agent", "--", "gpt-x"]
    assert argv[4] == f"after {parent.id} exit=0"
    assert child.exit_code == 0


async def test_no_follow_up_after_cancellation(make_engine, clock, h, tmp_path: Path) -> None:
    engine = await make_engine(clock=clock)
    slow = h.script("slow.py", "import time\ntime.sleep(30)\n")
    created = await engine.service.create(
        h.command_schedule(slow, on_fail={"command_args": [slow]})
    )
    clock.set(created.next_fire_at)
    await engine.tick_once()
    await h.eventually(
        lambda: _has_pid(engine.conn, created.id),
    )
    conn_path = engine.db_path
    await engine.stop()
    from studio_state import connect

    async with connect(conn_path) as conn:
        runs = await h.runs_of(conn, created.id)
    assert [(r.status, r.status_reason_code) for r in runs] == [
        ("cancelled", "run.cancelled.shutdown")
    ]


async def _has_pid(conn: Any, schedule_id: str) -> bool:
    rows = await fetch_all(
        conn, "SELECT child_pid FROM schedule_runs WHERE schedule_id = ?", (schedule_id,)
    )
    return bool(rows) and rows[0]["child_pid"] is not None


async def test_follow_ups_take_no_slot(make_engine, clock, h) -> None:
    """With the cap at 1 the chain still runs: children hold no global slot of their own."""
    engine = await make_engine(clock=clock, max_scheduled_concurrent=1)
    ok = h.script("ok.py", "pass\n")
    created = await engine.service.create(
        h.command_schedule(ok, on_success={"command_args": [ok, "x"], "on_success": None})
    )
    await _fire(engine, clock, created)
    assert [r.chain_depth for r in await h.runs_of(engine.conn, created.id)] == [0, 1]
