"""``BodyLimitMiddleware``: a request body over the limit is refused with 413, never read whole.

A declared ``Content-Length`` over the limit is answered before a byte of the body is read; a
body without one (chunked) is counted as it streams in and refused as soon as it passes the
limit. Either way the answer closes the connection, so the rest of the body is not read.
"""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodyLimitMiddleware", "BodyTooLarge"]


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` once a streamed body passes the limit (answered as 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            413,
            detail=f"body: request body larger than the limit of {limit} bytes "
            "(LIONAGI_STUDIO_MAX_BODY_BYTES)",
            headers={"Connection": "close"},
        )


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses a malformed length before the app sees it
    return None


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
            await self._refuse(send)
            return
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            # read outside a route (where the error handlers answer it): answer here
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
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
        await send({"type": "http.response.body", "body": body})
