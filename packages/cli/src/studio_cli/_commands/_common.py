"""Options and renderers shared by the command groups."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .._output import (
    emit_json,
    fmt_duration,
    fmt_time,
    note,
    print_record,
    print_rows,
    say,
    shorten,
)
from .._types import vocabulary

if TYPE_CHECKING:
    from studio_scheduler_core import Run, RunWithChain, Schedule

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


def trigger_summary(schedule: Schedule) -> str:
    kind = schedule.trigger_type
    if kind == "cron":
        text = f"cron {schedule.cron_expr}"
    elif kind == "interval":
        text = f"every {_seconds(schedule.interval_sec)}"
    else:
        text = f"github {schedule.github_repo}"
    threshold = schedule.threshold_config
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


def action_summary(schedule: Schedule) -> str:
    kind = str(schedule.action_kind)
    if kind == "command":
        args = schedule.action_command_args or ()
        return shorten(" ".join([f"command: {schedule.action_command}", *map(str, args)]), 50)
    detail = schedule.action_playbook or schedule.action_agent or ""
    model = schedule.action_model
    parts = [kind, *(str(p) for p in (detail, model) if p)]
    return shorten(" ".join(parts), 50)


def schedule_rows(schedules: Sequence[Schedule]) -> list[list[str]]:
    return [
        [
            s.id,
            s.name,
            "yes" if s.enabled else "no",
            trigger_summary(s),
            action_summary(s),
            fmt_time(s.next_fire_at) if s.enabled else "-",
            fmt_time(s.last_fired_at),
        ]
        for s in schedules
    ]


SCHEDULE_COLUMNS = ("ID", "NAME", "ENABLED", "TRIGGER", "ACTION", "NEXT FIRE", "LAST FIRED")
RUN_COLUMNS = ("RUN", "STATUS", "FIRED", "DURATION", "EXIT", "ATTEMPT", "DEPTH", "REASON")


def run_rows(runs: Sequence[Run]) -> list[list[str]]:
    return [
        [
            r.id,
            r.status,
            fmt_time(r.fired_at),
            fmt_duration(r.fired_at, r.ended_at),
            "-" if r.exit_code is None else str(r.exit_code),
            # a retry's attempt number (2, 3, …); "-" for a run that is no retry
            "-" if r.attempt is None else str(r.attempt),
            str(r.chain_depth),
            shorten(r.status_reason_code or "-", 40),
        ]
        for r in runs
    ]


def record_json(record: Schedule | Run) -> dict[str, Any]:
    """A record as its JSON document (every field; tuples as lists, nested records as
    objects)."""
    out = record.to_row()
    drifted = getattr(record, "drifted", None)
    if drifted is not None:  # a schedule: whether its set's file no longer matches it
        out["drifted"] = drifted
    children = out.get("chain_children")
    if children is not None:
        out["chain_children"] = [child.to_row() for child in children]
    return out


def show_schedule_result(
    verb: str,
    schedule: Schedule,
    *,
    as_json: bool,
    fields: Sequence[str] | None = None,
) -> None:
    """Report a write on a schedule: the schedule as JSON, or one human line (+ next fire).

    A set-owned schedule the write made differ from its set's file gets a warning on stderr
    (the write stands; the next apply of the set restores the file's version)."""
    if schedule.drifted:
        note(
            f"warning: schedule {schedule.name!r} is managed by schedule set "
            f"{schedule.owner_key!r}; the next apply of the set restores the file's version"
        )
    if as_json:
        emit_json(record_json(schedule))
        return
    line = f"{verb} schedule {schedule.id} ({schedule.name})"
    if fields:
        line += ": " + ", ".join(fields)
    say(line)
    if schedule.enabled:
        say(f"next fire: {fmt_time(schedule.next_fire_at)}")
    else:
        reason = schedule.disabled_reason
        say("disabled" + (f": {reason}" if reason else ""))


def print_schedule(schedule: Schedule) -> None:
    print_record(record_json(schedule), title=f"schedule {schedule.name}")


def print_run(run: RunWithChain) -> None:
    record = {key: value for key, value in record_json(run).items() if key != "chain_children"}
    print_record(record, title=f"run {run.id}")
    if run.chain_children:
        print_rows(RUN_COLUMNS, run_rows(run.chain_children), empty="", title="follow-up runs")
