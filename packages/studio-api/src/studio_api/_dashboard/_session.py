"""Signed session cookies and CSRF tokens (stdlib ``hmac``; no extra dependency).

A session cookie is ``<nonce>.<expires>.<auth>.<signature>``: ``auth`` is ``1`` once the
visitor proved ``LIONAGI_STUDIO_AUTH_TOKEN`` at the login form, ``t<id>`` once they proved the
scoped token ``<id>`` (its role and liveness are read from the database on every request, so a
revoked token's sessions end at once), ``0`` for an anonymous session (which only exists to
carry a CSRF token for the login form, or for every form when no token is configured). The
signature is HMAC-SHA256 over the rest with a key derived from the auth token, so sessions
survive a restart without a new setting; without that token the key is random per process
(sessions of scoped tokens then last as long as the process).
The CSRF token of a form is HMAC(key, "csrf:" + nonce): it is bound to the session, and a new
session (login, logout) invalidates the forms of the old one.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from .._auth_context import DASHBOARD_AUTH

COOKIE_NAME = "studio_session"
#: How long a session (and the forms it issued) lasts, in seconds.
SESSION_SECONDS = 12 * 3600
_SUBJECT = re.compile(r"0|1|t[0-9a-f]{12}")


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
        """Whether a visitor must log in (a token is configured, or the database holds a live
        scoped token: the auth middleware decides per request)."""
        auth = DASHBOARD_AUTH.get()
        if auth is not None:
            return auth.enforced
        return self.token is not None

    def _sign(self, message: str) -> str:
        return hmac.new(self._key, message.encode(), hashlib.sha256).hexdigest()

    def issue(self, *, authenticated: bool, subject: str | None = None) -> tuple[Session, str]:
        """A fresh session and its cookie value (``subject``: who logged in, see above)."""
        nonce = secrets.token_hex(16)
        expires = int(self._clock()) + SESSION_SECONDS
        auth = subject if subject is not None else ("1" if authenticated else "0")
        body = f"{nonce}.{expires}.{auth}"
        return Session(nonce, expires, authenticated), f"{body}.{self._sign(body)}"

    def _parse(self, cookie: str | None) -> tuple[str, int, str] | None:
        if not cookie or len(cookie) > 256:
            return None
        body, _, signature = cookie.rpartition(".")
        if not hmac.compare_digest(self._sign(body), signature):
            return None
        nonce, _, rest = body.partition(".")
        expires_text, _, auth = rest.partition(".")
        if not expires_text.isdigit() or not _SUBJECT.fullmatch(auth):
            return None
        expires = int(expires_text)
        if expires <= self._clock():
            return None
        return nonce, expires, auth

    def subject_of(self, cookie: str | None) -> str | None:
        """Who a valid cookie says logged in (``0``, ``1`` or ``t<id>``), else ``None``."""
        parsed = self._parse(cookie)
        return parsed[2] if parsed is not None else None

    def verify(self, cookie: str | None) -> Session | None:
        """The session a cookie carries, or ``None`` when it is missing, forged or expired.

        It counts as logged in when no login is required, or when the auth middleware found
        its subject live for this request.
        """
        parsed = self._parse(cookie)
        if parsed is None:
            return None
        nonce, expires, auth = parsed
        auth_now = DASHBOARD_AUTH.get()
        if auth_now is not None:
            live = auth != "0" and auth_now.principal is not None
        else:
            live = auth == "1"
        return Session(nonce, expires, live or not self.login_required)

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
