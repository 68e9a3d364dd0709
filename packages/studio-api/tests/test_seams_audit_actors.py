"""The audit trail names the operator: each change made through the API carries its token's name.

A served Studio, two scoped tokens (``ops``: operate, ``boss``: admin); every operator action
on schedules and runs goes through HTTP, then ``GET /api/audit?actor=<token name>`` lists each
one with its entity and reason code.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import studio_state
from studio_api._tokens import InvalidTokenArgument, create_token
from studio_api.testing import StudioServers
from studio_scheduler_core import ensure_schema


def _tokens(db: Path) -> dict[str, str]:
    """``{"ops": <operate token>, "boss": <admin token>}``, made on the database directly."""

    async def work() -> dict[str, str]:
        async with studio_state.connect(db) as conn:
            await ensure_schema(conn)
            made = {}
            for name, role in (("ops", "operate"), ("boss", "admin")):
                _, text = await create_token(conn, name, role, now=time.time(), actor="test")
                made[name] = text
            return made

    return asyncio.run(work())


def _audit(client: httpx.Client, actor: str) -> list[dict[str, Any]]:
    answer = client.get("/api/audit", params={"actor": actor, "limit": "1000"})
    assert answer.status_code == 200, answer.text
    entries: list[dict[str, Any]] = answer.json()["entries"]
    return entries


def test_every_api_change_names_its_token_in_the_audit_trail(
    serve: StudioServers,
    command_schedule: Callable[..., dict[str, Any]],
    script: Callable[[str, str], Path],
    wait: Callable[..., Any],
) -> None:
    studio = serve()
    tokens = _tokens(studio.settings.db)
    # the server notices the first token on its next look: wait until it is enforced
    wait(lambda: studio.client.get("/api/schedules").status_code == 401, timeout=15)
    sleeper = script("sleep.sh", "sleep 60\n")
    ops = httpx.Client(
        base_url=studio.base_url, headers={"Authorization": f"Bearer {tokens['ops']}"}, timeout=30
    )
    boss = httpx.Client(
        base_url=studio.base_url, headers={"Authorization": f"Bearer {tokens['boss']}"}, timeout=30
    )
    try:
        created = boss.post("/api/schedules", json=command_schedule("nightly", sleeper))
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        updated = boss.patch(f"/api/schedules/{sid}", json={"interval_sec": 1800})
        assert updated.status_code == 200, updated.text
        assert ops.post(f"/api/schedules/{sid}/disable", json={"reason": "window"}).is_success
        assert ops.post(f"/api/schedules/{sid}/enable").is_success
        now = time.time()
        backfilled = ops.post(
            f"/api/schedules/{sid}/backfill", json={"start": now - 3 * 1800, "end": now - 1}
        )
        assert backfilled.status_code == 202, backfilled.text
        assert backfilled.json()["runs"] >= 2
        fired = ops.post(f"/api/schedules/{sid}/trigger")
        assert fired.status_code == 202, fired.text
        run_id = fired.json()["run_id"]
        cancelled = ops.post(f"/api/schedules/runs/{run_id}/cancel")
        assert cancelled.status_code == 202, cancelled.text
        assert cancelled.json()["status"] == "cancelled"

        adhoc = ops.post(
            "/api/runs",
            json={
                "action_kind": "command",
                "action_command": "sh",
                "action_command_args": [str(sleeper)],
            },
        )
        assert adhoc.status_code == 202, adhoc.text
        adhoc_id = adhoc.json()["run_id"]
        assert ops.delete(f"/api/runs/{adhoc_id}").json()["status"] == "cancelled"

        # force-delete while a run runs: the run's cancel and the delete both name the admin
        second = boss.post(f"/api/schedules/{sid}/trigger")
        assert second.status_code == 202, second.text
        second_id = second.json()["run_id"]
        wait(
            lambda: boss.get(f"/api/schedules/runs/{second_id}").json()["status"] == "running",
            timeout=30,
        )
        deleted = boss.delete(f"/api/schedules/{sid}", params={"force": "true"})
        assert deleted.status_code == 200, deleted.text

        mine = _audit(ops, "ops")
        theirs = _audit(ops, "boss")
    finally:
        ops.close()
        boss.close()

    ops_rows = {(e["entity_type"], e["entity_id"], e["reason_code"]) for e in mine}
    assert ("schedule", sid, "schedule.disabled.manual") in ops_rows
    assert ("schedule", sid, "schedule.enabled.manual") in ops_rows
    assert ("schedule_run", run_id, "schedule.fired.manual") in ops_rows
    assert ("schedule_run", run_id, "run.cancelled.operator") in ops_rows
    assert ("schedule_run", adhoc_id, "run.queued.enqueued") in ops_rows
    assert ("schedule_run", adhoc_id, "run.cancelled.operator") in ops_rows
    queued = [e for e in mine if e["reason_code"] == "schedule.backfill.queued"]
    assert len(queued) == backfilled.json()["runs"]
    assert all(e["entity_type"] == "schedule_run" for e in queued)

    boss_rows = {(e["entity_type"], e["entity_id"], e["reason_code"]) for e in theirs}
    assert ("schedule", sid, "schedule.created") in boss_rows
    assert ("schedule", sid, "schedule.updated.operator") in boss_rows
    assert ("schedule_run", second_id, "schedule.fired.manual") in boss_rows
    assert ("schedule_run", second_id, "run.cancelled.operator") in boss_rows
    assert ("schedule", sid, "schedule.deleted.manual") in boss_rows
    update = next(e for e in theirs if e["reason_code"] == "schedule.updated.operator")
    assert "interval_sec" in update["metadata"]["fields"]
    # the operator's token never shows up as the admin's and vice versa
    assert all(e["actor"] == "ops" for e in mine)
    assert all(e["actor"] == "boss" for e in theirs)
    assert not {r for r in ops_rows if r[2] in ("schedule.created", "schedule.deleted.manual")}


def test_dispatch_enqueue_retry_and_purge_name_their_token(
    serve: StudioServers, wait: Callable[..., Any]
) -> None:
    studio = serve()
    tokens = _tokens(studio.settings.db)
    wait(lambda: studio.client.get("/api/schedules").status_code == 401, timeout=15)
    ops = httpx.Client(
        base_url=studio.base_url, headers={"Authorization": f"Bearer {tokens['ops']}"}, timeout=30
    )
    try:
        made = []
        for key in ("first", "second"):
            answer = ops.post(
                "/api/dispatch", json={"kind": "alert", "deliver_to": "ops", "dedup_key": key}
            )
            assert answer.status_code == 201, answer.text
            made.append(answer.json()["id"])
        # both dead-lettered by hand: no delivery can claim them meanwhile
        conn = sqlite3.connect(studio.settings.db)
        try:
            with conn:
                conn.execute("UPDATE dispatch_outbox SET status = 'dead_letter'")
        finally:
            conn.close()
        retried = ops.post(f"/api/dispatch/{made[0]}/retry")
        assert retried.status_code == 200, retried.text
        purged = ops.delete(f"/api/dispatch/{made[1]}")
        assert purged.status_code == 200, purged.text
        assert ops.get(f"/api/dispatch/{made[1]}").status_code == 404
        mine = _audit(ops, "ops")
    finally:
        ops.close()
    rows = {(e["entity_type"], e["entity_id"], e["reason_code"]) for e in mine}
    assert ("dispatch", made[0], "dispatch.pending.enqueued") in rows
    assert ("dispatch", made[1], "dispatch.pending.enqueued") in rows
    assert ("dispatch", made[0], "dispatch.pending.operator_retry") in rows
    assert ("dispatch", made[1], "dispatch.purged.operator") in rows
    purge = next(e for e in mine if e["reason_code"] == "dispatch.purged.operator")
    assert (purge["previous_status"], purge["status"]) == ("dead_letter", "purged")


def test_dashboard_buttons_name_the_visitor_s_token(
    serve: StudioServers,
    command_schedule: Callable[..., dict[str, Any]],
    wait: Callable[..., Any],
) -> None:
    studio = serve()
    tokens = _tokens(studio.settings.db)
    wait(lambda: studio.client.get("/api/schedules").status_code == 401, timeout=15)
    boss = httpx.Client(
        base_url=studio.base_url, headers={"Authorization": f"Bearer {tokens['boss']}"}, timeout=30
    )
    browser = httpx.Client(base_url=studio.base_url, timeout=30)
    try:
        created = boss.post("/api/schedules", json=command_schedule("hourly"))
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        csrf = _csrf(browser.get("/login").text)
        login = browser.post("/login", data={"csrf": csrf, "token": tokens["ops"], "next": "/"})
        assert login.status_code == 303, login.text
        for verb in ("disable", "enable"):
            csrf = _csrf(browser.get(f"/schedules/{sid}").text)
            answer = browser.post(f"/schedules/{sid}/{verb}", data={"csrf": csrf})
            assert answer.status_code in (200, 303), answer.text
        entries = _audit(boss, "ops")
    finally:
        browser.close()
        boss.close()
    assert [(e["entity_id"], e["reason_code"]) for e in reversed(entries)] == [
        (sid, "schedule.disabled.manual"),
        (sid, "schedule.enabled.manual"),
    ]


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert found is not None, html[:500]
    return found.group(1)


def test_no_token_may_take_a_name_studio_itself_acts_as(tmp_path: Path) -> None:
    async def attempt(name: str) -> None:
        async with studio_state.connect(tmp_path / "state.db") as conn:
            await ensure_schema(conn)
            await create_token(conn, name, "operate", now=time.time(), actor="test")

    for name in ("scheduler", "schedule_service", "adhoc_worker", "studio"):
        with pytest.raises(InvalidTokenArgument, match="actor name Studio uses"):
            asyncio.run(attempt(name))
