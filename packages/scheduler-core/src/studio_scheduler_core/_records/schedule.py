"""The ``Action`` and ``Schedule`` records: one field per ``schedules`` column, in column order.

Adding a column is one field here (plus its migration): the row codec, the service's create and
update field sets, the follow-up overlay keys and the API's models follow from the metadata.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from .column import column, create_fields, from_row, specs, to_row
from .vocab import (
    ACTION_KIND_ALIASES,
    MAX_BUDGET_USD,
    MAX_COUNT,
    MAX_INTERVAL_SEC,
    MAX_POLL_INTERVAL_SEC,
    MAX_TIMEOUT_SEC,
    ActionKindName,
    MissedFirePolicy,
    OverlapPolicy,
    TriggerType,
)

_IN = column(create=True)
"""A plain input field."""
_POLICY = column(create=True, own_check=True)
"""A policy input field, checked by ``_policies.fields``."""
_MODEL_KINDS = ("agent", "flow", "fanout", "engine")
ManagedBy = Literal["api", "cli", "set"]
"""Which door a schedule came in by: the API, the CLI, or a ``ScheduleSet`` apply."""
"""The kinds that take a model (``engine`` is the launcher's own kind, reachable by follow-ups)."""


@dataclass(frozen=True, kw_only=True)
class _Trigger:
    """The identity and trigger columns (the first columns of ``schedules``)."""

    id: str = field(metadata=column())
    name: str = field(metadata=column(create=True, not_null=True))
    description: str | None = field(default=None, metadata=_IN)
    enabled: bool = field(default=True, metadata=column(create=True, update=False, not_null=True))
    trigger_type: TriggerType = field(metadata=column(create=True, not_null=True))
    cron_expr: str | None = field(default=None, metadata=_IN)
    interval_sec: int | None = field(
        default=None, metadata=column(create=True, maximum=MAX_INTERVAL_SEC)
    )
    github_repo: str | None = field(default=None, metadata=_IN)
    github_filter: Mapping[str, Any] | None = field(
        default=None, metadata=column(create=True, json=True)
    )
    github_cursor: str | None = field(default=None, metadata=column())
    poll_interval_sec: int | None = field(
        default=None, metadata=column(create=True, maximum=MAX_POLL_INTERVAL_SEC)
    )


@dataclass(frozen=True, kw_only=True)
class Action:
    """What a fire runs: the ``action_*`` columns a schedule and an ad-hoc run share.

    ``overlay`` names the follow-up keys (``on_success``/``on_fail``) that override a column;
    ``kinds`` the action kinds that use it (a follow-up of another kind may not set it).
    """

    # The stored kind is one of ACTION_KINDS; input may also spell an alias.
    action_kind: ActionKindName = field(
        metadata=column(
            create=True, not_null=True, overlay=("kind", "action_kind"), aliases=ACTION_KIND_ALIASES
        )
    )
    action_model: str | None = field(
        default=None, metadata=column(create=True, overlay=("model",), kinds=_MODEL_KINDS)
    )
    action_prompt: str | None = field(
        default=None,
        metadata=column(create=True, overlay=("prompt",), kinds=(*_MODEL_KINDS, "play")),
    )
    action_agent: str | None = field(
        default=None, metadata=column(create=True, overlay=("agent",), kinds=("agent", "engine"))
    )
    action_playbook: str | None = field(
        default=None, metadata=column(create=True, overlay=("playbook",), kinds=("play",))
    )
    action_flow_yaml: str | None = field(
        default=None, metadata=column(create=True, overlay=("flow_yaml",), kinds=("flow_yaml",))
    )
    action_project: str | None = field(
        default=None, metadata=column(create=True, overlay=("project",))
    )
    action_cwd: str | None = field(default=None, metadata=_IN)
    action_extra_args: tuple[str, ...] = field(default=(), metadata=column(create=True, json=True))
    action_command: str | None = field(
        default=None, metadata=column(create=True, overlay=("command",), kinds=("command",))
    )
    action_command_args: tuple[str, ...] = field(
        default=(),
        metadata=column(create=True, json=True, overlay=("command_args",), kinds=("command",)),
    )

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Action:
        """The action of a decoded row (an ad-hoc run's stored action; other keys ignored)."""
        return from_row(cls, row)

    def launch_fields(self) -> Mapping[str, Any]:
        """The ``action_*`` columns as the launcher reads them (``build_argv``,
        ``resolve_cwd``): the one place a fire's action becomes a mapping again."""
        return {name: getattr(self, name) for name in ACTION_COLUMNS}


ACTION_COLUMNS = tuple(f.name for f in fields(Action))
"""The ``action_*`` columns, in order."""


@dataclass(frozen=True, kw_only=True)
class Schedule(Action, _Trigger):
    """A ``schedules`` row: trigger, action, follow-ups, policies, limits and bookkeeping."""

    on_success: Mapping[str, Any] | None = field(
        default=None, metadata=column(create=True, json=True, overlay=("on_success",))
    )
    on_fail: Mapping[str, Any] | None = field(
        default=None, metadata=column(create=True, json=True, overlay=("on_fail",))
    )
    last_fired_at: float | None = field(default=None, metadata=column())
    next_fire_at: float | None = field(default=None, metadata=column())
    last_evaluated_at: float | None = field(default=None, metadata=column())
    missed_fire_policy: MissedFirePolicy = field(
        default="skip", metadata=column(create=True, not_null=True)
    )
    overlap_policy: OverlapPolicy = field(
        default="skip", metadata=column(create=True, not_null=True)
    )
    max_runs: int | None = field(default=None, metadata=column(create=True, maximum=MAX_COUNT))
    budget_usd: float | None = field(
        default=None, metadata=column(create=True, maximum=MAX_BUDGET_USD)
    )
    budget_tokens: int | None = field(default=None, metadata=column(create=True, maximum=MAX_COUNT))
    project: str | None = field(default=None, metadata=_IN)
    threshold_config: Mapping[str, Any] | None = field(
        default=None, metadata=column(create=True, json=True)
    )
    last_alert_at: float | None = field(default=None, metadata=column())
    last_healthy_poll_at: float | None = field(default=None, metadata=column())
    poller_consecutive_401: int = field(default=0, metadata=column())
    disabled_reason: str | None = field(default=None, metadata=column())
    timezone: str | None = field(default=None, metadata=column(create=True, own_check=True))
    timeout_sec: int | None = field(
        default=None, metadata=column(create=True, maximum=MAX_TIMEOUT_SEC)
    )
    created_at: float = field(metadata=column())
    updated_at: float = field(metadata=column())
    notify: Mapping[str, Any] | None = field(
        default=None, metadata=column(create=True, json=True, own_check=True)
    )
    github_etag: str | None = field(default=None, metadata=column(public=False))
    # The policies (migration 8); their checks are in ``_policies.fields`` (``own_check``).
    catchup_window_sec: int | None = field(default=None, metadata=_POLICY)
    """A missed occurrence older than this many seconds is skipped, even under run_once."""
    jitter_sec: int | None = field(default=None, metadata=_POLICY)
    """Each occurrence waits a deterministic delay in [0, jitter_sec) before it starts."""
    pause_on_failure: bool | None = field(default=None, metadata=_POLICY)
    """Disable the schedule when a run fails after its last attempt."""
    retry: Mapping[str, Any] | None = field(
        default=None, metadata=column(create=True, json=True, own_check=True, overlay=("retry",))
    )
    """``{"max_attempts", "backoff_sec", "backoff_factor", "max_backoff_sec"}``; a follow-up's
    overlay may set its own (a follow-up never inherits the schedule's)."""
    # Migration 16: the ``at`` trigger's instant and the rolling-window gate.
    at: str | None = field(default=None, metadata=column(create=True, own_check=True))
    """``trigger_type: at``: the RFC 3339 instant (explicit offset) as given."""
    rate_limit: Mapping[str, Any] | None = field(
        default=None, metadata=column(create=True, json=True, own_check=True)
    )
    """``{"max_fires", "window_sec"}``: at most that many fires in any window of that length."""
    # Migration 17: who manages the schedule; for a set's schedule its owner, member, digest.
    managed_by: ManagedBy = field(default="api", metadata=column())
    """``api``, ``cli`` or ``set`` (written by create and by a set's apply, never by input)."""
    owner_key: str | None = field(default=None, metadata=column())
    """The owner key of the ``ScheduleSet`` that owns the schedule (``None``: unowned)."""
    set_member: str | None = field(default=None, metadata=column())
    """The member name the schedule has in its set's document."""
    set_digest: str | None = field(default=None, metadata=column())
    """The digest of the member's resolved form at the set's last apply."""

    @property
    def digest(self) -> str:
        """The digest of the schedule's behaviour (its input fields), as a set member's."""
        return fields_digest(set_fields(self.to_row()))

    @property
    def drifted(self) -> bool:
        """A set-managed schedule whose fields no longer have the digest of its last apply
        (edited through the API, the CLI or the dashboard since)."""
        return self.set_digest is not None and self.digest != self.set_digest

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Schedule:
        """The record of a decoded ``schedules`` row."""
        return from_row(cls, row)

    def to_row(self) -> dict[str, Any]:
        """The record as the public dict the service returns."""
        return to_row(self)


def set_fields(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """The input fields of a schedule (``row``: a stored row or a normalised input) in the
    canonical form a set member's digest is taken of: numbers as floats, lists as lists.

    A schedule Studio disabled itself (max runs, budget, a pause on failure, a fired ``at``)
    counts as enabled: the document still says ``enabled: true``, and an apply should not
    re-arm it.
    """
    out = {name: _canonical(shape, row.get(name)) for name, shape in _CREATE_SHAPES}
    if not out.get("enabled") and disabled_by_studio(row.get("disabled_reason")):
        out["enabled"] = True
    return out


def _canonical(shape: str, value: Any) -> Any:
    if value is not None and shape == "number":
        return float(value)
    return list(value) if isinstance(value, tuple) else value


def disabled_by_studio(reason: Any) -> bool:
    """Whether ``disabled_reason`` is a reason code Studio wrote itself (not an operator's)."""
    return (
        isinstance(reason, str)
        and reason.startswith("schedule.disabled.")
        and reason != "schedule.disabled.manual"
    )


def fields_digest(values: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of ``values`` (sorted keys, no spaces)."""
    text = json.dumps(
        values, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_CREATE_NAMES = frozenset(create_fields(Schedule))
_CREATE_SHAPES = tuple((s.name, s.shape) for s in specs(Schedule) if s.name in _CREATE_NAMES)
