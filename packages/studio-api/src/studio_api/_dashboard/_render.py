"""Templates, the visitor's session and the answers every dashboard route shares."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from .. import _roles
from .._auth_context import dashboard_principal, may
from . import _format
from ._session import COOKIE_NAME, SESSION_SECONDS, Session, SessionSigner

HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
PAGE_SIZE = 50

#: Pages never load anything from another origin; scripts and styles are the package's own.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}

_env = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters.update(
    duration=_format.duration,
    utc=_format.utc_time,
    icon=_format.status_icon,
    tone=_format.status_tone,
    code_breaks=_format.code_breaks,
    meaning=_format.verdict_meaning,
)


def signer_of(request: Request) -> SessionSigner:
    signer: SessionSigner = request.app.state.dashboard_signer
    return signer


@dataclass
class Visitor:
    """Who is asking: a verified session, or a fresh one to set on the answer."""

    session: Session
    new_cookie: str | None
    csrf: str


def visitor(request: Request) -> Visitor | None:
    """The visitor's session; ``None`` when a token is configured and they are not logged in.

    Without a token every visitor gets a session (it carries the CSRF token of the forms).
    """
    signer = signer_of(request)
    session = signer.verify(request.cookies.get(COOKIE_NAME))
    if session is not None and session.authenticated:
        return Visitor(session, None, signer.csrf_token(session))
    if signer.login_required:
        return None
    session, cookie = signer.issue(authenticated=True)
    return Visitor(session, cookie, signer.csrf_token(session))


def set_session_cookie(response: Response, cookie: str, request: Request) -> None:
    response.set_cookie(
        COOKIE_NAME,
        cookie,
        max_age=SESSION_SECONDS,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


def to_login(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?{urlencode({'next': target})}", status_code=303)


def render(
    request: Request,
    template: str,
    who: Visitor | None,
    *,
    status_code: int = 200,
    **context: Any,
) -> HTMLResponse:
    """Render ``template`` with the context every page uses (nav, flash messages, CSRF)."""
    settings = request.app.state.settings
    page = _env.get_template(template).render(
        request=request,
        path=request.url.path,
        csrf=who.csrf if who is not None else "",
        login_required=signer_of(request).login_required,
        logged_in=who is not None and who.session.authenticated,
        notice=request.query_params.get("notice"),
        error=request.query_params.get("error"),
        started_run=request.query_params.get("run"),
        here=_here(request),
        now=time.time(),
        server_zone=settings.timezone,
        zone_of=lambda name: _format.zone_of(name, settings.timezone),
        local=_format.local_time,
        run_duration=_format.run_duration,
        # the visitor's role: forms it may not use are not shown (the API refuses them anyway)
        can=may,
        may_form=lambda url: may(_roles.form_role(url)),
        principal=dashboard_principal(),
        **context,
    )
    response = HTMLResponse(page, status_code=status_code, headers=SECURITY_HEADERS)
    if who is not None and who.new_cookie is not None:
        set_session_cookie(response, who.new_cookie, request)
    return response


def _here(request: Request) -> str:
    """This page's path and query without the flash parameters (where a form comes back to)."""
    query = [
        (k, v) for k, v in request.query_params.multi_items() if k not in ("notice", "error", "run")
    ]
    return request.url.path + (f"?{urlencode(query)}" if query else "")


def page_links(request: Request, offset: int, total: int) -> dict[str, str | None]:
    """The previous / next page URLs of a paginated list (``None`` at either end)."""
    query = {k: v for k, v in request.query_params.items() if k not in ("notice", "error", "run")}

    def at(position: int) -> str:
        return request.url.path + "?" + urlencode({**query, "offset": str(position)})

    return {
        "prev": at(max(0, offset - PAGE_SIZE)) if offset > 0 else None,
        "next": at(offset + PAGE_SIZE) if offset + PAGE_SIZE < total else None,
    }


def safe_back(target: str | None, fallback: str) -> str:
    """A same-site path to return to after a form (never another origin)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return fallback
    return target


def with_flash(target: str, **flash: str) -> str:
    joiner = "&" if "?" in target else "?"
    return target + joiner + urlencode(flash)
