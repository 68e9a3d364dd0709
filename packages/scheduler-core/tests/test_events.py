"""Operator events: fire, outcome, first deferral, disable, tick and the recovery summary."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from studio_scheduler_core import EVENTS_LOGGER


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [
            {"message": r.getMessage(), "level": r.levelname, **r.studio_fields}  # type: ignore[attr-defined]
            for r in self.records
            if getattr(r, "studio_event", None) == name
        ]


@pytest.fixture
def events() -> Iterator[Capture]:
    handler = Capture()
    log = logging.getLogger(EVENTS_LOGGER)
    old = log.level
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    yield handler
    log.removeHandler(handler)
    log.setLevel(old)


async def test_fire_outcome_deferral_disable_tick_and_recovery(
    make_engine, clock, h, events: Capture
) -> None:
    engine = await make_engine(clock=clock, max_scheduled_concurrent=1)
    (recovery,) = events.events("recovery")
    assert recovery["message"] == "recovered 0 runs, killed 0 orphans, 0 missed fires skipped/0 run"
    flag = h.script("unused.flag", "")
    a = await engine.service.create(h.command_schedule(h.blocker, flag + ".go", name="a"))
    b = await engine.service.create(h.command_schedule(h.blocker, flag + ".go", name="b"))
    clock.set(a.next_fire_at + 0.25)
    await engine.tick_once()
    (fire,) = events.events("fire")
    first, second = (a, b) if fire["schedule_id"] == a.id else (b, a)
    assert fire["kind"] == "scheduled"
    assert fire["lag_seconds"] == pytest.approx(0.25)
    deferrals = events.events("deferral")
    assert [(d["schedule_id"], d["count"], d["level"]) for d in deferrals] == [
        (second.id, 1, "INFO")
    ]
    assert deferrals[0]["reason_code"] == "schedule.deferred.capacity"
    clock.advance(1.0)  # the next full pass: wake-ups within a second only refill slots
    await engine.tick_once()
    assert [d["level"] for d in events.events("deferral")] == ["INFO", "DEBUG"]
    assert len(events.events("tick")) == 2
    with open(flag + ".go", "w"):
        pass
    await engine.wait_idle()
    (outcome,) = events.events("outcome")
    assert outcome["run_id"] == fire["run_id"] and outcome["status"] == "completed"
    assert outcome["reason_code"] == "run.completed.ok" and outcome["duration_seconds"] >= 0
    await engine.service.disable(second.id)
    (disable,) = events.events("disable")
    assert disable["schedule_id"] == second.id and disable["level"] == "WARNING"


async def test_coalesced_slots_are_counted(make_engine, clock, h, events: Capture) -> None:
    engine = await make_engine(clock=clock)
    ok = h.script("ok.py", "pass\n")
    created = await engine.service.create(h.command_schedule(ok, interval_sec=60))
    clock.set(created.next_fire_at + 4 * 60 + 5)  # four more slots passed while late
    await engine.tick_once()
    await engine.wait_idle()
    (coalesced,) = events.events("coalesced")
    assert coalesced["schedule_id"] == created.id and coalesced["count"] == 4
    assert coalesced["level"] == "INFO"
    (fire,) = events.events("fire")
    assert fire["lag_seconds"] == pytest.approx(245)
    row = await h.schedule_row(engine.conn, created.id)
    assert row.next_fire_at == created.next_fire_at + 5 * 60
