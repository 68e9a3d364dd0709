"""The records are the schema: their fields are the tables' columns, their metadata the field
sets the service, the row codec and the follow-ups use."""

from __future__ import annotations

from typing import Any

import pytest

from studio_scheduler_core import (
    ACTION_KINDS,
    OVERLAY_KEYS,
    Action,
    Run,
    Schedule,
    ScheduleService,
    ScheduleValidationError,
    record_specs,
)
from studio_scheduler_core._records.codec import SCHEDULE_JSON_COLUMNS
from studio_scheduler_core._records.column import columns, create_fields, update_fields
from studio_scheduler_core._records.schedule_input import ScheduleInput
from studio_scheduler_core._schedules.validation import CREATE_FIELDS, NOT_NULL_FIELDS
from studio_state import fetch_all


async def _table_columns(conn: Any, table: str) -> list[str]:
    return [str(r["name"]) for r in await fetch_all(conn, f"PRAGMA table_info({table})")]


@pytest.mark.sqlite_only("reads the SQLite file or its schema itself")
async def test_record_fields_are_the_table_columns_in_order(conn: Any) -> None:
    schedule_columns = await _table_columns(conn, "schedules")
    # migrations append columns; the record lists every one of them
    assert sorted(columns(Schedule)) == sorted(schedule_columns)
    assert list(columns(Run)) == await _table_columns(conn, "schedule_runs")
    action = columns(Action)
    assert set(action) <= set(schedule_columns)
    assert all(name.startswith("action_") for name in action)


def test_field_sets_come_from_the_metadata() -> None:
    assert create_fields(Schedule) == CREATE_FIELDS
    assert "enabled" in CREATE_FIELDS and "enabled" not in update_fields(Schedule)
    assert {"id", "created_at", "next_fire_at", "github_etag"}.isdisjoint(CREATE_FIELDS)
    assert {
        "name",
        "trigger_type",
        "action_kind",
        "missed_fire_policy",
        "overlap_policy",
        "enabled",
    } == NOT_NULL_FIELDS
    assert set(SCHEDULE_JSON_COLUMNS) == {
        "github_filter",
        "action_extra_args",
        "action_command_args",
        "on_success",
        "on_fail",
        "threshold_config",
        "notify",
        "retry",
        "rate_limit",
    }
    assert OVERLAY_KEYS["playbook"] == "action_playbook"
    assert OVERLAY_KEYS["kind"] == OVERLAY_KEYS["action_kind"] == "action_kind"
    assert set(OVERLAY_KEYS.values()) - {"on_success", "on_fail", "retry"} <= set(columns(Action))
    assert OVERLAY_KEYS["retry"] == "retry"
    public = [s.name for s in record_specs(Schedule) if s.meta.public]
    assert "github_etag" not in public and len(public) == len(columns(Schedule)) - 1
    assert "playbook" not in ACTION_KINDS


def test_the_input_mapping_names_every_create_field_in_column_order() -> None:
    # a field added to the record without its input key here would go untyped in the test kit
    assert tuple(ScheduleInput.__annotations__) == CREATE_FIELDS
    assert ScheduleInput.__required_keys__ == frozenset()


async def test_a_stored_schedule_round_trips_through_its_record(
    service: ScheduleService, h: Any
) -> None:
    ok = h.script("ok.py", "pass\n")
    record = await service.create(h.command_schedule(ok, name="typed"))
    assert isinstance(record, Schedule)
    assert record.name == "typed" and record.action_kind == "command"
    assert isinstance(record.action_command_args, tuple)
    assert Schedule.from_row(record.to_row()) == record
    with pytest.raises(AttributeError):
        record.name = "changed"  # type: ignore[misc]


async def test_an_unknown_kind_is_refused_naming_the_alias(service: ScheduleService) -> None:
    with pytest.raises(ScheduleValidationError) as refused:
        await service.validate(
            {"name": "p", "trigger_type": "interval", "interval_sec": 60, "action_kind": "nope"}
        )
    assert refused.value.field == "action_kind"
    assert "(or playbook)" in str(refused.value)
