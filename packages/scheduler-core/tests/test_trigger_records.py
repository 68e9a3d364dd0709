"""The trigger path's values are records: the due scan reads ``DueSchedule`` records, the
engine's store hands the trigger sources the ``Schedule`` record, an ``Occurrence`` carries it,
and a skipped run is a ``Run``."""

from __future__ import annotations

import typing
from typing import Any

from studio_scheduler_core import GithubPollSource, Run, Schedule, ScheduleService
from studio_scheduler_core._engine import store
from studio_scheduler_core._fire.occurrence import skipped_run, write_skip
from studio_scheduler_core._records.column import strip_none
from studio_scheduler_core._records.due import DueSchedule
from studio_scheduler_core._triggers.once import OnceTrigger
from studio_scheduler_core._triggers.registry import CadenceTrigger
from studio_scheduler_core.abc import Occurrence, TriggerSource

_THRESHOLD = {"metric": "failed_runs", "op": "gt", "value": 0, "window_minutes": 5}
_RATE = {"max_fires": 2, "window_sec": 600}


def test_the_trigger_sources_take_the_schedule_record() -> None:
    for owner in (TriggerSource, CadenceTrigger, OnceTrigger, GithubPollSource):
        for method in ("next_fire_at", "occurrences"):
            hints = typing.get_type_hints(getattr(owner, method))
            assert hints["schedule"] is Schedule, f"{owner.__name__}.{method}"
    assert typing.get_type_hints(Occurrence)["schedule"] is Schedule
    assert typing.get_type_hints(store.due_schedule)["return"] == Schedule | None
    assert typing.get_type_hints(store.due_rows)["return"] == list[DueSchedule]
    assert typing.get_args(typing.get_type_hints(skipped_run)["return"])[0] is Run
    assert typing.get_type_hints(write_skip)["run"] == Run | None


def test_a_due_schedule_holds_schedule_fields_with_their_types() -> None:
    full = typing.get_type_hints(Schedule)
    for name, annotation in typing.get_type_hints(DueSchedule).items():
        # The scan reads due rows only: their next_fire_at is set.
        expected = strip_none(full[name]) if name == "next_fire_at" else full[name]
        assert annotation == expected, name


async def test_the_due_scan_reads_records_and_the_due_read_the_schedule(
    service: ScheduleService, conn: Any, clock: Any, h: Any
) -> None:
    ok = h.script("ok.py", "pass\n")
    plain = await service.create(h.command_schedule(ok, name="plain"))
    gated = await service.create(
        h.command_schedule(
            ok,
            name="gated",
            interval_sec=120,
            threshold_config=_THRESHOLD,
            rate_limit=_RATE,
            max_runs=3,
            budget_usd=1.5,
            jitter_sec=7,
            overlap_policy="allow",
        )
    )
    clock.advance(121)
    rows = await store.due_rows(conn, ("interval",), clock(), None, 10)
    assert [type(row) for row in rows] == [DueSchedule, DueSchedule]
    assert rows[0] == DueSchedule(
        id=plain.id,
        trigger_type="interval",
        next_fire_at=plain.next_fire_at or 0.0,
        action_kind="command",
        overlap_policy=plain.overlap_policy,
    )
    assert rows[1] == DueSchedule(
        id=gated.id,
        trigger_type="interval",
        next_fire_at=gated.next_fire_at or 0.0,
        action_kind="command",
        overlap_policy="allow",
        threshold_config=_THRESHOLD,
        max_runs=3,
        budget_usd=1.5,
        jitter_sec=7,
        rate_limit=_RATE,
    )
    # Keyset: only the rows after the first one's (next_fire_at, id).
    after = await store.due_rows(conn, ("interval",), clock(), (rows[0].next_fire_at, plain.id), 10)
    assert [row.id for row in after] == [gated.id]
    assert await store.due_rows(conn, ("cron",), clock(), None, 10) == []

    full = await store.due_schedule(conn, gated.id, rows[1].next_fire_at)
    assert isinstance(full, Schedule)
    assert full == await service.get(gated.id)
    assert full.threshold_config == _THRESHOLD and full.rate_limit == _RATE
    # Due at another time than the scan read: someone else moved it.
    assert await store.due_schedule(conn, gated.id, rows[1].next_fire_at + 1) is None
    assert await store.read_schedule(conn, gated.id) == full
    await service.disable(gated.id)
    assert await store.due_schedule(conn, gated.id, rows[1].next_fire_at) is None
    assert await store.read_schedule(conn, "missing") is None


async def test_the_wake_up_read_is_id_and_due_time_pairs(
    service: ScheduleService, conn: Any, h: Any
) -> None:
    ok = h.script("ok.py", "pass\n")
    first = await service.create(h.command_schedule(ok, name="first", interval_sec=60))
    await service.create(h.command_schedule(ok, name="second", interval_sec=90))
    pairs = await store.next_fire_rows(conn, ("interval",), floor=None, limit=1)
    assert pairs == [(first.id, first.next_fire_at)]
    assert await store.next_fire_rows(conn, ("interval",), floor=1e12, limit=5) == []
