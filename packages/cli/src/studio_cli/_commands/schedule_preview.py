"""``studio schedule preview``: the next fire times of a schedule, or of a bare cron expression.

A schedule's preview comes from the running server when one answers for it (its jitter and
its clock are the ones that will fire); otherwise, and for ``--cron``, it is computed here.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from .._context import open_service, resolve_db_path, run_async, scheduler_settings
from .._errors import CliError
from .._output import emit_json, print_rows
from ._common import db_option, json_option

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from studio_scheduler_core import JitteredEntry, PreviewEntry, Schedule


@click.command("preview")
@click.argument("schedule", required=False)
@click.option("--cron", metavar="EXPR", help="Preview a cron expression instead of a schedule.")
@click.option("--tz", metavar="ZONE", help="Timezone for --cron (default the scheduler's).")
@click.option("-n", "count", type=click.IntRange(1, 1000), default=5, show_default=True)
@db_option
@json_option
def preview(
    schedule: str | None,
    cron: str | None,
    tz: str | None,
    count: int,
    db: str | None,
    as_json: bool,
) -> None:
    """Show the next fire times of SCHEDULE, or of --cron EXPR.

    \b
    Examples:
      studio schedule preview nightly -n 3
      studio schedule preview --cron '*/15 9-17 * * mon-fri' --tz Europe/Berlin
    """
    if (schedule is None) == (cron is None):
        raise click.UsageError("give a SCHEDULE or --cron EXPR (one of them)")
    if tz is not None and cron is None:
        raise click.UsageError("--tz applies only to --cron")
    times: Sequence[Mapping[str, Any]]
    if cron is not None:
        times, zone = _preview_cron(cron, tz, count)
        subject: dict[str, Any] = {"cron_expr": cron}
    else:
        db_path = resolve_db_path(db, existing=True)
        assert schedule is not None

        async def _preview() -> tuple[Schedule, list[JitteredEntry]]:
            async with open_service(db_path) as service:
                row = await service.resolve(schedule)
                return row, await service.preview(row.id, count)

        row, times = run_async(_preview)
        zone = row.timezone or scheduler_settings().timezone
        served = _server_preview(row.id, count)
        if served is not None:
            times, zone = served
        subject = {"schedule_id": row.id, "name": row.name}
    if as_json:
        emit_json({**subject, "timezone": zone, "fire_times": times})
        return
    rows = [[str(i), str(t.get("utc")), str(t.get("local"))] for i, t in enumerate(times, 1)]
    headers: tuple[str, ...] = ("#", "UTC", f"LOCAL ({zone})")
    if any(t.get("jitter_sec") for t in times):  # the delay each occurrence waits
        headers += ("JITTER",)
        for cells, entry in zip(rows, times, strict=True):
            cells.append(f"+{float(entry.get('jitter_sec') or 0):.3f}s")
    print_rows(headers, rows, empty="no upcoming fire times")


def _server_preview(schedule_id: str, count: int) -> tuple[list[dict[str, Any]], str] | None:
    """The running server's preview of the schedule, or ``None`` (no server, or not its)."""
    import httpx

    from .._context import auth_token, resolve_server

    url, _source = resolve_server(None)
    token = auth_token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        answer = httpx.get(
            f"{url}/api/schedules/{schedule_id}/preview",
            params={"n": count},
            headers=headers,
            timeout=2.0,
        )
    except httpx.HTTPError:
        return None
    if answer.status_code != 200:
        return None
    body = answer.json()
    return list(body["fire_times"]), str(body["timezone"])


def _preview_cron(cron: str, tz: str | None, count: int) -> tuple[list[PreviewEntry], str]:
    from studio_scheduler_core import preview_fire_times

    zone = tz or scheduler_settings().timezone
    if tz is not None and not _is_zone(tz):
        raise CliError(f"invalid value for --tz: {tz!r} is not a known IANA time zone")
    times = preview_fire_times(
        trigger_type="cron", cron_expr=cron, timezone=zone, start=time.time(), n=count
    )
    return times, zone


def _is_zone(name: str) -> bool:
    import zoneinfo

    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True
