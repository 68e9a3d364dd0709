"""The dashboard's Audit page: the audit trail (``GET /api/audit``), newest first."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ._pages import api_get
from ._render import PAGE_SIZE, render, to_login, visitor

router = APIRouter(include_in_schema=False)

_FILTERS = ("actor", "entity", "since", "until")


@router.get("/audit")
async def audit_page(request: Request) -> Response:
    """Who changed what, filtered by actor, entity and time; "Older" follows the cursor."""
    who = visitor(request)
    if who is None:
        return to_login(request)
    filters = {name: request.query_params.get(name, "").strip() for name in _FILTERS}
    cursor = request.query_params.get("cursor", "")
    answer = await api_get(request, "/api/audit", limit=PAGE_SIZE, cursor=cursor, **filters)
    if not answer.ok:
        return render(
            request,
            "audit.html",
            who,
            status_code=answer.status if answer.status in (404, 422, 503) else 502,
            entries=[],
            filters=filters,
            older=None,
            problem=answer.detail,
        )
    following = answer.body.get("next_cursor")
    older = None
    if following:
        kept = {name: value for name, value in filters.items() if value}
        older = "/audit?" + urlencode({**kept, "cursor": following})
    return render(
        request,
        "audit.html",
        who,
        entries=answer.body["entries"],
        filters=filters,
        older=older,
        problem=None,
    )
