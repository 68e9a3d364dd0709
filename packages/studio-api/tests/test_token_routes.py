"""``/api/tokens`` against a served Studio: list, create (shown once), revoke, roles, audit."""

from __future__ import annotations

import httpx

from studio_api.testing import StudioServers

ADMIN_TOKEN = "the-admin-token-0123456789abcdef"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_create_list_and_revoke_over_the_api(serve: StudioServers) -> None:
    studio = serve(auth_token=ADMIN_TOKEN)
    client = studio.client

    made = client.post("/api/tokens", json={"name": "ops", "role": "admin", "expires": "2d"})
    assert made.status_code == 201, made.text
    ops = made.json()
    assert ops["name"] == "ops" and ops["role"] == "admin" and ops["state"] == "live"
    assert ops["token"].startswith("sst_")
    assert ops["created_by"] == "auth-token"
    assert abs(ops["expires_at"] - (ops["created_at"] + 2 * 86400)) < 1e-6
    reader = client.post("/api/tokens", json={"name": "viewer", "role": "read"})
    assert reader.status_code == 201, reader.text
    assert reader.json()["expires_at"] is None

    # the new admin token works at once, and acts under its own name
    listed = httpx.get(f"{studio.base_url}/api/tokens", headers=_bearer(ops["token"]))
    assert listed.status_code == 200, listed.text
    rows = listed.json()["tokens"]
    assert [row["name"] for row in rows] == ["ops", "viewer"]
    assert all("token" not in row and "digest" not in row and "salt" not in row for row in rows)
    assert ops["token"] not in listed.text
    assert rows[0]["last_used_at"] is not None  # this very request used it

    # a read token may list schedules but not tokens (reads of /api/tokens are admin)
    viewer = reader.json()["token"]
    assert httpx.get(f"{studio.base_url}/api/schedules", headers=_bearer(viewer)).status_code == 200
    refused = httpx.get(f"{studio.base_url}/api/tokens", headers=_bearer(viewer))
    assert refused.status_code == 403 and refused.json()["required_role"] == "admin"

    revoked = httpx.delete(f"{studio.base_url}/api/tokens/viewer", headers=_bearer(ops["token"]))
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["state"] == "revoked"
    # refused at once, with no cache to wait out
    answer = httpx.get(f"{studio.base_url}/api/schedules", headers=_bearer(viewer))
    assert answer.status_code == 401
    assert [row["name"] for row in client.get("/api/tokens").json()["tokens"]] == ["ops"]
    every = client.get("/api/tokens", params={"all": "true"}).json()["tokens"]
    assert {row["name"]: row["state"] for row in every} == {"ops": "live", "viewer": "revoked"}

    # the name of a revoked token is free again
    again = client.post("/api/tokens", json={"name": "viewer", "role": "operate"})
    assert again.status_code == 201 and again.json()["token"] != viewer

    audit = client.get("/api/audit", params={"entity": "token"}).json()["entries"]
    seen = [(e["reason_code"], e["metadata"]["name"], e["actor"]) for e in audit]
    assert (
        seen
        == [
            ("token.created", "viewer", "auth-token"),
            ("token.revoked", "viewer", "ops"),
            ("token.created", "viewer", "auth-token"),
            ("token.created", "ops", "auth-token"),
        ][: len(seen)]
    )
    assert len(seen) == 4, seen
    assert [s[:2] for s in seen] == [
        ("token.created", "viewer"),
        ("token.revoked", "viewer"),
        ("token.created", "viewer"),
        ("token.created", "ops"),
    ]


def test_bad_requests_name_the_field_and_write_nothing(serve: StudioServers) -> None:
    studio = serve(auth_token=ADMIN_TOKEN)
    client = studio.client
    assert client.post("/api/tokens", json={"name": "ci", "role": "operate"}).status_code == 201

    cases = [
        ({"name": "ci", "role": "read"}, 409, "name"),
        ({"name": "bad name", "role": "read"}, 422, "name"),
        ({"name": "studio", "role": "read"}, 422, "name"),
        ({"name": "x", "role": "root"}, 422, "role"),
        ({"name": "x", "role": "read", "expires": "soon"}, 422, "expires"),
        ({"name": "x", "role": "read", "expires": "0d"}, 422, "expires"),
        ({"name": "x", "role": "read", "token": "mine"}, 422, "token"),
        ({"role": "read"}, 422, "name"),
    ]
    for body, status, field in cases:
        answer = client.post("/api/tokens", json=body)
        assert answer.status_code == status, (body, answer.text)
        assert answer.json()["field"] == field, (body, answer.json())
        assert field in answer.json()["detail"], (body, answer.json())

    unknown = client.delete("/api/tokens/nobody")
    assert unknown.status_code == 404 and unknown.json()["field"] == "name"
    names = [row["name"] for row in client.get("/api/tokens").json()["tokens"]]
    assert names == ["ci"]
    assert studio.db_rows("SELECT count(*) AS n FROM api_tokens")[0]["n"] == 1
    created = studio.db_rows(
        "SELECT count(*) AS n FROM status_transitions WHERE entity_type = 'token'"
    )
    assert created[0]["n"] == 1


def test_operate_may_not_manage_tokens(serve: StudioServers) -> None:
    studio = serve(auth_token=ADMIN_TOKEN)
    made = studio.client.post("/api/tokens", json={"name": "runner", "role": "operate"})
    operate = _bearer(made.json()["token"])
    base = studio.base_url
    for answer in (
        httpx.get(f"{base}/api/tokens", headers=operate),
        httpx.post(f"{base}/api/tokens", json={"name": "me2", "role": "admin"}, headers=operate),
        httpx.delete(f"{base}/api/tokens/runner", headers=operate),
    ):
        assert answer.status_code == 403, answer.text
        assert answer.json()["required_role"] == "admin"
