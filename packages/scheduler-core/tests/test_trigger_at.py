"""The ``at`` one-shot trigger (DESIGN §11.2): one fire at its instant, then disabled
(``schedule.disabled.once``) in the fire's transaction, with its transition and notification."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from studio_scheduler_core import ScheduleAtPassed, ScheduleValidationError
from studio_state import fetch_all

PLUS_ONE = timezone(timedelta(hours=1))


def _instant(epoch: float) -> str:
    """An RFC 3339 instant with a +01:00 offset (not UTC: the offset is kept as given)."""
    return datetime.fromtimestamp(epoch, tz=PLUS_ONE).isoformat()


def _at_schedule(h: Any, when: str, **fields: Any) -> dict[str, Any]:
    ok = h.script("ok.py", "pass\n")
    data = h.command_schedule(ok, name="once", trigger_type="at", at=when, **fields)
    del data["interval_sec"]
    return data


async def test_at_fires_once_then_is_disabled_in_the_fire_transaction(
    make_engine: Any, clock: Any, h: Any
) -> None:
    engine = await make_engine(clock=clock)
    when = _instant(clock() + 120)
    created = await engine.service.create(
        _at_schedule(h, when, notify={"deliver_to": "pager", "on": ["disabled"]})
    )
    assert created.at == when  # kept as given, offset and all
    assert created.next_fire_at == clock() + 120
    await h.fire_due(engine, clock, clock() + 119)
    assert await h.run_reasons(engine.conn, created.id) == []
    await h.fire_due(engine, clock, clock() + 1)
    assert await h.run_reasons(engine.conn, created.id) == [("completed", "run.completed.ok")]
    row = await h.schedule_row(engine.conn, created.id)
    assert (row.enabled, row.disabled_reason) == (0, "schedule.disabled.once")
    assert row.next_fire_at is None
    (disabled,) = [
        t for t in await h.transitions_of(engine.conn, created.id) if t.status == "disabled"
    ]
    assert (disabled.reason_code, disabled.previous_status) == (
        "schedule.disabled.once",
        "enabled",
    )
    run = (await h.runs_of(engine.conn, created.id))[0]
    # The disable committed with the fire: same instant as the run's fire.
    assert disabled.created_at == run.fired_at
    outbox = await fetch_all(engine.conn, "SELECT kind, payload FROM dispatch_outbox")
    assert [r["kind"] for r in outbox] == ["schedule.disabled"]
    assert json.loads(outbox[0]["payload"])["body"]["reason_code"] == "schedule.disabled.once"
    # Later ticks never fire it again.
    await h.fire_due(engine, clock, clock() + 3600)
    assert len(await h.runs_of(engine.conn, created.id)) == 1


async def test_at_in_the_past_is_refused_unless_run_once(
    make_engine: Any, clock: Any, h: Any
) -> None:
    engine = await make_engine(clock=clock)
    past = _instant(clock() - 60)
    with pytest.raises(ScheduleValidationError) as caught:
        await engine.service.create(_at_schedule(h, past))
    assert caught.value.field == "at"
    assert await fetch_all(engine.conn, "SELECT id FROM schedules") == []
    created = await engine.service.create(_at_schedule(h, past, missed_fire_policy="run_once"))
    await h.fire_due(engine, clock, clock() + 1)
    assert [r[0] for r in await h.run_reasons(engine.conn, created.id)] == ["completed"]
    row = await h.schedule_row(engine.conn, created.id)
    assert row.disabled_reason == "schedule.disabled.once"
    # Editing the fired schedule's description does not re-judge its (past) instant.
    updated = await engine.service.update(created.id, {"description": "done"})
    assert updated.description == "done"


@pytest.mark.parametrize(
    "value",
    [
        "2030-01-05T09:00:00",  # no offset
        "2030-01-05",  # a date alone
        "2030-02-30T09:00:00Z",  # no such day
        "next tuesday",
        12345,
    ],
)
async def test_bad_at_is_refused_naming_at(service: Any, h: Any, value: Any) -> None:
    with pytest.raises(ScheduleValidationError) as caught:
        await service.create(_at_schedule(h, value))
    assert caught.value.field == "at"


async def test_at_requires_its_instant_and_refuses_other_trigger_fields(
    service: Any, h: Any, clock: Any
) -> None:
    data = _at_schedule(h, _instant(clock() + 60))
    del data["at"]
    with pytest.raises(ScheduleValidationError) as caught:
        await service.create(data)
    assert caught.value.field == "at"
    with pytest.raises(ScheduleValidationError) as caught:
        await service.create(_at_schedule(h, _instant(clock() + 60), cron_expr="* * * * *"))
    assert caught.value.field == "cron_expr"
    utc = await service.create(_at_schedule(h, "2030-01-05T08:00:00Z"))
    assert utc.next_fire_at == datetime(2030, 1, 5, 8, tzinfo=UTC).timestamp()


async def test_a_missed_at_under_skip_is_skipped_and_disabled(
    make_engine: Any, clock: Any, h: Any
) -> None:
    engine = await make_engine(clock=clock)
    created = await engine.service.create(_at_schedule(h, _instant(clock() + 60)))
    await engine.stop()  # down while its instant passes
    clock.advance(600)
    restarted = await make_engine(clock=clock)
    await h.fire_due(restarted, clock, clock())
    assert await h.run_reasons(restarted.conn, created.id) == [
        ("skipped", "schedule.skipped.missed_fire")
    ]
    row = await h.schedule_row(restarted.conn, created.id)
    assert (row.enabled, row.disabled_reason) == (0, "schedule.disabled.once")


async def test_a_fired_at_is_not_enabled_again_without_a_new_instant(
    make_engine: Any, clock: Any, h: Any
) -> None:
    engine = await make_engine(clock=clock)
    when = _instant(clock() + 60)
    created = await engine.service.create(_at_schedule(h, when))
    await h.fire_due(engine, clock, clock() + 60)
    assert len(await h.runs_of(engine.conn, created.id)) == 1
    before = await h.transitions_of(engine.conn, created.id)

    # enable, and a PATCH enabling it with its old instant: refused naming `at`, nothing written
    with pytest.raises(ScheduleAtPassed) as caught:
        await engine.service.enable(created.id)
    assert (caught.value.field, caught.value.reason_code) == ("at", "schedule.enable.at_passed")
    assert when in str(caught.value)
    with pytest.raises(ScheduleAtPassed):
        await engine.service.update(created.id, {"enabled": True, "description": "again"})
    with pytest.raises(ScheduleAtPassed):
        await engine.service.update(created.id, {"enabled": True, "at": when})
    assert await h.transitions_of(engine.conn, created.id) == before
    row = await h.schedule_row(engine.conn, created.id)
    assert (row.enabled, row.description) == (0, None)
    await h.fire_due(engine, clock, clock() + 3600)
    assert len(await h.runs_of(engine.conn, created.id)) == 1  # it never fired again

    # a new future instant in the same PATCH enables it, and it fires once more, at that time
    later = _instant(clock() + 300)
    enabled = await engine.service.update(created.id, {"enabled": True, "at": later})
    assert (enabled.enabled, enabled.at, enabled.next_fire_at) == (True, later, clock() + 300)
    await h.fire_due(engine, clock, clock() + 300)
    assert len(await h.runs_of(engine.conn, created.id)) == 2

    # a new instant set while disabled, then a plain enable: allowed too
    await engine.service.update(created.id, {"at": _instant(clock() + 600)})
    assert (await engine.service.enable(created.id)).next_fire_at == clock() + 600
    # moving the instant of an enabled `at` moves its next fire with it
    moved = await engine.service.update(created.id, {"at": _instant(clock() + 900)})
    assert moved.next_fire_at == clock() + 900


async def test_an_at_disabled_by_hand_before_its_fire_is_enabled_as_before(
    service: Any, h: Any, clock: Any
) -> None:
    created = await service.create(
        _at_schedule(h, _instant(clock() + 60), missed_fire_policy="run_once")
    )
    await service.disable(created.id)
    clock.advance(120)  # its instant passes while disabled by the operator: not yet handled
    enabled = await service.enable(created.id)
    assert enabled.enabled and enabled.next_fire_at == clock() - 60
