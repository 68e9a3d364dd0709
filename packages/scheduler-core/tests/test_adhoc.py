"""Ad-hoc queued runs (DESIGN §5.8): enqueue validation, reads, claims, launch, pools, keys."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from studio_scheduler_core import (
    AdhocRunService,
    RunNotCancellable,
    RunNotFound,
    ScheduleValidationError,
)
from studio_state import fetch_all, fetch_one, fetch_value


def _command(py: str, path: str, *args: str, **fields: Any) -> dict[str, Any]:
    return {
        "action_kind": "command",
        "action_command": py,
        "action_command_args": [path, *args],
        **fields,
    }


async def _status(conn: Any, run_id: str) -> str:
    return str(await fetch_value(conn, "SELECT status FROM schedule_runs WHERE id = ?", (run_id,)))


async def _wait_status(h: Any, conn: Any, run_id: str, *statuses: str) -> dict[str, Any]:
    async def done() -> bool:
        return await _status(conn, run_id) in statuses

    await h.eventually(done)
    row = await fetch_one(conn, "SELECT * FROM schedule_runs WHERE id = ?", (run_id,))
    assert row is not None
    return row


async def _steps(h: Any, conn: Any, entity_id: str) -> list[tuple[str | None, str, str]]:
    return [
        (t.previous_status, t.status, t.reason_code)
        for t in await h.transitions_of(conn, entity_id)
    ]


# -- enqueue and validation -----------------------------------------------------------------
async def test_enqueue_stores_a_queued_row_with_the_validated_action(
    service, conn, settings, clock, h, tmp_path: Path
) -> None:
    runs = AdhocRunService(conn, settings=settings, clock=clock)
    run = await runs.enqueue(
        _command(h.PY, h.env_dump, "x", action_cwd=str(tmp_path)) | {"concurrency_key": "repo-a"}
    )
    assert run.status == "queued" and run.schedule_id is None
    assert (run.queued_at, run.concurrency_key, run.lease_attempts) == (
        h.T0,
        "repo-a",
        0,
    )
    assert run.leased_by is None and run.invocation_id is None
    action = run.action_args
    assert action["action_kind"] == "command" and action["action_command"] == h.PY
    assert action["action_command_args"] == [h.env_dump, "x"]
    assert action["action_cwd"] == str(tmp_path)
    assert set(action) == {
        "action_kind",
        "action_model",
        "action_prompt",
        "action_agent",
        "action_playbook",
        "action_flow_yaml",
        "action_project",
        "action_cwd",
        "action_extra_args",
        "action_command",
        "action_command_args",
    }
    assert run.trigger_context == {"adhoc": True, "run_id": run.id, "queued_at": h.T0}
    assert await _steps(h, conn, run.id) == [(None, "queued", "run.queued.enqueued")]


async def test_enqueue_normalises_like_a_schedule(conn, settings, clock, tmp_path: Path) -> None:
    from dataclasses import replace

    project_dir = tmp_path / "proj"
    project_dir.mkdir()
    runs = AdhocRunService(
        conn, settings=replace(settings, project_paths={"proj": str(project_dir)}), clock=clock
    )
    run = await runs.enqueue(
        {"action_kind": "playbook", "action_playbook": "review", "action_project": "proj"}
    )
    assert run.action_kind == "play" and run.action_args["action_kind"] == "play"
    assert run.action_args["action_cwd"] == str(project_dir)  # snapshotted at acceptance


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"name": "x", "action_kind": "agent", "action_prompt": "p"}, "name"),
        ({"trigger_type": "cron", "action_kind": "agent", "action_prompt": "p"}, "trigger_type"),
        ({"action_kind": "agent", "action_prompt": "p", "on_success": {}}, "on_success"),
        ({"action_prompt": "p"}, "action_kind"),
        ({"action_kind": "engine", "action_prompt": "p"}, "action_kind"),
        ({"action_kind": "agent", "action_model": "-x", "action_prompt": "p"}, "action_model"),
        ({"action_kind": "agent"}, "action_prompt"),
        ({"action_kind": "command", "action_command": "rm"}, "action_command"),
        ({"action_kind": "flow_yaml", "action_flow_yaml": "- a"}, "action_flow_yaml"),
        ({"action_kind": "agent", "action_prompt": "p", "action_cwd": "rel"}, "action_cwd"),
        ({"action_kind": "agent", "action_prompt": "p", "concurrency_key": ""}, "concurrency_key"),
        ({"action_kind": "agent", "action_prompt": "p", "concurrency_key": 3}, "concurrency_key"),
        ({"action_kind": "agent", "action_prompt": 7}, "action_prompt"),
    ],
)
async def test_enqueue_refusals_name_the_field_and_write_nothing(
    conn, settings, clock, data: dict[str, Any], field: str
) -> None:
    runs = AdhocRunService(conn, settings=settings, clock=clock)
    with pytest.raises(ScheduleValidationError) as caught:
        await runs.enqueue(data)
    assert caught.value.field == field, str(caught.value)
    assert await fetch_value(conn, "SELECT COUNT(*) FROM schedule_runs") == 0
    assert await fetch_value(conn, "SELECT COUNT(*) FROM status_transitions") == 0


async def test_enqueue_refuses_a_non_object(conn, settings, clock) -> None:
    runs = AdhocRunService(conn, settings=settings, clock=clock)
    with pytest.raises(ScheduleValidationError) as caught:
        await runs.enqueue(["action_kind"])  # type: ignore[arg-type]
    assert caught.value.field == "run"


async def test_list_get_and_cancel_of_queued_runs(service, conn, settings, clock, h) -> None:
    runs = AdhocRunService(conn, settings=settings, clock=clock)
    first = await runs.enqueue(_command(h.PY, h.blocker, "/nonexistent"))
    clock.advance(1)
    second = await runs.enqueue(_command(h.PY, h.blocker, "/nonexistent"))
    scheduled = await service.create(h.command_schedule(h.blocker))
    listed, total = await runs.list()
    assert total == 2 and [r.id for r in listed] == [second.id, first.id]
    page, total = await runs.list(limit=1, offset=1)
    assert total == 2 and [r.id for r in page] == [first.id]
    cancelled = await runs.cancel(first.id)
    assert (cancelled.status, cancelled.status_reason_code) == (
        "cancelled",
        "run.cancelled.operator",
    )
    assert cancelled.ended_at == h.T0 + 1
    assert (await runs.list(status="queued"))[1] == 1
    assert [r.id for r in (await runs.list(status="cancelled"))[0]] == [first.id]
    assert (await _steps(h, conn, first.id))[-1] == (
        "queued",
        "cancelled",
        "run.cancelled.operator",
    )
    with pytest.raises(RunNotCancellable) as caught:
        await runs.cancel(first.id)
    assert caught.value.status == "cancelled"
    with pytest.raises(RunNotFound):
        await runs.get("000000000000")
    with pytest.raises(RunNotFound):
        await runs.cancel("000000000000")
    with pytest.raises(ScheduleValidationError) as bad:
        await runs.list(status="bogus")
    assert bad.value.field == "status"
    assert scheduled.id  # a schedule exists, yet its runs never show up here


# -- claim and launch -----------------------------------------------------------------------
async def test_queue_claim_complete_like_a_scheduled_fire(
    make_engine, clock, h, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock)
    out = tmp_path / "env.jsonl"
    run = await engine.runs.enqueue(_command(h.PY, h.env_dump, str(out), action_cwd=str(tmp_path)))
    await engine.tick_once()
    row = await _wait_status(h, engine.conn, run.id, "completed", "failed")
    assert (row["status"], row["status_reason_code"], row["exit_code"]) == (
        "completed",
        "run.completed.ok",
        0,
    )
    host, pid, token = row["leased_by"].rsplit(":", 2)
    assert host == socket.gethostname() and int(pid) > 0 and len(token) == 8
    assert (row["lease_attempts"], row["lease_expires_at"], row["fired_at"]) == (
        1,
        h.T0 + 60,
        h.T0,
    )
    assert row["child_pid"] and row["child_started_at"] and row["ended_at"] == h.T0
    assert json.loads(row["action_args"])["action_command_args"] == [h.env_dump, str(out)]
    invocation = await fetch_one(
        engine.conn, "SELECT * FROM invocations WHERE id = ?", (row["invocation_id"],)
    )
    assert invocation["status"] == "completed" and invocation["schedule_run_id"] == run.id
    assert invocation["skill"] == "adhoc:command"
    env = json.loads(out.read_text().splitlines()[0])
    assert env["LIONAGI_INVOCATION_ID"] == row["invocation_id"]
    assert env["LIONAGI_STUDIO_DB"] == engine.db_path and env["cwd"] == str(tmp_path)
    assert await _steps(h, engine.conn, run.id) == [
        (None, "queued", "run.queued.enqueued"),
        ("queued", "running", "run.running.claimed"),
        ("running", "completed", "run.completed.ok"),
    ]
    claim = (await h.transitions_of(engine.conn, run.id))[1]
    assert claim.metadata["argv"] == [h.PY, h.env_dump, str(out)]
    assert engine.limits()["adhoc_in_flight"] == 0
    await engine.tick_once()
    assert len(out.read_text().splitlines()) == 1  # never claimed twice


async def test_agent_run_uses_the_li_argv_and_session_evidence(
    make_engine, clock, h, child_env, tmp_path: Path
) -> None:
    log = tmp_path / "li.jsonl"
    engine = await make_engine(clock=clock, child_env={**child_env, "FAKE_LI_LOG": str(log)})
    run = await engine.runs.enqueue(
        {
            "action_kind": "agent",
            "action_model": "m1",
            "action_prompt": "do it usage=failed:5:6:0.5",
            "action_cwd": str(tmp_path),
        }
    )
    await engine.tick_once()
    row = await _wait_status(h, engine.conn, run.id, "completed", "failed")
    assert row["status"] == "completed"  # exit 0
    entry = json.loads(log.read_text().splitlines()[0])
    assert entry["argv"] == ["agent", "--", "m1", "do it usage=failed:5:6:0.5"]
    assert entry["invocation_id"] == row["invocation_id"]
    invocation = await fetch_one(
        engine.conn, "SELECT * FROM invocations WHERE id = ?", (row["invocation_id"],)
    )
    assert (invocation["status"], invocation["status_reason_code"]) == (
        "failed",
        "run.failed.session_evidence",
    )
    assert invocation["prompt"] == "do it usage=failed:5:6:0.5"


async def test_nonzero_exit_and_setup_refusal_follow_the_fire_rules(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock, li_executable="/nonexistent/li")
    fail = h.script("fail.py", "import sys\nsys.stderr.write('boom')\nsys.exit(4)\n")
    bad = await engine.runs.enqueue(_command(h.PY, fail))
    no_li = await engine.runs.enqueue({"action_kind": "agent", "action_prompt": "p"})
    await engine.tick_once()
    row = await _wait_status(h, engine.conn, bad.id, "failed", "completed")
    assert (row["status_reason_code"], row["exit_code"], row["error_detail"]) == (
        "run.failed.exit_nonzero",
        4,
        "boom",
    )
    refused = await fetch_one(engine.conn, "SELECT * FROM schedule_runs WHERE id = ?", (no_li.id,))
    assert (refused["status"], refused["status_reason_code"]) == (
        "failed",
        "run.failed.spawn_error",
    )
    assert refused["child_pid"] is None and refused["lease_expires_at"] is None
    invocation = await fetch_one(
        engine.conn, "SELECT * FROM invocations WHERE id = ?", (refused["invocation_id"],)
    )
    assert invocation["status"] == "failed"
    assert (await _steps(h, engine.conn, no_li.id))[-1] == (
        "queued",
        "failed",
        "run.failed.spawn_error",
    )


# -- pools and keys -------------------------------------------------------------------------
async def test_concurrency_cap_is_its_own_pool_oldest_first(
    make_engine, clock, h, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock, max_adhoc_concurrent=2, max_scheduled_concurrent=1)
    flags = [tmp_path / f"flag{i}" for i in range(3)]
    queued = [await engine.runs.enqueue(_command(h.PY, h.blocker, str(f))) for f in flags]
    await engine.tick_once()
    statuses = [await _status(engine.conn, r.id) for r in queued]
    assert statuses == ["running", "running", "queued"]
    assert engine.limits()["adhoc_in_flight"] == 2
    assert engine.health()["in_flight"] == 0  # no scheduled slot taken
    schedule = await engine.service.create(h.command_schedule(h.blocker, str(tmp_path / "s")))
    scheduled_run = await engine.fire_now(schedule.id)  # the one scheduled slot is free
    assert engine.health()["in_flight"] == 1
    await engine.tick_once()
    assert await _status(engine.conn, queued[2].id) == "queued"
    flags[0].touch()
    await _wait_status(h, engine.conn, queued[0].id, "completed")
    # The freed ad-hoc slot is claimed into at once (no tick needed), oldest first.
    await _wait_status(h, engine.conn, queued[2].id, "running")
    assert engine.limits()["adhoc_in_flight"] == 2
    for flag in (*flags, tmp_path / "s"):
        flag.touch()
    for run in queued:
        await _wait_status(h, engine.conn, run.id, "completed")
    await engine.wait_idle()
    assert await _status(engine.conn, scheduled_run) == "completed"


async def test_one_running_row_per_concurrency_key(make_engine, clock, h, tmp_path: Path) -> None:
    engine = await make_engine(clock=clock, max_adhoc_concurrent=4)
    flags = {name: tmp_path / name for name in "abcd"}
    keys = {"a": "k", "b": "k", "c": None, "d": "j"}
    runs = {
        name: await engine.runs.enqueue(
            _command(h.PY, h.blocker, str(flags[name])) | {"concurrency_key": keys[name]}
        )
        for name in "abcd"
    }
    await engine.tick_once()
    await engine.tick_once()
    status = {name: await _status(engine.conn, r.id) for name, r in runs.items()}
    assert status == {"a": "running", "b": "queued", "c": "running", "d": "running"}
    flags["a"].touch()
    await _wait_status(h, engine.conn, runs["a"].id, "completed")
    # The key's next row starts as soon as its running one ended (no tick needed).
    await _wait_status(h, engine.conn, runs["b"].id, "running")
    running_k = await fetch_all(
        engine.conn,
        "SELECT id FROM schedule_runs WHERE status = 'running' AND concurrency_key = 'k'",
    )
    assert [r["id"] for r in running_k] == [runs["b"].id]
    for flag in flags.values():
        flag.touch()
    for run in runs.values():
        await _wait_status(h, engine.conn, run.id, "completed")


@pytest.mark.sqlite_only("reads SQLite's query plan")
async def test_the_claim_query_uses_the_queue_indexes(conn) -> None:
    from studio_scheduler_core._adhoc.store import CANDIDATES as _CANDIDATES

    plan = " ".join(
        str(r["detail"]) for r in await fetch_all(conn, f"EXPLAIN QUERY PLAN {_CANDIDATES}", (4,))
    )
    assert "q USING INDEX idx_schedule_runs_queued " in f"{plan} "  # only queued rows, in order
    assert "TEMP B-TREE" not in plan
    assert "idx_schedule_runs_queued_key" in plan
    assert "idx_schedule_runs_running" in plan
