"""``BodyLimitMiddleware``: a request body over the limit is refused with 413, never kept.

A declared ``Content-Length`` over the limit is answered before a byte of the body is read; a
body without one (chunked) is counted as it streams in and refused as soon as it passes the
limit. Either way the 413 goes out at once and says ``Connection: close``.

A client that is still sending when the answer comes (httpx, curl and requests send the whole
body before they read) must not meet a connection reset: closing a socket with unread data
makes the kernel send RST, and the client's kernel then drops the 413 it had received. So,
as nginx's ``lingering_close`` does, the rest of the body is read and thrown away after the
answer, within bounds a hostile client cannot stretch (:data:`DISCARD_MAX_BYTES`,
:data:`DISCARD_MAX_SECONDS`, :data:`DISCARD_IDLE_SECONDS`), and only then is the connection
closed. The answer's body is sent whole first; only its end (an empty last chunk, which puts
nothing on the wire) waits for the discard. A body declared larger than the bound, or one
the client waits to be invited to send (``Expect: 100-continue``), is not read at all.
"""

from __future__ import annotations

import asyncio
import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodyLimitMiddleware", "BodyTooLarge"]

_MIB = 1024 * 1024
#: The most of an over-limit body read (and thrown away) after the 413.
DISCARD_MAX_BYTES = 128 * _MIB
#: The longest the rest of an over-limit body is read after the 413.
DISCARD_MAX_SECONDS = 30.0
#: The longest wait for the next piece of an over-limit body after the 413.
DISCARD_IDLE_SECONDS = 5.0


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` once a streamed body passes the limit (answered as 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            413,
            detail=f"body: request body larger than the limit of {limit} bytes "
            "(LIONAGI_STUDIO_MAX_BODY_BYTES)",
            headers={"Connection": "close"},
        )


def _header(scope: Scope, wanted: bytes) -> bytes | None:
    for name, value in scope.get("headers", ()):
        if name == wanted:
            return bytes(value)
    return None


def _content_length(scope: Scope) -> int | None:
    value = _header(scope, b"content-length")
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None  # the server refuses a malformed length before the app sees it


async def discard_rest(
    receive: Receive,
    *,
    max_bytes: int = DISCARD_MAX_BYTES,
    max_seconds: float = DISCARD_MAX_SECONDS,
    idle_seconds: float = DISCARD_IDLE_SECONDS,
) -> bool:
    """Read and drop the rest of a request body; ``True`` when it ended (or the client left)
    within the bounds, ``False`` when a bound cut it short."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_seconds
    read = 0
    while True:
        wait = min(idle_seconds, deadline - loop.time())
        if wait <= 0:
            return False
        try:
            message = await asyncio.wait_for(receive(), wait)
        except TimeoutError:
            return False
        if message["type"] != "http.request":
            return True  # the client is gone: nothing is left to read
        read += len(message.get("body", b""))
        if not message.get("more_body", False):
            return True
        if read > max_bytes:
            return False


class BodyLimitMiddleware:
    """Refuse request bodies larger than ``max_bytes`` with 413 ``{"detail", "field": "body"}``."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            waits = (_header(scope, b"expect") or b"").lower() == b"100-continue"
            linger = not waits and declared <= DISCARD_MAX_BYTES
            await self._refuse(send, receive if linger else None)
            return
        received = 0
        over = False
        started = False
        ending = False

        async def counting_receive() -> Message:
            nonlocal received, over
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    over = True
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started, ending
            if message["type"] == "http.response.start":
                started = True
            elif over and message["type"] == "http.response.body" and not message.get("more_body"):
                # the answer goes out whole; its end waits until the body is discarded
                message = {**message, "more_body": True}
                ending = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            # read outside a route (where the error handlers answer it): answer here
            if not started:
                await self._refuse(send, receive)
                return
        if ending:
            await discard_rest(receive)
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _refuse(self, send: Send, receive: Receive | None) -> None:
        """Answer 413; with ``receive``, discard the rest of the body before the end."""
        body = json.dumps(
            {
                "detail": f"body: request body larger than the limit of {self.max_bytes} bytes "
                "(LIONAGI_STUDIO_MAX_BODY_BYTES)",
                "field": "body",
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": receive is not None})
        if receive is not None:
            await discard_rest(receive)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
