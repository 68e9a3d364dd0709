"""Signed session cookies and CSRF tokens (stdlib ``hmac``; no extra dependency).

A session cookie is ``<nonce>.<expires>.<auth>.<signature>``: ``auth`` is ``1`` once the
visitor proved the token at the login form, ``0`` for an anonymous session (which only exists
to carry a CSRF token for the login form, or for every form when no token is configured). The
signature is HMAC-SHA256 over the rest with a key derived from the auth token, so sessions
survive a restart without a new setting; without a token the key is random per process.
The CSRF token of a form is HMAC(key, "csrf:" + nonce): it is bound to the session, and a new
session (login, logout) invalidates the forms of the old one.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

COOKIE_NAME = "studio_session"
#: How long a session (and the forms it issued) lasts, in seconds.
SESSION_SECONDS = 12 * 3600


@dataclass(frozen=True)
class Session:
    """A verified session: its nonce, expiry (epoch seconds) and whether it is logged in."""

    nonce: str
    expires: int
    authenticated: bool


class SessionSigner:
    """Issue and verify session cookies and CSRF tokens for one app.

    ``token`` is the configured auth token (``None``: the dashboard is open and every session
    counts as authenticated).
    """

    def __init__(self, token: str | None, *, clock: Callable[[], float] = time.time) -> None:
        self.token = token
        seed = token.encode() if token is not None else secrets.token_bytes(32)
        self._key = hmac.new(seed, b"studio-dashboard-session-v1", hashlib.sha256).digest()
        self._clock = clock

    @property
    def login_required(self) -> bool:
        """Whether a visitor must log in (a token is configured)."""
        return self.token is not None

    def _sign(self, message: str) -> str:
        return hmac.new(self._key, message.encode(), hashlib.sha256).hexdigest()

    def issue(self, *, authenticated: bool) -> tuple[Session, str]:
        """A fresh session and its cookie value."""
        nonce = secrets.token_hex(16)
        expires = int(self._clock()) + SESSION_SECONDS
        body = f"{nonce}.{expires}.{1 if authenticated else 0}"
        return Session(nonce, expires, authenticated), f"{body}.{self._sign(body)}"

    def verify(self, cookie: str | None) -> Session | None:
        """The session a cookie carries, or ``None`` when it is missing, forged or expired."""
        if not cookie or len(cookie) > 256:
            return None
        body, _, signature = cookie.rpartition(".")
        if not hmac.compare_digest(self._sign(body), signature):
            return None
        nonce, _, rest = body.partition(".")
        expires_text, _, auth = rest.partition(".")
        if not expires_text.isdigit() or auth not in ("0", "1"):
            return None
        expires = int(expires_text)
        if expires <= self._clock():
            return None
        return Session(nonce, expires, auth == "1" or not self.login_required)

    def csrf_token(self, session: Session) -> str:
        """The CSRF token every form of ``session`` carries."""
        return self._sign(f"csrf:{session.nonce}")

    def csrf_ok(self, session: Session | None, submitted: str | None) -> bool:
        """Whether ``submitted`` is the CSRF token of ``session`` (constant-time compare)."""
        if session is None or not submitted:
            return False
        return hmac.compare_digest(self.csrf_token(session), submitted)

    def token_ok(self, submitted: str) -> bool:
        """Whether ``submitted`` is the configured auth token (constant-time compare)."""
        if self.token is None:
            return True
        return hmac.compare_digest(submitted.encode(), self.token.encode())
