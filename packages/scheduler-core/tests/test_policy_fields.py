"""Schedule policy columns: migration 8 keeps every row of a populated v7 database (and its
run counts), and the policy fields are validated (naming the field) before anything is
written."""

from __future__ import annotations

from typing import Any

import pytest

import studio_outbox
import studio_state
from studio_scheduler_core import ScheduleValidationError, ensure_schema
from studio_scheduler_core._schema import MIGRATIONS, PACKAGE
from studio_state import connect, fetch_all, fetch_value


async def _v7_database(db_path: Any) -> None:
    async with connect(db_path) as c:
        await studio_state.ensure_schema(c)
        await studio_state.migrate(c, PACKAGE, MIGRATIONS[:7])
        await studio_outbox.ensure_schema(c)
        for i in range(3):
            await c.execute(
                "INSERT INTO schedules (id, name, trigger_type, interval_sec, action_kind, "
                "action_command, action_command_args, overlap_policy, notify, timezone, "
                "timeout_sec, github_etag, created_at, updated_at) "
                "VALUES (?, ?, 'interval', 60, 'command', 'true', '[\"x\"]', 'allow', "
                "'{\"deliver_to\":\"https://x\"}', 'Europe/Berlin', 30, 'etag', 1.0, 2.0)",
                (f"s{i}", f"name{i}"),
            )
            for j, status in enumerate(("completed", "failed")):
                await c.execute(
                    "INSERT INTO schedule_runs (id, schedule_id, trigger_context, action_kind, "
                    "action_args, status, fired_at, created_at) "
                    "VALUES (?, ?, '{}', 'command', '[]', ?, 1.0, 1.0)",
                    (f"r{i}{j}", f"s{i}", status),
                )
        await c.commit()


async def _counts(c: Any) -> list[dict[str, Any]]:
    return await fetch_all(
        c, "SELECT schedule_id, status, n FROM schedule_run_counts ORDER BY schedule_id, status"
    )


async def _exact_counts(c: Any) -> list[dict[str, Any]]:
    return await fetch_all(
        c,
        "SELECT schedule_id, status, count(*) AS n FROM schedule_runs "
        "WHERE schedule_id IS NOT NULL GROUP BY schedule_id, status ORDER BY schedule_id, status",
    )


async def _triggers(c: Any) -> set[str]:
    rows = await fetch_all(c, "SELECT name FROM sqlite_master WHERE type = 'trigger'")
    return {str(r["name"]) for r in rows}


async def test_migration_8_keeps_every_row_and_the_run_counts_of_a_v7_database(db_path) -> None:
    await _v7_database(db_path)
    async with connect(db_path) as c:
        before = await fetch_all(c, "SELECT * FROM schedules ORDER BY id")
        counts = await _counts(c)
        assert len(counts) == 6 and counts == await _exact_counts(c)
        triggers = await _triggers(c)
        assert {"schedule_run_count_insert", "schedule_run_count_update"} <= triggers
        assert await fetch_value(c, "PRAGMA foreign_keys") == 1
        await ensure_schema(c)
        assert await studio_state.applied_version(c, PACKAGE) >= 8
        assert triggers <= await _triggers(c)  # every v7 trigger stays (later ones add theirs)
        assert await _counts(c) == counts
        after = await fetch_all(c, "SELECT * FROM schedules ORDER BY id")
        assert len(after) == 3
        for old, new in zip(before, after, strict=True):
            assert {k: new[k] for k in old} == old
            assert new["retry"] is None and new["jitter_sec"] is None
        assert await fetch_value(c, "SELECT COUNT(*) FROM schedule_runs") == 6
        runs = await fetch_all(c, "SELECT retry_of, attempt FROM schedule_runs")
        assert all(r["retry_of"] is None and r["attempt"] is None for r in runs)
        indexes = {
            r["name"]
            for r in await fetch_all(
                c, "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'schedules'"
            )
        }
        expected = {"idx_schedules_due", "idx_schedules_github_poll", "idx_schedules_created"}
        assert expected <= indexes
        assert await fetch_value(c, "PRAGMA foreign_keys") == 1
        assert await fetch_all(c, "PRAGMA foreign_key_check") == []
        # the widened CHECK, and the cascade from schedules to runs still in force
        await c.execute("UPDATE schedules SET overlap_policy = 'buffer_all' WHERE id = 's0'")
        await c.execute("DELETE FROM schedules WHERE id = 's1'")
        await c.execute("UPDATE schedule_runs SET status = 'failed' WHERE id = 'r00'")
        await c.commit()
        assert await fetch_value(c, "SELECT COUNT(*) FROM schedule_runs") == 4
        # the count triggers still run against the rebuilt table's runs
        assert await _counts(c) == await _exact_counts(c)
        assert {(r["schedule_id"], r["status"], r["n"]) for r in await _counts(c)} == {
            ("s0", "failed", 2),
            ("s2", "completed", 1),
            ("s2", "failed", 1),
        }
        await ensure_schema(c)  # idempotent
        assert await fetch_value(c, "SELECT COUNT(*) FROM schedules") == 2


def _interval(**fields: Any) -> dict[str, Any]:
    return {
        "name": "p",
        "trigger_type": "interval",
        "interval_sec": 60,
        "action_kind": "command",
        "action_command": "true",
        **fields,
    }


@pytest.mark.parametrize(
    ("fields", "field", "needle"),
    [
        ({"overlap_policy": "buffer"}, "overlap_policy", "buffer_one, buffer_all, cancel_other"),
        ({"jitter_sec": 60}, "jitter_sec", "never fire on time"),
        ({"jitter_sec": -1}, "jitter_sec", "between 0"),
        ({"retry": {"max_attempts": 0}}, "retry.max_attempts", "between 1 and 10"),
        ({"retry": {"max_attempts": 11}}, "retry.max_attempts", "between 1 and 10"),
        ({"retry": {}}, "retry.max_attempts", "required"),
        ({"retry": {"max_attempts": 2, "backoff_sec": 0}}, "retry.backoff_sec", "between"),
        ({"retry": {"max_attempts": 2, "backoff_factor": 11}}, "retry.backoff_factor", "10"),
        ({"retry": {"max_attempts": 2, "max_backoff_sec": 86401}}, "retry.max_backoff_sec", ""),
        ({"retry": {"max_attempts": 2, "tries": 1}}, "retry.tries", "unknown key"),
        ({"retry": [3]}, "retry", "object"),
        ({"catchup_window_sec": 0}, "catchup_window_sec", "between"),
        ({"pause_on_failure": "yes"}, "pause_on_failure", "boolean"),
    ],
)
async def test_bad_policy_fields_are_refused_naming_the_field(
    service, conn, fields, field, needle
) -> None:
    with pytest.raises(ScheduleValidationError) as info:
        await service.create(_interval(**fields))
    assert info.value.field == field
    assert needle in info.value.message
    assert await fetch_value(conn, "SELECT COUNT(*) FROM schedules") == 0


async def test_jitter_on_a_github_schedule_is_refused(service) -> None:
    with pytest.raises(ScheduleValidationError) as info:
        await service.create(
            {
                "name": "g",
                "trigger_type": "github_poll",
                "github_repo": "o/r",
                "action_kind": "command",
                "action_command": "true",
                "jitter_sec": 5,
            }
        )
    assert info.value.field == "jitter_sec"


async def test_policy_fields_are_stored_with_defaults_and_shown(service) -> None:
    created = await service.create(
        _interval(
            overlap_policy="cancel_other",
            catchup_window_sec=600,
            jitter_sec=59,
            pause_on_failure=True,
            retry={"max_attempts": 3},
        )
    )
    assert created.overlap_policy == "cancel_other"
    assert created.catchup_window_sec == 600
    assert created.jitter_sec == 59
    assert created.pause_on_failure is True
    assert created.retry == {
        "max_attempts": 3,
        "backoff_sec": 10,
        "backoff_factor": 2.0,
        "max_backoff_sec": 3600,
    }
    updated = await service.update(created.id, {"retry": None, "pause_on_failure": None})
    assert updated.retry is None and updated.pause_on_failure is None
    plain = await service.create(_interval(name="plain"))
    fields = ("catchup_window_sec", "jitter_sec", "pause_on_failure", "retry")
    assert [getattr(plain, k) for k in fields] == [None, None, None, None]


async def test_preview_shows_each_occurrences_jitter_deterministically(service) -> None:
    created = await service.create(_interval(jitter_sec=30))
    first = await service.preview(created.id, 5)
    again = await service.preview(created.id, 5)
    assert first == again
    delays = [entry["jitter_sec"] for entry in first]
    assert all(0 <= d < 30 for d in delays)
    assert len(set(delays)) > 1
    plain = await service.create(_interval(name="plain"))
    assert all(e["jitter_sec"] == 0 for e in await service.preview(plain.id, 3))
