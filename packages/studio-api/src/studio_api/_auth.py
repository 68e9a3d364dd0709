"""Bearer-token authentication and roles for every route but ``/api/health``.

When it is enforced: whenever ``LIONAGI_STUDIO_AUTH_TOKEN`` is set (an ``admin`` token) or the
database holds at least one live scoped token (``studio token create``). A Studio with
neither is open, as before tokens existed (and binding beyond loopback still needs
``LIONAGI_STUDIO_AUTH_TOKEN``: the settings refuse it otherwise). Whether live tokens exist is
read at most once a second; a presented scoped token is checked against the database on every
request (one indexed read), so a revoked or expired token is refused at once on every node.

No token, a wrong, revoked or expired one: 401. A token whose role is below the route's
(:mod:`studio_api._roles`): 403 ``{"detail", "required_role"}``. The dashboard's pages check
their own session cookie; this middleware resolves the visitor's principal for them.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from ._auth_context import CLAIM_SCOPE_KEY, DASHBOARD_AUTH, OPEN, STATE_KEY, DashboardAuth
from ._dashboard._paths import is_dashboard_path
from ._dashboard._session import COOKIE_NAME
from ._roles import PUBLIC_PATHS as PUBLIC_PATHS
from ._roles import RouteRoles
from ._tokens import Principal, any_live_token, find_token, role_allows
from ._tokens.store import principal_of_id

logger = logging.getLogger("studio_api.auth")

#: The actor name of requests made with ``LIONAGI_STUDIO_AUTH_TOKEN``.
ADMIN_TOKEN_ACTOR = "auth-token"  # noqa: S105 - an actor name, not a secret
#: How long "the database holds a live token" is believed (seconds).
ENFORCEMENT_CACHE_SECONDS = 1.0
#: ``last_used_at`` of a token is written at most this often per process (seconds).
TOUCH_INTERVAL_SECONDS = 60.0

_UNAUTHORIZED = json.dumps(
    {"detail": "Authorization: a valid 'Bearer <token>' header is required"}
).encode()


def token_matches(header_value: bytes | None, token: bytes) -> bool:
    """Whether an ``Authorization`` header value carries ``token`` (constant-time compare)."""
    credentials = bearer_credentials(header_value)
    # compare_digest's time depends only on the length of the secret, never on where the
    # first difference is.
    return credentials is not None and hmac.compare_digest(credentials, token)


def bearer_credentials(header_value: bytes | None) -> bytes | None:
    """The credentials of a ``Bearer`` header value, or ``None``."""
    if not header_value:
        return None
    scheme, _, credentials = header_value.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    return credentials.strip()


class AuthMiddleware:
    """ASGI middleware: who a request is, and whether its role may use the route.

    It wraps the whole application, so the OpenAPI document and unknown paths are covered as
    well as the API routes; only :data:`PUBLIC_PATHS` (and ``public``) are exempt.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        owner: FastAPI,
        admin_token: str | None,
        public: frozenset[str] = frozenset(),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.app = app
        self._owner = owner
        self._admin = admin_token.encode("ascii") if admin_token is not None else None
        self._public = PUBLIC_PATHS | public
        self._clock = clock
        self._roles: RouteRoles | None = None
        self._live_checked = -1e18
        self._live = False
        self._touched: dict[str, float] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in self._public:
            await self.app(scope, receive, send)
            return
        try:
            enforced = await self._enforced()
        except Exception as exc:  # the database is unreadable: say so, never serve unchecked
            logger.warning("auth: cannot read the tokens: %s", exc)
            await _answer(send, 503, {"detail": f"database: cannot check tokens ({exc})"})
            return
        if is_dashboard_path(path):
            principal = await self._visitor(scope) if enforced else OPEN
            reset = DASHBOARD_AUTH.set(DashboardAuth(enforced, principal))
            try:
                await self.app(scope, receive, send)
            finally:
                DASHBOARD_AUTH.reset(reset)
            return
        claimed = scope.get(CLAIM_SCOPE_KEY)
        if isinstance(claimed, Principal):
            resolved: Principal | None = claimed
        elif not enforced:
            resolved = OPEN
        else:
            resolved = await self._bearer(scope)
        if resolved is None:
            await _answer(
                send, 401, _UNAUTHORIZED, headers=((b"www-authenticate", b'Bearer realm="studio"'),)
            )
            return
        required = self._route_roles().required(scope)
        if not role_allows(resolved.role, required):
            detail = f"role: this needs the {required} role; the token's role is {resolved.role}"
            await _answer(send, 403, {"detail": detail, "required_role": required})
            return
        scope.setdefault("state", {})[STATE_KEY] = resolved
        await self.app(scope, receive, send)

    def _route_roles(self) -> RouteRoles:
        if self._roles is None:
            self._roles = RouteRoles(self._owner.router.routes)
        return self._roles

    def _conn(self) -> Any:
        reads = getattr(self._owner.state, "reads", None)
        return reads.conn if reads is not None else None

    async def _enforced(self) -> bool:
        if self._admin is not None:
            return True
        conn = self._conn()
        if conn is None:
            return False
        now = self._clock()
        if now - self._live_checked >= ENFORCEMENT_CACHE_SECONDS:
            self._live = await any_live_token(conn, now=now)
            self._live_checked = now
        return self._live

    async def _bearer(self, scope: Scope) -> Principal | None:
        header = next(
            (value for name, value in scope.get("headers", ()) if name == b"authorization"),
            None,
        )
        credentials = bearer_credentials(header)
        if not credentials:
            return None
        return await self.principal_of_token(credentials.decode("latin-1"))

    async def principal_of_token(self, text: str) -> Principal | None:
        """The principal ``text`` (a presented token) stands for, or ``None``."""
        if self._admin is not None and hmac.compare_digest(text.encode("latin-1"), self._admin):
            return Principal(ADMIN_TOKEN_ACTOR, "admin")
        conn = self._conn()
        if conn is None:
            return None
        now = self._clock()
        principal = await find_token(conn, text, now=now)
        if principal is not None and principal.token_id is not None:
            await self._touch(principal.token_id, now)
        return principal

    async def _visitor(self, scope: Scope) -> Principal | None:
        signer = getattr(self._owner.state, "dashboard_signer", None)
        cookie = _cookie(scope, COOKIE_NAME)
        if signer is None or cookie is None:
            return None
        subject = signer.subject_of(cookie)
        if subject == "1" and self._admin is not None:
            return Principal(ADMIN_TOKEN_ACTOR, "admin")
        if subject is not None and subject.startswith("t") and (conn := self._conn()) is not None:
            now = self._clock()
            principal = await principal_of_id(conn, subject[1:], now=now)
            if principal is not None and principal.token_id is not None:
                await self._touch(principal.token_id, now)
            return principal
        return None

    async def _touch(self, token_id: str, now: float) -> None:
        if now - self._touched.get(token_id, -1e18) < TOUCH_INTERVAL_SECONDS:
            return
        self._touched[token_id] = now
        engine = getattr(self._owner.state, "engine", None)
        if engine is None:
            return
        from ._tokens import touch_token

        try:
            await touch_token(engine.conn, token_id, now=now)
        except Exception as exc:  # a busy database must not refuse the request
            logger.warning("auth: could not record the use of token %s: %s", token_id, exc)


def _cookie(scope: Scope, name: str) -> str | None:
    header: bytes
    value: bytes
    for header, value in scope.get("headers", ()):
        if header == b"cookie":
            for part in value.decode("latin-1").split(";"):
                key, _, content = part.strip().partition("=")
                if key == name:
                    return content
    return None


async def _answer(
    send: Send,
    status: int,
    body: bytes | dict[str, Any],
    headers: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(raw)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": raw})


async def login_subject(app: FastAPI, text: str) -> str | None:
    """What a dashboard session records for a token typed at the login form: ``"1"`` for
    ``LIONAGI_STUDIO_AUTH_TOKEN``, ``"t<id>"`` for a live scoped token, else ``None``."""
    settings = app.state.settings
    if settings.auth_token is not None and hmac.compare_digest(
        text.encode(), settings.auth_token.get_secret_value().encode()
    ):
        return "1"
    reads = getattr(app.state, "reads", None)
    if reads is None:
        return None
    principal = await find_token(reads.conn, text, now=time.time())
    return None if principal is None or principal.token_id is None else f"t{principal.token_id}"
