"""Schedule validation: every refusal a ScheduleValidationError naming the field.

:func:`normalize` turns create/update input into the row that would be stored; nothing is
written here. Launcher rules come from :func:`studio_launcher.validate_action`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any
from zoneinfo import ZoneInfoNotFoundError

import yaml

from studio_launcher import InvalidAction, validate_action

from .._exceptions import ScheduleValidationError
from .._notify import check_notify
from .._policies.fields import POLICY_FIELDS, check_policies
from .._schema import ACTION_KINDS, TRIGGER_TYPES
from .._settings import SchedulerSettings
from .._triggers.cadence import MAX_INTERVAL_SEC
from .._triggers.cron import CronError, check_expression, next_after, zone
from .followups import MAX_CHAIN_DEPTH, OVERLAY_KEYS, apply_overlay, unusable_keys

MAX_TIMEOUT_SEC = 7 * 86400
"""The bound of a schedule's ``timeout_sec`` (7 days)."""

CREATE_FIELDS = (
    "name",
    "description",
    "trigger_type",
    "cron_expr",
    "interval_sec",
    "github_repo",
    "github_filter",
    "poll_interval_sec",
    "action_kind",
    "action_model",
    "action_prompt",
    "action_agent",
    "action_playbook",
    "action_flow_yaml",
    "action_project",
    "action_cwd",
    "action_extra_args",
    "action_command",
    "action_command_args",
    "on_success",
    "on_fail",
    "missed_fire_policy",
    "overlap_policy",
    "max_runs",
    "budget_usd",
    "budget_tokens",
    "project",
    "threshold_config",
    "enabled",
    "notify",
    "timezone",
    "timeout_sec",
    *POLICY_FIELDS,
)
NOT_NULL_FIELDS = frozenset(
    {"name", "trigger_type", "action_kind", "missed_fire_policy", "overlap_policy", "enabled"}
)
_STR_FIELDS = (
    "name",
    "description",
    "cron_expr",
    "github_repo",
    "action_model",
    "action_prompt",
    "action_agent",
    "action_playbook",
    "action_flow_yaml",
    "action_project",
    "action_cwd",
    "action_command",
    "project",
)
_TRIGGER_FIELDS: Mapping[str, tuple[str, ...]] = {
    "cron": ("cron_expr",),
    "interval": ("interval_sec",),
    "github_poll": ("github_repo", "github_filter", "poll_interval_sec"),
}
GITHUB_FILTER_KEYS = ("state", "base", "draft", "same_repo_only", "event")
GITHUB_EVENTS = ("pr_opened", "pr_updated", "pr_merged", "pr_closed")
THRESHOLD_KEYS = ("metric", "op", "value", "window_minutes")
THRESHOLD_METRICS = (
    "failed_runs",
    "failed_sessions",
    "total_cost_usd",
    "p95_latency_ms",
    "dead_letters",
    "pending_dispatch",
    "github_poll_healthy_age_minutes",
    "github_poll_consecutive_401",
)
THRESHOLD_OPS = ("gt", "gte", "lt", "lte")
_REPO = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}")
_BRANCH = re.compile(r"[A-Za-z0-9._/@+-]{1,255}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_NAME = 200
MAX_DESCRIPTION = 4000
MAX_DISABLE_REASON = 500
MAX_POLL_INTERVAL_SEC = 86400
MAX_COUNT = 2**31 - 1
"""The bound of ``max_runs`` and ``budget_tokens``."""
MAX_BUDGET_USD = 1e9
MAX_WINDOW_MINUTES = 366 * 1440


def _err(field: str, message: str) -> ScheduleValidationError:
    return ScheduleValidationError(field, message)


def _positive_int(field: str, value: Any, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _err(field, f"must be an integer, got {value!r}")
    if not 1 <= value <= maximum:
        # str() of a huge int raises (Python's digit limit): describe it by its size instead.
        shown = (
            str(value) if value.bit_length() < 64 else f"an integer of {value.bit_length()} bits"
        )
        raise _err(field, f"must be between 1 and {maximum}, got {shown}")
    return value


def _finite(value: Any) -> float | None:
    """``value`` as a finite float, or ``None`` (not a number, NaN, infinite, too large)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _str_list(field: str, value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise _err(field, "must be a list of strings")
    return list(value)


def check_name(value: Any) -> str:
    """A schedule name: non-empty text without surrounding blanks or control characters."""
    if not isinstance(value, str) or not value.strip():
        raise _err("name", "is required (a non-empty string)")
    if value != value.strip():
        raise _err("name", "must not start or end with whitespace")
    if len(value) > MAX_NAME:
        raise _err("name", f"must be at most {MAX_NAME} characters")
    if _CONTROL.search(value):
        raise _err("name", "must not contain control characters")
    return value


def check_disable_reason(reason: Any) -> str | None:
    """A manual disable reason: ``None`` or non-blank text of at most 500 characters."""
    if reason is None:
        return None
    if not isinstance(reason, str) or not reason.strip():
        raise _err("reason", "must be a non-blank string")
    if len(reason.strip()) > MAX_DISABLE_REASON:
        raise _err("reason", f"must be at most {MAX_DISABLE_REASON} characters")
    return reason.strip()


def _check_types(row: dict[str, Any]) -> None:
    for field in _STR_FIELDS:
        value = row.get(field)
        if value is not None and not isinstance(value, str):
            raise _err(field, f"must be a string, got {type(value).__name__}")
    for field in ("github_filter", "on_success", "on_fail", "threshold_config"):
        value = row.get(field)
        if value is not None and not isinstance(value, Mapping):
            raise _err(field, f"must be an object, got {type(value).__name__}")
    row["action_extra_args"] = _str_list("action_extra_args", row.get("action_extra_args"))
    row["action_command_args"] = _str_list("action_command_args", row.get("action_command_args"))
    if not isinstance(row.get("enabled"), bool):
        raise _err("enabled", f"must be a boolean, got {row.get('enabled')!r}")
    if row.get("description") is not None and len(row["description"]) > MAX_DESCRIPTION:
        raise _err("description", f"must be at most {MAX_DESCRIPTION} characters")


def _check_enums(row: dict[str, Any]) -> None:
    if row.get("trigger_type") not in TRIGGER_TYPES:
        raise _err("trigger_type", f"must be one of {', '.join(TRIGGER_TYPES)}")
    if row.get("action_kind") == "playbook":
        row["action_kind"] = "play"
    if row.get("action_kind") not in ACTION_KINDS:
        raise _err("action_kind", f"must be one of {', '.join(ACTION_KINDS)} (or playbook)")
    if row.get("missed_fire_policy") not in ("skip", "run_once"):
        raise _err("missed_fire_policy", "must be 'skip' or 'run_once'")


def check_github_filter(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Validate github_filter keys and values."""
    if value is None:
        return None
    out = dict(value)
    for key in out:
        if key not in GITHUB_FILTER_KEYS:
            raise _err(
                f"github_filter.{key}",
                f"unknown key (allowed: {', '.join(GITHUB_FILTER_KEYS)})",
            )
    if "state" in out and out["state"] not in ("open", "closed", "all"):
        raise _err("github_filter.state", "must be 'open', 'closed' or 'all'")
    if "base" in out and (not isinstance(out["base"], str) or not _BRANCH.fullmatch(out["base"])):
        raise _err("github_filter.base", "must be a branch name")
    for key in ("draft", "same_repo_only"):
        if key in out and not isinstance(out[key], bool):
            raise _err(f"github_filter.{key}", "must be a boolean")
    if "event" in out and out["event"] not in GITHUB_EVENTS:
        raise _err("github_filter.event", f"must be one of {', '.join(GITHUB_EVENTS)}")
    if out.get("event") in ("pr_merged", "pr_closed") and out.get("state") == "open":
        raise _err("github_filter.state", f"'open' never matches event {out['event']!r}")
    return out


def check_threshold(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Validate threshold_config: exactly metric, op, value, window_minutes."""
    if value is None:
        return None
    out = dict(value)
    for key in out:
        if key not in THRESHOLD_KEYS:
            raise _err(f"threshold_config.{key}", "unknown key")
    for key in THRESHOLD_KEYS:
        if key not in out:
            raise _err(f"threshold_config.{key}", "is required")
    if out["metric"] not in THRESHOLD_METRICS:
        raise _err("threshold_config.metric", f"must be one of {', '.join(THRESHOLD_METRICS)}")
    if out["op"] not in THRESHOLD_OPS:
        raise _err("threshold_config.op", f"must be one of {', '.join(THRESHOLD_OPS)}")
    if _finite(out["value"]) is None:
        raise _err("threshold_config.value", "must be a finite number")
    out["window_minutes"] = _positive_int(
        "threshold_config.window_minutes", out["window_minutes"], MAX_WINDOW_MINUTES
    )
    return out


def _check_trigger(row: dict[str, Any], *, timezone: str, now: float) -> None:
    trigger = row["trigger_type"]
    for other, fields in _TRIGGER_FIELDS.items():
        if other == trigger:
            continue
        for field in fields:
            if row.get(field) is not None:
                raise _err(field, f"does not apply to trigger_type {trigger!r}")
    if trigger == "cron":
        expr = row.get("cron_expr")
        if not expr:
            raise _err("cron_expr", "is required for trigger_type 'cron'")
        try:
            check_expression(expr)
            next_after(expr, timezone, now)
        except CronError as exc:
            raise _err("cron_expr", str(exc)) from None
        row["cron_expr"] = expr.strip()
    elif trigger == "interval":
        if row.get("interval_sec") is None:
            raise _err("interval_sec", "is required for trigger_type 'interval'")
        row["interval_sec"] = _positive_int("interval_sec", row["interval_sec"], MAX_INTERVAL_SEC)
    else:
        repo = row.get("github_repo")
        if not repo:
            raise _err("github_repo", "is required for trigger_type 'github_poll'")
        name = repo.split("/", 1)[-1]
        if not _REPO.fullmatch(repo) or name in (".", ".."):
            raise _err("github_repo", f"must be 'owner/name', got {repo!r}")
        row["github_filter"] = check_github_filter(row.get("github_filter"))
        if row.get("poll_interval_sec") is None:
            row["poll_interval_sec"] = 300
        row["poll_interval_sec"] = _positive_int(
            "poll_interval_sec", row["poll_interval_sec"], MAX_POLL_INTERVAL_SEC
        )
        if row.get("threshold_config") is not None:
            raise _err("threshold_config", "applies only to cron and interval schedules")
    row["threshold_config"] = check_threshold(row.get("threshold_config"))


def check_timezone(value: Any) -> str | None:
    """An IANA zone name (``None``: the server's zone); refusals name ``timezone``."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _err("timezone", f"must be an IANA time zone name, got {value!r}")
    name = value.strip()
    try:
        zone(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise _err("timezone", f"unknown time zone {name!r}") from None
    return name


def _check_limits(row: dict[str, Any]) -> None:
    if row.get("timeout_sec") is not None:
        row["timeout_sec"] = _positive_int("timeout_sec", row["timeout_sec"], MAX_TIMEOUT_SEC)
    for field in ("max_runs", "budget_tokens"):
        if row.get(field) is not None:
            row[field] = _positive_int(field, row[field], MAX_COUNT)
    budget = row.get("budget_usd")
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, int | float):
            raise _err("budget_usd", f"must be a number, got {type(budget).__name__}")
        number = _finite(budget)
        if number is None or not 0 < number <= MAX_BUDGET_USD:
            raise _err("budget_usd", f"must be a finite number > 0 and <= {MAX_BUDGET_USD:g}")
        row["budget_usd"] = number


def check_action(row: Mapping[str, Any], *, settings: SchedulerSettings, prefix: str = "") -> None:
    """Launcher validation plus the flow_yaml mapping check; ``prefix`` qualifies field names."""
    try:
        validate_action(row, command_allowlist=settings.command_allowlist)
    except InvalidAction as exc:
        raise _err(f"{prefix}{exc.field}", exc.reason) from None
    if row.get("action_kind") == "flow_yaml":
        try:
            parsed = yaml.safe_load(str(row.get("action_flow_yaml")))
        except yaml.YAMLError as exc:
            raise _err(f"{prefix}action_flow_yaml", f"is not valid YAML: {exc}") from None
        if not isinstance(parsed, Mapping) or not all(isinstance(k, str) for k in parsed):
            raise _err(f"{prefix}action_flow_yaml", "must be a YAML mapping with string keys")


def _check_cwd(row: dict[str, Any], settings: SchedulerSettings) -> None:
    cwd = row.get("action_cwd")
    if cwd is not None:
        if not os.path.isabs(cwd):
            raise _err("action_cwd", f"must be an absolute path, got {cwd!r}")
        if not os.path.isdir(cwd):
            raise _err("action_cwd", f"{cwd!r} is not an existing directory")
        return
    project = row.get("action_project")
    if project:
        registered = settings.project_paths.get(project)
        if registered and os.path.isabs(registered) and os.path.isdir(registered):
            # The execution root is snapshotted once, at creation.
            row["action_cwd"] = registered


def check_overlay(
    overlay: Mapping[str, Any] | None,
    parent: Mapping[str, Any],
    *,
    field: str,
    settings: SchedulerSettings,
    level: int = 1,
) -> dict[str, Any] | None:
    """Validate one on_success/on_fail overlay (recursively) against the row it applies to."""
    if overlay is None:
        return None
    if not isinstance(overlay, Mapping):
        raise _err(field, f"must be an object, got {type(overlay).__name__}")
    if level > MAX_CHAIN_DEPTH:
        raise _err(field, f"follow-ups nest deeper than {MAX_CHAIN_DEPTH} levels")
    out = dict(overlay)
    for key, value in out.items():
        if key not in OVERLAY_KEYS:
            allowed = ", ".join(OVERLAY_KEYS)
            raise _err(f"{field}.{key}", f"unknown follow-up key (allowed: {allowed})")
        if key == "command_args":
            out[key] = _str_list(f"{field}.{key}", value)
        elif key in ("on_success", "on_fail"):
            continue
        elif value is not None and not isinstance(value, str):
            raise _err(f"{field}.{key}", f"must be a string, got {type(value).__name__}")
    if "kind" in out and "action_kind" in out and out["kind"] != out["action_kind"]:
        raise _err(f"{field}.kind", "conflicts with action_kind")
    for key in ("kind", "action_kind"):
        if key in out:
            if out[key] == "playbook":
                out[key] = "play"
            if out[key] not in ACTION_KINDS:
                raise _err(f"{field}.{key}", f"must be one of {', '.join(ACTION_KINDS)}")
    child = apply_overlay(parent, out)
    kind = str(child.get("action_kind"))
    for key in unusable_keys(out, kind):
        raise _err(f"{field}.{key}", f"a follow-up of kind {kind!r} cannot use {key!r}")
    check_action(child, settings=settings, prefix=f"{field}.")
    for key in ("on_success", "on_fail"):
        if key in out:
            out[key] = check_overlay(
                out[key], child, field=f"{field}.{key}", settings=settings, level=level + 1
            )
    return out


def normalize(
    data: Mapping[str, Any],
    *,
    settings: SchedulerSettings,
    now: float,
    base: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Validate ``data`` (create input, or update changes over ``base``) into a stored row.

    Returns the schedule columns (not id/created_at/updated_at/cadence); nothing is written.
    """
    if not isinstance(data, Mapping):
        raise _err("schedule", f"must be an object, got {type(data).__name__}")
    for key in data:
        if key not in CREATE_FIELDS:
            raise _err(str(key), "unknown field")
    if base is None:
        row: dict[str, Any] = {
            "description": None,
            "missed_fire_policy": "skip",
            "overlap_policy": "skip",
            "enabled": True,
            "action_extra_args": [],
            "action_command_args": [],
        }
        row.update({k: v for k, v in data.items() if v is not None or k not in NOT_NULL_FIELDS})
    else:
        for key, value in data.items():
            if value is None and key in NOT_NULL_FIELDS:
                raise _err(key, "cannot be cleared to null")
        row = {k: base.get(k) for k in CREATE_FIELDS}
        if "trigger_type" in data and data["trigger_type"] != base.get("trigger_type"):
            for field in _TRIGGER_FIELDS.get(str(base.get("trigger_type")), ()):
                row[field] = None
            if data["trigger_type"] != "cron" and data["trigger_type"] != "interval":
                row["threshold_config"] = None
        row.update(data)
    for field in CREATE_FIELDS:
        row.setdefault(field, None)
    if row.get("enabled") is None:
        row["enabled"] = True
    row["name"] = check_name(row.get("name"))
    _check_types(row)
    _check_enums(row)
    row["timezone"] = check_timezone(row.get("timezone"))
    _check_trigger(row, timezone=row["timezone"] or settings.timezone, now=now)
    _check_limits(row)
    check_policies(row)
    if row.get("project") is not None and not row["project"].strip():
        raise _err("project", "must not be blank")
    check_action(row, settings=settings)
    _check_cwd(row, settings)
    for key in ("on_success", "on_fail"):
        row[key] = check_overlay(row.get(key), row, field=key, settings=settings)
    row["notify"] = check_notify(row.get("notify"))
    return row
