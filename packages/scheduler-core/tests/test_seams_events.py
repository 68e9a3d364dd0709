"""A gate's disable notifies like every other disable: ``schedule.disabled`` is enqueued in the
disabling transaction, whichever gate (budget, max_runs at admission or after a run,
pause_on_failure) disabled the schedule, with the default ``notify.on``."""

from __future__ import annotations

import json
from typing import Any

from studio_scheduler_core import report_usage
from studio_state import fetch_all


async def _fire(engine: Any, clock: Any, at: float) -> None:
    clock.set(at)
    await engine.tick_once()
    await engine.wait_idle()


async def _disabled_dispatch(conn: Any, schedule_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The one ``schedule.disabled`` dispatch of the schedule and its disable transition."""
    rows = await fetch_all(
        conn,
        "SELECT * FROM dispatch_outbox WHERE kind = 'schedule.disabled' ORDER BY rowid",
    )
    (transition,) = await fetch_all(
        conn,
        "SELECT id, created_at, reason_code, reason_summary FROM status_transitions "
        "WHERE entity_type = 'schedule' AND entity_id = ? AND status = 'disabled'",
        (schedule_id,),
    )
    (row,) = [dict(r) for r in rows]
    return row, dict(transition)


def _check(row: dict[str, Any], transition: dict[str, Any], created: dict[str, Any]) -> None:
    assert row["dedup_key"] == f"schedule:{created['id']}:disabled:{transition['id']}"
    assert row["deliver_to"] == "pager"
    # written by the disabling transaction: at the disable's own time
    assert row["created_at"] == transition["created_at"]
    assert json.loads(row["payload"])["body"] == {
        "schedule_id": created["id"],
        "schedule_name": created["name"],
        "reason_code": transition["reason_code"],
        "reason_summary": transition["reason_summary"],
        "disabled_at": transition["created_at"],
    }


async def test_budget_disable_enqueues_schedule_disabled(
    make_engine: Any, clock: Any, h: Any
) -> None:
    engine = await make_engine(clock=clock)
    ok = h.script("ok.py", "pass\n")
    created = await engine.service.create(
        h.command_schedule(ok, name="spend", budget_usd=1.0, notify={"deliver_to": "pager"})
    )
    assert "disabled" in created["notify"]["on"]  # the default
    due = created["next_fire_at"]
    await _fire(engine, clock, due)
    (run,) = await fetch_all(
        engine.conn,
        "SELECT invocation_id FROM schedule_runs WHERE schedule_id = ?",
        (created["id"],),
    )
    await report_usage(engine.conn, invocation_id=run["invocation_id"], cost_usd=1.5, clock=clock)
    await _fire(engine, clock, due + 60)
    row, transition = await _disabled_dispatch(engine.conn, created["id"])
    assert transition["reason_code"] == "schedule.budget.exhausted"
    _check(row, transition, created)


async def test_max_runs_disable_at_admission_enqueues_schedule_disabled(
    make_engine: Any, clock: Any, h: Any
) -> None:
    engine = await make_engine(clock=clock)
    ok = h.script("ok.py", "pass\n")
    created = await engine.service.create(
        h.command_schedule(ok, name="capped", max_runs=5, notify={"deliver_to": "pager"})
    )
    due = created["next_fire_at"]
    await _fire(engine, clock, due)
    await _fire(engine, clock, due + 60)
    # lowered under what already ran: the admission gate (not the end of a run) disables it
    await engine.service.update(created["id"], {"max_runs": 2})
    await _fire(engine, clock, due + 120)
    row, transition = await _disabled_dispatch(engine.conn, created["id"])
    assert transition["reason_code"] == "schedule.disabled.max_runs"
    _check(row, transition, created)


async def test_pause_on_failure_enqueues_schedule_disabled(
    make_engine: Any, clock: Any, h: Any
) -> None:
    engine = await make_engine(clock=clock)
    bad = h.script("bad.py", "raise SystemExit(3)\n")
    created = await engine.service.create(
        h.command_schedule(
            bad, name="fragile", pause_on_failure=True, notify={"deliver_to": "pager"}
        )
    )
    await _fire(engine, clock, created["next_fire_at"])
    row, transition = await _disabled_dispatch(engine.conn, created["id"])
    assert transition["reason_code"] == "schedule.disabled.failure"
    _check(row, transition, created)
