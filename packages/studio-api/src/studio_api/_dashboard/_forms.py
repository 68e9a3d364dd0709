"""The schedule forms: create (on the schedules page) and delete / force-delete (a confirm page).

Each form becomes the request a client of the API would send (``POST /api/schedules``,
``DELETE /api/schedules/{id}``, ``DELETE ...?force=true``), made in process: the API's route,
validation and messages decide, and a refusal is shown inline with what was typed kept.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from ._actions import checked_form
from ._internal import call_api
from ._pages import api_get, schedules_page
from ._render import Visitor, render, safe_back, signer_of, to_login, visitor, with_flash

router = APIRouter(include_in_schema=False)

#: The fields of the create form (named as the API names them, so a refusal's ``field``
#: points at its input).
CREATE_FIELDS = (
    "name",
    "description",
    "trigger_type",
    "cron_expr",
    "interval_sec",
    "timezone",
    "action_kind",
    "action_command",
    "action_command_args",
    "action_prompt",
    "action_playbook",
    "action_cwd",
    "timeout_sec",
    "enabled",
)
#: Trigger types and action kinds the form offers (the API takes the others; the page says so).
FORM_TRIGGERS = ("interval", "cron")
FORM_KINDS = ("command", "agent", "playbook")
_OPTIONAL_TEXT = ("description", "timezone", "action_cwd")


def duration_value(text: str) -> int | str:
    """A ``*_sec`` input as the API takes it: whole seconds typed as digits become an integer
    (the API reads a string as a duration with a unit, ``"15m"``); anything else goes as typed,
    for the API to accept or refuse naming the field."""
    typed = text.strip()
    return int(typed) if typed.isascii() and typed.isdigit() and len(typed) < 19 else typed


def argv_lines(text: str) -> list[str]:
    """The command's arguments: one per line, as typed (no shell splitting); blank lines drop."""
    return [line for line in text.replace("\r\n", "\n").split("\n") if line.strip()]


def schedule_body(form: dict[str, str]) -> dict[str, Any]:
    """The ``POST /api/schedules`` body of a create form.

    Values go to the API as typed (numbers as text: the API's model converts or refuses
    them, naming the field; whole seconds as integers, see :func:`duration_value`); only the
    inputs of the chosen trigger type and action kind are sent, so a field left filled under
    another choice does not count.
    """
    trigger = form.get("trigger_type", "")
    kind = form.get("action_kind", "")
    body: dict[str, Any] = {
        "name": form.get("name", ""),
        "trigger_type": trigger,
        "action_kind": kind,
        "enabled": form.get("enabled") == "on",
    }
    for field in _OPTIONAL_TEXT:
        if form.get(field, "").strip():
            body[field] = form[field].strip()
    if form.get("timeout_sec", "").strip():
        body["timeout_sec"] = duration_value(form["timeout_sec"])
    if trigger == "cron" and form.get("cron_expr", "").strip():
        body["cron_expr"] = form["cron_expr"]
    elif trigger == "interval" and form.get("interval_sec", "").strip():
        body["interval_sec"] = duration_value(form["interval_sec"])
    if kind == "command":
        if form.get("action_command", "").strip():
            body["action_command"] = form["action_command"].strip()
        args = argv_lines(form.get("action_command_args", ""))
        if args:
            body["action_command_args"] = args
    elif kind in ("agent", "playbook"):
        if form.get("action_prompt", "").strip():
            body["action_prompt"] = form["action_prompt"]
        if kind == "playbook" and form.get("action_playbook", "").strip():
            body["action_playbook"] = form["action_playbook"].strip()
    return body


@router.post("/schedules")
async def create_schedule(request: Request) -> Response:
    """Create a schedule from the form; on refusal the page again, the API's message inline."""
    checked = await checked_form(request)
    if isinstance(checked, Response):
        return checked
    who, form = checked
    typed = {name: form.get(name, "") for name in CREATE_FIELDS}
    answer = await call_api(
        request.app,
        "POST",
        "/api/schedules",
        token=signer_of(request).token,
        json_body=schedule_body(form),
    )
    if answer.ok:
        created = answer.body if isinstance(answer.body, dict) else {}
        target = with_flash("/schedules", notice=f"Schedule {created.get('name', '')} created")
        return RedirectResponse(target, status_code=303)
    field = answer.body.get("field") if isinstance(answer.body, dict) else None
    status = answer.status if answer.status in (409, 413, 422, 503) else 502
    return await schedules_page(
        request,
        who,
        form=typed,
        form_error={"detail": answer.detail, "field": _input_of(field)},
        status_code=status,
    )


def _input_of(field: object) -> str | None:
    """The form input a refusal's ``field`` names (``action_command_args.0`` → its textarea)."""
    if not isinstance(field, str):
        return None
    head = field.split(".", 1)[0]
    return head if head in CREATE_FIELDS else None


@router.get("/schedules/{schedule_id}/delete")
async def confirm_delete(request: Request, schedule_id: str) -> Response:
    """The confirm step of Delete; after a 409, the API's message and "Cancel runs and delete"."""
    who = visitor(request)
    if who is None:
        return to_login(request)
    return await _confirm_page(request, who, schedule_id)


async def _confirm_page(request: Request, who: Visitor, schedule_id: str) -> Response:
    path = f"/api/schedules/{quote(schedule_id, safe='')}"
    answer = await api_get(request, path)
    if not answer.ok:
        status = answer.status if answer.status in (404, 503) else 502
        return render(
            request, "error.html", who, status_code=status, title="Delete", message=answer.detail
        )
    running = await api_get(request, f"{path}/runs", status="running", limit=1)
    runs = await api_get(request, f"{path}/runs", limit=1)
    query = request.query_params
    return render(
        request,
        "delete.html",
        who,
        schedule=answer.body,
        running=running.body["total"] if running.ok else None,
        runs_total=runs.body["total"] if runs.ok else None,
        refused=query.get("refused"),
        offer_force=query.get("force") == "offer",
        back=_back(query.get("back"), schedule_id),
    )


def _back(target: str | None, schedule_id: str) -> str:
    """Where Keep it / a deletion goes: never the page of the schedule just deleted."""
    back = safe_back(target, "/schedules")
    own = f"/schedules/{schedule_id}"
    return "/schedules" if back == own or back.startswith(own + "?") else back


@router.post("/schedules/{schedule_id}/delete")
async def delete_schedule(request: Request, schedule_id: str) -> Response:
    """``DELETE /api/schedules/{id}``: refused (409) while runs are running."""
    return await _delete(request, schedule_id, force=False)


@router.post("/schedules/{schedule_id}/force-delete")
async def force_delete_schedule(request: Request, schedule_id: str) -> Response:
    """``DELETE /api/schedules/{id}?force=true``: cancel the running runs, then delete."""
    return await _delete(request, schedule_id, force=True)


async def _delete(request: Request, schedule_id: str, *, force: bool) -> Response:
    checked = await checked_form(request)
    if isinstance(checked, Response):
        return checked
    who, form = checked
    back = _back(form.get("back"), schedule_id)
    path = f"/api/schedules/{quote(schedule_id, safe='')}" + ("?force=true" if force else "")
    answer = await call_api(request.app, "DELETE", path, token=signer_of(request).token)
    if answer.ok:
        name = answer.body.get("name", schedule_id) if isinstance(answer.body, dict) else ""
        done = "deleted; its running runs were cancelled" if force else "deleted"
        return RedirectResponse(with_flash(back, notice=f"Schedule {name} {done}"), 303)
    if answer.status == 404:
        return RedirectResponse(with_flash(back, error=f"Schedule: {answer.detail}"), 303)
    query = {"back": back, "refused": answer.detail}
    if answer.status == 409:
        query["force"] = "offer"
    target = f"/schedules/{quote(schedule_id, safe='')}/delete?{urlencode(query)}"
    return RedirectResponse(target, status_code=303)
