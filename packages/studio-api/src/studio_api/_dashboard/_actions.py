"""The dashboard's forms (each one API request, made in process), login, logout, assets."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse

from .._auth import login_subject
from ._internal import ApiAnswer, call_api, has_route, stream_api
from ._pages import CANCEL_ROUTE, LOG_STREAM_ROUTE
from ._render import (
    SECURITY_HEADERS,
    STATIC_DIR,
    Visitor,
    render,
    safe_back,
    set_session_cookie,
    signer_of,
    visitor,
    with_flash,
)
from ._session import COOKIE_NAME

router = APIRouter(include_in_schema=False)

#: A dashboard form is a few short fields; anything larger is refused before it is parsed.
MAX_FORM_BYTES = 16 * 1024
_ASSETS = {"dashboard.css": "text/css", "dashboard.js": "text/javascript"}


class FormRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def read_form(request: Request) -> dict[str, str]:
    """The urlencoded form of a POST (first value of each field), bounded in size."""
    declared = request.headers.get("content-length", "0")
    if declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        raise FormRefused(413, f"body: larger than {MAX_FORM_BYTES} bytes")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise FormRefused(413, f"body: larger than {MAX_FORM_BYTES} bytes")
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=40)
    except (UnicodeDecodeError, ValueError) as exc:
        raise FormRefused(422, f"body: not a form ({exc})") from None
    return {name: values[0] for name, values in fields.items()}


def refused(request: Request, who: Visitor | None, status: int, message: str) -> HTMLResponse:
    return render(request, "error.html", who, status_code=status, title="Refused", message=message)


async def checked_form(request: Request) -> tuple[Visitor, dict[str, str]] | Response:
    """The visitor and form of a POST, or the refusal: 403 without a valid CSRF token."""
    who = visitor(request)
    if who is None or who.new_cookie is not None:
        # no session the form could have come from: nothing to check its token against
        return refused(request, None, 403, "csrf: no session; reload the page and try again")
    try:
        form = await read_form(request)
    except FormRefused as exc:
        return refused(request, who, exc.status, exc.message)
    if not signer_of(request).csrf_ok(who.session, form.get("csrf")):
        return refused(request, who, 403, "csrf: missing or wrong token; reload the page")
    return who, form


Action = Callable[[Request, str, dict[str, str]], Awaitable[ApiAnswer]]


def _api(method: str, template: str, body: Callable[[dict[str, str]], Any] | None = None) -> Action:
    async def act(request: Request, ident: str, form: dict[str, str]) -> ApiAnswer:
        path = template.format(id=quote(ident, safe=""))
        payload = body(form) if body is not None else None
        return await call_api(
            request.app, method, path, token=signer_of(request).token, json_body=payload
        )

    return act


def _disable_body(form: dict[str, str]) -> dict[str, Any] | None:
    reason = form.get("reason", "").strip()
    return {"reason": reason} if reason else None


# (what the form does, the API request it makes, the words of the notice on success)
ACTIONS: dict[tuple[str, str], tuple[Action, str]] = {
    ("schedules", "trigger"): (_api("POST", "/api/schedules/{id}/trigger"), "triggered"),
    ("schedules", "enable"): (_api("POST", "/api/schedules/{id}/enable"), "enabled"),
    ("schedules", "disable"): (
        _api("POST", "/api/schedules/{id}/disable", _disable_body),
        "disabled",
    ),
    ("runs", "cancel"): (_api("POST", CANCEL_ROUTE.replace("{run_id}", "{id}")), "cancelled"),
    ("dispatch", "retry"): (_api("POST", "/api/dispatch/{id}/retry"), "queued for retry"),
    # an operator's ack: the receiver's token is never shown on a page
    ("dispatch", "ack"): (
        _api("POST", "/api/dispatch/{id}/ack", lambda form: {"operator": True}),
        "acknowledged",
    ),
    ("dispatch", "purge"): (_api("DELETE", "/api/dispatch/{id}"), "purged"),
}


@router.post("/schedules/{ident}/{verb}")
async def schedule_action(request: Request, ident: str, verb: str) -> Response:
    """Trigger, Enable or Disable a schedule (Delete has its confirm step in ``_forms``)."""
    return await act(request, "schedules", ident, verb)


@router.post("/runs/{ident}/{verb}")
async def run_action(request: Request, ident: str, verb: str) -> Response:
    """Cancel a run."""
    return await act(request, "runs", ident, verb)


@router.post("/dispatch/{ident}/{verb}")
async def dispatch_action(request: Request, ident: str, verb: str) -> Response:
    """Retry, Ack or Purge an outbox row."""
    return await act(request, "dispatch", ident, verb)


async def act(request: Request, area: str, ident: str, verb: str) -> Response:
    """Run one form's API request; back to the page with the API's message (303)."""
    checked = await checked_form(request)
    if isinstance(checked, Response):
        return checked
    who, form = checked
    entry = ACTIONS.get((area, verb))
    if entry is None:
        return refused(request, who, 404, f"no action {verb!r} on {area}")
    action, done = entry
    back = safe_back(form.get("back"), f"/{area}")
    cancel_path = CANCEL_ROUTE.format(run_id=quote(ident, safe=""))
    if (area, verb) == ("runs", "cancel") and not has_route(request.app, "POST", cancel_path):
        return RedirectResponse(
            with_flash(back, error="Cancel is not available on this server"), status_code=303
        )
    answer = await action(request, ident, form)
    label = {"schedules": "Schedule", "runs": "Run", "dispatch": "Dispatch"}[area]
    if not answer.ok:
        return RedirectResponse(
            with_flash(back, error=f"{label} {ident}: {answer.detail}"), status_code=303
        )
    flash = {"notice": f"{label} {ident} {done}"}
    if verb == "trigger" and isinstance(answer.body, dict):
        flash["run"] = str(answer.body.get("run_id", ""))
    return RedirectResponse(with_flash(back, **flash), status_code=303)


@router.get("/runs/{run_id}/log/stream")
async def log_stream(request: Request, run_id: str) -> Response:
    """The run's log as Server-Sent Events, relayed from the API's stream route."""
    who = visitor(request)
    if who is None:
        return refused(request, None, 401, "log in first")
    path = LOG_STREAM_ROUTE.format(run_id=quote(run_id, safe=""))
    if not has_route(request.app, "GET", path):
        return refused(request, who, 404, "the run log is not available on this server")
    chunks = stream_api(request.app, path, token=signer_of(request).token)
    return StreamingResponse(
        chunks, media_type="text/event-stream", headers={"cache-control": "no-store"}
    )


@router.get("/login")
async def login_page(request: Request) -> Response:
    """The login form (only with a token configured; otherwise straight to the overview)."""
    signer = signer_of(request)
    if not signer.login_required:
        return RedirectResponse("/", status_code=303)
    session = signer.verify(request.cookies.get(COOKIE_NAME))
    cookie = None
    if session is None:
        session, cookie = signer.issue(authenticated=False)
    who = Visitor(session, cookie, signer.csrf_token(session))
    return render(
        request,
        "login.html",
        who,
        next=safe_back(request.query_params.get("next"), "/"),
        failed=request.query_params.get("failed") == "1",
    )


@router.post("/login")
async def login(request: Request) -> Response:
    """Exchange a token (``LIONAGI_STUDIO_AUTH_TOKEN`` or a scoped token of any role) for a
    logged-in session cookie (constant-time compares)."""
    signer = signer_of(request)
    session = signer.verify(request.cookies.get(COOKIE_NAME))
    try:
        form = await read_form(request)
    except FormRefused as exc:
        return refused(request, None, exc.status, exc.message)
    if not signer.csrf_ok(session, form.get("csrf")):
        return refused(request, None, 403, "csrf: missing or wrong token; reload the page")
    target = safe_back(form.get("next"), "/")
    if not signer.login_required:
        return RedirectResponse(target, status_code=303)
    subject = await login_subject(request.app, form.get("token", ""))
    if subject is None:
        return RedirectResponse(f"/login?failed=1&next={quote(target)}", status_code=303)
    _, cookie = signer.issue(authenticated=True, subject=subject)
    response = RedirectResponse(target, status_code=303)
    set_session_cookie(response, cookie, request)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    """End the session (its forms stop working too) and go back to the login form."""
    checked = await checked_form(request)
    if isinstance(checked, Response):
        return checked
    response = RedirectResponse("/login" if signer_of(request).login_required else "/", 303)
    response.delete_cookie(COOKIE_NAME, path="/", httponly=True, samesite="strict")
    return response


@router.get("/static/dashboard/{name}")
async def asset(name: str) -> Response:
    """The dashboard's own stylesheet and script (shipped in the package)."""
    media = _ASSETS.get(name)
    if media is None:
        return Response("not found", status_code=404, media_type="text/plain")
    headers = {**SECURITY_HEADERS, "cache-control": "max-age=300"}
    return Response((STATIC_DIR / name).read_bytes(), media_type=media, headers=headers)
