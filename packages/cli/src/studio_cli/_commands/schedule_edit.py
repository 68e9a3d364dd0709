"""``studio schedule create`` and ``studio schedule update``: one flag per create-model field.

Both build a dict of service field names and hand it to ``ScheduleService`` (the same
validation the HTTP API uses); the CLI itself checks only what the flags cannot express
(conflicting flags, unreadable files, invalid JSON).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .._context import open_service, resolve_db_path, run_async, scheduler_settings
from .._errors import FIELD_FLAGS, CliError
from .._types import VocabularyChoice, duration_option, parse_json_flag, read_text
from ._actor import cli_actor
from ._common import db_option, json_option, show_schedule_result
from ._notify_flags import NOTIFY_OPTIONS, new_notify, notify_changes
from ._policy_flags import POLICY_CLEARABLE, POLICY_OPTIONS, merge_retry, policy_values
from .schedule_quick import CreateCommand

if TYPE_CHECKING:
    from studio_scheduler_core import Schedule

F = TypeVar("F", bound=Callable[..., Any])

# Flag name (as given to --clear) → (service field, value that clears it).
CLEARABLE: dict[str, tuple[str, Any]] = {
    "description": ("description", None),
    "github-filter": ("github_filter", None),
    "poll-interval": ("poll_interval_sec", None),
    "threshold": ("threshold_config", None),
    "model": ("action_model", None),
    "prompt": ("action_prompt", None),
    "agent": ("action_agent", None),
    "playbook": ("action_playbook", None),
    "flow-yaml": ("action_flow_yaml", None),
    "project": ("action_project", None),
    "cwd": ("action_cwd", None),
    "extra-arg": ("action_extra_args", []),
    "command": ("action_command", None),
    "command-arg": ("action_command_args", []),
    "on-success": ("on_success", None),
    "on-fail": ("on_fail", None),
    "max-runs": ("max_runs", None),
    "budget-usd": ("budget_usd", None),
    "budget-tokens": ("budget_tokens", None),
    "schedule-project": ("project", None),
    "notify": ("notify", None),
    "timezone": ("timezone", None),
    "timeout": ("timeout_sec", None),
    **POLICY_CLEARABLE,
}

_FIELD_OPTIONS: list[Callable[[F], F]] = [
    click.option("--description", help="Free-text description."),
    click.option("--cron", metavar="EXPR", help="Cron trigger: a 5-field cron expression."),
    duration_option("--interval", help="Interval trigger: seconds, or 30s/15m/6h/2d."),
    click.option(
        "--at", metavar="INSTANT", help="One-shot trigger: an RFC 3339 instant with its offset."
    ),
    click.option("--github-repo", metavar="OWNER/NAME", help="GitHub pull-request poll trigger."),
    click.option(
        "--github-filter", metavar="JSON", help='PR filter, e.g. \'{"event": "pr_opened"}\'.'
    ),
    duration_option("--poll-interval", help="GitHub poll interval (default 300 s)."),
    click.option(
        "--threshold",
        metavar="JSON",
        help='Fire only on a metric breach: {"metric", "op", "value", "window_minutes"}.',
    ),
    click.option(
        "--kind", "--action", "action", type=VocabularyChoice("ActionKindName"), help="Action kind."
    ),
    click.option("--model", help="Model for agent/flow/fanout actions."),
    click.option("--prompt", help="Prompt text ({{name}} placeholders render from the trigger)."),
    click.option(
        "--prompt-file",
        type=click.File("r", encoding="utf-8"),
        metavar="FILE",
        help="Read the prompt from a file ('-' = stdin).",
    ),
    click.option("--agent", help="Agent profile for agent actions."),
    click.option("--playbook", help="Playbook for play actions."),
    click.option(
        "--flow-yaml",
        type=click.File("r", encoding="utf-8"),
        metavar="FILE",
        help="Flow spec YAML file for flow_yaml actions ('-' = stdin).",
    ),
    click.option("--project", help="The action's lionagi project (li --project)."),
    click.option(
        "--cwd",
        type=click.Path(file_okay=False),
        help="Working directory of the action (create: default the current directory).",
    ),
    click.option("--extra-arg", multiple=True, help="Extra positional argument (repeatable)."),
    click.option("--command", "command_name", metavar="NAME", help="Command for command actions."),
    click.option("--command-arg", multiple=True, help="Argument of the command (repeatable)."),
    click.option("--on-success", metavar="JSON", help="Follow-up overlay run after success."),
    click.option("--on-fail", metavar="JSON", help="Follow-up overlay run after failure/timeout."),
    click.option(
        "--missed-fire", type=click.Choice(["skip", "run_once"]), help="Missed-fire policy."
    ),
    click.option("--max-runs", type=int, help="Disable after this many runs."),
    click.option("--once", is_flag=True, help="Run once (--max-runs 1)."),
    click.option("--budget-usd", type=float, help="Cumulative cost budget in USD."),
    click.option("--budget-tokens", type=int, help="Cumulative token budget."),
    click.option(
        "--timezone",
        metavar="ZONE",
        help="IANA zone of the cron expression (default the server's), e.g. Europe/Berlin.",
    ),
    duration_option(
        "--timeout", help="Deadline of each run: seconds, or 30s/15m/6h/2d (at most 7 days)."
    ),
    click.option(
        "--schedule-project",
        metavar="NAME",
        help="The project the schedule belongs to (stored as `project`; a grouping label).",
    ),
    *NOTIFY_OPTIONS,
    *POLICY_OPTIONS,
]


def _field_options(func: F) -> F:
    for decorator in reversed(_FIELD_OPTIONS):
        func = decorator(func)
    return func


def _trigger_fields(opts: dict[str, Any]) -> dict[str, Any]:
    given = [
        flag
        for flag, key in (
            ("--cron", "cron"),
            ("--interval", "interval"),
            ("--at", "at"),
            ("--github-repo", "github_repo"),
        )
        if opts[key] is not None
    ]
    if len(given) > 1:
        raise click.UsageError(f"{' and '.join(given)} are exclusive: a schedule has one trigger")
    data: dict[str, Any] = {}
    if opts["cron"] is not None:
        data.update(trigger_type="cron", cron_expr=opts["cron"])
    if opts["interval"] is not None:
        data.update(trigger_type="interval", interval_sec=opts["interval"])
    if opts["at"] is not None:
        data.update(trigger_type="at", at=opts["at"])
    if opts["github_repo"] is not None:
        data.update(trigger_type="github_poll", github_repo=opts["github_repo"])
    return data


def _field_values(opts: dict[str, Any]) -> dict[str, Any]:
    """Service fields for every flag that was given (None = not given)."""
    if opts["prompt"] is not None and opts["prompt_file"] is not None:
        raise click.UsageError("--prompt and --prompt-file are exclusive")
    if opts["once"] and opts["max_runs"] is not None:
        raise click.UsageError("--once and --max-runs are exclusive (--once means --max-runs 1)")
    data = _trigger_fields(opts)
    prompt = opts["prompt"]
    if opts["prompt_file"] is not None:
        prompt = read_text("--prompt-file", opts["prompt_file"])
        if prompt is not None:
            prompt = prompt.rstrip("\r\n")
    simple = {
        "description": opts["description"],
        "github_filter": parse_json_flag("--github-filter", opts["github_filter"]),
        "poll_interval_sec": opts["poll_interval"],
        "threshold_config": parse_json_flag("--threshold", opts["threshold"]),
        "action_kind": opts["action"],
        "action_model": opts["model"],
        "action_prompt": prompt,
        "action_agent": opts["agent"],
        "action_playbook": opts["playbook"],
        "action_flow_yaml": read_text("--flow-yaml", opts["flow_yaml"]),
        "action_project": opts["project"],
        "action_command": opts["command_name"],
        "on_success": parse_json_flag("--on-success", opts["on_success"]),
        "on_fail": parse_json_flag("--on-fail", opts["on_fail"]),
        "missed_fire_policy": opts["missed_fire"],
        "max_runs": 1 if opts["once"] else opts["max_runs"],
        "budget_usd": opts["budget_usd"],
        "budget_tokens": opts["budget_tokens"],
        "project": opts["schedule_project"],
        "timezone": opts["timezone"],
        "timeout_sec": opts["timeout"],
    }
    data.update({key: value for key, value in simple.items() if value is not None})
    data.update(policy_values(opts))
    if opts["cwd"] is not None:
        data["action_cwd"] = str(Path(opts["cwd"]).expanduser().resolve())
    if opts["extra_arg"]:
        data["action_extra_args"] = list(opts["extra_arg"])
    if opts["command_arg"]:
        data["action_command_args"] = list(opts["command_arg"])
    _check_limits(data)
    return data


def _check_limits(data: dict[str, Any]) -> None:
    """Refuse a number beyond its field's bound (exit 1 naming the flag) before any I/O."""
    from studio_api import FIELD_LIMITS, check_field_limit

    for field in FIELD_LIMITS:
        value = data.get(field)
        if value is None:
            continue
        try:
            check_field_limit(field, value)
        except ValueError as exc:
            raise CliError(f"invalid value for {FIELD_FLAGS[field]} ({field}): {exc}") from None


def _infer_action(data: dict[str, Any]) -> str:
    """``--action`` default: the kind implied by --command/--command-arg/--flow-yaml/--playbook,
    else agent (a schedule given only --command-arg is a command schedule missing --command,
    and is told so, not that an agent needs --prompt)."""
    implied = [
        (flag, kind)
        for flag, field, kind in (
            ("--command", "action_command", "command"),
            ("--command-arg", "action_command_args", "command"),
            ("--flow-yaml", "action_flow_yaml", "flow_yaml"),
            ("--playbook", "action_playbook", "play"),
        )
        if field in data
    ]
    if len({kind for _, kind in implied}) > 1:
        flags = " and ".join(flag for flag, _ in implied)
        raise click.UsageError(f"{flags} imply different action kinds: pass --action")
    return implied[0][1] if implied else "agent"


@click.command("create", cls=CreateCommand)
@click.argument("name")
@_field_options
@click.option("--disabled", is_flag=True, help="Create the schedule disabled.")
@db_option
@json_option
def create(name: str, disabled: bool, db: str | None, as_json: bool, **opts: Any) -> None:
    """Create a schedule NAME.

    One of --cron, --interval, --at or --github-repo is its trigger. The typed quick-create,
    'studio schedule create command NAME --every 5m -- ARGV...', makes a command schedule in
    one line (see 'studio schedule create command X --help').

    \b
    Examples:
      studio schedule create nightly --cron '0 2 * * *' --model gpt-4.1 --prompt 'triage'
      studio schedule create ping --interval 15m --command curl --command-arg https://x/health
    """
    data = _field_values(opts)
    if "trigger_type" not in data:
        raise click.UsageError(
            "a trigger is required: pass --cron, --interval, --at or --github-repo"
        )
    data = {"name": name, **data}
    data.setdefault("action_kind", _infer_action(data))
    notify = new_notify(opts)
    if notify is not None:
        data["notify"] = notify
    if disabled:
        data["enabled"] = False
    db_path = resolve_db_path(db)

    async def _create() -> Schedule:
        async with open_service(db_path) as service:
            if "action_cwd" not in data and not _project_has_root(data):
                data["action_cwd"] = str(Path.cwd().resolve())
            return await service.create(data, actor=cli_actor())

    schedule = run_async(_create)
    show_schedule_result("Created", schedule, as_json=as_json)


def _project_has_root(data: dict[str, Any]) -> bool:
    """True when --project names a registered project: the service snapshots its path."""
    project = data.get("action_project")
    if not project:
        return False
    return str(project) in dict(scheduler_settings().project_paths)


@click.command("update")
@click.argument("schedule")
@click.option("--name", "new_name", help="Rename the schedule.")
@_field_options
@click.option(
    "--clear",
    "clear",
    multiple=True,
    type=click.Choice(sorted(CLEARABLE)),
    help="Clear a field (repeatable), e.g. --clear max-runs.",
)
@db_option
@json_option
def update(
    schedule: str,
    new_name: str | None,
    clear: tuple[str, ...],
    db: str | None,
    as_json: bool,
    **opts: Any,
) -> None:
    """Change fields of SCHEDULE.

    Only the fields whose flags are given change.

    \b
    Examples:
      studio schedule update nightly --cron '30 3 * * *' --budget-usd 5
      studio schedule update nightly --clear max-runs --overlap allow
    """
    changes = _field_values(opts)
    notify = notify_changes(opts)
    if new_name is not None:
        changes["name"] = new_name
    for flag in clear:
        field, empty = CLEARABLE[flag]
        if field in changes:
            raise click.UsageError(f"--clear {flag} conflicts with a value given for it")
        changes[field] = empty
    if notify and "notify" in changes:
        raise click.UsageError("--clear notify conflicts with a --notify-* flag")
    if not changes and not notify:
        raise click.UsageError("nothing to update: give at least one field flag or --clear")
    db_path = resolve_db_path(db, existing=True)

    async def _update() -> Schedule:
        async with open_service(db_path) as service:
            current = await service.resolve(schedule)
            merge_retry(changes, current.retry)
            if notify:  # the flags change those keys of the stored notify object
                changes["notify"] = {**(current.notify or {}), **notify}
            return await service.update(current.id, changes, actor=cli_actor())

    result = run_async(_update)
    show_schedule_result("Updated", result, as_json=as_json, fields=sorted(changes))
