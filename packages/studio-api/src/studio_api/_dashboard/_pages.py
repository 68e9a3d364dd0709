"""The dashboard's pages: overview, schedules, schedule, runs, run, dispatch."""

from __future__ import annotations

import dataclasses
import functools
import time
import zoneinfo
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response
from markupsafe import Markup

from studio_outbox import DISPATCH_STATUSES
from studio_scheduler_core import (
    FINAL_RUN_STATUSES,
    HEALTH_VERDICTS,
    RUN_STATUSES,
    TRIGGER_TYPES,
    read_activity,
    read_health_counts,
    read_overview,
    read_runs_page,
    schedules_have_zones,
)

from ._charts import ACTIVITY_SERIES, STRIP_RUNS, activity_chart, run_strip
from ._internal import ApiAnswer, call_api, has_route
from ._render import PAGE_SIZE, Visitor, page_links, render, signer_of, to_login, visitor

router = APIRouter(include_in_schema=False)

LOG_STREAM_ROUTE = "/api/schedules/runs/{run_id}/log/stream"
CANCEL_ROUTE = "/api/schedules/runs/{run_id}/cancel"


async def api_get(request: Request, path: str, **query: Any) -> ApiAnswer:
    """GET an API route in process (its validation, its errors) with the non-empty ``query``."""
    params = {k: v for k, v in query.items() if v not in (None, "")}
    target = path + (f"?{urlencode(params)}" if params else "")
    return await call_api(request.app, "GET", target, token=signer_of(request).token)


@functools.cache
def zone_datalist() -> Markup:
    """The IANA zone names the create form suggests (the API checks what is typed), built
    once: ~600 options are not re-rendered on every page."""
    names = sorted(zoneinfo.available_timezones())
    options = Markup("").join(Markup('<option value="{}">').format(name) for name in names)
    return Markup('<datalist id="zone-names">{}</datalist>').format(options)


def _offset(request: Request) -> int:
    text = request.query_params.get("offset", "0")
    return int(text) if text.isdigit() and len(text) < 12 else 0


async def _zones(request: Request) -> bool:
    state = request.app.state
    if getattr(state, "dashboard_zones", None) is None:
        state.dashboard_zones = await schedules_have_zones(state.engine.conn)
    return bool(state.dashboard_zones)


def _unavailable(request: Request) -> str | None:
    problem = request.app.state.engine.health().get("database_error")
    return str(problem) if problem else None


def _failed(request: Request, who: Any, answer: ApiAnswer, what: str) -> Response:
    status = answer.status if answer.status in (404, 409, 422, 503) else 502
    return render(request, "error.html", who, status_code=status, title=what, message=answer.detail)


@router.get("/")
async def overview(request: Request) -> Response:
    """Health strip, in-flight runs, next fires, recent failures, dispatch backlog."""
    who = visitor(request)
    if who is None:
        return to_login(request)
    health = await api_get(request, "/api/health")
    problem = _unavailable(request)
    if problem is not None:
        return render(
            request, "error.html", who, status_code=503, title="Overview", message=problem
        )
    conn = request.app.state.engine.conn
    data = await read_overview(conn, zones=await _zones(request))
    now = time.time()
    activity = await read_activity(conn, window="24h", now=now)
    counts = await read_health_counts(conn, now=now)
    return render(
        request,
        "overview.html",
        who,
        health=health.body if health.ok else None,
        dispatch_statuses=DISPATCH_STATUSES,
        activity=activity_chart(activity.buckets),
        completion_rate=activity.completion_rate,
        activity_series=ACTIVITY_SERIES,
        verdicts=[(name, counts[name]) for name in HEALTH_VERDICTS],
        **dataclasses.asdict(data),  # the templates read the run rows as mappings
    )


@router.get("/schedules")
async def schedules(request: Request) -> Response:
    """Schedules, filtered by enabled state and trigger type, a page at a time; the create form."""
    who = visitor(request)
    if who is None:
        return to_login(request)
    return await schedules_page(request, who)


async def schedules_page(
    request: Request,
    who: Visitor,
    *,
    form: dict[str, str] | None = None,
    form_error: dict[str, str | None] | None = None,
    status_code: int = 200,
) -> Response:
    """The schedules page; ``form`` / ``form_error``: a refused create form, shown again."""
    offset = _offset(request)
    enabled = request.query_params.get("enabled", "")
    trigger_type = request.query_params.get("trigger_type", "")
    answer = await api_get(
        request,
        "/api/schedules",
        enabled=enabled,
        trigger_type=trigger_type,
        limit=PAGE_SIZE,
        offset=offset,
    )
    if not answer.ok:
        return _failed(request, who, answer, "Schedules")
    return render(
        request,
        "schedules.html",
        who,
        status_code=status_code,
        schedules=answer.body["schedules"],
        total=answer.body["total"],
        offset=offset,
        pages=page_links(request, offset, answer.body["total"]),
        enabled=enabled,
        trigger_type=trigger_type,
        trigger_types=TRIGGER_TYPES,
        form=form if form is not None else {"enabled": "on"},
        form_error=form_error,
        zone_datalist=zone_datalist(),
    )


@router.get("/schedules/{schedule_id}")
async def schedule(request: Request, schedule_id: str) -> Response:
    """A schedule's settings, its next 10 fires in its zone and its runs."""
    who = visitor(request)
    if who is None:
        return to_login(request)
    path = f"/api/schedules/{quote(schedule_id, safe='')}"
    answer = await api_get(request, path)
    if not answer.ok:
        return _failed(request, who, answer, "Schedule")
    offset = _offset(request)
    preview = await api_get(request, f"{path}/preview", n=10)
    runs = await api_get(request, f"{path}/runs", limit=PAGE_SIZE, offset=offset)
    if not runs.ok:
        return _failed(request, who, runs, "Schedule")
    newest = runs
    if offset != 0 or PAGE_SIZE < STRIP_RUNS:
        newest = await api_get(request, f"{path}/runs", limit=STRIP_RUNS, offset=0)
    now = time.time()
    strip = run_strip(newest.body["runs"] if newest.ok else [], now=now)
    return render(
        request,
        "schedule.html",
        who,
        schedule=answer.body,
        strip=strip,
        health=answer.body if answer.body.get("health") else None,
        preview=preview.body["fire_times"] if preview.ok else [],
        preview_error=None if preview.ok else preview.detail,
        runs=runs.body["runs"],
        total=runs.body["total"],
        offset=offset,
        pages=page_links(request, offset, runs.body["total"]),
    )


@router.get("/runs")
async def runs(request: Request) -> Response:
    """Every run (scheduled, follow-up, ad-hoc), newest first, filtered by status."""
    who = visitor(request)
    if who is None:
        return to_login(request)
    problem = _unavailable(request)
    if problem is not None:
        return render(request, "error.html", who, status_code=503, title="Runs", message=problem)
    status = request.query_params.get("status", "")
    if status and status not in RUN_STATUSES:
        message = f"status: must be one of {', '.join(RUN_STATUSES)}"
        return render(request, "error.html", who, status_code=422, title="Runs", message=message)
    offset = _offset(request)
    rows, total = await read_runs_page(
        request.app.state.engine.conn,
        status=status or None,
        zones=await _zones(request),
        limit=PAGE_SIZE,
        offset=offset,
    )
    return render(
        request,
        "runs.html",
        who,
        runs=[dataclasses.asdict(row) for row in rows],  # the run rows' macros read mappings
        total=total,
        offset=offset,
        pages=page_links(request, offset, total),
        status=status,
        statuses=RUN_STATUSES,
    )


@router.get("/runs/{run_id}")
async def run(request: Request, run_id: str) -> Response:
    """A run: status, reason, chain, stderr tail, live log and Cancel (when served)."""
    who = visitor(request)
    if who is None:
        return to_login(request)
    answer = await api_get(request, f"/api/schedules/runs/{quote(run_id, safe='')}")
    if not answer.ok:
        return _failed(request, who, answer, "Run")
    body = answer.body
    schedule_row = None
    if body.get("schedule_id"):
        found = await api_get(request, f"/api/schedules/{quote(body['schedule_id'], safe='')}")
        schedule_row = found.body if found.ok else None
    app = request.app
    concrete = {"run_id": run_id}
    return render(
        request,
        "run.html",
        who,
        run=body,
        schedule=schedule_row,
        zone=(schedule_row or {}).get("timezone"),
        terminal=body["status"] in FINAL_RUN_STATUSES,
        log_available=has_route(app, "GET", LOG_STREAM_ROUTE.format(**concrete)),
        cancel_available=has_route(app, "POST", CANCEL_ROUTE.format(**concrete)),
        checked_at=time.time(),
    )


@router.get("/dispatch")
async def dispatch(request: Request) -> Response:
    """Outbox rows filtered by status and kind (payloads without ack tokens)."""
    who = visitor(request)
    if who is None:
        return to_login(request)
    offset = _offset(request)
    status = request.query_params.get("status", "")
    kind = request.query_params.get("kind", "")
    answer = await api_get(
        request, "/api/dispatch", status=status, kind=kind, limit=PAGE_SIZE, offset=offset
    )
    if not answer.ok:
        return _failed(request, who, answer, "Dispatch")
    return render(
        request,
        "dispatch.html",
        who,
        dispatches=answer.body["dispatches"],
        total=answer.body["total"],
        offset=offset,
        pages=page_links(request, offset, answer.body["total"]),
        status=status,
        kind=kind,
        statuses=DISPATCH_STATUSES,
    )
