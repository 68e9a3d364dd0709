"""Bearer-token authentication for every route but ``/api/health`` (and the dashboard's pages,
which check their own session cookie)."""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send

from ._dashboard._paths import is_dashboard_path

#: Paths served without a token (liveness probes must work without the secret).
PUBLIC_PATHS = frozenset({"/api/health"})

_UNAUTHORIZED = json.dumps(
    {"detail": "Authorization: a valid 'Bearer <token>' header is required"}
).encode()


def token_matches(header_value: bytes | None, token: bytes) -> bool:
    """Whether an ``Authorization`` header value carries ``token`` (constant-time compare)."""
    if not header_value:
        return False
    scheme, _, credentials = header_value.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    # compare_digest's time depends only on the length of the secret, never on where the
    # first difference is.
    return hmac.compare_digest(credentials.strip(), token)


class BearerAuthMiddleware:
    """ASGI middleware: 401 for any HTTP request without the right bearer token.

    It wraps the whole application, so the OpenAPI document and unknown paths are covered as
    well as the API routes; only :data:`PUBLIC_PATHS` are exempt.
    """

    def __init__(self, app: ASGIApp, *, token: str, public: frozenset[str] = frozenset()) -> None:
        self.app = app
        self._token = token.encode("ascii")
        self._public = PUBLIC_PATHS | public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in self._public or is_dashboard_path(path):
            await self.app(scope, receive, send)
            return
        header = next(
            (value for name, value in scope.get("headers", ()) if name == b"authorization"),
            None,
        )
        if token_matches(header, self._token):
            await self.app(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(_UNAUTHORIZED)).encode()),
                    (b"www-authenticate", b'Bearer realm="studio"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": _UNAUTHORIZED})
