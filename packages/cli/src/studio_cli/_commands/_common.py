"""Options and renderers shared by the command groups."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import click

from .._output import (
    emit_json,
    fmt_duration,
    fmt_time,
    print_record,
    print_rows,
    say,
    shorten,
)
from .._types import vocabulary

F = TypeVar("F", bound=Callable[..., Any])


def is_final_status(status: object) -> bool:
    """Whether a run in ``status`` never changes again (scheduler-core's FINAL_RUN_STATUSES)."""
    return status in vocabulary("FINAL_RUN_STATUSES")


def db_option(func: F) -> F:
    """``--db PATH|URL`` (default ``$LIONAGI_STUDIO_DB``, else ``~/.lionagi/studio/state.db``)."""
    return click.option(
        "--db",
        metavar="PATH|URL",
        help="SQLite database file or postgresql:// URL (default $LIONAGI_STUDIO_DB, else "
        "~/.lionagi/studio/state.db).",
    )(func)


def json_option(func: F) -> F:
    """``--json``: print one JSON document on stdout instead of tables."""
    return click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document instead of a table."
    )(func)


def limit_option(default: int = 50) -> Callable[[F], F]:
    return click.option(
        "--limit",
        type=click.IntRange(1, 10000),
        default=default,
        show_default=True,
        help="At most this many rows.",
    )


def offset_option(func: F) -> F:
    return click.option(
        "--offset",
        type=click.IntRange(0, 2**63 - 1),
        default=0,
        show_default=True,
        help="Skip this many rows.",
    )(func)


def confirm_or_abort(action: str, yes: bool) -> None:
    """Ask before a destructive ``action`` unless ``--yes``; refuse when there is no terminal."""
    if yes:
        return
    import sys

    from .._errors import CliError

    if not sys.stdin.isatty():
        raise CliError(f"refusing to {action} without confirmation: pass --yes")
    if not click.confirm(f"Really {action}?", default=False, err=True):
        raise CliError("aborted: nothing was changed")


def trigger_summary(schedule: Mapping[str, Any]) -> str:
    kind = schedule.get("trigger_type")
    if kind == "cron":
        text = f"cron {schedule.get('cron_expr')}"
    elif kind == "interval":
        text = f"every {_seconds(schedule.get('interval_sec'))}"
    elif kind == "github_poll":
        text = f"github {schedule.get('github_repo')}"
    else:
        text = str(kind)
    threshold = schedule.get("threshold_config")
    if isinstance(threshold, Mapping) and threshold:
        text += f" if {threshold.get('metric')} {threshold.get('op')} {threshold.get('value')}"
    return text


def _seconds(value: object) -> str:
    if not isinstance(value, int) or value <= 0:
        return f"{value}s"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if value % size == 0:
            return f"{value // size}{unit}"
    return f"{value}s"


def action_summary(schedule: Mapping[str, Any]) -> str:
    kind = str(schedule.get("action_kind"))
    if kind == "command":
        args = schedule.get("action_command_args") or []
        return shorten(
            " ".join([f"command: {schedule.get('action_command')}", *map(str, args)]), 50
        )
    detail = schedule.get("action_playbook") or schedule.get("action_agent") or ""
    model = schedule.get("action_model")
    parts = [kind, *(str(p) for p in (detail, model) if p)]
    return shorten(" ".join(parts), 50)


def schedule_rows(schedules: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    return [
        [
            str(s.get("id")),
            str(s.get("name")),
            "yes" if s.get("enabled") else "no",
            trigger_summary(s),
            action_summary(s),
            fmt_time(s.get("next_fire_at")) if s.get("enabled") else "-",
            fmt_time(s.get("last_fired_at")),
        ]
        for s in schedules
    ]


SCHEDULE_COLUMNS = ("ID", "NAME", "ENABLED", "TRIGGER", "ACTION", "NEXT FIRE", "LAST FIRED")
RUN_COLUMNS = ("RUN", "STATUS", "FIRED", "DURATION", "EXIT", "ATTEMPT", "DEPTH", "REASON")


def run_rows(runs: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    return [
        [
            str(r.get("id")),
            str(r.get("status")),
            fmt_time(r.get("fired_at")),
            fmt_duration(r.get("fired_at"), r.get("ended_at")),
            "-" if r.get("exit_code") is None else str(r.get("exit_code")),
            # a retry's attempt number (2, 3, …); "-" for a run that is no retry
            "-" if r.get("attempt") is None else str(r.get("attempt")),
            str(r.get("chain_depth", 0)),
            shorten(r.get("status_reason_code") or "-", 40),
        ]
        for r in runs
    ]


def show_schedule_result(
    verb: str,
    schedule: Mapping[str, Any],
    *,
    as_json: bool,
    fields: Sequence[str] | None = None,
) -> None:
    """Report a write on a schedule: the schedule as JSON, or one human line (+ next fire)."""
    if as_json:
        emit_json(dict(schedule))
        return
    line = f"{verb} schedule {schedule.get('id')} ({schedule.get('name')})"
    if fields:
        line += ": " + ", ".join(fields)
    say(line)
    if schedule.get("enabled"):
        say(f"next fire: {fmt_time(schedule.get('next_fire_at'))}")
    else:
        reason = schedule.get("disabled_reason")
        say("disabled" + (f": {reason}" if reason else ""))


def print_schedule(schedule: Mapping[str, Any]) -> None:
    print_record(schedule, title=f"schedule {schedule.get('name')}")


def print_run(run: Mapping[str, Any]) -> None:
    record = {key: value for key, value in run.items() if key != "chain_children"}
    print_record(record, title=f"run {run.get('id')}")
    children = run.get("chain_children") or []
    if children:
        print_rows(RUN_COLUMNS, run_rows(children), empty="", title="follow-up runs")
