"""Row decoding and encoding: JSON columns, booleans, column lists."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ._policies.fields import (
    POLICY_BOOL_FIELDS,
    POLICY_FIELDS,
    POLICY_JSON_FIELDS,
    decode_bool,
    encode_bool,
)

SCHEDULE_JSON_COLUMNS = (
    "github_filter",
    "action_extra_args",
    "action_command_args",
    "on_success",
    "on_fail",
    "threshold_config",
    "notify",
    *POLICY_JSON_FIELDS,
)
RUN_JSON_COLUMNS = ("trigger_context", "action_args", "status_evidence_refs", "notify")

SCHEDULE_COLUMNS = (
    "id",
    "name",
    "description",
    "enabled",
    "trigger_type",
    "cron_expr",
    "interval_sec",
    "github_repo",
    "github_filter",
    "github_cursor",
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
    "last_fired_at",
    "next_fire_at",
    "last_evaluated_at",
    "missed_fire_policy",
    "overlap_policy",
    "max_runs",
    "budget_usd",
    "budget_tokens",
    "project",
    "threshold_config",
    "last_alert_at",
    "last_healthy_poll_at",
    "poller_consecutive_401",
    "disabled_reason",
    "timezone",
    "timeout_sec",
    "created_at",
    "updated_at",
    "notify",
    *POLICY_FIELDS,
)

TERMINAL_RUN_STATUSES = ("completed", "failed", "timed_out", "cancelled")
"""Statuses of a run that fired and ended (``skipped`` never fired)."""


def _loads(value: Any) -> Any:
    if value is None:
        return None
    if value == "[]":
        return []
    if isinstance(value, str | bytes):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def dumps(value: Any) -> str | None:
    """Encode a JSON column value (``None`` stays SQL NULL)."""
    if value is None:
        return None
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def decode_schedule(row: Mapping[str, Any]) -> dict[str, Any]:
    """A ``schedules`` row as the public dict: JSON decoded, ``enabled`` a bool."""
    out = dict(row)
    for column in SCHEDULE_JSON_COLUMNS:
        if column in out:
            out[column] = _loads(out[column])
    if "enabled" in out:
        out["enabled"] = bool(out["enabled"])
    for column in POLICY_BOOL_FIELDS:
        if column in out:
            out[column] = decode_bool(out[column])
    for column in ("action_extra_args", "action_command_args"):
        if column in out and out[column] is None:
            out[column] = []
    return out


def encode_schedule(row: Mapping[str, Any]) -> dict[str, Any]:
    """A normalised schedule dict as column values for an INSERT/UPDATE."""
    out: dict[str, Any] = {}
    for column, value in row.items():
        if column in SCHEDULE_JSON_COLUMNS:
            out[column] = dumps(value)
        elif column == "enabled":
            out[column] = 1 if value else 0
        elif column in POLICY_BOOL_FIELDS:
            out[column] = encode_bool(value)
        else:
            out[column] = value
    return out


def decode_run(row: Mapping[str, Any]) -> dict[str, Any]:
    """A ``schedule_runs`` row as the public dict (JSON columns decoded)."""
    out = dict(row)
    for column in RUN_JSON_COLUMNS:
        if column in out:
            out[column] = _loads(out[column])
    if "required_capabilities" in out:
        out["required_capabilities"] = _loads(out["required_capabilities"])
    return out
