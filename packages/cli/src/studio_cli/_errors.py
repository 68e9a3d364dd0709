"""Turning every failure into one ``error: …`` line on stderr and an exit code.

Exit codes: 0 success, 1 an error (bad value, missing row, refused operation, unreachable
server, failed run under ``--wait``), 2 a usage error (unknown option, missing argument,
conflicting flags), 130 interrupted. No failure prints a traceback unless ``STUDIO_DEBUG=1``.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import traceback
from typing import NoReturn

import click

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

DEBUG_ENV = "STUDIO_DEBUG"

# Service field names → the `studio schedule create/update` flag that sets them, so a
# validation error names what the operator typed.
FIELD_FLAGS: dict[str, str] = {
    "name": "NAME",
    "description": "--description",
    "trigger_type": "--cron/--interval/--at/--github-repo",
    "at": "--at",
    "github_cursor": "--set",
    "cron_expr": "--cron",
    "interval_sec": "--interval",
    "github_repo": "--github-repo",
    "github_filter": "--github-filter",
    "poll_interval_sec": "--poll-interval",
    "threshold_config": "--threshold",
    "action_kind": "--action",
    "action_model": "--model",
    "action_prompt": "--prompt",
    "action_agent": "--agent",
    "action_playbook": "--playbook",
    "action_flow_yaml": "--flow-yaml",
    "action_project": "--project",
    "action_cwd": "--cwd",
    "action_extra_args": "--extra-arg",
    "action_command": "--command",
    "action_command_args": "--command-arg",
    "on_success": "--on-success",
    "on_fail": "--on-fail",
    "missed_fire_policy": "--missed-fire",
    "overlap_policy": "--overlap-policy",
    "max_runs": "--max-runs",
    "budget_usd": "--budget-usd",
    "budget_tokens": "--budget-tokens",
    "project": "--schedule-project",
    "enabled": "--disabled",
    "concurrency_key": "--concurrency-key",
    "notify": "--notify-to",
    "notify.deliver_to": "--notify-to",
    "notify.on": "--notify-on",
    "notify.ack_required": "--notify-ack",
    "notify.max_attempts": "--notify-max-attempts",
    # the schedule-policy flags (_commands/_policy_flags.py)
    "catchup_window_sec": "--catchup-window-sec",
    "jitter_sec": "--jitter-sec",
    "pause_on_failure": "--pause-on-failure",
    "retry": "--retry-max-attempts",
    "retry.max_attempts": "--retry-max-attempts",
    "retry.backoff_sec": "--retry-backoff-sec",
    "retry.backoff_factor": "--retry-backoff-factor",
    "retry.max_backoff_sec": "--retry-max-backoff-sec",
    "start": "--from",  # studio schedule backfill
    "end": "--to",
}


class CliError(Exception):
    """An error the CLI reports as one line (``error: <message>``) with an exit code."""

    def __init__(self, message: str, *, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def one_line(text: str) -> str:
    """Collapse whitespace (newlines included) so a message prints as a single line."""
    return " ".join(str(text).split())


def _library_message(exc: BaseException) -> str | None:
    """The message for an error raised by a Studio library, or None if it is not one."""
    scheduler = sys.modules.get("studio_scheduler_core")
    if scheduler is not None:
        if isinstance(exc, scheduler.ScheduleValidationError):
            field = getattr(exc, "field", None)
            message = getattr(exc, "message", None) or str(exc)
            if field:
                flag = FIELD_FLAGS.get(str(field)) or FIELD_FLAGS.get(
                    str(field).split(".", 1)[0].split("[", 1)[0]
                )
                where = f"{flag} ({field})" if flag and flag != field else str(field)
                return f"invalid value for {where}: {message}"
            return f"invalid schedule: {message}"
        if isinstance(exc, scheduler.ScheduleNotFound):
            return f"schedule not found: {getattr(exc, 'schedule_id', exc)}"
        if isinstance(exc, scheduler.ScheduleNameTaken):
            return f"a schedule named {getattr(exc, 'name', '?')!r} already exists"
        if isinstance(exc, scheduler.RunNotFound):
            return f"run not found: {getattr(exc, 'run_id', exc)}"
        if isinstance(exc, scheduler.SchedulerError):
            return str(exc)
    outbox = sys.modules.get("studio_outbox")
    if outbox is not None and isinstance(exc, outbox.OutboxError):
        return str(exc)
    state = sys.modules.get("studio_state")
    if state is not None and isinstance(exc, state.StateError):
        return str(exc)
    api = sys.modules.get("studio_api")
    settings_error = getattr(api, "SettingsError", None) if api is not None else None
    if isinstance(settings_error, type) and isinstance(exc, settings_error):
        # one line per invalid variable (fail() prints each line as its own error)
        problems = getattr(exc, "problems", None) or {"settings": str(exc)}
        return "\n".join(
            f"invalid settings: {name}: {one_line(text)}" for name, text in problems.items()
        )
    api_error = getattr(api, "StudioApiError", None) if api is not None else None
    if isinstance(api_error, type) and isinstance(exc, api_error):
        return str(exc)
    return None


def describe(exc: BaseException) -> tuple[str, int]:
    """Message and exit code for any exception that reached the top of the CLI."""
    if isinstance(exc, CliError):
        return exc.message, exc.exit_code
    library = _library_message(exc)
    if library is not None:
        return library, EXIT_ERROR
    if isinstance(exc, sqlite3.Error):
        return f"database error: {exc}", EXIT_ERROR
    if isinstance(exc, OSError):
        if exc.filename is not None and exc.strerror:
            return f"{exc.strerror}: {exc.filename}", EXIT_ERROR
        return str(exc) or type(exc).__name__, EXIT_ERROR
    hint = f" (rerun with {DEBUG_ENV}=1 for a traceback)"
    detail = str(exc)
    text = f"unexpected {type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return text + hint, EXIT_ERROR


def debug_enabled() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def error_lines(exc: BaseException) -> tuple[list[str], int]:
    """The ``error: …`` lines for ``exc`` and its exit code: one line, or one per invalid
    variable of a settings error."""
    message, code = describe(exc)
    parts = message.split("\n") if _is_settings_error(exc) else [message]
    return [f"error: {one_line(part)}" for part in parts if part.strip()], code


def _is_settings_error(exc: BaseException) -> bool:
    api = sys.modules.get("studio_api")
    settings_error = getattr(api, "SettingsError", None) if api is not None else None
    return isinstance(settings_error, type) and isinstance(exc, settings_error)


def fail(exc: BaseException) -> NoReturn:
    """Print ``error: …`` for ``exc`` on stderr (a traceback first under STUDIO_DEBUG=1), exit."""
    lines, code = error_lines(exc)
    if debug_enabled() and not isinstance(exc, CliError):
        traceback.print_exception(exc, file=sys.stderr)
    for line in lines:
        click.echo(line, err=True)
    sys.exit(code)


def usage_error(exc: click.UsageError) -> NoReturn:
    """Print a click usage error as one line, naming the command's help, and exit 2."""
    ctx = exc.ctx
    hint = ""
    if ctx is not None:
        hint = f" (see '{ctx.command_path} --help')"
    click.echo(f"error: {one_line(exc.format_message())}{hint}", err=True)
    sys.exit(EXIT_USAGE)
