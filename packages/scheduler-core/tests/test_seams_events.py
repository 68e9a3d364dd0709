"""Seams of the engine's events and notifications.

A gate's disable notifies like every other disable: ``schedule.disabled`` is enqueued in the
disabling transaction, whichever gate (budget, max_runs at admission or after a run,
pause_on_failure) disabled the schedule, with the default ``notify.on``. An operator's cancel
is one ``outcome`` event."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from studio_scheduler_core import EVENTS_LOGGER, Schedule, report_usage
from studio_state import fetch_all


async def wait_until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "not met in time"
        await asyncio.sleep(0.02)


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


def _check(row: dict[str, Any], transition: dict[str, Any], created: Schedule) -> None:
    assert row["dedup_key"] == f"schedule:{created.id}:disabled:{transition['id']}"
    assert row["deliver_to"] == "pager"
    # written by the disabling transaction: at the disable's own time
    assert row["created_at"] == transition["created_at"]
    assert json.loads(row["payload"])["body"] == {
        "schedule_id": created.id,
        "schedule_name": created.name,
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
    assert "disabled" in created.notify["on"]  # the default
    due = created.next_fire_at
    await _fire(engine, clock, due)
    (run,) = await fetch_all(
        engine.conn,
        "SELECT invocation_id FROM schedule_runs WHERE schedule_id = ?",
        (created.id,),
    )
    await report_usage(engine.conn, invocation_id=run["invocation_id"], cost_usd=1.5, clock=clock)
    await _fire(engine, clock, due + 60)
    row, transition = await _disabled_dispatch(engine.conn, created.id)
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
    due = created.next_fire_at
    await _fire(engine, clock, due)
    await _fire(engine, clock, due + 60)
    # lowered under what already ran: the admission gate (not the end of a run) disables it
    await engine.service.update(created.id, {"max_runs": 2})
    await _fire(engine, clock, due + 120)
    row, transition = await _disabled_dispatch(engine.conn, created.id)
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
    await _fire(engine, clock, created.next_fire_at)
    row, transition = await _disabled_dispatch(engine.conn, created.id)
    assert transition["reason_code"] == "schedule.disabled.failure"
    _check(row, transition, created)


class _Outcomes(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "studio_event", None) == "outcome":
            self.seen.append(dict(record.studio_fields))  # type: ignore[attr-defined]


@pytest.fixture
def outcomes() -> Iterator[_Outcomes]:
    handler = _Outcomes()
    log = logging.getLogger(EVENTS_LOGGER)
    old = log.level
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    yield handler
    log.removeHandler(handler)
    log.setLevel(old)


async def test_an_operator_cancel_is_one_outcome_event(
    make_engine: Any, clock: Any, h: Any, tmp_path: Path, outcomes: _Outcomes
) -> None:
    engine = await make_engine(clock=clock, max_adhoc_concurrent=1)
    await engine.tick_once()  # the engine reports cancels recorded from its first tick on
    sleeper = h.script("sleep.py", "import time\ntime.sleep(60)\n")
    created = await engine.service.create(h.command_schedule(sleeper, name="long"))
    run_id = await engine.fire_now(created.id)
    await wait_until(lambda: bool(engine.limits().get("in_flight")))
    adhoc = await engine.runs.enqueue({"action_kind": "command", "action_command": "true"})
    await engine.runs.cancel(run_id)  # running: its owner (this engine) reports it
    await engine.runs.cancel(adhoc.id)  # queued or running: reported once either way
    await engine.tick_once()
    await engine.wait_idle()
    mine = {o["run_id"]: o for o in outcomes.seen if o["run_id"] in (run_id, adhoc.id)}
    assert len([o for o in outcomes.seen if o["run_id"] in mine]) == 2  # once each
    assert mine[run_id]["status"] == "cancelled"
    assert mine[run_id]["reason_code"] == "run.cancelled.operator"
    assert mine[run_id]["duration_seconds"] is not None
    assert mine[adhoc.id]["reason_code"] == "run.cancelled.operator"
