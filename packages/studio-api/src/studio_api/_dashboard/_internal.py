"""The dashboard's actions are requests to the API itself, made in process.

A form on a page (Trigger, Disable, Retry, ...) becomes the very request a client of the API
would send, answered by the same route, validation and error handlers: there is no second
path to the services, and an error shows the API's own ``detail``. With a token configured the
request carries it (the dashboard already checked the visitor's session).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Scope

from .._auth_context import CLAIM_SCOPE_KEY, dashboard_principal


@dataclass(frozen=True)
class ApiAnswer:
    """Status and decoded JSON body of an in-process API request."""

    status: int
    body: Any

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def detail(self) -> str:
        """The API's error message (``detail``), or the status when it has none."""
        if isinstance(self.body, dict) and isinstance(self.body.get("detail"), str):
            return str(self.body["detail"])
        return f"the API answered {self.status}"


def _scope(method: str, target: str, token: str | None, body: bytes) -> Scope:
    path, _, query = target.partition("?")
    headers = [(b"host", b"127.0.0.1"), (b"content-length", str(len(body)).encode())]
    if body:
        headers.append((b"content-type", b"application/json"))
    # the visitor's own principal (its role and actor name), else the configured token
    principal = dashboard_principal()
    if token is not None and principal is None:
        headers.append((b"authorization", b"Bearer " + token.encode()))
    return {
        CLAIM_SCOPE_KEY: principal,
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
    }


async def call_api(
    app: ASGIApp, method: str, path: str, *, token: str | None, json_body: Any = None
) -> ApiAnswer:
    """Send one request through the whole app (middleware included) and collect the answer."""
    body = json.dumps(json_body).encode() if json_body is not None else b""
    sent = False
    status = 500
    chunks: list[bytes] = []

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # a disconnect never comes: the request ends first
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(_scope(method, path, token, body), receive, send)
    raw = b"".join(chunks)
    try:
        decoded: Any = json.loads(raw) if raw else None
    except ValueError:
        decoded = raw.decode(errors="replace")
    return ApiAnswer(status, decoded)


async def stream_api(app: ASGIApp, path: str, *, token: str | None) -> AsyncIterator[bytes]:
    """The body of a streaming GET (Server-Sent Events) as the API writes it.

    The request runs in its own task; leaving the iterator (the browser went away) tells the
    route the client disconnected and waits for it to finish.
    """
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=64)
    gone = asyncio.Event()

    async def receive() -> Message:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body":
            await queue.put(message.get("body", b""))
            if not message.get("more_body", False):
                await queue.put(None)

    async def run() -> None:
        try:
            await app(_scope("GET", path, token, b""), receive, send)
        finally:
            await queue.put(None)

    task = asyncio.create_task(run())
    try:
        while (chunk := await queue.get()) is not None:
            if chunk:
                yield chunk
    finally:
        gone.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def has_route(app: Any, method: str, path: str) -> bool:
    """Whether the app serves ``method path`` (the run log and cancel routes may be absent)."""
    scope = {"type": "http", "method": method, "path": path}
    for route in getattr(app, "routes", ()):
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return True
    return False
