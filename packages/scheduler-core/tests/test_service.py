"""Schedule service: create/validate/update/enable/disable/delete and every §5.7 refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from studio_scheduler_core import (
    RunNotFound,
    ScheduleNameTaken,
    ScheduleNotFound,
    SchedulerSettings,
    ScheduleService,
    ScheduleValidationError,
    preview_fire_times,
)
from studio_state import fetch_all, fetch_value

T0 = 1_700_000_000.0

AGENT = {
    "name": "nightly",
    "trigger_type": "cron",
    "cron_expr": "0 3 * * *",
    "action_kind": "agent",
    "action_model": "gpt-x",
    "action_prompt": "summarise",
}


async def test_create_stores_row_with_next_fire_at_and_transition(h, service, conn) -> None:
    created = await service.create(AGENT)
    assert len(created.id) == 12
    assert created.enabled is True
    assert created.next_fire_at == pytest.approx(T0 - T0 % 86400 + 86400 + 3 * 3600) or (
        created.next_fire_at > T0
    )
    assert created.action_extra_args == () and created.on_success is None
    rows = await h.transitions_of(conn, created.id)
    assert [(r.entity_type, r.status, r.reason_code) for r in rows] == [
        ("schedule", "enabled", "schedule.created")
    ]


async def test_cron_next_fire_is_computed_in_settings_timezone(conn, clock) -> None:
    svc = ScheduleService(conn, settings=SchedulerSettings(timezone="Europe/Berlin"), clock=clock)
    created = await svc.create(AGENT)
    from datetime import datetime
    from zoneinfo import ZoneInfo

    local = datetime.fromtimestamp(created.next_fire_at, ZoneInfo("Europe/Berlin"))
    assert (local.hour, local.minute) == (3, 0)


async def test_interval_first_fire_is_one_interval_after_creation(service) -> None:
    created = await service.create(
        {**AGENT, "trigger_type": "interval", "cron_expr": None, "interval_sec": 90}
    )
    assert created.next_fire_at == T0 + 90


async def test_playbook_is_stored_as_play(service) -> None:
    created = await service.create(
        {**AGENT, "action_kind": "playbook", "action_playbook": "triage", "action_model": None}
    )
    assert created.action_kind == "play"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"surprise": 1}, "surprise"),
        ({"name": ""}, "name"),
        ({"name": " padded"}, "name"),
        ({"trigger_type": "hourly"}, "trigger_type"),
        ({"cron_expr": None}, "cron_expr"),
        ({"cron_expr": "61 * * * *"}, "cron_expr"),
        ({"cron_expr": "* * * *"}, "cron_expr"),
        ({"cron_expr": "0 0 30 2 *"}, "cron_expr"),
        ({"interval_sec": 5}, "interval_sec"),
        ({"trigger_type": "interval", "cron_expr": None, "interval_sec": 0}, "interval_sec"),
        ({"trigger_type": "interval", "cron_expr": None, "interval_sec": True}, "interval_sec"),
        ({"trigger_type": "interval", "cron_expr": None}, "interval_sec"),
        ({"trigger_type": "github_poll", "cron_expr": None}, "github_repo"),
        (
            {"trigger_type": "github_poll", "cron_expr": None, "github_repo": "no-slash"},
            "github_repo",
        ),
        (
            {
                "trigger_type": "github_poll",
                "cron_expr": None,
                "github_repo": "o/r",
                "github_filter": {"labels": ["x"]},
            },
            "github_filter.labels",
        ),
        (
            {
                "trigger_type": "github_poll",
                "cron_expr": None,
                "github_repo": "o/r",
                "github_filter": {"event": "pr_reopened"},
            },
            "github_filter.event",
        ),
        (
            {
                "trigger_type": "github_poll",
                "cron_expr": None,
                "github_repo": "o/r",
                "github_filter": {"draft": "yes"},
            },
            "github_filter.draft",
        ),
        (
            {
                "trigger_type": "github_poll",
                "cron_expr": None,
                "github_repo": "o/r",
                "poll_interval_sec": 0,
            },
            "poll_interval_sec",
        ),
        ({"action_kind": "engine"}, "action_kind"),
        ({"action_kind": "shell"}, "action_kind"),
        ({"action_model": "-rf"}, "action_model"),
        ({"action_model": "bad model"}, "action_model"),
        ({"action_prompt": "--"}, "action_prompt"),
        ({"action_prompt": "x" * 131073}, "action_prompt"),
        ({"action_extra_args": ["--danger"]}, "action_extra_args"),
        ({"action_extra_args": "a b"}, "action_extra_args"),
        ({"action_kind": "flow", "action_model": None}, "action_model"),
        ({"action_kind": "play", "action_playbook": None}, "action_playbook"),
        ({"action_kind": "flow_yaml", "action_flow_yaml": ""}, "action_flow_yaml"),
        ({"action_kind": "flow_yaml", "action_flow_yaml": "- a\n- b\n"}, "action_flow_yaml"),
        ({"action_kind": "flow_yaml", "action_flow_yaml": "a: [\n"}, "action_flow_yaml"),
        ({"action_kind": "command", "action_command": "rm"}, "action_command"),
        ({"action_kind": "command", "action_command": "/bin/sh"}, "action_command"),
        ({"action_kind": "command", "action_command": None}, "action_command"),
        ({"action_cwd": "relative/dir"}, "action_cwd"),
        ({"action_cwd": "/definitely/not/here"}, "action_cwd"),
        ({"missed_fire_policy": "catch_up"}, "missed_fire_policy"),
        ({"overlap_policy": "queue"}, "overlap_policy"),
        ({"max_runs": 0}, "max_runs"),
        ({"max_runs": 1.5}, "max_runs"),
        ({"budget_usd": 0}, "budget_usd"),
        ({"budget_usd": float("inf")}, "budget_usd"),
        ({"budget_usd": True}, "budget_usd"),
        ({"budget_tokens": -1}, "budget_tokens"),
        ({"enabled": "yes"}, "enabled"),
        ({"on_success": "notify"}, "on_success"),
        ({"on_success": {"id": "other"}}, "on_success.id"),
        ({"on_fail": {"cron_expr": "* * * * *"}}, "on_fail.cron_expr"),
        ({"on_success": {"model": "--x"}}, "on_success.action_model"),
        ({"on_success": {"kind": "bogus"}}, "on_success.kind"),
        ({"on_success": {"on_fail": {"action_cwd": "/"}}}, "on_success.on_fail.action_cwd"),
        ({"threshold_config": {"metric": "failed_runs"}}, "threshold_config.op"),
        (
            {"threshold_config": {"metric": "cpu", "op": "gt", "value": 1, "window_minutes": 5}},
            "threshold_config.metric",
        ),
        (
            {
                "threshold_config": {
                    "metric": "failed_runs",
                    "op": "eq",
                    "value": 1,
                    "window_minutes": 5,
                }
            },
            "threshold_config.op",
        ),
        (
            {
                "threshold_config": {
                    "metric": "failed_runs",
                    "op": "gt",
                    "value": 1,
                    "window_minutes": 5,
                    "cooldown": 3,
                }
            },
            "threshold_config.cooldown",
        ),
    ],
)
async def test_every_refusal_names_the_field_and_writes_nothing(
    service, conn, changes: dict[str, Any], field: str
) -> None:
    with pytest.raises(ScheduleValidationError) as info:
        await service.create({**AGENT, **changes})
    assert info.value.field == field, str(info.value)
    assert str(info.value).startswith(f"{field}: ")
    assert await fetch_value(conn, "SELECT COUNT(*) FROM schedules") == 0
    assert await fetch_value(conn, "SELECT COUNT(*) FROM status_transitions") == 0


async def test_follow_up_nesting_is_capped(service) -> None:
    overlay: dict[str, Any] = {"prompt": "leaf"}
    for _ in range(11):
        overlay = {"prompt": "x", "on_success": overlay}
    with pytest.raises(ScheduleValidationError) as info:
        await service.create({**AGENT, "on_success": overlay})
    assert info.value.field.startswith("on_success.on_success")


async def test_valid_follow_ups_and_kinds_are_accepted(h, service, tmp_path: Path) -> None:
    created = await service.create(
        {
            **AGENT,
            "action_cwd": str(tmp_path),
            "on_success": {"kind": "command", "command": h.PY, "command_args": ["ok.py"]},
            "on_fail": {"prompt": "explain {{parent_exit_code}}", "on_fail": None},
        }
    )
    assert created.on_success["command_args"] == ["ok.py"]
    assert created.action_cwd == str(tmp_path)
    flow = await service.create(
        {**AGENT, "name": "fy", "action_kind": "flow_yaml", "action_flow_yaml": "steps: []\n"}
    )
    assert flow.action_kind == "flow_yaml"


async def test_github_poll_is_created_with_default_poll_interval(service) -> None:
    created = await service.create(
        {
            **AGENT,
            "trigger_type": "github_poll",
            "cron_expr": None,
            "github_repo": "octo/repo",
            "github_filter": {"state": "open", "event": "pr_opened", "same_repo_only": True},
        }
    )
    assert created.poll_interval_sec == 300
    assert created.github_filter["event"] == "pr_opened"


async def test_threshold_only_on_cron_and_interval(service) -> None:
    threshold = {"metric": "failed_runs", "op": "gte", "value": 3, "window_minutes": 10}
    created = await service.create({**AGENT, "threshold_config": threshold})
    assert created.threshold_config == threshold
    with pytest.raises(ScheduleValidationError) as info:
        await service.create(
            {
                **AGENT,
                "name": "gh",
                "trigger_type": "github_poll",
                "cron_expr": None,
                "github_repo": "o/r",
                "threshold_config": threshold,
            }
        )
    assert info.value.field == "threshold_config"


async def test_project_path_is_snapshotted_into_action_cwd(conn, clock, tmp_path: Path) -> None:
    svc = ScheduleService(
        conn, settings=SchedulerSettings(project_paths={"site": str(tmp_path)}), clock=clock
    )
    created = await svc.create({**AGENT, "action_project": "site"})
    assert created.action_cwd == str(tmp_path)


async def test_name_taken(service) -> None:
    await service.create(AGENT)
    with pytest.raises(ScheduleNameTaken) as info:
        await service.create(AGENT)
    assert info.value.name == "nightly"


async def test_validate_writes_nothing(service, conn) -> None:
    row = await service.validate({**AGENT, "action_kind": "playbook", "action_playbook": "p"})
    assert row["action_kind"] == "play" and row["next_fire_at"] > T0
    assert await fetch_value(conn, "SELECT COUNT(*) FROM schedules") == 0


async def test_update_revalidates_and_rearms(h, service, clock, conn) -> None:
    created = await service.create(
        {**AGENT, "trigger_type": "interval", "cron_expr": None, "interval_sec": 600}
    )
    clock.advance(100)
    updated = await service.update(created.id, {"interval_sec": 60})
    assert updated.next_fire_at == T0 + 100 + 60
    with pytest.raises(ScheduleValidationError) as info:
        await service.update(created.id, {"action_model": "-x"})
    assert info.value.field == "action_model"
    with pytest.raises(ScheduleValidationError) as info:
        await service.update(created.id, {"name": None})
    assert info.value.field == "name"
    switched = await service.update(
        created.id, {"trigger_type": "cron", "cron_expr": "*/5 * * * *"}
    )
    assert switched.interval_sec is None and switched.trigger_type == "cron"
    assert (await h.schedule_row(conn, created.id)).cron_expr == "*/5 * * * *"


async def test_update_name_collision(service) -> None:
    await service.create(AGENT)
    other = await service.create({**AGENT, "name": "other"})
    with pytest.raises(ScheduleNameTaken):
        await service.update(other.id, {"name": "nightly"})


async def test_enable_disable_transitions_and_on_change(h, conn, settings, clock) -> None:
    calls: list[int] = []
    svc = ScheduleService(conn, settings=settings, clock=clock, on_change=lambda: calls.append(1))
    created = await svc.create(AGENT)
    assert calls == [1]
    disabled = await svc.disable(created.id, reason="  maintenance ")
    assert disabled.enabled is False and disabled.disabled_reason == "maintenance"
    again = await svc.disable(created.id)
    assert again.enabled is False
    clock.advance(86400 * 3)
    enabled = await svc.enable(created.id)
    assert enabled.enabled is True and enabled.next_fire_at > clock()
    assert enabled.disabled_reason is None
    rows = await h.transitions_of(conn, created.id)
    assert [r.reason_code for r in rows] == [
        "schedule.created",
        "schedule.disabled.manual",
        "schedule.enabled.manual",
    ]
    assert calls == [1, 1]
    with pytest.raises(ScheduleValidationError) as info:
        await svc.disable(created.id, reason=" ")
    assert info.value.field == "reason"


async def test_enable_refused_when_max_runs_reached(service, conn) -> None:
    created = await service.create({**AGENT, "max_runs": 1, "enabled": False})
    await conn.execute(
        "INSERT INTO schedule_runs (id, schedule_id, trigger_context, action_kind, action_args, "
        "status, fired_at, created_at) VALUES ('r1', ?, '{}', 'agent', '[]', 'completed', 1, 1)",
        (created.id,),
    )
    with pytest.raises(ScheduleValidationError) as info:
        await service.enable(created.id)
    assert info.value.field == "max_runs"


async def test_delete_and_not_found(h, service, conn) -> None:
    created = await service.create(AGENT)
    await service.delete(created.id)
    with pytest.raises(ScheduleNotFound):
        await service.get(created.id)
    with pytest.raises(ScheduleNotFound):
        await service.delete(created.id)
    rows = await h.transitions_of(conn, created.id)
    assert rows[-1].status == "deleted"
    with pytest.raises(RunNotFound):
        await service.get_run("000000000000")


async def test_list_resolve_and_paging(service) -> None:
    for i in range(5):
        await service.create({**AGENT, "name": f"s{i}", "enabled": i % 2 == 0})
    rows, total = await service.list(limit=2, offset=1)
    assert total == 5 and [r.name for r in rows] == ["s1", "s2"]
    rows, total = await service.list(enabled=False)
    assert total == 2 and all(not r.enabled for r in rows)
    found = await service.resolve("s3")
    assert (await service.resolve(found.id)).name == "s3"
    with pytest.raises(ScheduleNotFound):
        await service.resolve("missing")


async def test_preview(service, conn) -> None:
    created = await service.create(
        {**AGENT, "trigger_type": "interval", "cron_expr": None, "interval_sec": 60}
    )
    times = await service.preview(created.id, n=3)
    assert [t["at"] for t in times] == [T0 + 60, T0 + 120, T0 + 180]
    assert times[0]["utc"].endswith("Z")
    berlin = preview_fire_times(
        trigger_type="cron", cron_expr="0 12 * * *", timezone="Europe/Berlin", start=T0, n=2
    )
    assert (
        berlin[0]["local"].startswith(berlin[0]["local"][:10])
        and "T12:00:00+01:00" in (berlin[0]["local"])
    )
    with pytest.raises(ScheduleValidationError) as info:
        preview_fire_times(trigger_type="cron", cron_expr="nope", start=T0)
    assert info.value.field == "cron_expr"


@pytest.mark.sqlite_only("reads the SQLite file or its schema itself")
async def test_schema_has_the_hot_path_indexes(conn) -> None:
    names = {
        r["name"]
        for r in await fetch_all(conn, "SELECT name FROM sqlite_master WHERE type = 'index'")
    }
    assert {
        "idx_schedules_due",
        "idx_schedule_runs_schedule_page",
        "idx_schedules_created",
        "idx_schedule_runs_running",
        "idx_schedule_runs_chain_parent",
        "idx_sessions_invocation",
        "idx_status_transitions_entity",
    } <= names
