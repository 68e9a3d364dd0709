"""The schedule edit form: ``GET /schedules/{id}/edit`` shows it filled in, ``POST`` sends
``PATCH /api/schedules/{id}`` with the fields the visitor changed (in process: the API's
validation decides, and a refusal is shown beside the field it names, what was typed kept).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from ._actions import checked_form
from ._forms import argv_lines, duration_value
from ._internal import call_api
from ._pages import api_get
from ._render import Visitor, render, signer_of, to_login, visitor, with_flash

router = APIRouter(include_in_schema=False)

#: Text inputs of the form, named as ``PATCH`` names them (so a refusal's ``field`` finds its
#: input); blank clears an optional field (``null``). The JSON-valued fields (follow-ups,
#: notify, retry, filters, thresholds) are changed through the API.
TEXT_FIELDS = (
    "name",
    "description",
    "cron_expr",
    "interval_sec",
    "github_repo",
    "poll_interval_sec",
    "timezone",
    "action_command",
    "action_model",
    "action_prompt",
    "action_playbook",
    "action_cwd",
    "timeout_sec",
    "catchup_window_sec",
    "jitter_sec",
    "max_runs",
    "budget_usd",
    "budget_tokens",
)
CHOICE_FIELDS = {
    "overlap_policy": ("skip", "allow", "buffer_one", "buffer_all", "cancel_other"),
    "missed_fire_policy": ("skip", "run_once"),
}
LIST_FIELDS = ("action_command_args",)
CHECK_FIELDS = ("pause_on_failure",)
EDIT_FIELDS = (*TEXT_FIELDS, *CHOICE_FIELDS, *LIST_FIELDS, *CHECK_FIELDS)
#: Fields a schedule must keep: blank is sent as typed (the API names what is wrong).
_REQUIRED = frozenset({"name"})


def form_values(schedule: dict[str, Any]) -> dict[str, str]:
    """The form's inputs filled in from a stored schedule (what the visitor starts from)."""
    values: dict[str, str] = {}
    for name in (*TEXT_FIELDS, *CHOICE_FIELDS):
        value = schedule.get(name)
        values[name] = "" if value is None else str(value)
    for name in LIST_FIELDS:
        values[name] = "\n".join(str(word) for word in schedule.get(name) or [])
    for name in CHECK_FIELDS:
        values[name] = "on" if schedule.get(name) else ""
    return values


def patch_body(form: dict[str, str], before: dict[str, str]) -> dict[str, Any]:
    """The ``PATCH`` body: each field whose input differs from ``before`` (the stored values).

    Text goes as typed (numbers too: the API converts or refuses them, naming the field;
    whole seconds of a ``*_sec`` field as an integer); a blank optional input becomes ``null``;
    arguments are one per line, no shell splitting.
    """
    body: dict[str, Any] = {}
    for name in (*TEXT_FIELDS, *CHOICE_FIELDS):
        if name not in form:  # not shown for this trigger type / action kind
            continue
        typed = form[name].strip()
        if typed == before.get(name, ""):
            continue
        if name.endswith("_sec") and typed:
            body[name] = duration_value(typed)
        else:
            body[name] = typed if typed or name in _REQUIRED else None
    for name in LIST_FIELDS:
        if name not in form:
            continue
        words = argv_lines(form[name])
        if "\n".join(words) != before.get(name, ""):
            body[name] = words or None
    for name in CHECK_FIELDS:
        checked = form.get(name) == "on"
        if checked != (before.get(name) == "on"):
            body[name] = checked
    return body


def _input_of(field: object) -> str | None:
    if not isinstance(field, str):
        return None
    head = field.split(".", 1)[0]
    return head if head in EDIT_FIELDS else None


async def _page(
    request: Request,
    who: Visitor,
    schedule_id: str,
    *,
    typed: dict[str, str] | None = None,
    form_error: dict[str, str | None] | None = None,
    status_code: int = 200,
) -> Response:
    answer = await api_get(request, f"/api/schedules/{quote(schedule_id, safe='')}")
    if not answer.ok:
        status = answer.status if answer.status in (404, 503) else 502
        return render(
            request, "error.html", who, status_code=status, title="Edit", message=answer.detail
        )
    return render(
        request,
        "edit.html",
        who,
        status_code=status_code,
        schedule=answer.body,
        form=typed if typed is not None else form_values(answer.body),
        form_error=form_error,
        choices=CHOICE_FIELDS,
    )


@router.get("/schedules/{schedule_id}/edit")
async def edit_form(request: Request, schedule_id: str) -> Response:
    """The edit form, filled in with the schedule's current values."""
    who = visitor(request)
    if who is None:
        return to_login(request)
    return await _page(request, who, schedule_id)


@router.post("/schedules/{schedule_id}/edit")
async def edit_schedule(request: Request, schedule_id: str) -> Response:
    """Send the changed fields as ``PATCH /api/schedules/{id}``; on refusal the form again."""
    checked = await checked_form(request)
    if isinstance(checked, Response):
        return checked
    who, form = checked
    path = f"/api/schedules/{quote(schedule_id, safe='')}"
    current = await api_get(request, path)
    if not current.ok:
        return await _page(request, who, schedule_id)
    typed = {name: form[name] for name in EDIT_FIELDS if name in form}
    body = patch_body(form, form_values(current.body))
    own = f"/schedules/{quote(schedule_id, safe='')}"
    if not body:
        return RedirectResponse(with_flash(own, notice="Nothing changed"), status_code=303)
    token = signer_of(request).token
    answer = await call_api(request.app, "PATCH", path, token=token, json_body=body)
    if answer.ok:
        changed = ", ".join(sorted(body))
        return RedirectResponse(with_flash(own, notice=f"Schedule saved ({changed})"), 303)
    field = answer.body.get("field") if isinstance(answer.body, dict) else None
    status = answer.status if answer.status in (403, 409, 413, 422, 503) else 502
    return await _page(
        request,
        who,
        schedule_id,
        typed=typed,
        form_error={"detail": answer.detail, "field": _input_of(field)},
        status_code=status,
    )
