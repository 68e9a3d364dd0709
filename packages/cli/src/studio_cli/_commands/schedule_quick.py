"""``studio schedule create command NAME --every 5m -- ARGV…``: the typed quick-create.

A command schedule in one line: exactly one trigger (``--every DURATION``, ``--cron EXPR``
with an optional ``--timezone ZONE``, or ``--at INSTANT``) and the argv after ``--`` (its first
word is the command, on the allow-list). The flag form (``studio schedule create NAME --cron …``)
stays beside it; :class:`CreateCommand` sends ``create command NAME …`` here. Durations are
parsed by scheduler-core's parser (the one schedule sets use); bad input is one line naming
the flag, exit 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .._context import open_service, resolve_db_path, run_async
from .._errors import CliError
from ._actor import cli_actor
from ._common import db_option, json_option, show_schedule_result

if TYPE_CHECKING:
    from studio_scheduler_core import Schedule

_FLAGS = {
    "interval_sec": "--every",
    "cron_expr": "--cron",
    "timezone": "--timezone",
    "at": "--at",
    "timeout_sec": "--timeout",
    "action_command": "ARGV",
    "action_command_args": "ARGV",
    "action_cwd": "--cwd",
    "name": "NAME",
}
"""A refused field → the quick-create flag that set it."""
QUICK_KINDS = ("command",)
"""The action kinds the typed quick-create takes (``create KIND NAME …``)."""


def _seconds(flag: str, value: str | None) -> int | None:
    if value is None:
        return None
    from studio_scheduler_core import ScheduleValidationError, parse_duration

    try:
        seconds = parse_duration(flag, value)
    except ScheduleValidationError as exc:
        raise CliError(f"invalid value for {flag}: {exc.message}") from None
    if seconds < 1:
        raise CliError(f"invalid value for {flag}: must be at least 1 second")
    return seconds


def _trigger(
    every: str | None, cron: str | None, at: str | None, zone: str | None
) -> dict[str, Any]:
    given = [flag for flag, value in (("--every", every), ("--cron", cron), ("--at", at)) if value]
    if len(given) != 1:
        which = " and ".join(given) if given else "none"
        raise CliError(f"exactly one of --every, --cron or --at is required (got {which})")
    if zone is not None and cron is None:
        raise CliError("--timezone applies only with --cron")
    if every is not None:
        return {"trigger_type": "interval", "interval_sec": _seconds("--every", every)}
    if cron is not None:
        data: dict[str, Any] = {"trigger_type": "cron", "cron_expr": cron}
        if zone is not None:
            data["timezone"] = zone
        return data
    return {"trigger_type": "at", "at": at}


@click.command("command")
@click.argument("name")
@click.option("--every", metavar="DURATION", help="Fire every DURATION (90s, 15m, 2h, 1d).")
@click.option("--cron", metavar="EXPR", help="Fire on a 5-field cron expression.")
@click.option("--timezone", metavar="ZONE", help="IANA zone of --cron (default the server's).")
@click.option("--at", metavar="INSTANT", help="Fire once at an RFC 3339 instant with its offset.")
@click.option("--timeout", metavar="DURATION", help="Deadline of each run (at most 7 days).")
@click.option("--cwd", type=click.Path(file_okay=False), help="Working directory (default: here).")
@click.option("--description", help="Free-text description.")
@click.option("--disabled", is_flag=True, help="Create the schedule disabled.")
@db_option
@json_option
@click.argument("argv", nargs=-1, required=True, metavar="-- ARGV...")
def quick_command(
    name: str,
    every: str | None,
    cron: str | None,
    timezone: str | None,
    at: str | None,
    timeout: str | None,
    cwd: str | None,
    description: str | None,
    disabled: bool,
    db: str | None,
    as_json: bool,
    argv: tuple[str, ...],
) -> None:
    """Create a command schedule NAME running ARGV (after --) on one trigger.

    \b
    Examples:
      studio schedule create command ping --every 5m -- curl -fsS https://x/health
      studio schedule create command nightly --cron '0 2 * * *' --timezone Europe/Berlin -- make
      studio schedule create command once --at 2027-01-05T09:00:00+01:00 -- ./deploy.sh
    """
    data: dict[str, Any] = {"name": name, **_trigger(every, cron, at, timezone)}
    data.update(action_kind="command", action_command=argv[0], action_command_args=list(argv[1:]))
    seconds = _seconds("--timeout", timeout)
    if seconds is not None:
        data["timeout_sec"] = seconds
    if description is not None:
        data["description"] = description
    if disabled:
        data["enabled"] = False
    data["action_cwd"] = str(Path(cwd or Path.cwd()).expanduser().resolve())
    db_path = resolve_db_path(db)

    async def _create() -> Schedule:
        from studio_scheduler_core import ScheduleValidationError

        async with open_service(db_path) as service:
            try:
                return await service.create(data, actor=cli_actor())
            except ScheduleValidationError as exc:
                flag = _FLAGS.get(exc.field.split(".", 1)[0])
                if flag is None:
                    raise
                raise CliError(f"invalid value for {flag}: {exc.message}") from None

    show_schedule_result("Created", run_async(_create), as_json=as_json)


class CreateCommand(click.Command):
    """``create``: the flag form, or ``create KIND NAME …`` (the typed quick-create) when the
    first word is a quick kind and a NAME follows."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if len(args) >= 2 and args[0] in QUICK_KINDS and not args[1].startswith("-"):
            ctx.meta["studio_quick_create"] = args[1:]
            return []
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        quick = ctx.meta.pop("studio_quick_create", None)
        if quick is None:
            return super().invoke(ctx)
        with quick_command.make_context("command", list(quick), parent=ctx) as sub:
            return quick_command.invoke(sub)
