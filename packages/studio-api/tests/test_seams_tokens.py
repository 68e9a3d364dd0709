"""Scoped tokens against a served Studio: every route × every role, 401s, revocation, audit."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import studio_outbox
import studio_state
from studio_api import StudioSettings, create_app
from studio_api._roles import PUBLIC_PATHS, flat_routes, role_for, roles_markdown, with_table
from studio_api._tokens import ROLES, create_token, revoke_token
from studio_api.testing import ServedStudio, StudioServers
from studio_scheduler_core import ensure_schema

REPO = Path(__file__).resolve().parents[3]
ADMIN_TOKEN = "the-admin-token-0123456789abcdef"


def _db_call(db: Path, work: Callable[[Any], Any]) -> Any:
    """Run ``work(conn)`` on a connection of its own (as the CLI or another node would)."""

    async def go() -> Any:
        async with studio_state.connect(db) as conn:
            await ensure_schema(conn)
            return await work(conn)

    return asyncio.run(go())


def make_tokens(db: Path, **expiry: float) -> dict[str, str]:
    """One live token per role, named after it."""

    async def work(conn: Any) -> dict[str, str]:
        made = {}
        for role in ROLES:
            _, text = await create_token(conn, role, role, now=time.time(), actor="test")
            made[role] = text
        return made

    return dict(_db_call(db, work))


def _example(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "nosuchthing0", path)


def _request(client: httpx.Client, method: str, path: str, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    body = {} if method in ("POST", "PATCH", "PUT") else None
    return client.request(method, _example(path), headers=headers, json=body)


def test_every_route_answers_every_role_as_the_table_says(serve: StudioServers) -> None:
    studio = serve()
    tokens = make_tokens(studio.settings.db)
    walked = 0
    with httpx.Client(base_url=studio.base_url, timeout=30) as client:
        for methods, path in flat_routes(studio.server.app.routes):
            if path.startswith(("/schedules", "/runs", "/dispatch", "/audit", "/login")):
                continue  # the dashboard: its session cookie, tested in tests/dashboard
            if path in ("/logout", "/") or path.startswith("/static"):
                continue
            for method in sorted(methods - {"HEAD"}):
                needed = role_for(method, path)
                anonymous = _request(client, method, path, None)
                if path in PUBLIC_PATHS:
                    assert anonymous.status_code == 200, (method, path)
                    continue
                assert anonymous.status_code == 401, (method, path, anonymous.text)
                for role, token in tokens.items():
                    answer = _request(client, method, path, token)
                    where = (method, path, role, answer.status_code, answer.text[:200])
                    if ROLES.index(role) >= ROLES.index(needed):
                        assert answer.status_code not in (401, 403), where
                    else:
                        assert answer.status_code == 403, where
                        assert answer.json()["required_role"] == needed, where
                        assert needed in answer.json()["detail"], where
                    walked += 1
    assert walked >= 3 * 30  # every API route was asked by every role


def test_wrong_revoked_and_expired_tokens_are_refused_at_once(serve: StudioServers) -> None:
    studio = serve()
    db = studio.settings.db
    tokens = make_tokens(db)

    async def expired(conn: Any) -> str:
        now = time.time()
        _, text = await create_token(
            conn, "old", "admin", now=now - 100, expires_at=now - 50, actor="test"
        )
        return text

    old = _db_call(db, expired)
    url = "/api/schedules"
    client = httpx.Client(base_url=studio.base_url, timeout=30)
    try:
        assert (
            client.get(url, headers={"Authorization": f"Bearer {tokens['read']}"}).status_code
            == 200
        )
        for bad in (old, tokens["read"][:-1] + "x", "sst_000000000000_" + "a" * 43, "nonsense"):
            answer = client.get(url, headers={"Authorization": f"Bearer {bad}"})
            assert answer.status_code == 401, bad
            assert answer.headers["www-authenticate"].startswith("Bearer")
        # revoked by another process: the very next request is refused
        _db_call(db, lambda conn: revoke_token(conn, "read", now=time.time(), actor="cli:test"))
        answer = client.get(url, headers={"Authorization": f"Bearer {tokens['read']}"})
        assert answer.status_code == 401
        # the others still work
        ok = client.get(url, headers={"Authorization": f"Bearer {tokens['operate']}"})
        assert ok.status_code == 200
    finally:
        client.close()


def test_an_open_studio_locks_once_a_token_exists(serve: StudioServers) -> None:
    studio = serve()
    assert studio.client.get("/api/schedules").status_code == 200
    tokens = make_tokens(studio.settings.db)
    deadline = time.monotonic() + 10
    while studio.client.get("/api/schedules").status_code != 401:
        assert time.monotonic() < deadline, "auth was not enforced after a token was created"
        time.sleep(0.2)
    headers = {"Authorization": f"Bearer {tokens['admin']}"}
    assert studio.client.get("/api/schedules", headers=headers).status_code == 200


def test_the_configured_token_stays_admin_beside_scoped_ones(serve: StudioServers) -> None:
    studio = serve(auth_token=ADMIN_TOKEN)
    tokens = make_tokens(studio.settings.db)
    maintenance = studio.client.post("/api/admin/maintenance", json={"action": "checkpoint"})
    assert maintenance.status_code == 200, maintenance.text
    assert maintenance.json()["actor"] == "auth-token"
    refused = httpx.post(
        f"{studio.base_url}/api/admin/maintenance",
        json={"action": "checkpoint"},
        headers={"Authorization": f"Bearer {tokens['operate']}"},
    )
    assert refused.status_code == 403 and refused.json()["required_role"] == "admin"


def _audit(studio: ServedStudio, token: str, **query: str) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"{studio.base_url}/api/audit",
        params=query,
        headers={"Authorization": f"Bearer {token}"},
    )
    assert answer.status_code == 200, answer.text
    entries: list[dict[str, Any]] = answer.json()["entries"]
    return entries


def test_operator_ack_maintenance_and_audit_record_the_token_name(serve: StudioServers) -> None:
    studio = serve()
    db = studio.settings.db
    tokens = make_tokens(db)

    async def enqueue(conn: Any) -> str:
        return str(
            await studio_outbox.enqueue_dispatch(
                conn, kind="alert", deliver_to="ops", ack_required=True
            )
        )

    dispatch_id = _db_call(db, enqueue)
    operate = {"Authorization": f"Bearer {tokens['operate']}"}
    read = {"Authorization": f"Bearer {tokens['read']}"}
    url = f"{studio.base_url}/api/dispatch/{dispatch_id}/ack"
    assert httpx.post(url, json={"operator": True}, headers=read).status_code == 403
    both = httpx.post(url, json={"operator": True, "token": "x"}, headers=operate)
    assert both.status_code == 422 and both.json()["field"] == "token"
    acked = httpx.post(url, json={"operator": True}, headers=operate)
    assert acked.status_code == 200, acked.text
    assert acked.json()["status"] == "acked"

    vacuum = httpx.post(
        f"{studio.base_url}/api/admin/maintenance",
        json={"action": "vacuum"},
        headers={"Authorization": f"Bearer {tokens['admin']}"},
    )
    assert vacuum.status_code == 200, vacuum.text
    bad = httpx.post(
        f"{studio.base_url}/api/admin/maintenance",
        json={"action": "defrag"},
        headers={"Authorization": f"Bearer {tokens['admin']}"},
    )
    assert bad.status_code == 422 and bad.json()["field"] == "action"

    mine = _audit(studio, tokens["read"], actor="operate")
    assert [(e["entity_id"], e["reason_code"]) for e in mine] == [
        (dispatch_id, "dispatch.acked.operator")
    ]
    maintenance = _audit(studio, tokens["read"], entity="maintenance")
    assert [(e["reason_code"], e["actor"]) for e in maintenance] == [
        ("maintenance.vacuum", "admin")
    ]
    created = _audit(studio, tokens["read"], entity="token")
    assert {e["metadata"]["name"] for e in created} == set(ROLES)
    assert all(e["reason_code"] == "token.created" and e["actor"] == "test" for e in created)
    # newest first, pages by cursor, time filters
    everything = _audit(studio, tokens["read"], limit="1000")
    stamps = [e["created_at"] for e in everything]
    assert stamps == sorted(stamps, reverse=True)
    first = httpx.get(f"{studio.base_url}/api/audit", params={"limit": "2"}, headers=read).json()
    second = httpx.get(
        f"{studio.base_url}/api/audit",
        params={"limit": "2", "cursor": first["next_cursor"]},
        headers=read,
    ).json()
    assert [e["id"] for e in first["entries"] + second["entries"]] == [
        e["id"] for e in everything[:4]
    ]
    assert _audit(studio, tokens["read"], since=str(time.time() + 60)) == []
    assert len(_audit(studio, tokens["read"], until="2100-01-01T00:00:00Z", limit="1000")) == len(
        everything
    )
    wrong = httpx.get(f"{studio.base_url}/api/audit", params={"since": "soon"}, headers=read)
    assert wrong.status_code == 422 and wrong.json()["field"] == "since"


def test_maintenance_answers_409_while_the_database_is_busy(serve: StudioServers) -> None:
    import sqlite3

    studio = serve()
    tokens = make_tokens(studio.settings.db)
    blocker = sqlite3.connect(studio.settings.db, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        answer = httpx.post(
            f"{studio.base_url}/api/admin/maintenance",
            json={"action": "vacuum"},
            headers={"Authorization": f"Bearer {tokens['admin']}"},
            timeout=30,
        )
        assert answer.status_code == 409, answer.text
        assert "busy" in answer.json()["detail"] or "locked" in answer.json()["detail"]
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def test_docs_table_is_the_generated_one(tmp_path: Path) -> None:
    app = create_app(StudioSettings.from_env({}, db=tmp_path / "state.db"))
    document = (REPO / "docs" / "operations.md").read_text()
    assert "## Tokens and roles" in document
    assert with_table(document, roles_markdown(app.routes)) == document, (
        "docs/operations.md's route table is stale: run "
        "python -m studio_api._roles --write docs/operations.md"
    )


@pytest.mark.parametrize("role", ROLES)
def test_role_of_every_listed_route_is_in_the_docs(role: str, tmp_path: Path) -> None:
    app = create_app(StudioSettings.from_env({}, db=tmp_path / "state.db"))
    table = roles_markdown(app.routes)
    rows = [line for line in table.splitlines()[2:] if line.endswith(f"| {role} |")]
    assert rows, f"no route needs {role}"
