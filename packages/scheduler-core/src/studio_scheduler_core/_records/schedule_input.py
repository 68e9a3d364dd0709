"""``ScheduleInput``: the fields a schedule's create input may set, as a typed mapping; and
``ScheduleRow``, the columns that input becomes once validated.

Input is JSON-shaped: a field in seconds also takes a duration (``"90s"``), an action kind an
alias, a list field any sequence of strings; the service's ``normalize`` checks each. The keys
are :func:`~.column.create_fields` of :class:`~.schedule.Schedule` (a test keeps them equal).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypedDict

from .schedule import ManagedBy
from .vocab import ActionKindName, MissedFirePolicy, OverlapPolicy, TriggerType


class ScheduleInput(TypedDict, total=False):
    """Create input (or update changes) of a schedule: any subset of its input fields."""

    name: str
    description: str | None
    enabled: bool
    trigger_type: str
    cron_expr: str | None
    interval_sec: int | str | None
    github_repo: str | None
    github_filter: Mapping[str, object] | None
    poll_interval_sec: int | str | None
    action_kind: str
    action_model: str | None
    action_prompt: str | None
    action_agent: str | None
    action_playbook: str | None
    action_flow_yaml: str | None
    action_project: str | None
    action_cwd: str | None
    action_extra_args: Sequence[str] | None
    action_command: str | None
    action_command_args: Sequence[str] | None
    on_success: Mapping[str, object] | None
    on_fail: Mapping[str, object] | None
    missed_fire_policy: str
    overlap_policy: str
    max_runs: int | None
    budget_usd: float | None
    budget_tokens: int | None
    project: str | None
    threshold_config: Mapping[str, object] | None
    timezone: str | None
    timeout_sec: int | str | None
    notify: Mapping[str, object] | None
    catchup_window_sec: int | str | None
    jitter_sec: int | str | None
    pause_on_failure: bool | None
    retry: Mapping[str, object] | None
    at: str | None
    rate_limit: Mapping[str, object] | None


class ScheduleRow(TypedDict, total=False):
    """A schedule's columns as validation returns them (``normalize``: every input field,
    checked and in its stored shape) and as create and update then complete them (the id,
    the times, the next fire, who manages it)."""

    id: str
    name: str
    description: str | None
    enabled: bool
    trigger_type: TriggerType
    cron_expr: str | None
    interval_sec: int | None
    github_repo: str | None
    github_filter: Mapping[str, object] | None
    poll_interval_sec: int | None
    action_kind: ActionKindName
    action_model: str | None
    action_prompt: str | None
    action_agent: str | None
    action_playbook: str | None
    action_flow_yaml: str | None
    action_project: str | None
    action_cwd: str | None
    action_extra_args: list[str]
    action_command: str | None
    action_command_args: list[str]
    on_success: Mapping[str, object] | None
    on_fail: Mapping[str, object] | None
    next_fire_at: float | None
    missed_fire_policy: MissedFirePolicy
    overlap_policy: OverlapPolicy
    max_runs: int | None
    budget_usd: float | None
    budget_tokens: int | None
    project: str | None
    threshold_config: Mapping[str, object] | None
    poller_consecutive_401: int
    disabled_reason: str | None
    timezone: str | None
    timeout_sec: int | None
    created_at: float
    updated_at: float
    notify: Mapping[str, object] | None
    catchup_window_sec: int | None
    jitter_sec: int | None
    pause_on_failure: bool | None
    retry: Mapping[str, object] | None
    at: str | None
    rate_limit: Mapping[str, object] | None
    managed_by: ManagedBy
