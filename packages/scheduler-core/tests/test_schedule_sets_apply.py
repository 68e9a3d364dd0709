"""Plan and apply of ScheduleSet documents on a real database (SQLite, and PostgreSQL under the
``postgres`` selection): create, update, unchanged, disable, delete, errors, adoption, drift,
the zero-writes cases and the actor of every transition.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from studio_scheduler_core import (
    SchedulerSettings,
    ScheduleService,
    ScheduleSetChanged,
    ScheduleSetPlan,
    ScheduleSetRefused,
    apply_schedule_plan,
    validate_schedule_sets,
)
from studio_scheduler_core.testing import PY, plan_set_files, set_document, set_member
from studio_state import ManualClock, fetch_all, fetch_value


async def plan_of(
    conn: Any, settings: SchedulerSettings, clock: ManualClock, path: Path, **flags: bool
) -> ScheduleSetPlan:
    return await plan_set_files(conn, [path], settings=settings, now=clock(), **flags)


async def apply(conn: Any, settings: SchedulerSettings, clock: ManualClock, plan: Any) -> Any:
    return await apply_schedule_plan(conn, plan, timezone=settings.timezone, clock=clock)


async def apply_members(
    conn: Any, settings: SchedulerSettings, clock: ManualClock, path: Path, members: dict[str, str]
) -> Any:
    """Write team-a's document of ``members`` to ``path``, then plan and apply it."""
    path.write_text(set_document("team-a", members))
    return await apply(conn, settings, clock, await plan_of(conn, settings, clock, path))


def actions(plan: ScheduleSetPlan) -> dict[str, str]:
    return {c.name: c.action for c in plan.changes}


async def counts(conn: Any) -> tuple[int, int]:
    schedules = await fetch_value(conn, "SELECT count(*) FROM schedules")
    transitions = await fetch_value(conn, "SELECT count(*) FROM status_transitions")
    return int(schedules), int(transitions)


async def test_create_then_the_same_file_again_writes_nothing(
    conn: Any, settings: SchedulerSettings, clock: ManualClock, tmp_path: Path
) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(set_document("team-a", {"one": set_member(), "two": set_member("1h")}))
    plan = await plan_of(conn, settings, clock, path)
    assert plan.to_json() == {
        "owner": "team-a",
        "owners": ["team-a"],
        "changes": [
            {"member": "one", "name": "team-a/one", "action": "create", "fields": {}, "detail": ""},
            {"member": "two", "name": "team-a/two", "action": "create", "fields": {}, "detail": ""},
        ],
    }
    assert plan.summary() == "Plan: 2 to create, 0 to update, 0 to disable, 0 to delete, 0 errors."
    applied = await apply(conn, settings, clock, plan)
    assert (applied.created, applied.writes) == (2, 2)
    rows = await fetch_all(
        conn, "SELECT name, managed_by, owner_key, set_member, set_digest FROM schedules"
    )
    digests = {m.name: m.digest for m in validate_schedule_sets([path], settings=settings).members}
    assert sorted((r["name"], r["managed_by"], r["owner_key"], r["set_member"]) for r in rows) == [
        ("team-a/one", "set", "team-a", "one"),
        ("team-a/two", "set", "team-a", "two"),
    ]
    assert {r["name"]: r["set_digest"] for r in rows} == digests
    actors = await fetch_all(conn, "SELECT DISTINCT actor FROM status_transitions")
    assert [r["actor"] for r in actors] == ["set:team-a"]

    before = await counts(conn)
    stamps = await fetch_all(conn, "SELECT id, updated_at FROM schedules ORDER BY id")
    again = await plan_of(conn, settings, clock, path)
    assert set(actions(again).values()) == {"unchanged"} and not again.has_changes
    assert (await apply(conn, settings, clock, again)).writes == 0
    assert await counts(conn) == before
    assert await fetch_all(conn, "SELECT id, updated_at FROM schedules ORDER BY id") == stamps


async def test_update_lists_fields_and_keeps_id_and_history(
    conn: Any,
    settings: SchedulerSettings,
    clock: ManualClock,
    service: ScheduleService,
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.yaml"
    await apply_members(conn, settings, clock, path, {"one": set_member("5m")})
    first = await service.resolve("team-a/one")
    path.write_text(
        set_document("team-a", {"one": set_member("10m", extra=", description: slower")})
    )
    plan = await plan_of(conn, settings, clock, path)
    (change,) = plan.changes
    assert change.action == "update"
    assert change.fields == {"description": (None, "slower"), "interval_sec": (300, 600)}
    assert str(change).startswith("UPDATE team-a/one: ")
    await apply(conn, settings, clock, plan)
    after = await service.resolve("team-a/one")
    assert after.id == first.id and after.interval_sec == 600 and not after.drifted
    last = await fetch_all(
        conn,
        "SELECT reason_code, actor FROM status_transitions WHERE entity_id = ? ORDER BY rowid",
        (first.id,),
    )
    assert [(r["reason_code"], r["actor"]) for r in last] == [
        ("schedule.created", "set:team-a"),
        ("schedule.updated.operator", "set:team-a"),
    ]


async def test_absent_member_is_disabled_and_pruned_through_the_delete_rules(
    conn: Any,
    settings: SchedulerSettings,
    clock: ManualClock,
    service: ScheduleService,
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.yaml"
    await apply_members(conn, settings, clock, path, {"one": set_member(), "two": set_member()})
    two = await service.resolve("team-a/two")
    path.write_text(set_document("team-a", {"one": set_member()}))

    plan = await plan_of(conn, settings, clock, path)
    assert actions(plan) == {"team-a/one": "unchanged", "team-a/two": "disable"}
    await apply(conn, settings, clock, plan)
    assert not (await service.get(two.id)).enabled
    again = await plan_of(conn, settings, clock, path)
    assert not again.has_changes

    await conn.execute(
        "INSERT INTO schedule_runs (id, schedule_id, trigger_context, action_kind, action_args, "
        "status, fired_at, created_at) VALUES ('r1', ?, '{}', 'command', '{}', 'running', ?, ?)",
        (two.id, clock(), clock()),
    )
    await conn.commit()
    refused = await plan_of(conn, settings, clock, path, prune=True)
    assert actions(refused)["team-a/two"] == "error"
    assert "--force" in refused.errors[0].detail and "r1" in refused.errors[0].detail
    with pytest.raises(ScheduleSetRefused):
        await apply(conn, settings, clock, refused)
    assert (await service.get(two.id)).id == two.id

    forced = await plan_of(conn, settings, clock, path, prune=True, force=True)
    (delete,) = forced.errors or [c for c in forced.changes if c.action == "delete"]
    assert delete.running == ("r1",)
    assert "Plan: 0 to create, 0 to update, 0 to disable, 1 to delete" in forced.summary()
    applied = await apply(conn, settings, clock, forced)
    assert (applied.deleted, applied.cancelled) == (1, ("r1",))
    assert await fetch_value(conn, "SELECT count(*) FROM schedules WHERE id = ?", (two.id,)) == 0
    cancel = await fetch_all(
        conn,
        "SELECT previous_status, status, reason_code, actor FROM status_transitions "
        "WHERE entity_type = 'schedule_run' AND entity_id = 'r1'",
    )
    assert [tuple(r.values()) for r in cancel] == [
        ("running", "cancelled", "run.cancelled.operator", "set:team-a")
    ]


async def _running(conn: Any, schedule_id: str, run_id: str, now: float) -> None:
    await conn.execute(
        "INSERT INTO schedule_runs (id, schedule_id, trigger_context, action_kind, action_args, "
        "status, fired_at, created_at) VALUES (?, ?, '{}', 'command', '{}', 'running', ?, ?)",
        (run_id, schedule_id, now, now),
    )
    await conn.commit()


async def _run_state(conn: Any, run_id: str) -> tuple[str | None, int]:
    status = await fetch_value(conn, "SELECT status FROM schedule_runs WHERE id = ?", (run_id,))
    moves = await fetch_value(
        conn, "SELECT count(*) FROM status_transitions WHERE entity_id = ?", (run_id,)
    )
    return status, int(moves)


async def test_a_failed_forced_prune_cancels_nothing(
    conn: Any,
    settings: SchedulerSettings,
    clock: ManualClock,
    service: ScheduleService,
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.yaml"
    await apply_members(conn, settings, clock, path, {"one": set_member(), "two": set_member()})
    one, two = await service.resolve("team-a/one"), await service.resolve("team-a/two")
    await _running(conn, two.id, "r1", clock())

    # a plan error elsewhere (a name an unowned schedule holds): refused, the run still runs
    await service.create({**_unowned("team-a/three"), "action_command": PY})
    path.write_text(set_document("team-a", {"one": set_member(), "three": set_member()}))
    refused = await plan_of(conn, settings, clock, path, prune=True, force=True)
    assert actions(refused) == {
        "team-a/one": "unchanged",
        "team-a/three": "error",
        "team-a/two": "delete",
    }
    with pytest.raises(ScheduleSetRefused):
        await apply(conn, settings, clock, refused)
    assert await _run_state(conn, "r1") == ("running", 0)

    # a row changed between the plan and the write: the apply fails, the run still runs
    path.write_text(set_document("team-a", {"one": set_member("7m")}))
    forced = await plan_of(conn, settings, clock, path, prune=True, force=True)
    await service.update(one.id, {"description": "edited by hand"})
    before = await counts(conn)
    with pytest.raises(ScheduleSetChanged):
        await apply(conn, settings, clock, forced)
    assert await _run_state(conn, "r1") == ("running", 0)
    assert await counts(conn) == before and (await service.get(two.id)).id == two.id

    # a prune planned without --force, and a run started since: changed since plan
    await _running(conn, one.id, "r2", clock())
    await conn.execute("UPDATE schedule_runs SET status = 'completed' WHERE id = 'r1'")
    await conn.commit()
    path.write_text(set_document("team-a", {"three": set_member()}))
    unforced = await plan_of(conn, settings, clock, path, prune=True)
    assert actions(unforced)["team-a/one"] == "error"  # r2 runs: refused without --force
    await conn.execute("UPDATE schedule_runs SET status = 'completed' WHERE id = 'r2'")
    await conn.commit()
    path.write_text(set_document("team-a", {}))
    quiet = await plan_of(conn, settings, clock, path, prune=True)
    assert set(actions(quiet).values()) == {"delete"}
    await _running(conn, two.id, "r3", clock())
    with pytest.raises(ScheduleSetChanged, match="team-a/two"):
        await apply(conn, settings, clock, quiet)
    assert await _run_state(conn, "r3") == ("running", 0)
    assert await fetch_value(conn, "SELECT count(*) FROM schedules WHERE owner_key = 'team-a'") == 2


def _unowned(name: str) -> dict[str, Any]:
    return {"name": name, "trigger_type": "interval", "interval_sec": 300, "action_kind": "command"}


async def test_names_held_by_others_are_errors_and_nothing_is_written(
    conn: Any,
    settings: SchedulerSettings,
    clock: ManualClock,
    service: ScheduleService,
    tmp_path: Path,
) -> None:
    manual = await service.create(
        {
            "name": "team-a/taken",
            "trigger_type": "interval",
            "interval_sec": 300,
            "action_kind": "command",
            "action_command": PY,
            "action_command_args": ["-c", "pass"],
        }
    )
    assert manual.managed_by == "api" and manual.owner_key is None
    other = tmp_path / "b.yaml"
    other.write_text(set_document("team-b", {"theirs": set_member()}))
    await apply(conn, settings, clock, await plan_of(conn, settings, clock, other))
    theirs = await service.resolve("team-b/theirs")
    await service.update(theirs.id, {"name": "team-a/held"})

    path = tmp_path / "a.yaml"
    path.write_text(
        set_document(
            "team-a", {"fresh": set_member(), "taken": set_member("6m"), "held": set_member()}
        )
    )
    before = await counts(conn)
    plan = await plan_of(conn, settings, clock, path, adopt=True)
    assert actions(plan) == {
        "team-a/fresh": "create",
        "team-a/taken": "error",
        "team-a/held": "error",
    }
    details = {c.name: c.detail for c in plan.errors}
    assert "differs in interval_sec" in details["team-a/taken"]
    assert "owner 'team-b'" in details["team-a/held"]
    with pytest.raises(ScheduleSetRefused) as refused:
        await apply(conn, settings, clock, plan)
    assert len(refused.value.errors) == 2
    assert await counts(conn) == before


async def test_adopt_takes_a_matching_unowned_schedule(
    conn: Any,
    settings: SchedulerSettings,
    clock: ManualClock,
    service: ScheduleService,
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(set_document("team-a", {"job": set_member()}))
    report = validate_schedule_sets([path], settings=settings, now=clock())
    manual = await ScheduleService(conn, settings=settings, clock=clock, managed_by="cli").create(
        dict(report.members[0].fields)
    )
    assert manual.managed_by == "cli"
    plain = await plan_of(conn, settings, clock, path)
    assert actions(plain) == {"team-a/job": "error"}
    assert "--adopt" in plain.errors[0].detail
    plan = await plan_of(conn, settings, clock, path, adopt=True)
    (change,) = plan.changes
    assert change.action == "update" and change.fields == {
        "managed_by": ("cli", "set"),
        "owner_key": (None, "team-a"),
    }
    await apply(conn, settings, clock, plan)
    adopted = await service.get(manual.id)
    assert (adopted.managed_by, adopted.owner_key, adopted.set_member) == ("set", "team-a", "job")
    assert not (await plan_of(conn, settings, clock, path)).has_changes


async def test_a_row_changed_since_the_plan_fails_the_apply_with_zero_writes(
    conn: Any,
    settings: SchedulerSettings,
    clock: ManualClock,
    service: ScheduleService,
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.yaml"
    await apply_members(conn, settings, clock, path, {"one": set_member()})
    path.write_text(set_document("team-a", {"one": set_member("7m"), "two": set_member()}))
    plan = await plan_of(conn, settings, clock, path)
    one = await service.resolve("team-a/one")
    await service.update(one.id, {"description": "edited by hand"})
    before = await counts(conn)
    with pytest.raises(ScheduleSetChanged, match="changed since plan; re-run"):
        await apply(conn, settings, clock, plan)
    assert await counts(conn) == before
    assert (await service.get(one.id)).interval_sec == 300

    create_only = tmp_path / "c.yaml"
    create_only.write_text(set_document("team-c", {"new": set_member()}))
    racing = await plan_of(conn, settings, clock, create_only)
    await apply(conn, settings, clock, await plan_of(conn, settings, clock, create_only))
    with pytest.raises(ScheduleSetChanged, match="team-c/new"):
        await apply(conn, settings, clock, racing)


async def test_an_edit_outside_the_set_is_drift_and_the_next_apply_restores_it(
    conn: Any,
    settings: SchedulerSettings,
    clock: ManualClock,
    service: ScheduleService,
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.yaml"
    await apply_members(conn, settings, clock, path, {"one": set_member()})
    one = await service.resolve("team-a/one")
    assert not one.drifted
    edited = await service.update(one.id, {"interval_sec": 900})
    assert edited.drifted and edited.managed_by == "set"
    plan = await plan_of(conn, settings, clock, path)
    (change,) = plan.changes
    assert change.action == "update" and change.fields == {"interval_sec": (900, 300)}
    assert change.detail.startswith("drifted")
    await apply(conn, settings, clock, plan)
    restored = await service.get(one.id)
    assert restored.interval_sec == 300 and not restored.drifted


async def test_a_schedule_studio_disabled_is_not_re_armed(
    conn: Any,
    settings: SchedulerSettings,
    clock: ManualClock,
    service: ScheduleService,
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.yaml"
    await apply_members(conn, settings, clock, path, {"one": set_member()})
    one = await service.resolve("team-a/one")
    await conn.execute(
        "UPDATE schedules SET enabled = 0, disabled_reason = 'schedule.disabled.max_runs' "
        "WHERE id = ?",
        (one.id,),
    )
    await conn.commit()
    assert not (await service.get(one.id)).drifted
    assert not (await plan_of(conn, settings, clock, path)).has_changes


async def test_a_fired_at_member_is_enabled_again_only_by_a_new_instant(
    conn: Any,
    settings: SchedulerSettings,
    clock: ManualClock,
    service: ScheduleService,
    tmp_path: Path,
) -> None:
    def at_job(instant: float) -> str:
        stamp = datetime.fromtimestamp(instant, tz=UTC).isoformat()
        return f"{{trigger: {{at: '{stamp}'}}, command: {{argv: [{PY}, -c, pass]}}}}"

    path = tmp_path / "a.yaml"
    first = clock() + 60
    await apply_members(conn, settings, clock, path, {"once": at_job(first)})
    once = await service.resolve("team-a/once")
    clock.advance(120)  # it fired: the fire's transaction disabled it
    await conn.execute(
        "UPDATE schedules SET enabled = 0, disabled_reason = 'schedule.disabled.once', "
        "next_fire_at = NULL WHERE id = ?",
        (once.id,),
    )
    await conn.commit()
    assert not (await plan_of(conn, settings, clock, path)).has_changes  # not re-armed

    path.write_text(set_document("team-a", {"once": at_job(clock() + 600)}))
    plan = await plan_of(conn, settings, clock, path)
    assert actions(plan) == {"team-a/once": "update"}
    await apply(conn, settings, clock, plan)
    rearmed = await service.get(once.id)
    assert (rearmed.enabled, rearmed.next_fire_at) == (True, clock() + 600)


async def test_a_one_shot_whose_instant_passed_stays_in_its_file(
    conn: Any, settings: SchedulerSettings, clock: ManualClock, tmp_path: Path
) -> None:
    """An ``at`` member applied while its instant was ahead re-applies unchanged once the
    instant has passed; a new member, or a changed instant, in the past is a plan error."""
    soon = datetime.fromtimestamp(clock() + 3600, UTC).isoformat()
    later = datetime.fromtimestamp(clock() + 7200, UTC).isoformat()
    once = f"{{trigger: {{at: '{soon}'}}, command: {{argv: [{PY!r}, -c, pass]}}}}"
    path = tmp_path / "once.yaml"
    path.write_text(set_document("team-a", {"once": once}))
    assert (
        await apply(conn, settings, clock, await plan_of(conn, settings, clock, path))
    ).created == 1

    clock.advance(3 * 3600)  # both instants are past now
    again = await plan_of(conn, settings, clock, path)
    assert actions(again) == {"team-a/once": "unchanged"} and not again.errors
    assert (await apply(conn, settings, clock, again)).writes == 0
    # another field of it may still change: its instant is not new
    described = once[:-1] + ", description: kept}"
    path.write_text(set_document("team-a", {"once": described}))
    edit = await plan_of(conn, settings, clock, path)
    assert actions(edit) == {"team-a/once": "update"} and not edit.errors
    assert (await apply(conn, settings, clock, edit)).writes == 1

    moved = described.replace(soon, later)
    path.write_text(set_document("team-a", {"once": described, "new": moved}))
    plan = await plan_of(conn, settings, clock, path)
    assert actions(plan) == {"team-a/once": "unchanged", "team-a/new": "error"}
    (error,) = plan.errors
    assert "schedules.new.trigger.at" in error.detail and "in the past" in error.detail

    path.write_text(set_document("team-a", {"once": moved}))
    changed = await plan_of(conn, settings, clock, path)
    assert actions(changed) == {"team-a/once": "error"}
    with pytest.raises(ScheduleSetRefused):
        await apply(conn, settings, clock, changed)
