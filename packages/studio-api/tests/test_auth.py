from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from studio_api import SettingsError, create_app, run
from studio_api._auth import token_matches

TOKEN = "tok-4f1c9a"


def test_token_matching() -> None:
    token = TOKEN.encode()
    assert token_matches(b"Bearer " + token, token)
    assert token_matches(b"bearer " + token, token)
    assert token_matches(b"  Bearer   " + token + b" ", token)
    assert not token_matches(None, token)
    assert not token_matches(b"", token)
    assert not token_matches(b"Bearer", token)
    assert not token_matches(b"Basic " + token, token)
    assert not token_matches(b"Bearer " + token[:-1], token)
    assert not token_matches(b"Bearer " + token + b"x", token)
    assert not token_matches(b"Bearer \xff\xfe", token)


def test_with_a_token_every_route_but_health_needs_it(serve: Callable[..., Any]) -> None:
    studio = serve(auth_token=TOKEN)
    bare = httpx.Client(base_url=studio.base_url, timeout=30)
    try:
        health = bare.get("/api/health")
        assert health.status_code == 200 and health.json()["status"] in {"ok", "degraded"}
        for method, path in [
            ("GET", "/api/schedules"),
            ("POST", "/api/schedules"),
            ("GET", "/api/schedules/limits"),
            ("GET", "/api/schedules/abc"),
            ("DELETE", "/api/schedules/abc"),
            ("POST", "/api/schedules/abc/trigger"),
            ("GET", "/api/dispatch"),
            ("POST", "/api/dispatch/abc/ack"),
            ("GET", "/openapi.json"),
            ("GET", "/docs"),
            ("GET", "/api/nothing-here"),
        ]:
            answer = bare.request(method, path, json={})
            assert answer.status_code == 401, (method, path, answer.text)
            assert answer.headers["www-authenticate"].startswith("Bearer")
            assert "detail" in answer.json()
            wrong = bare.request(method, path, json={}, headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401
            basic = bare.request(method, path, headers={"Authorization": f"Basic {TOKEN}"})
            assert basic.status_code == 401
        # the right token opens every route
        assert studio.client.get("/api/schedules").status_code == 200
        assert studio.client.get("/api/dispatch").status_code == 200
        assert studio.client.get("/api/schedules/abc").status_code == 404
        assert studio.client.get("/openapi.json").status_code == 200
        lower = bare.get("/api/schedules", headers={"Authorization": f"bearer {TOKEN}"})
        assert lower.status_code == 200
    finally:
        bare.close()


def test_the_schema_documents_bearer_auth(serve: Callable[..., Any]) -> None:
    studio = serve(auth_token=TOKEN)
    schema = studio.client.get("/openapi.json").json()
    assert schema["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert schema["paths"]["/api/schedules"]["get"]["security"] == [{"bearerAuth": []}]
    assert "401" in schema["paths"]["/api/schedules"]["post"]["responses"]
    assert "security" not in schema["paths"]["/api/health"]["get"]


def test_without_a_token_no_route_needs_one(studio: Any) -> None:
    bare = httpx.Client(base_url=studio.base_url, timeout=30)
    try:
        assert bare.get("/api/schedules").status_code == 200
        assert bare.get("/api/dispatch").status_code == 200
        assert bare.get("/openapi.json").status_code == 200
        # a stray header is harmless
        assert bare.get("/api/schedules", headers={"Authorization": "Bearer x"}).status_code == 200
        schema = bare.get("/openapi.json").json()
        assert "securitySchemes" not in schema.get("components", {})
    finally:
        bare.close()


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1", "::"])
def test_non_loopback_without_token_is_refused(
    make_settings: Callable[..., Any], host: str
) -> None:
    settings = make_settings(host=host)
    with pytest.raises(SettingsError, match="LIONAGI_STUDIO_AUTH_TOKEN") as info:
        create_app(settings)
    assert info.value.variable == "LIONAGI_STUDIO_HOST"
    # run() refuses before binding anything, with or without an explicit host override
    with pytest.raises(SettingsError, match="non-loopback"):
        run(settings)
    with pytest.raises(SettingsError, match="non-loopback"):
        run(make_settings(), host=host)


def test_non_loopback_with_token_builds_the_app(make_settings: Callable[..., Any]) -> None:
    app = create_app(make_settings(host="0.0.0.0", auth_token=TOKEN))
    assert app.title == "Studio"
