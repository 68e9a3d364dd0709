"""Schedule validation: every refusal a ScheduleValidationError naming the field.

:func:`normalize` turns create/update input into the row that would be stored; nothing is
written here. The field sets come from the :class:`~.._records.schedule.Schedule` record;
trigger rules live in :mod:`.trigger_rules`, action and follow-up rules in
:mod:`.action_rules` (launcher rules come from :func:`studio_launcher.validate_action`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping
from typing import Any, cast
from zoneinfo import ZoneInfoNotFoundError

from .._notify.service import check_notify
from .._records.column import create_fields, maximum, not_null_fields, specs
from .._records.schedule import Schedule
from .._records.schedule_input import ScheduleRow
from .._records.vocab import (
    ACTION_KIND_ALIASES,
    ACTION_KINDS,
    MISSED_FIRE_POLICIES,
    TRIGGER_TYPES,
)
from .._settings import SchedulerSettings
from .._triggers.cron import zone
from .action_rules import check_action, check_cwd, check_overlay
from .checks import err, finite, positive_int, str_list
from .policy_fields import check_overlap_policy, check_policies, check_rate_limit
from .sets.durations import parse_duration
from .trigger_rules import TRIGGER_FIELDS, check_trigger

CREATE_FIELDS = create_fields(Schedule)
"""The fields create input may set (the service's update takes the same)."""
NOT_NULL_FIELDS = not_null_fields(Schedule)
"""Input fields that cannot be null (create falls back to the record's default)."""
_CREATE_SPECS = tuple(s for s in specs(Schedule) if s.meta.create)
_DEFAULTS = {s.name: s.default for s in _CREATE_SPECS if s.default is not None and not s.required}
_TEXT_FIELDS = tuple(s.name for s in _CREATE_SPECS if s.shape == "text" and not s.meta.own_check)
_OBJECT_FIELDS = tuple(
    s.name for s in _CREATE_SPECS if s.shape == "object" and not s.meta.own_check
)
_LIST_FIELDS = tuple(s.name for s in _CREATE_SPECS if s.shape == "list")
_TRIGGER_OWNED = frozenset(f for fields in TRIGGER_FIELDS.values() for f in fields)
_COUNT_FIELDS = tuple(
    s.name
    for s in _CREATE_SPECS
    if s.shape == "int" and s.meta.maximum is not None and s.name not in _TRIGGER_OWNED
)
"""Bounded integer fields outside the trigger (checked as ``1..maximum``), in column order."""
_SECONDS_FIELDS = tuple(
    s.name for s in _CREATE_SPECS if s.shape == "int" and s.name.endswith("_sec")
)
"""Fields in seconds: each also takes a duration (``"90s"``, ``"15m"``, ``"2h"``, ``"1d"``)."""
_NESTED_SECONDS = (("retry", ("backoff_sec", "max_backoff_sec")), ("rate_limit", ("window_sec",)))
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_NAME = 200
MAX_DESCRIPTION = 4000
MAX_DISABLE_REASON = 500


def _policy_message(values: tuple[str, ...]) -> str:
    quoted = [repr(v) for v in values]
    return f"must be {', '.join(quoted[:-1])} or {quoted[-1]}"


def check_name(value: Any) -> str:
    """A schedule name: non-empty text without surrounding blanks or control characters."""
    if not isinstance(value, str) or not value.strip():
        raise err("name", "is required (a non-empty string)")
    if value != value.strip():
        raise err("name", "must not start or end with whitespace")
    if len(value) > MAX_NAME:
        raise err("name", f"must be at most {MAX_NAME} characters")
    if _CONTROL.search(value):
        raise err("name", "must not contain control characters")
    return value


def check_disable_reason(reason: Any) -> str | None:
    """A manual disable reason: ``None`` or non-blank text of at most 500 characters."""
    if reason is None:
        return None
    if not isinstance(reason, str) or not reason.strip():
        raise err("reason", "must be a non-blank string")
    if len(reason.strip()) > MAX_DISABLE_REASON:
        raise err("reason", f"must be at most {MAX_DISABLE_REASON} characters")
    return reason.strip()


def _durations(row: MutableMapping[str, Any]) -> None:
    """Duration strings in seconds fields (top level, ``retry``, ``rate_limit``) as seconds."""
    for field in _SECONDS_FIELDS:
        if isinstance(row.get(field), str):
            row[field] = parse_duration(field, row[field])
    for name, keys in _NESTED_SECONDS:
        value = row.get(name)
        if isinstance(value, Mapping) and any(isinstance(value.get(k), str) for k in keys):
            parsed = {k: parse_duration(f"{name}.{k}", value[k]) for k in keys if k in value}
            row[name] = {**value, **parsed}


def _check_types(row: Mapping[str, Any]) -> dict[str, list[str]]:
    """Refuse a field of the wrong shape; return the list fields as lists of strings."""
    for field in _TEXT_FIELDS:
        value = row.get(field)
        if value is not None and not isinstance(value, str):
            raise err(field, f"must be a string, got {type(value).__name__}")
    for field in _OBJECT_FIELDS:
        value = row.get(field)
        if value is not None and not isinstance(value, Mapping):
            raise err(field, f"must be an object, got {type(value).__name__}")
    lists = {field: str_list(field, row.get(field)) for field in _LIST_FIELDS}
    if not isinstance(row.get("enabled"), bool):
        raise err("enabled", f"must be a boolean, got {row.get('enabled')!r}")
    if row.get("description") is not None and len(row["description"]) > MAX_DESCRIPTION:
        raise err("description", f"must be at most {MAX_DESCRIPTION} characters")
    return lists


def _check_enums(row: Mapping[str, Any]) -> dict[str, str]:
    """Refuse a value outside its vocabulary; return the action kind (an alias resolved) and
    the overlap policy."""
    if row.get("trigger_type") not in TRIGGER_TYPES:
        raise err("trigger_type", f"must be one of {', '.join(TRIGGER_TYPES)}")
    kind = row.get("action_kind")
    if isinstance(kind, str) and kind in ACTION_KIND_ALIASES:
        kind = ACTION_KIND_ALIASES[kind]
    if kind not in ACTION_KINDS:
        aliases = ", ".join(ACTION_KIND_ALIASES)
        raise err("action_kind", f"must be one of {', '.join(ACTION_KINDS)} (or {aliases})")
    if row.get("missed_fire_policy") not in MISSED_FIRE_POLICIES:
        raise err("missed_fire_policy", _policy_message(MISSED_FIRE_POLICIES))
    return {
        "action_kind": str(kind),
        "overlap_policy": check_overlap_policy(row.get("overlap_policy")),
    }


def check_timezone(value: Any) -> str | None:
    """An IANA zone name (``None``: the server's zone); refusals name ``timezone``."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise err("timezone", f"must be an IANA time zone name, got {value!r}")
    name = value.strip()
    try:
        zone(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise err("timezone", f"unknown time zone {name!r}") from None
    return name


def _check_limits(row: Mapping[str, Any]) -> dict[str, int | float]:
    """The bounded counts and the budget that ``row`` sets, each checked."""
    out: dict[str, int | float] = {}
    for field in _COUNT_FIELDS:
        if row.get(field) is not None:
            out[field] = positive_int(field, row[field], maximum(Schedule, field))
    budget = row.get("budget_usd")
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, int | float):
            raise err("budget_usd", f"must be a number, got {type(budget).__name__}")
        number = finite(budget)
        bound = maximum(Schedule, "budget_usd")
        if number is None or not 0 < number <= bound:
            raise err("budget_usd", f"must be a finite number > 0 and <= {bound:g}")
        out["budget_usd"] = number
    return out


def _merge(data: Mapping[str, Any], base: Mapping[str, Any] | None) -> dict[str, object]:
    """The input row: ``data`` over the record's defaults (create) or over ``base`` (update).

    Its values are the input's, not yet checked (any JSON value): :func:`normalize` checks
    each and returns the row typed."""
    row: dict[str, object]
    if base is None:
        row = {k: list(v) if isinstance(v, tuple) else v for k, v in _DEFAULTS.items()}
        row.update({k: v for k, v in data.items() if v is not None or k not in NOT_NULL_FIELDS})
    else:
        for key, value in data.items():
            if value is None and key in NOT_NULL_FIELDS:
                raise err(key, "cannot be cleared to null")
        row = {k: base.get(k) for k in CREATE_FIELDS}
        if "trigger_type" in data and data["trigger_type"] != base.get("trigger_type"):
            for field in TRIGGER_FIELDS.get(str(base.get("trigger_type")), ()):
                row[field] = None
            if data["trigger_type"] != "cron" and data["trigger_type"] != "interval":
                row["threshold_config"] = None
        row.update(data)
    for field in CREATE_FIELDS:
        row.setdefault(field, None)
    if row.get("enabled") is None:
        row["enabled"] = True
    return row


def normalize(
    data: Mapping[str, Any],
    *,
    settings: SchedulerSettings,
    now: float,
    base: Mapping[str, Any] | None = None,
) -> ScheduleRow:
    """Validate ``data`` (create input, or update changes over ``base``) into a stored row.

    Returns the schedule's input columns, checked (not id/created_at/updated_at/cadence);
    nothing is written.
    """
    if not isinstance(data, Mapping):
        raise err("schedule", f"must be an object, got {type(data).__name__}")
    for key in data:
        if key not in CREATE_FIELDS:
            raise err(str(key), "unknown field")
    row = _merge(data, base)
    row["name"] = check_name(row.get("name"))
    _durations(row)
    row.update(_check_types(row))
    row.update(_check_enums(row))
    row["timezone"] = zone_name = check_timezone(row.get("timezone"))
    fresh_at = base is None or row.get("at") != base.get("at")
    row.update(
        check_trigger(row, timezone=zone_name or settings.timezone, now=now, fresh_at=fresh_at)
    )
    row.update(_check_limits(row))
    check_policies(row)
    row["rate_limit"] = check_rate_limit(row.get("rate_limit"))
    project = row.get("project")
    if isinstance(project, str) and not project.strip():
        raise err("project", "must not be blank")
    check_action(row, settings=settings)
    row["action_cwd"] = check_cwd(row.get("action_cwd"), row.get("action_project"), settings)
    for key in ("on_success", "on_fail"):
        row[key] = check_overlay(row.get(key), row, field=key, settings=settings)
    row["notify"] = check_notify(row.get("notify"))
    # every column is checked above: the row now has the shape its type names
    return cast("ScheduleRow", row)
