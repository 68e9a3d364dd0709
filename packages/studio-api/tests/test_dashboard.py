"""The dashboard's server side over HTTP (the browser tests live in tests/dashboard)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit
from zoneinfo import ZoneInfo

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from studio_api._dashboard import SessionSigner
from studio_api._dashboard._format import duration, local_time, utc_time
from studio_api._dashboard._internal import has_route, stream_api
from studio_api._dashboard._render import safe_back

TOKEN = "dashboard-test-token-0123456789"


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert found, html[:2000]
    return found.group(1)


def flash(response: httpx.Response) -> dict[str, str]:
    assert response.status_code == 303, response.text
    query = parse_qs(urlsplit(response.headers["location"]).query)
    return {key: values[0] for key, values in query.items()}


def test_session_cookies_are_signed_expiring_and_bound_to_the_token() -> None:
    now = [1_000_000.0]
    signer = SessionSigner(TOKEN, clock=lambda: now[0])
    session, cookie = signer.issue(authenticated=True)
    assert signer.verify(cookie) == session and session.authenticated
    assert TOKEN not in cookie
    body, _, signature = cookie.rpartition(".")
    forged = body[:-1] + ("0" if body[-1] == "1" else "1")
    assert signer.verify(f"{forged}.{signature}") is None  # anonymous made logged-in
    assert signer.verify(cookie[:-2] + "00") is None
    assert SessionSigner("another-token", clock=lambda: now[0]).verify(cookie) is None
    anonymous = signer.verify(signer.issue(authenticated=False)[1])
    assert anonymous is not None and not anonymous.authenticated
    assert signer.csrf_ok(session, signer.csrf_token(session))
    assert not signer.csrf_ok(session, signer.csrf_token(anonymous))
    assert not signer.csrf_ok(session, "") and not signer.csrf_ok(None, "x")
    assert signer.token_ok(TOKEN) and not signer.token_ok(TOKEN[:-1])
    now[0] += 12 * 3600 + 1
    assert signer.verify(cookie) is None  # expired
    open_signer = SessionSigner(None)
    opened = open_signer.verify(open_signer.issue(authenticated=False)[1])
    assert opened is not None and opened.authenticated  # no token: open, like the API


def test_formatting_of_times_and_durations() -> None:
    assert [duration(x) for x in (0.25, 4.24, 185, 7620, 273600)] == [
        "250 ms",
        "4.2 s",
        "3 min 05 s",
        "2 h 07 min",
        "3 d 4 h",
    ]
    moment = 1_796_292_000.0  # 2026-12-03 10:00:00 UTC
    assert local_time(moment, ZoneInfo("Europe/Berlin")) == "2026-12-03 11:00:00 CET"
    assert utc_time(moment) == "2026-12-03T10:00:00Z UTC"


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/schedules?enabled=true", "/schedules?enabled=true"),
        ("//evil.example/x", "/fallback"),
        ("https://evil.example/", "/fallback"),
        ("/\\evil.example", "/fallback"),
        (None, "/fallback"),
    ],
)
def test_forms_only_return_to_this_site(target: str | None, expected: str) -> None:
    assert safe_back(target, "/fallback") == expected


def test_pages_render_with_links_security_headers_and_a_session(
    studio: Any, command_schedule: Callable[..., dict[str, Any]]
) -> None:
    made = studio.client.post("/api/schedules", json=command_schedule("nightly")).json()
    page = studio.client.get("/")
    assert page.status_code == 200
    for label, href in (("Schedules", "/schedules"), ("Runs", "/runs"), ("Dispatch", "/dispatch")):
        assert f'<a href="{href}">{label}</a>' in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    cookie = page.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    listing = studio.client.get("/schedules")
    assert f'<a href="/schedules/{made["id"]}">nightly</a>' in listing.text
    for path in (f"/schedules/{made['id']}", "/runs", "/dispatch", "/runs?status=failed"):
        assert studio.client.get(path).status_code == 200, path
    assert studio.client.get("/schedules/000000000000").status_code == 404
    assert studio.client.get("/runs?status=bogus").status_code == 422
    bad = studio.client.get("/schedules?trigger_type=bogus")
    assert bad.status_code == 422 and "trigger_type" in bad.text
    paths = studio.client.get("/openapi.json").json()["paths"]
    assert not [path for path in paths if not path.startswith("/api/")]


def test_every_form_refuses_a_post_without_its_csrf_token(
    studio: Any, command_schedule: Callable[..., dict[str, Any]]
) -> None:
    sid = studio.client.post("/api/schedules", json=command_schedule("guarded")).json()["id"]
    studio.client.get("/")  # a session, whose token the forms below do not carry
    for action in ("trigger", "disable", "enable", "delete"):
        for form in ({}, {"csrf": "0" * 64}):
            answer = studio.client.post(f"/schedules/{sid}/{action}", data=form)
            assert answer.status_code == 403, (action, form)
    for path in ("/dispatch/000000000000/retry", "/runs/000000000000/cancel", "/logout"):
        assert studio.client.post(path, data={}).status_code == 403, path
    fresh = httpx.post(f"{studio.base_url}/schedules/{sid}/trigger", data={})
    assert fresh.status_code == 403  # no session at all
    assert studio.client.get(f"/api/schedules/{sid}").json()["enabled"] is True
    assert studio.db_rows("SELECT id FROM schedule_runs") == []


def test_actions_are_the_api_requests_and_show_its_messages(
    studio: Any, command_schedule: Callable[..., dict[str, Any]]
) -> None:
    sid = studio.client.post("/api/schedules", json=command_schedule("acting")).json()["id"]
    csrf = csrf_of(studio.client.get("/schedules").text)
    back = "/schedules?enabled=true"
    done = flash(studio.client.post(f"/schedules/{sid}/disable", data={"csrf": csrf, "back": back}))
    assert done["notice"] == f"Schedule {sid} disabled"
    row = studio.client.get(f"/api/schedules/{sid}").json()
    assert row["enabled"] is False and row["disabled_reason"] == "manual"
    for ident, path, verb in (
        ("000000000000", "/api/schedules/000000000000/trigger", "schedules/000000000000/trigger"),
        ("nope", "/api/dispatch/nope/retry", "dispatch/nope/retry"),
    ):
        api = studio.client.post(path).json()["detail"]
        shown = flash(studio.client.post(f"/{verb}", data={"csrf": csrf, "back": "/"}))
        assert shown["error"].endswith(api) and ident in shown["error"]
    long_reason = {"csrf": csrf, "reason": "x" * 20_000}
    assert studio.client.post(f"/schedules/{sid}/disable", data=long_reason).status_code == 413
    sent = flash(studio.client.post(f"/schedules/{sid}/trigger", data={"csrf": csrf}))
    assert re.fullmatch(r"[0-9a-f]{12}", sent["run"])
    run_page = studio.client.get(f"/runs/{sent['run']}")
    assert run_page.status_code == 200 and "acting" in run_page.text
    paths = set(studio.client.get("/openapi.json").json()["paths"])
    log_route = "/api/schedules/runs/{run_id}/log/stream" in paths
    assert ("Log: not available on this server" in run_page.text) is not log_route
    form = {"csrf": csrf, "back": f"/schedules/{sid}"}
    gone = flash(studio.client.post(f"/schedules/{sid}/delete", data=form))
    assert gone["notice"] == "Schedule acting deleted"
    assert studio.client.get(f"/api/schedules/{sid}").status_code == 404


def test_with_a_token_pages_need_a_login_and_the_api_its_bearer(
    serve: Callable[..., Any],
) -> None:
    studio = serve(auth_token=TOKEN)
    browser = httpx.Client(base_url=studio.base_url, timeout=30)
    try:
        assert browser.get("/api/schedules").status_code == 401
        assert browser.get("/openapi.json").status_code == 401
        first = browser.get("/runs?status=failed")
        assert first.status_code == 303
        assert first.headers["location"] == "/login?next=%2Fruns%3Fstatus%3Dfailed"
        login = browser.get("/login")
        csrf = csrf_of(login.text)
        assert browser.post("/login", data={"token": TOKEN}).status_code == 403  # no csrf
        wrong = browser.post("/login", data={"csrf": csrf, "token": "nope", "next": "/runs"})
        assert wrong.headers["location"].startswith("/login?failed=1")
        assert browser.get("/").status_code == 303
        good = browser.post("/login", data={"csrf": csrf, "token": TOKEN, "next": "/runs"})
        assert good.status_code == 303 and good.headers["location"] == "/runs"
        assert "httponly" in good.headers["set-cookie"].lower()
        assert browser.get("/").status_code == 200
        assert browser.get("/api/schedules").status_code == 401  # the cookie opens pages only
        assert studio.client.get("/api/schedules").status_code == 200
        csrf = csrf_of(browser.get("/").text)
        assert browser.post("/logout", data={"csrf": csrf}).headers["location"] == "/login"
        browser.cookies.clear()
        assert browser.get("/dispatch").status_code == 303
    finally:
        browser.close()


async def test_stream_api_relays_a_streaming_route_as_it_writes() -> None:
    released = asyncio.Event()

    async def events(request: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            yield b"data: first\n\n"
            await released.wait()
            yield b"event: end\ndata: {}\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/api/schedules/runs/{run_id}/log/stream", events)])
    assert has_route(app, "GET", "/api/schedules/runs/abc/log/stream")
    assert not has_route(app, "POST", "/api/schedules/runs/abc/log/stream")
    assert not has_route(app, "POST", "/api/schedules/runs/abc/cancel")
    chunks = stream_api(app, "/api/schedules/runs/abc/log/stream", token=None)
    assert await asyncio.wait_for(anext(chunks), 5) == b"data: first\n\n"  # before the end
    released.set()
    assert await asyncio.wait_for(anext(chunks), 5) == b"event: end\ndata: {}\n\n"
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(anext(chunks), 5)
