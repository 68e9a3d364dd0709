"""A fire carries records: its :class:`Schedule` (a follow-up's with its overlay applied), an
ad-hoc run its own :class:`Action`; the seams that see a fire's end take the records too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from studio_scheduler_core import (
    Action,
    AdhocRunService,
    Run,
    Schedule,
    SchedulerEngine,
    SchedulerSettings,
)
from studio_scheduler_core._adhoc.claim import action_of
from studio_scheduler_core._fire.env import FireEnv
from studio_scheduler_core._fire.prepare import prepare
from studio_scheduler_core._records.codec import run_record
from studio_scheduler_core._schedules.followups import apply_overlay, follow_up_action
from studio_state import fetch_one


def _env(conn: Any, settings: Any, clock: Any, db_path: Path) -> FireEnv:
    return FireEnv(conn=conn, settings=settings, clock=clock, db_path=str(db_path))


async def test_a_fire_carries_its_schedule_record(
    conn: Any, service: Any, settings: Any, clock: Any, h: Any, db_path: Path
) -> None:
    ok = h.script("ok.py", "pass\n")
    created = await service.create(h.command_schedule(ok, "{{who}}", timeout_sec=90))
    fire = prepare(_env(conn, settings, clock, db_path), created, {"who": "x"}, kind="manual")
    assert fire.setup_error is None
    assert fire.schedule is created and fire.action is created
    assert (fire.schedule_id, fire.timeout_sec) == (created.id, 90)
    assert fire.argv[-2:] == [ok, "x"]  # the launcher read the record's action columns


async def test_a_follow_up_is_its_schedule_record_with_the_overlay_applied(
    service: Any, h: Any
) -> None:
    ok = h.script("ok.py", "pass\n")
    created = await service.create(
        h.command_schedule(
            ok,
            retry={"max_attempts": 2},
            on_fail={"command_args": [ok, "again"], "on_success": {"kind": "command"}},
        )
    )
    assert created.on_fail is not None
    child = apply_overlay(created, created.on_fail)
    assert isinstance(child, Schedule) and child.id == created.id
    assert child.action_command_args == (ok, "again")  # JSON's list is the record's tuple
    assert child.on_success == {"kind": "command"}
    assert (child.on_fail, child.retry) == (None, None)  # never inherited
    assert created.action_command_args == (ok,)  # the parent is unchanged
    assert follow_up_action(created, ["failed"]) == child
    assert follow_up_action(created, ["completed"]) is None


async def test_an_adhoc_fire_carries_an_action_and_has_no_schedule(
    conn: Any, settings: Any, clock: Any, h: Any, db_path: Path
) -> None:
    ok = h.script("ok.py", "pass\n")
    runs = AdhocRunService(conn, settings=settings, clock=clock)
    queued = await runs.enqueue(
        {
            "action_kind": "command",
            "action_command": h.PY,
            "action_command_args": [ok],
            "timeout_sec": 30,
        }
    )
    row = await fetch_one(conn, "SELECT * FROM schedule_runs WHERE id = ?", (queued.id,))
    assert row is not None
    stored = action_of(run_record(row))
    assert type(stored.action) is Action and stored.timeout_sec == 30
    assert stored.action.action_command_args == (ok,)
    fire = prepare(
        _env(conn, settings, clock, db_path),
        stored.action,
        stored.context,
        kind="adhoc",
        run_id=queued.id,
        timeout_sec=stored.timeout_sec,
    )
    assert fire.setup_error is None and fire.argv[-1] == ok
    assert (fire.schedule_id, fire.timeout_sec) == (None, 30)
    with pytest.raises(TypeError, match="ad-hoc"):
        _ = fire.schedule


async def test_the_run_terminal_hook_takes_the_records(
    db_target: str, settings: SchedulerSettings, clock: Any, h: Any
) -> None:
    seen: list[tuple[Any, Any]] = []

    async def hook(conn: Any, schedule: Schedule, run: Run) -> None:
        seen.append((schedule, run))

    engine = SchedulerEngine(db_target, settings=settings, clock=clock, on_run_terminal=hook)
    await engine.start(loop=False)
    try:
        created = await engine.service.create(h.command_schedule(h.script("ok.py", "pass\n")))
        clock.set(created.next_fire_at)
        await engine.tick_once()

        async def ended() -> bool:
            return bool(seen)

        await h.eventually(ended, timeout=20.0)
    finally:
        await engine.stop()
    [(schedule, run)] = seen
    assert isinstance(schedule, Schedule) and schedule.id == created.id
    assert isinstance(run, Run) and (run.schedule_id, run.status) == (created.id, "completed")
